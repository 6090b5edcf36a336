//! Table tests ported from upstream `backoff_utils_test.go` and the
//! `TestJobBackoffForOnFailure` cases of `job_controller_test.go` (v1.34),
//! extra edge cases, and property tests.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, PodCondition,
    PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::*;
use crate::pods::{JOB_INDEX_FAILURE_COUNT, JOB_INDEX_IGNORED_FAILURE_COUNT};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// 2009-11-10T23:00:00Z, upstream's `defaultTestTime`.
fn t0() -> Timestamp {
    Timestamp::constant(1_257_894_000, 0)
}

fn at(offset_ms: i64) -> Timestamp {
    t0() + SignedDuration::from_millis(offset_ms)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A container status: `Some(t)` terminated at `t`, `Some(None)`-like
/// terminated without `finishedAt` via [`term_no_time`], `None` running.
fn cs(name: &str, finished: Option<Timestamp>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(match finished {
            Some(t) => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    finished_at: Some(Time(t)),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None => ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn term_no_time(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod_finished_at(phase: &str, t: Timestamp) -> CachedPod {
    pod_finished_at_full(phase, t).into()
}

fn pod_finished_at_full(phase: &str, t: Timestamp) -> Pod {
    Pod {
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: Some(vec![cs("c", Some(t))]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ready(status: &str, t: Option<Timestamp>) -> PodCondition {
    PodCondition {
        type_: "Ready".into(),
        status: status.into(),
        last_transition_time: t.map(Time),
        ..Default::default()
    }
}

mod finish;
mod timing;

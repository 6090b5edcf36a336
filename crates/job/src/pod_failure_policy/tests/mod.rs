//! Table tests ported from upstream `pod_failure_policy_test.go` (v1.34) as
//! data, extra edge cases, and property tests.

use k8s_openapi::api::batch::v1::{
    JobSpec, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
    PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

use super::*;

/// The matcher over a test pod as the cache holds it (the tests build API
/// pods; the controller reads the cached form).
fn match_pod_failure_policy(policy: Option<&PodFailurePolicy>, pod: &Pod) -> PolicyMatch {
    super::match_pod_failure_policy(policy, &CachedPod::from(pod))
}

/// [`super::fail_job_message`] over test pods, as cached, with the policy
/// the `JobPodFailurePolicy` gate leaves ([`crate::sync::Config::policy`]).
fn get_fail_job_message(job: &Job, pods: &[&Pod], gate_enabled: bool) -> Option<String> {
    let cached: Vec<CachedPod> = pods.iter().map(|p| CachedPod::from(*p)).collect();
    let refs: Vec<&CachedPod> = cached.iter().collect();
    let config = crate::sync::Config {
        pod_failure_policy: gate_enabled,
        ..crate::sync::Config::default()
    };
    let policy = config.policy(job)?;
    super::fail_job_message(job, &refs, &|p| {
        super::match_pod_failure_policy(Some(&policy), p)
    })
}

/// The state of one container status in a test pod.
#[derive(Clone, Copy, Debug)]
enum St {
    /// `state.terminated` with this exit code.
    Term(i32),
    /// `state.running`.
    Running,
    /// No `state` at all.
    NoState,
    /// Running now, terminated with this code only in `lastState`.
    LastTerm(i32),
}

fn cs(name: &str, st: St) -> ContainerStatus {
    let terminated = |code| ContainerStateTerminated {
        exit_code: code,
        ..Default::default()
    };
    let (state, last_state) = match st {
        St::Term(c) => (
            Some(ContainerState {
                terminated: Some(terminated(c)),
                ..Default::default()
            }),
            None,
        ),
        St::Running | St::LastTerm(_) => (
            Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            match st {
                St::LastTerm(c) => Some(ContainerState {
                    terminated: Some(terminated(c)),
                    ..Default::default()
                }),
                _ => None,
            },
        ),
        St::NoState => (None, None),
    };
    ContainerStatus {
        name: name.to_string(),
        state,
        last_state,
        ..Default::default()
    }
}

fn pod_with(
    phase: &str,
    containers: &[(&str, St)],
    init: &[(&str, St)],
    conditions: &[(&str, &str)],
) -> Pod {
    let list =
        |v: &[(&str, St)]| (!v.is_empty()).then(|| v.iter().map(|(n, s)| cs(n, *s)).collect());
    Pod {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("mypod".into()),
            ..Default::default()
        },
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: list(containers),
            init_container_statuses: list(init),
            conditions: (!conditions.is_empty()).then(|| {
                conditions
                    .iter()
                    .map(|(t, s)| PodCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn failed(containers: &[(&str, St)], init: &[(&str, St)], conditions: &[(&str, &str)]) -> Pod {
    pod_with("Failed", containers, init, conditions)
}

fn exit_rule(
    action: &str,
    op: &str,
    values: &[i32],
    container: Option<&str>,
) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
            container_name: container.map(str::to_string),
            operator: op.into(),
            values: values.to_vec(),
        }),
        on_pod_conditions: None,
    }
}

fn cond_rule(action: &str, patterns: &[(&str, &str)]) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: None,
        on_pod_conditions: Some(
            patterns
                .iter()
                .map(|(t, s)| PodFailurePolicyOnPodConditionsPattern {
                    type_: t.to_string(),
                    status: Some(s.to_string()),
                })
                .collect(),
        ),
    }
}

fn policy(rules: Vec<PodFailurePolicyRule>) -> Option<PodFailurePolicy> {
    Some(PodFailurePolicy { rules })
}

const DT: &str = "DisruptionTarget";

struct Case {
    name: &'static str,
    policy: Option<PodFailurePolicy>,
    pod: Pod,
    message: Option<&'static str>,
    counts: bool,
    action: Option<Action>,
}

mod bad_input;
mod props;
mod table;

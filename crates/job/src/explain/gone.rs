//! Pods of the Job that are no longer in the API: named by the Job's
//! `SuccessfulCreate` events and by events about pods named after the Job.
//! Their failures survive only in the counters; an eviction event still
//! says which `DisruptionTarget` the pod got, so the rule that decided it
//! can be named (marked as inferred).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, PodCondition, PodStatus};
use kcm_conditions::disruption::{DISRUPTION_TARGET, REASON_DELETION_BY_TAINT_MANAGER};
use serde::Serialize;

use crate::pod_failure_policy::{Action, match_pod_failure_policy};
use crate::sync::Config;

/// The taint manager's event reason and the start of its eviction message.
const TAINT_EVICTION: &str = "TaintManagerEviction";
const MARKING: &str = "Marking for deletion";
const CREATED: &str = "Created pod: ";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GonePod {
    pub pod: String,
    /// `Reason: message` of each event about the pod, oldest first.
    pub events: Vec<String>,
    /// What the events imply the policy decided, when they say enough.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferred: Option<Inferred>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inferred {
    pub condition: String,
    pub rule: Option<usize>,
    pub action: String,
}

fn involved_name(e: &Event) -> &str {
    e.involved_object.name.as_deref().unwrap_or("")
}

fn is_about_job(e: &Event, job: &Job) -> bool {
    let o = &e.involved_object;
    match (&o.uid, &job.metadata.uid) {
        (Some(a), Some(b)) => a == b,
        _ => o.kind.as_deref() == Some("Job") && o.name == job.metadata.name,
    }
}

pub fn gone_pods(job: &Job, pods: &[Pod], events: &[Event], config: &Config) -> Vec<GonePod> {
    let present: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let prefix = format!("{}-", job.metadata.name.as_deref().unwrap_or(""));
    let mut gone: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| is_about_job(e, job)) {
        let message = e.message.as_deref().unwrap_or("");
        if e.reason.as_deref() == Some("SuccessfulCreate")
            && let Some(at) = message.find(CREATED)
        {
            let pod = message[at + CREATED.len()..].trim();
            if !present.contains(pod) {
                gone.entry(pod.to_string()).or_default();
            }
        }
    }
    for e in events {
        let o = &e.involved_object;
        let pod = involved_name(e);
        if o.kind.as_deref() == Some("Pod")
            && o.namespace == job.metadata.namespace
            && !present.contains(pod)
            && (gone.contains_key(pod) || pod.starts_with(&prefix))
        {
            gone.entry(pod.to_string()).or_default().push(e);
        }
    }
    gone.into_iter()
        .map(|(pod, mut evs)| {
            evs.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
            let evicted = evs.iter().any(|e| {
                e.reason.as_deref() == Some(TAINT_EVICTION)
                    && e.message.as_deref().is_some_and(|m| m.starts_with(MARKING))
            });
            GonePod {
                events: evs
                    .iter()
                    .map(|e| {
                        format!(
                            "{}: {}",
                            e.reason.as_deref().unwrap_or(""),
                            e.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect(),
                inferred: evicted.then(|| infer_eviction(job, &pod, config)),
                pod,
            }
        })
        .collect()
}

/// The policy's decision on a pod the taint manager evicted: `Failed` with
/// `DisruptionTarget` (reason `DeletionByTaintManager`), no exit code known.
fn infer_eviction(job: &Job, name: &str, config: &Config) -> Inferred {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.to_string());
    pod.metadata.namespace.clone_from(&job.metadata.namespace);
    pod.status = Some(PodStatus {
        phase: Some("Failed".into()),
        conditions: Some(vec![PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(REASON_DELETION_BY_TAINT_MANAGER.into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let pod = kcm_pod::CachedPod::from(pod);
    let m = match_pod_failure_policy(config.policy(job).as_ref(), &pod);
    Inferred {
        condition: format!("{DISRUPTION_TARGET} ({REASON_DELETION_BY_TAINT_MANAGER})"),
        rule: m.rule,
        action: m.action.map_or("default", Action::as_str).to_string(),
    }
}

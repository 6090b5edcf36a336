//! The stale `DisruptionTarget` rule (`nonTerminatingPodHasStaleDisruptionCondition`,
//! `syncStalePodDisruption`): a pod not being deleted and not terminal that
//! has carried `DisruptionTarget=True` (any reason but
//! `TerminationByKubelet`) for the timeout gets the condition set to False,
//! with empty reason and message.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_conditions::disruption::{DISRUPTION_TARGET, REASON_TERMINATION_BY_KUBELET};
use kcm_conditions::pod::is_pod_terminal;
use kcm_pod::CachedPod;
use serde_json::{Value, json};

/// What the stale worker does with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum StaleAction {
    /// Not a candidate (or no longer one): nothing to do.
    Skip,
    /// A candidate whose condition is not old enough yet: look again then.
    RequeueAfter(Duration),
    /// Reset the condition by the [`reset_patch`] of the cached pod (fails
    /// on conflict, as upstream's update of its cached pod does).
    Reset,
}

/// Time left before the pod's `DisruptionTarget` is stale, or `None` when
/// the pod is not a candidate. A missing transition time counts as long ago.
pub fn stale_wait(pod: &CachedPod, now: Timestamp, timeout: Duration) -> Option<Duration> {
    if pod.is_deleting() || is_pod_terminal(pod) {
        return None;
    }
    let cond = pod.disruption_target()?;
    // The kubelet's condition may stay arbitrarily long before the pod
    // terminates; it is never stale.
    if cond.status != "True" || cond.reason.as_deref() == Some(REASON_TERMINATION_BY_KUBELET) {
        return None;
    }
    let Some(since) = cond.last_transition_time.as_ref() else {
        return Some(Duration::ZERO);
    };
    let age = now.duration_since(since.0);
    let left = jiff::SignedDuration::try_from(timeout)
        .unwrap_or(jiff::SignedDuration::MAX)
        .saturating_sub(age);
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}

/// The worker's decision for `pod` at `now`. A stale condition is `True`,
/// so resetting it to `False` always changes the pod.
pub fn decide(pod: &CachedPod, now: Timestamp, timeout: Duration) -> StaleAction {
    match stale_wait(pod, now, timeout) {
        None => StaleAction::Skip,
        Some(left) if !left.is_zero() => StaleAction::RequeueAfter(left),
        Some(_) => StaleAction::Reset,
    }
}

/// The pods/status strategic-merge patch that leaves `pod`'s
/// `DisruptionTarget` condition as upstream's update leaves it: status
/// `False`, transition time `now`, the pod's generation as
/// `observedGeneration` (PodObservedGenerationTracking is on by default
/// from 1.34), and no reason, message or probe time (nulled: a merge would
/// keep them). Upstream PUTs its whole cached pod; the cache here keeps only
/// part of the status, so it patches, with the cached `resourceVersion` as
/// the same precondition (409 when the pod changed since) and the uid.
pub fn reset_patch(pod: &CachedPod, now: Timestamp) -> Value {
    let order: Vec<Value> = pod
        .conditions()
        .iter()
        .map(|c| json!({ "type": &*c.type_ }))
        .collect();
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    json!({
        "metadata": {
            "uid": non_empty(pod.uid()),
            "resourceVersion": non_empty(pod.resource_version()),
        },
        "status": {
            "$setElementOrder/conditions": order,
            "conditions": [{
                "type": DISRUPTION_TARGET,
                "status": "False",
                "reason": null,
                "message": null,
                "lastProbeTime": null,
                "lastTransitionTime": Time(now),
                "observedGeneration": pod.generation().filter(|g| *g != 0),
            }],
        },
    })
}

#[cfg(test)]
mod tests;

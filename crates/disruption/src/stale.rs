//! The stale `DisruptionTarget` rule (`nonTerminatingPodHasStaleDisruptionCondition`,
//! `syncStalePodDisruption`): a pod not being deleted and not terminal that
//! has carried `DisruptionTarget=True` (any reason but
//! `TerminationByKubelet`) for the timeout gets the condition set to False,
//! with empty reason and message.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use kcm_conditions::disruption::{DISRUPTION_TARGET, REASON_TERMINATION_BY_KUBELET};
use kcm_conditions::pod::{is_pod_terminal, update_pod_condition};
use kcm_pod::CachedPod;

/// What the stale worker does with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum StaleAction {
    /// Not a candidate (or no longer one): nothing to do.
    Skip,
    /// A candidate whose condition is not old enough yet: look again then.
    RequeueAfter(Duration),
    /// Reset the condition: fetch the whole pod (the cache keeps only part
    /// of its status), apply [`reset`], and send it by a full status update
    /// preconditioned on the cached resourceVersion (fails on conflict,
    /// as upstream's update of its cached pod does).
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

/// Sets `DisruptionTarget` to `False` with empty reason and message in a
/// fetched pod's `status`; `generation` is the pod's. Returns whether
/// anything changed.
pub fn reset(status: &mut PodStatus, generation: Option<i64>, now: Timestamp) -> bool {
    // PodObservedGenerationTracking is on by default from 1.34: the
    // condition records the pod's generation.
    let cond = PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "False".into(),
        observed_generation: generation.filter(|g| *g != 0),
        ..Default::default()
    };
    update_pod_condition(status, cond, now)
}

#[cfg(test)]
mod tests;

//! The order in which active pods are picked for deletion (upstream
//! `controller.ActivePods` `Less` in `pkg/controller/controller_utils.go`,
//! Kubernetes v1.34): pods that are "cheapest" to lose come first.

use std::cmp::Ordering;

use jiff::Timestamp;
use kcm_conditions::pod::is_pod_ready;
use kcm_pod::CachedPod;

use crate::backoff::{non_zero, sidecar_names};

#[cfg(test)]
mod tests;

/// Compares two pods so that the pod to delete first sorts first. Criteria,
/// in order, each deciding only when the pods differ on it:
/// 1. unscheduled (`spec.nodeName` empty) before scheduled;
/// 2. phase `Pending` < `Unknown` < `Running` (any other phase, including
///    unset, ranks like `Pending`, as upstream's map lookup yields 0);
/// 3. not ready before ready;
/// 4. both ready: the one ready more recently first (a missing `Ready`
///    transition time counts as the most recent);
/// 5. higher maximum restart count of regular containers first; when equal,
///    higher maximum restart count of restartable (sidecar) init containers
///    first (other init containers never count);
/// 6. newer `creationTimestamp` first (missing counts as newest).
///
/// Every criterion compares a key of each pod, so this is a total preorder:
/// ties are `Equal` and it can be used with `sort_by` (upstream's sort is
/// unstable, so any order among ties is faithful).
pub fn active_pods_order(a: &CachedPod, b: &CachedPod) -> Ordering {
    is_scheduled(a)
        .cmp(&is_scheduled(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_pod_ready(a).cmp(&is_pod_ready(b)))
        .then_with(|| {
            if is_pod_ready(a) && is_pod_ready(b) {
                latest_or_zero_first(ready_since(a), ready_since(b))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| {
            let (ra, rb) = (max_restarts(a), max_restarts(b));
            // Reversed: more restarts sorts first.
            rb.0.cmp(&ra.0).then(rb.1.cmp(&ra.1))
        })
        .then_with(|| {
            latest_or_zero_first(
                non_zero(a.creation_timestamp()),
                non_zero(b.creation_timestamp()),
            )
        })
}

/// Sorts `pods` so the pods to delete first come first (stable).
pub fn sort_active_pods(pods: &mut [&CachedPod]) {
    pods.sort_by(|a, b| active_pods_order(a, b));
}

fn is_scheduled(pod: &CachedPod) -> bool {
    pod.node_name().is_some_and(|n| !n.is_empty())
}

fn phase_rank(pod: &CachedPod) -> u8 {
    match pod.phase() {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// `lastTransitionTime` of the first `Ready=True` condition, `None` when
/// unset (Go's zero time).
fn ready_since(pod: &CachedPod) -> Option<Timestamp> {
    let ready = pod
        .conditions()
        .iter()
        .find(|c| &*c.type_ == "Ready" && &*c.status == "True")?;
    non_zero(ready.last_transition_time)
}

/// Upstream `afterOrZero` as an ordering: a zero (missing) time first, then
/// later times before earlier ones.
fn latest_or_zero_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// (max restart count of regular containers, max of sidecar init containers).
fn max_restarts(pod: &CachedPod) -> (i32, i32) {
    // Go starts the maxima at 0, so negative counts never win.
    let regular = pod
        .container_statuses()
        .iter()
        .map(|c| c.restart_count)
        .fold(0, i32::max);
    let sidecars = sidecar_names(pod);
    let sidecar = pod
        .init_container_statuses()
        .iter()
        .filter(|c| sidecars.contains(&*c.name))
        .map(|c| c.restart_count)
        .fold(0, i32::max);
    (regular, sidecar)
}

//! The pure part of a PDB sync once the pods and the expected counts are
//! known: `disruptedPods` pruning (`buildDisruptedPodMap`), healthy pods
//! (`countHealthyPods`), the new status or nothing when it is up to date
//! (`updatePdbStatus`), and the fail-safe status (`failSafe`).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kcm_conditions::pdb::{
    DISRUPTION_ALLOWED, REASON_SYNC_FAILED, conditions_are_up_to_date, set_status_condition,
    update_disruption_allowed_condition,
};
use kcm_conditions::pod::is_pod_ready;
use kcm_pod::CachedPod;

/// How long an eviction's `disruptedPods` entry keeps the pod out of
/// `currentHealthy` while the pod is not yet being deleted (upstream
/// constant `DeletionTimeout`, 2 min; API-server time of the eviction).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// `disruptedPods` after pruning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disrupted {
    /// Entries of selected pods not being deleted whose window is open.
    pub pods: BTreeMap<String, Time>,
    /// The earliest window end among the kept entries.
    pub recheck_at: Option<Timestamp>,
    /// Pods whose window ended without a deletion (one `NotDeleted` event
    /// each).
    pub not_deleted: Vec<String>,
}

fn name(p: &CachedPod) -> &str {
    p.name()
}

fn end_of(t: &Time) -> Timestamp {
    t.0.checked_add(DELETION_TIMEOUT).unwrap_or(Timestamp::MAX)
}

/// `buildDisruptedPodMap`: entries of pods gone, unselected or already
/// being deleted are dropped; an entry whose window ended before `now` is
/// dropped and reported.
pub fn build_disrupted_pod_map(
    pods: &[&CachedPod],
    pdb: &PodDisruptionBudget,
    now: Timestamp,
) -> Disrupted {
    let mut out = Disrupted::default();
    let Some(old) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return out;
    };
    for pod in pods {
        if pod.is_deleting() {
            continue;
        }
        let Some(at) = old.get(name(pod)) else {
            continue;
        };
        let end = end_of(at);
        if end < now {
            out.not_deleted.push(name(pod).to_string());
        } else {
            if out.recheck_at.is_none_or(|r| end < r) {
                out.recheck_at = Some(end);
            }
            out.pods.insert(name(pod).to_string(), at.clone());
        }
    }
    out
}

/// `countHealthyPods`: Ready, not being deleted, and not inside an open
/// `disruptedPods` window. Phase and minReadySeconds are not consulted.
pub fn count_healthy(
    pods: &[&CachedPod],
    disrupted: &BTreeMap<String, Time>,
    now: Timestamp,
) -> i32 {
    let healthy = pods
        .iter()
        .filter(|p| !p.is_deleting())
        .filter(|p| disrupted.get(name(p)).is_none_or(|at| end_of(at) <= now))
        .filter(|p| is_pod_ready(p))
        .count();
    i32::try_from(healthy).unwrap_or(i32::MAX)
}

/// The counts a sync computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub expected_count: i32,
}

/// `disruptionsAllowed`: never negative, and 0 while no pods are expected
/// (a PDB over pods that do not exist yet stays safe when they appear).
pub fn disruptions_allowed(c: Counts) -> i32 {
    let allowed = c.current_healthy.saturating_sub(c.desired_healthy);
    if c.expected_count <= 0 || allowed <= 0 {
        0
    } else {
        allowed
    }
}

/// `updatePdbStatus`: the PDB to PUT, or `None` when the status already
/// says all of this (nil and empty `disruptedPods` are equal).
pub fn new_status(
    pdb: &PodDisruptionBudget,
    c: Counts,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> Option<PodDisruptionBudget> {
    let allowed = disruptions_allowed(c);
    let generation = pdb.metadata.generation.unwrap_or(0);
    let old = pdb.status.clone().unwrap_or_default();
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    // A field the stored status lacks reads as 0, as Go's int does.
    let n = |v: Option<i32>| v.unwrap_or(0);
    if n(old.current_healthy) == c.current_healthy
        && n(old.desired_healthy) == c.desired_healthy
        && n(old.expected_pods) == c.expected_count
        && n(old.disruptions_allowed) == allowed
        && old_disrupted == disrupted
        && old.observed_generation.unwrap_or(0) == generation
        && conditions_are_up_to_date(pdb)
    {
        return None;
    }
    let mut next = pdb.clone();
    next.status = Some(PodDisruptionBudgetStatus {
        current_healthy: Some(c.current_healthy),
        desired_healthy: Some(c.desired_healthy),
        expected_pods: Some(c.expected_count),
        disruptions_allowed: Some(allowed),
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: pdb.metadata.generation,
        conditions: old.conditions,
    });
    update_disruption_allowed_condition(&mut next, now);
    Some(next)
}

/// `failSafe`: `disruptionsAllowed = 0` and `DisruptionAllowed=False`
/// (`SyncFailed`, the error as message, the *existing*
/// `status.observedGeneration`); everything else unchanged, so a changed
/// spec still reads as unprocessed to the eviction API.
pub fn fail_safe(pdb: &PodDisruptionBudget, message: &str, now: Timestamp) -> PodDisruptionBudget {
    let mut next = pdb.clone();
    let status = next.status.get_or_insert_with(Default::default);
    status.disruptions_allowed = Some(0);
    let cond = Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: "False".into(),
        reason: REASON_SYNC_FAILED.into(),
        message: message.to_string(),
        observed_generation: status.observed_generation,
        last_transition_time: Time(now),
    };
    set_status_condition(status.conditions.get_or_insert_with(Vec::new), cond, now);
    next
}

#[cfg(test)]
mod tests;

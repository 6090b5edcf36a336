//! CachedPod-failure back-off: the delay before the controller re-creates pods
//! after failures, globally per Job or per completion index, plus the
//! `restartPolicy: OnFailure` restart-count limit.
//!
//! Upstream: `pkg/controller/job/backoff_utils.go` and `job_controller.go`
//! (`pastBackoffLimitOnFailure`), Kubernetes v1.34.
//!
//! Time is always passed in (`now`); nothing here reads a clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kcm_pod::{CachedPod, ContainerState};
use parking_lot::Mutex;

use crate::pods::{index_failure_count, index_ignored_failure_count};

#[cfg(test)]
mod tests;

/// Delay after the first failure (upstream `DefaultJobPodFailureBackOff`);
/// it doubles with every further consecutive failure.
pub const DEFAULT_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
/// Upper bound of the delay (upstream `MaxJobPodFailureBackOff`), reached
/// after 7 consecutive failures (10s·2^6 = 640s > 600s).
pub const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10 * 60);
/// `spec.backoffLimit` when unset (API defaulting; only reached for objects
/// that bypassed defaulting).
const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z). Upstream returns it as the
/// finish time of a pod without `creationTimestamp`; it sorts before every
/// real time and makes any back-off long expired.
pub const GO_ZERO_TIME: Timestamp = Timestamp::constant(-62_135_596_800, 0);

/// A timestamp that is set and not Go's zero time (upstream `IsZero()` checks).
pub(crate) fn non_zero(t: Option<Timestamp>) -> Option<Timestamp> {
    t.filter(|t| *t != GO_ZERO_TIME)
}

/// Names of the pod's restartable ("sidecar") init containers: those with
/// container-level `restartPolicy: Always`.
pub(crate) fn sidecar_names(pod: &CachedPod) -> HashSet<&str> {
    pod.sidecar_names().iter().map(|n| &**n).collect()
}

/// The consecutive-failure state of one Job (upstream `backoffRecord`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    /// Failures that finished after the latest success.
    pub failures_after_last_success: i32,
    /// Finish time of the latest of those failures.
    pub last_failure_time: Option<Timestamp>,
}

/// When a pod finished (upstream `getFinishedTime`), first that applies:
/// 1. the latest container `finishedAt` when every container is terminated
///    (restartable init containers included, with upstream's quirk described
///    on `finish_time_from_containers`);
/// 2. `lastTransitionTime` of a `Ready=False` condition;
/// 3. `deletionTimestamp − deletionGracePeriodSeconds` for a deleted pod;
/// 4. `creationTimestamp` (Go's zero time when unset).
///
/// The kubelet sets `Ready=False` when a pod turns terminal, so (1)/(2) are
/// the normal cases; (3) covers pods removed by PodGC.
pub fn finished_time(pod: &CachedPod) -> Timestamp {
    finish_time_from_containers(pod)
        .or_else(|| finish_time_from_ready_false(pod))
        .or_else(|| finish_time_from_deletion(pod))
        .or_else(|| non_zero(pod.creation_timestamp()))
        .unwrap_or(GO_ZERO_TIME)
}

/// The latest `finishedAt` over regular containers, then folded with the
/// restartable init containers (which stop after the regular ones).
///
/// Mirrors upstream exactly, including its quirk: the sidecar pass starts
/// from the regular result even when that is "none" because a regular
/// container is not terminated, so terminated sidecars alone then yield a
/// time. Any unterminated (or zero-time) sidecar yields "none".
fn finish_time_from_containers(pod: &CachedPod) -> Option<Timestamp> {
    if !pod.has_status() {
        return None;
    }
    let regular = latest_finish_time(None, pod.container_statuses().iter());
    let sidecars = sidecar_names(pod);
    let init = pod
        .init_container_statuses()
        .iter()
        .filter(|cs| sidecars.contains(&*cs.name));
    latest_finish_time(regular, init)
}

/// Folds `statuses` into the running maximum `start`. Any container that is
/// not terminated (or has no `finishedAt`) makes the result `None`,
/// discarding `start`; an empty list returns `start` unchanged.
fn latest_finish_time<'a>(
    start: Option<Timestamp>,
    statuses: impl Iterator<Item = &'a ContainerState>,
) -> Option<Timestamp> {
    let mut latest = start;
    for cs in statuses {
        let finished = non_zero(cs.terminated.as_ref().and_then(|t| t.finished_at))?;
        latest = Some(latest.map_or(finished, |l| l.max(finished)));
    }
    latest
}

fn finish_time_from_ready_false(pod: &CachedPod) -> Option<Timestamp> {
    let ready = pod.condition("Ready")?;
    if &*ready.status != "False" {
        return None;
    }
    non_zero(ready.last_transition_time)
}

fn finish_time_from_deletion(pod: &CachedPod) -> Option<Timestamp> {
    let deleted = pod.deletion_timestamp()?;
    let grace = pod.deletion_grace_period_seconds().unwrap_or(0);
    Some(
        deleted
            .checked_sub(SignedDuration::from_secs(grace))
            .unwrap_or(if grace > 0 {
                Timestamp::MIN
            } else {
                Timestamp::MAX
            }),
    )
}

/// The record after this sync's newly finished pods (upstream
/// `newBackoffRecord`), starting from the stored one (or zeros):
/// * no new pods: unchanged;
/// * only failures: count them all; the last failure time is the latest
///   failure's finish time;
/// * any success: reset, then count only failures that finished strictly
///   after the latest success.
///
/// Failures later ignored by a pod failure policy are included too.
pub fn new_backoff_record(
    stored: Option<&BackoffRecord>,
    new_succeeded: &[&CachedPod],
    new_failed: &[&CachedPod],
) -> BackoffRecord {
    let mut record = stored.copied().unwrap_or_default();
    let mut failed_times: Vec<Timestamp> = new_failed.iter().map(|p| finished_time(p)).collect();
    failed_times.sort_unstable();
    let last_success = new_succeeded.iter().map(|p| finished_time(p)).max();
    match last_success {
        None => {
            if let Some(latest) = failed_times.last() {
                let added = i32::try_from(failed_times.len()).unwrap_or(i32::MAX);
                record.failures_after_last_success =
                    record.failures_after_last_success.saturating_add(added);
                record.last_failure_time = Some(*latest);
            }
        }
        Some(success) => {
            let after = failed_times.iter().filter(|t| **t > success).count();
            record.failures_after_last_success = i32::try_from(after).unwrap_or(i32::MAX);
            record.last_failure_time = if after > 0 {
                failed_times.last().copied()
            } else {
                None
            };
        }
    }
    record
}

/// Remaining global back-off for `record` at `now`, with the upstream
/// defaults (10s doubling, capped at 10min).
pub fn remaining_time(record: &BackoffRecord, now: Timestamp) -> Duration {
    remaining_time_for_failures(
        record.failures_after_last_success,
        record.last_failure_time,
        now,
        DEFAULT_POD_FAILURE_BACKOFF,
        MAX_POD_FAILURE_BACKOFF,
    )
}

/// Remaining back-off of an index whose last failed pod `held_pod` is held
/// for replacement (upstream `getRemainingTimePerIndex`): the failure count
/// is the pod's failure-count plus ignored-failure-count annotations plus
/// one (the pod's own failure), timed from the pod's finish time. No held pod
/// means no delay.
pub fn remaining_time_per_index(held_pod: Option<&CachedPod>, now: Timestamp) -> Duration {
    let Some(pod) = held_pod else {
        return Duration::ZERO;
    };
    let count = index_failure_count(pod)
        .saturating_add(index_ignored_failure_count(pod))
        .saturating_add(1);
    remaining_time_for_failures(
        count,
        Some(finished_time(pod)),
        now,
        DEFAULT_POD_FAILURE_BACKOFF,
        MAX_POD_FAILURE_BACKOFF,
    )
}

/// `base · 2^(failures−1)` capped at `max`, minus the time elapsed since
/// `last_failure` (never negative). No failures → zero.
///
/// Two deliberate deviations from upstream (see the module tests):
/// * a `last_failure` later than `now` (clock skew between nodes and the
///   controller) counts as "just now", so the result never exceeds the
///   delay itself (upstream would add the skew);
/// * failures without a `last_failure` (impossible for records this module
///   builds; upstream would dereference nil) yield zero.
pub fn remaining_time_for_failures(
    failures: i32,
    last_failure: Option<Timestamp>,
    now: Timestamp,
    base: Duration,
    max: Duration,
) -> Duration {
    if failures <= 0 {
        // Upstream only special-cases 0; negative counts cannot be built
        // from annotations (parsed as ≥ 0) nor from records.
        return Duration::ZERO;
    }
    let Some(last_failure) = last_failure else {
        return Duration::ZERO;
    };
    let mut delay = base;
    for _ in 1..failures {
        delay = delay.saturating_mul(2);
        if delay >= max {
            delay = max;
            break;
        }
    }
    let elapsed = now.duration_since(last_failure);
    // Negative elapsed (failure "in the future") converts to an error: zero.
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    delay.saturating_sub(elapsed)
}

/// In-memory back-off records keyed by Job key (`namespace/name`), shared
/// by the workers (upstream `backoffStore`).
#[derive(Debug, Default)]
pub struct BackoffStore {
    records: Mutex<HashMap<String, BackoffRecord>>,
}

impl BackoffStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The stored record of `key`, if any.
    pub fn get(&self, key: &str) -> Option<BackoffRecord> {
        self.records.lock().get(key).copied()
    }

    /// Stores `record` for `key` (called only after the sync's first status
    /// write succeeded).
    pub fn update(&self, key: &str, record: BackoffRecord) {
        self.records.lock().insert(key.to_string(), record);
    }

    /// Forgets `key` (Job deleted or finished).
    pub fn remove(&self, key: &str) {
        self.records.lock().remove(key);
    }

    /// [`new_backoff_record`] starting from the record stored for `key`;
    /// does not store the result.
    pub fn new_record(
        &self,
        key: &str,
        new_succeeded: &[&CachedPod],
        new_failed: &[&CachedPod],
    ) -> BackoffRecord {
        new_backoff_record(self.get(key).as_ref(), new_succeeded, new_failed)
    }
}

/// `restartPolicy: OnFailure` only (upstream `pastBackoffLimitOnFailure`):
/// whether the container restarts of the Job's Running/Pending pods reach
/// `spec.backoffLimit`. The sum covers every init and regular container
/// status; with a limit of 0 any restart is too many, otherwise the sum must
/// be ≥ the limit (unlike the `failed > backoffLimit` rule for pods).
pub fn past_backoff_limit_on_failure(job: &Job, pods: &[&CachedPod]) -> bool {
    let Some(spec) = job.spec.as_ref() else {
        return false;
    };
    let restart_policy = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref());
    if restart_policy != Some("OnFailure") {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(p.phase(), "Running" | "Pending"))
        .flat_map(|p| {
            let init = p.init_container_statuses().iter();
            init.chain(p.container_statuses().iter())
        })
        .map(|cs| i64::from(cs.restart_count))
        .sum();
    let limit = spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    if limit == 0 {
        return restarts > 0;
    }
    restarts >= i64::from(limit)
}

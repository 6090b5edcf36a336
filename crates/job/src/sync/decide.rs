//! What a sync decides around the stages, as pure functions of the Job,
//! its pods and the status before and after: the guards before a sync,
//! which pods to claim, release and adopt, whether the pod counts need a
//! status write, the events and metric of a Job that finished, and the
//! pods-finished metric deltas. The executor (`controller/sync_job.rs`,
//! `claim.rs`) only performs what these return.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use kcm_pod::CachedPod;

use super::{Config, Counts, JobEvent};
use crate::indexes::OrderedIntervals;
use crate::pods::{completions, is_finished, is_indexed, unknown_completion_mode};

/// Whether a Job is synced at all (upstream syncJob's early returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Not in the cache: deleted. Forget everything about the key.
    Gone,
    /// `spec.managedBy` names another controller.
    ManagedElsewhere,
    /// Complete or Failed: forget its read-your-writes and back-off state.
    Finished,
    /// We marked it finished and have not seen that update yet.
    AwaitingFinishedUpdate,
    /// An unknown completion mode: one warning event, no sync.
    UnknownCompletionMode(JobEvent),
    Sync,
}

/// The guard for `job` (None: not in the cache); `marked_finished` says
/// whether we wrote its terminal condition and wait for the update.
pub fn guard(job: Option<&Job>, marked_finished: bool, config: &Config) -> Guard {
    let Some(job) = job else {
        return Guard::Gone;
    };
    if config.managed_elsewhere(job).is_some() {
        return Guard::ManagedElsewhere;
    }
    if is_finished(job) {
        return Guard::Finished;
    }
    if marked_finished {
        return Guard::AwaitingFinishedUpdate;
    }
    if unknown_completion_mode(job).is_some() {
        return Guard::UnknownCompletionMode(JobEvent {
            warning: true,
            reason: "UnknownCompletionMode".into(),
            message: "Skipped Job sync because completion mode is unknown".into(),
        });
    }
    Guard::Sync
}

/// `"Indexed"` or `"NonIndexed"`, the metrics' completion mode label.
pub fn mode(job: &Job) -> &'static str {
    if is_indexed(job) {
        "Indexed"
    } else {
        "NonIndexed"
    }
}

/// Upstream ClaimPods over the cache: the pods the Job keeps, the owned
/// ones to release (they stopped matching) and the orphans to adopt.
#[derive(Debug, Default)]
pub struct Claim {
    pub keep: Vec<Arc<CachedPod>>,
    pub release: Vec<Arc<CachedPod>>,
    /// Adopt only after a live read shows the Job still exists unchanged.
    pub adopt: Vec<Arc<CachedPod>>,
}

/// Claims among `owned` (the pods whose controller is the Job, any
/// namespace) and `orphans` (the pods without a controller in the Job's
/// namespace), by the Job's selector. A Job being deleted neither
/// releases nor adopts.
pub fn claim(job: &Job, owned: Vec<Arc<CachedPod>>, orphans: Vec<Arc<CachedPod>>) -> Claim {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let sel = job
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    // Parsed once: a sync walks every pod the Job owns (10,000 in W2).
    let selects = crate::selector::matcher(&sel);
    let deleting = job.metadata.deletion_timestamp.is_some();
    let mut c = Claim::default();
    for pod in owned {
        if pod.namespace() != ns {
            continue;
        }
        if selects(pod.labels()) {
            c.keep.push(pod);
        } else if !deleting {
            c.release.push(pod);
        }
    }
    if deleting {
        return c;
    }
    c.adopt = orphans
        .into_iter()
        .filter(|p| p.controller().is_none() && !p.is_deleting() && selects(p.labels()))
        .collect();
    c
}

/// Stage 4: `status` with this sync's active, ready and terminating counts,
/// and whether they (or suspension) changed, so the status must be written
/// even if nothing else did.
pub fn with_counts(
    status: &JobStatus,
    counts: Counts,
    suspend_changed: bool,
    config: &Config,
) -> (JobStatus, bool) {
    // Without JobPodReplacementPolicy upstream writes no terminating count.
    let terminating = config.pod_replacement_policy.then_some(counts.terminating);
    let changed = suspend_changed
        || counts.active != status.active.unwrap_or(0)
        || Some(counts.ready) != status.ready
        || terminating != status.terminating;
    let mut status = status.clone();
    // Counters as the API stores them: int32 omitempty, so 0 is absent.
    status.active = (counts.active != 0).then_some(counts.active);
    status.ready = Some(counts.ready);
    status.terminating = terminating;
    (status, changed)
}

/// A Job that finished in this sync: its events and its
/// `job_controller_jobs_finished_total` labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub events: Vec<JobEvent>,
    pub mode: &'static str,
    /// `succeeded` or `failed`.
    pub result: &'static str,
    pub reason: String,
}

/// What finishing with `f` means for `job` (as written).
pub fn finished(job: &Job, f: &JobCondition) -> Finished {
    let reason = f.reason.clone().unwrap_or_default();
    let event = |warning: bool, reason: &str, message: &str| JobEvent {
        warning,
        reason: reason.into(),
        message: message.into(),
    };
    let (events, result) = if f.type_ == "Complete" {
        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        let too_many = job
            .spec
            .as_ref()
            .and_then(|s| s.completions)
            .is_some_and(|c| succeeded > c);
        let mut events = Vec::new();
        if too_many {
            events.push(event(
                true,
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached",
            ));
        }
        events.push(event(false, "Completed", "Job completed"));
        (events, "succeeded")
    } else {
        let message = f.message.clone().unwrap_or_default();
        (vec![event(true, &reason, &message)], "failed")
    };
    Finished {
        events,
        mode: mode(job),
        result,
        reason,
    }
}

/// The increments of `job_controller_job_pods_finished_total` and (Indexed
/// Jobs) `job_controller_job_finished_indexes_total` between the status
/// `old` and the Job's status now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodsFinished {
    pub mode: &'static str,
    pub succeeded: u64,
    pub failed: u64,
    /// (`succeeded`|`failed`, `global`|`perIndex`, increment).
    pub indexes: Vec<(&'static str, &'static str, u64)>,
}

pub fn pods_finished(job: &Job, old: &JobStatus) -> PodsFinished {
    let new = job.status.clone().unwrap_or_default();
    let up = |d: i32| u64::try_from(d.max(0)).unwrap_or(0);
    let mut out = PodsFinished {
        mode: mode(job),
        failed: up(new.failed.unwrap_or(0) - old.failed.unwrap_or(0)),
        ..PodsFinished::default()
    };
    if !is_indexed(job) {
        out.succeeded = up(new.succeeded.unwrap_or(0) - old.succeeded.unwrap_or(0));
        return out;
    }
    let c = completions(job);
    let count = |s: &Option<String>| {
        s.as_deref()
            .map_or(0, |s| OrderedIntervals::parse(s, c).total())
    };
    let per_index = job
        .spec
        .as_ref()
        .is_some_and(|s| s.backoff_limit_per_index.is_some());
    let label = if per_index { "perIndex" } else { "global" };
    let done = count(&new.completed_indexes) - count(&old.completed_indexes);
    out.succeeded = up(done);
    out.indexes.push(("succeeded", label, up(done)));
    let failed = count(&new.failed_indexes) - count(&old.failed_indexes);
    if per_index && failed > 0 {
        out.indexes.push(("failed", label, up(failed)));
    }
    out
}

#[cfg(test)]
mod tests;

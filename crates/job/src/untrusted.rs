//! Traces of what Job and pod authors wrote that the Job controller ignores
//! or undoes, so an operator sees a tenant's attempt to steer it:
//! `kcm_rs_job_untrusted_input_total{reason}` and a warning at most every
//! [`LOG_EVERY`] per reason (with how many were not logged). Nothing here
//! changes what the controller does; the rules that make these inputs
//! harmless live where they apply (`conflict`, `metrics`, `orphans`).

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use tokio::time::Instant;

/// Why an input counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A Job's `managedFields` claims a write time the API server cannot
    /// have set (ahead of now by more than [`SKEW`]): written by its author.
    FutureManagedFields,
    /// A pod held the Job tracking finalizer while no Job of its namespace
    /// owns it (no controller, or one that does not exist with that UID):
    /// the finalizer was removed, as upstream does.
    OrphanTrackingFinalizer,
    /// A `spec.managedBy` value found no label slot (`controller_name` is
    /// `other`): the per-namespace or total bound of the label applied.
    ManagedByLabelOverflow,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::FutureManagedFields => "future_managed_fields",
            Reason::OrphanTrackingFinalizer => "orphan_tracking_finalizer",
            Reason::ManagedByLabelOverflow => "managed_by_label_overflow",
        }
    }
}

/// Clock skew allowed before a `managedFields` time counts as forged.
pub const SKEW: Duration = Duration::from_secs(600);
/// At most one log line per reason this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The manager and time of an entry of `job`'s `managedFields` dated more
/// than [`SKEW`] after `now`.
pub fn future_managed_fields(job: &Job, now: Timestamp) -> Option<(String, Timestamp)> {
    let limit = now.checked_add(SKEW).ok()?;
    job.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| Some((e.manager.clone().unwrap_or_default(), e.time.as_ref()?.0)))
        .find(|(_, t)| *t > limit)
}

/// `kcm_rs_job_untrusted_input_total{reason}` and when each reason was
/// last logged.
pub struct Untrusted {
    counter: IntCounterVec,
    last: Mutex<HashMap<Reason, (Instant, u64)>>,
}

impl Untrusted {
    pub fn new(counter: IntCounterVec) -> Self {
        Untrusted {
            counter,
            last: Mutex::default(),
        }
    }

    /// Counts one input; logs it unless this reason was logged within
    /// [`LOG_EVERY`] (the next line says how many were skipped).
    pub fn record(
        &self,
        reason: Reason,
        object: &str,
        what: impl FnOnce() -> String,
        now: Instant,
    ) {
        self.counter.with_label_values(&[reason.label()]).inc();
        let skipped = {
            let mut last = self.last.lock();
            match last.get_mut(&reason) {
                Some((at, n)) if now.saturating_duration_since(*at) < LOG_EVERY => {
                    *n += 1;
                    return;
                }
                _ => last.insert(reason, (now, 0)).map_or(0, |(_, n)| n),
            }
        };
        let what = what();
        tracing::warn!(
            reason = reason.label(),
            object,
            not_logged_since_last = skipped,
            "untrusted input ignored: {what}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_managed_fields_time_ahead_of_now_is_the_authors() {
        let job: Job = serde_json::from_value(json!({ "metadata": { "name": "j",
            "managedFields": [
                { "manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:00Z" },
                { "manager": "kube-controller-manager", "operation": "Update",
                  "subresource": "status", "time": "2099-01-01T00:00:00Z" } ] } }))
        .expect("job");
        let now: Timestamp = "2026-01-01T00:05:00Z".parse().expect("ts");
        let (m, _) = future_managed_fields(&job, now).expect("forged");
        assert_eq!(m, "kube-controller-manager");
        let later: Timestamp = "2099-01-01T00:00:00Z".parse().expect("ts");
        assert_eq!(future_managed_fields(&job, later), None);
    }

    #[test]
    fn every_input_counts_and_logging_is_bounded() {
        let counter =
            IntCounterVec::new(prometheus::Opts::new("c", "c"), &["reason"]).expect("valid");
        let untrusted = Untrusted::new(counter.clone());
        let c = || {
            counter
                .with_label_values(&[Reason::ManagedByLabelOverflow.label()])
                .get()
        };
        let t = Instant::now();
        let mut logged = 0;
        for i in 0..100u32 {
            untrusted.record(
                Reason::ManagedByLabelOverflow,
                "ns/j",
                || {
                    logged += 1;
                    String::new()
                },
                t + Duration::from_millis(u64::from(i)),
            );
        }
        assert_eq!(c(), 100);
        assert_eq!(logged, 1);
    }
}

//! The executor side of [`crate::conflict`]: feeds the ledger the watch's
//! Job updates and the controller's own status writes; for each foreign
//! status change, an error log line and a Warning `ConflictingController`
//! event on that Job naming the writer, and `kcm_rs_conflicting_controller`
//! by writer. With `--on-conflict=stop` only that Job's syncs wait (once
//! others changed it [`STOP_AFTER`] times), looked at again every
//! [`RECHECK`] until the contest expires.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_runtime::informer::{Informable as _, parse_rv};

use super::JobController;
use super::port::JobPort;
use crate::conflict::{Foreign, Outcome, STOP_AFTER, WINDOW, fingerprint, status_change};

/// The event reason on a Job another writer changes.
pub const REASON: &str = "ConflictingController";
/// How often a contested Job is looked at again while its syncs wait.
const RECHECK: Duration = Duration::from_secs(15);

/// How a status write ended, for the ledger: a definite refusal wrote
/// nothing; no answer, or a server error, may have written it.
pub fn outcome(result: &Result<Option<u64>, &kube::Error>, job: &Job) -> Outcome {
    match result {
        Ok(Some(rv)) => Outcome::Written(*rv),
        Err(kube::Error::Api(s)) if s.code < 500 => Outcome::Refused,
        Ok(None) | Err(_) => Outcome::Unknown {
            print: fingerprint(job.status.as_ref()),
        },
    }
}

impl<P: JobPort> JobController<P> {
    /// The watch's update of a Job: judge a status change we did not make.
    pub(super) fn observe_job_update(&self, old: &Job, cur: &Job) {
        if self.config.managed_elsewhere(cur).is_some() {
            return;
        }
        let Some(change) = status_change(old, cur) else {
            return;
        };
        let key = cur.key();
        if let Some(f) = self.conflict.observe(&key, change, self.clock.instant()) {
            self.report_conflict(cur, &key, &f);
        }
    }

    /// Runs one status write of `job` (key `key`) through the ledger.
    pub(super) async fn ledgered_status_write(
        &self,
        key: &str,
        job: &Job,
    ) -> Result<kcm_runtime::client::Written, kube::Error> {
        self.conflict.begin(key);
        let result = self.port.write_status(job).await;
        let rv = result
            .as_ref()
            .map(|w| w.metadata.resource_version.as_deref().and_then(parse_rv));
        let outcome = outcome(&rv, job);
        for f in self.conflict.end(key, outcome, self.clock.instant()) {
            self.report_conflict(job, key, &f);
        }
        result
    }

    /// Reports a foreign change: the first of a contest (a warning) and the
    /// one that stops the Job (an error); the others only move the gauge.
    fn report_conflict(&self, job: &Job, key: &str, f: &Foreign) {
        let stops = self.conflict.blocks(key, self.clock.instant());
        if f.count > 1 && !(stops && f.count == STOP_AFTER) {
            self.refresh_conflict_gauge();
            return;
        }
        let msg = format!(
            "another writer ({}) changed this Job's status (resourceVersion {}), which kcm-rs did \
             not write: {}",
            f.writer,
            f.rv,
            if stops {
                "it keeps writing, as a second Job controller does (kube-controller-manager's \
                 job-controller must be off: --controllers=...,-job-controller while kcm-rs runs); \
                 kcm-rs stops syncing this Job until it is left alone for 2 minutes"
            } else {
                "a second Job controller, or a hand edit (kube-controller-manager's job-controller \
                 must be off: --controllers=...,-job-controller while kcm-rs runs)"
            }
        );
        if stops {
            tracing::error!(job = %key, writer = %f.writer, rv = f.rv, "another controller writes this Job: {msg}");
        } else {
            tracing::warn!(job = %key, writer = %f.writer, rv = f.rv, "another writer changed this Job: {msg}");
        }
        self.event(job, true, REASON, msg);
        self.refresh_conflict_gauge();
    }

    /// Sets the gauge from the ledger (expired contests drop out).
    pub(super) fn refresh_conflict_gauge(&self) {
        let by = self.conflict.by_writer(self.clock.instant());
        let g = &self.metrics.conflicting;
        let mut shown = self.metrics.conflicting_shown.lock();
        shown.retain(|w| {
            let keep = by.contains_key(w);
            if !keep {
                let _ = g.remove_label_values(&[w]);
            }
            keep
        });
        for (w, n) in by {
            g.with_label_values(&[&w]).set(n);
            shown.insert(w);
        }
    }

    /// Whether the sync of `key` waits: its status was changed by another
    /// writer within [`WINDOW`] and `--on-conflict=stop`.
    pub(super) fn conflict_blocks(&self, key: &str) -> bool {
        self.refresh_conflict_gauge();
        let blocked = self.conflict.blocks(key, self.clock.instant());
        if blocked {
            self.queue.add_after(key.to_string(), RECHECK.min(WINDOW));
        }
        blocked
    }
}

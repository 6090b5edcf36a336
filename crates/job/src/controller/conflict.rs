//! The executor side of [`crate::conflict`]: log, Warning event and
//! `kcm_rs_conflicting_controller` when another controller writes the Jobs
//! this one leads; with `--on-conflict=stop` the sync is skipped and the Job
//! looked at again later, so syncing resumes once the conflict clears.

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use prometheus::IntGauge;

use super::JobController;
use super::port::JobPort;
use crate::conflict::{Observed, WINDOW};

/// The event reason on a Job another controller writes.
pub const REASON: &str = "ConflictingController";
/// How often a Job is looked at again while syncs are stopped.
const RECHECK: Duration = Duration::from_secs(15);

/// `kcm_rs_conflicting_controller`: 1 while another controller writes Jobs
/// this one leads (registered at start, so it reads 0 until then).
pub fn gauge() -> &'static IntGauge {
    static G: OnceLock<IntGauge> = OnceLock::new();
    G.get_or_init(|| {
        kcm_runtime::metrics::register(
            IntGauge::new(
                "kcm_rs_conflicting_controller",
                "1 while another controller (kube-controller-manager's job-controller) wrote \
                 the status of a Job this Job controller leads within the last 2 minutes.",
            )
            .expect("constant metric definition is valid"),
        )
    })
}

impl<P: JobPort> JobController<P> {
    /// Whether the sync of `job` must be skipped: a conflict is live and
    /// `--on-conflict=stop`.
    pub(super) fn conflict_blocks(&self, key: &str, job: &Job) -> bool {
        let now = self.clock.now();
        if let Observed::New(w) = self.conflict.observe(key, job, now) {
            let msg = format!(
                "another controller ({}) updated this Job's status at {}: kube-controller-manager's \
                 job-controller must be off (--controllers=...,-job-controller) while kcm-rs runs",
                w.manager, w.at
            );
            tracing::error!(job = %key, manager = %w.manager, "another controller writes this Job: {msg}");
            self.event(job, true, REASON, msg);
        }
        gauge().set(i64::from(self.conflict.active(now)));
        let blocked = self.conflict.blocks(now);
        if blocked {
            self.queue.add_after(key.to_string(), RECHECK.min(WINDOW));
        }
        blocked
    }
}

//! One Job sync as pure stages between the executor's API calls
//! (upstream `syncJob`, `manageJob`, `trackJobStatusAndRemoveFinalizers`):
//!
//! 1. [`prepare`]: counts, new finished pods, start time, back-off record and
//!    the terminal decision, in upstream's evaluation order;
//! 2. [`manage::pod_work`]: what to do to pods (delete, create, wait);
//! 3. [`manage::apply_outcome`]: fold in what the API calls achieved, then
//!    completion and suspend bookkeeping;
//! 4. [`tracking::plan`]: the first status write (uncounted UIDs, indexes,
//!    interim conditions) and the pods whose finalizer goes;
//! 5. [`tracking::finish`]: after the finalizer removals, move the freed UIDs
//!    into the counters and add the terminal condition when allowed.
//!
//! Ordering that matters for correctness lives here: UIDs are persisted in
//! `uncountedTerminatedPods` before finalizers are removed, `FailureTarget`
//! before `Failed`, `SuccessCriteriaMet` before `Complete`.

pub mod decide;
pub mod manage;
pub mod prepare;
pub mod profile;
pub mod tracking;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use kcm_pod::CachedPod;

use crate::backoff::BackoffRecord;
use crate::indexes::OrderedIntervals;

pub use prepare::prepare;
pub use profile::Config;

/// At most this many pods are created or deleted in one sync
/// (upstream MaxPodCreateDeletePerSync).
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;
/// At most this many terminated pods are accounted in one sync
/// (upstream MaxUncountedPods).
pub const MAX_UNCOUNTED_PODS: usize = 500;

/// `action` label values of the sync metrics.
pub const ACTION_RECONCILING: &str = "reconciling";
pub const ACTION_TRACKING: &str = "tracking";
pub const ACTION_PODS_CREATED: &str = "pods_created";
pub const ACTION_PODS_DELETED: &str = "pods_deleted";

/// What a sync starts from: a copy of the cached Job and its claimed pods.
#[derive(Debug, Clone)]
pub struct Input {
    pub job: Job,
    pub pods: Vec<Arc<CachedPod>>,
    /// CachedPod creation/deletion expectations were satisfied before listing pods.
    pub satisfied: bool,
    /// UIDs whose finalizer removal is in flight (not yet observed).
    pub expected_rm_finalizers: HashSet<String>,
    pub stored_backoff: Option<BackoffRecord>,
    pub now: Timestamp,
    pub config: Config,
}

/// An event on the Job object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// The state of one sync, carried from stage to stage.
#[derive(Debug, Clone)]
pub struct JobCtx {
    /// The working copy whose status is written.
    pub job: Job,
    pub pods: Vec<Arc<CachedPod>>,
    pub active_pods: Vec<Arc<CachedPod>>,
    pub active: i32,
    pub ready: i32,
    pub terminating: i32,
    pub uncounted_succeeded: HashSet<String>,
    pub uncounted_failed: HashSet<String>,
    pub expected_rm: HashSet<String>,
    pub succeeded: i32,
    pub failed: i32,
    pub new_backoff: BackoffRecord,
    /// The terminal (or interim) condition decided this sync, if any.
    pub finished: Option<JobCondition>,
    pub prev_succeeded_indexes: OrderedIntervals,
    pub succeeded_indexes: OrderedIntervals,
    pub failed_indexes: Option<OrderedIntervals>,
    /// Per index, the failed pod whose finalizer is kept until its
    /// replacement exists (backoffLimitPerIndex).
    pub held: BTreeMap<i32, Arc<CachedPod>>,
    pub satisfied: bool,
    pub now: Timestamp,
    pub config: Config,
    /// Sync again after this long (activeDeadlineSeconds, back-off).
    pub requeue_after: Option<Duration>,
    pub action: &'static str,
    pub manage_called: bool,
    pub suspend_changed: bool,
    pub events: Vec<JobEvent>,
    /// `WorkloadWithJob`: the PodGroup new pods name in
    /// `spec.schedulingGroup`.
    pub pod_group: Option<String>,
}

impl JobCtx {
    pub fn completions(&self) -> Option<i32> {
        self.job.spec.as_ref().and_then(|s| s.completions)
    }

    pub fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(match self.requeue_after {
            Some(d) => d.min(after),
            None => after,
        });
    }
}

fn uid(p: &CachedPod) -> &str {
    p.uid()
}

#[cfg(test)]
pub(crate) mod tests;

//! One Job sync as stages that take inputs and return their decisions
//! (upstream `syncJob`, `manageJob`, `trackJobStatusAndRemoveFinalizers`).
//! The executor (`controller/sync_job.rs`) runs them in upstream's order,
//! threads the Job's status from one to the next and performs the API calls
//! between them:
//!
//! 1. [`prepare`]: the snapshot's facts: counts, new finished pods, start
//!    time, back-off record, the pod failure policy's verdicts, and the
//!    terminal decision ([`Prepared`]);
//! 2. [`manage::pod_work`]: what to do to pods (delete, create, wait)
//!    ([`manage::Managed`]); [`tracking::success_first`]: a status to write
//!    before deleting the pods of a Job whose success policy is met;
//! 3. [`manage::after_pods`]: what the pod calls achieved, the completion
//!    check and the suspend bookkeeping ([`manage::AfterPods`]);
//! 4. [`decide::with_counts`]: the active, ready and terminating counts in
//!    the status, and whether they need a write;
//! 5. [`tracking::plan`]: the first status write (uncounted UIDs, indexes,
//!    interim conditions) and the pods whose finalizer goes
//!    ([`tracking::Tracking`]);
//! 6. [`tracking::finish`]: after the finalizer removals, the freed UIDs
//!    moved into the counters and the terminal condition when allowed.
//!
//! When to sync again is a returned value too ([`Requeue`]): the executor
//! hands it to the queue once, after the sync.
//!
//! Ordering that matters for correctness lives here: UIDs are persisted in
//! `uncountedTerminatedPods` before finalizers are removed, `FailureTarget`
//! before `Failed`, `SuccessCriteriaMet` before `Complete`.

pub mod decide;
pub mod manage;
pub mod prepare;
pub mod profile;
pub mod tracking;
pub mod verdicts;

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
pub use verdicts::Verdicts;

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
    /// `WorkloadWithJob`: the PodGroup new pods name in
    /// `spec.schedulingGroup`.
    pub pod_group: Option<String>,
}

/// An event on the Job object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// When to sync the Job again besides its events: the shortest wait any
/// stage asked for (activeDeadlineSeconds, the pod failure back-off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requeue(Option<Duration>);

impl Requeue {
    /// No wait asked for.
    pub const NONE: Requeue = Requeue(None);

    /// Sync again after `d`.
    pub fn after(d: Duration) -> Requeue {
        Requeue(Some(d))
    }

    /// The sooner of the two.
    #[must_use]
    pub fn min(self, other: Requeue) -> Requeue {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Requeue(Some(a.min(b))),
            (a, b) => Requeue(a.or(b)),
        }
    }

    /// How long to wait, if at all.
    pub fn wait(self) -> Option<Duration> {
        self.0
    }
}

/// Active, ready and terminating pods, as `status` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub active: i32,
    pub ready: i32,
    pub terminating: i32,
}

/// The UIDs the stored status lists as terminated but not yet counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uncounted {
    pub succeeded: HashSet<String>,
    pub failed: HashSet<String>,
}

/// What stage 1 found about an Indexed Job's indexes.
#[derive(Debug, Clone, Default)]
pub struct Indexes {
    /// `status.completedIndexes` as stored.
    pub prev_succeeded: OrderedIntervals,
    /// Stored plus the indexes of the pods that succeeded since.
    pub succeeded: OrderedIntervals,
    /// With `backoffLimitPerIndex`: stored plus newly failed indexes.
    pub failed: Option<OrderedIntervals>,
    /// Per index, the failed pod whose finalizer is kept until its
    /// replacement exists (`backoffLimitPerIndex`).
    pub held: BTreeMap<i32, Arc<CachedPod>>,
}

/// Stage 1's result: the snapshot and what it says, unchanged by the
/// later stages, which read it and return their own decisions.
#[derive(Debug)]
pub struct Prepared {
    /// The Job as the sync reads it ([`Config::view`]), its status as
    /// stage 1 leaves it (`startTime` set when the Job starts).
    pub job: Job,
    pub pods: Vec<Arc<CachedPod>>,
    pub active_pods: Vec<Arc<CachedPod>>,
    pub counts: Counts,
    pub uncounted: Uncounted,
    /// UIDs whose finalizer removal is in flight.
    pub expected_rm: HashSet<String>,
    pub succeeded: i32,
    pub failed: i32,
    pub new_backoff: BackoffRecord,
    /// The terminal (or interim) condition decided from the snapshot.
    pub finished: Option<JobCondition>,
    pub indexes: Indexes,
    /// The pod failure policy's verdict on each failed pod, matched once.
    pub verdicts: Verdicts,
    pub requeue: Requeue,
    pub satisfied: bool,
    pub now: Timestamp,
    pub config: Config,
    pub pod_group: Option<String>,
}

impl Prepared {
    pub fn completions(&self) -> Option<i32> {
        self.job.spec.as_ref().and_then(|s| s.completions)
    }
}

fn uid(p: &CachedPod) -> &str {
    p.uid()
}

#[cfg(test)]
pub(crate) mod tests;

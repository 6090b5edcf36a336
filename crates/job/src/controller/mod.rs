//! The Job controller's wiring: informers, event handlers, the `job` and
//! `job_orphan_pod` queues, expectations, and the workers that run syncs.
//! Every API write of the executor (`sync_job`, `claim`, `pod_control`,
//! `orphans`) and every event goes through the [`port::JobPort`] the
//! controller holds: [`port::ApiPort`] in KCM, an in-memory world in tests.

mod claim;
pub mod conflict;
pub mod consistency;
mod handlers;
mod orphans;
mod pod_control;
pub mod port;
pub mod scheduling;
mod sync_job;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use kcm_pod::CachedPod;
use kcm_runtime::clock::Clock;
use kcm_runtime::events::EventType;
use kcm_runtime::expectations::{ControllerExpectations, UidTrackingExpectations};
use kcm_runtime::host::Host;
use kcm_runtime::informer::{
    BY_CONTROLLER_UID, BY_NAMESPACE, Informer, namespace_index, pod_controller_uid_index,
};
use kcm_runtime::metrics::Metrics;
use kcm_runtime::workqueue::{InFlightLimit, RetryRateLimit, WorkQueue, namespace_lane};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::backoff::BackoffStore;
use crate::sync::Config;
use port::{ApiPort, JobPort};

/// CachedPod events are batched: a Job syncs at most once per this period for
/// them (upstream SyncJobBatchPeriod).
pub const SYNC_JOB_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// Per-key retry back-off of both queues (upstream DefaultJobApiBackOff,
/// MaxJobApiBackOff).
pub const JOB_API_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_JOB_API_BACKOFF: Duration = Duration::from_secs(60);

/// Index name: pods without a controller ownerReference, by namespace
/// (the adoption candidates; upstream's FilterPodsByOwner "orphan" key).
pub const BY_ORPHAN_NAMESPACE: &str = "orphan-namespace";

/// Files pods that have no controller under their namespace.
pub fn orphan_namespace_index() -> kcm_runtime::informer::IndexFn<CachedPod> {
    Arc::new(|p: &CachedPod| {
        if p.controller().is_some() {
            return Vec::new();
        }
        kcm_runtime::informer::namespace_of(p)
    })
}

/// Index name: pods holding the Job tracking finalizer, by namespace. A
/// finished or deleted Job's finalizer sweep can only act on these, so it
/// walks them instead of every pod in the namespace (upstream lists the
/// whole namespace: with 1,000 Jobs finishing among 10,000 kept pods that
/// is some 10^7 pods visited for nothing).
pub const BY_TRACKING_NAMESPACE: &str = "job-tracking-namespace";

/// Files pods that still hold the tracking finalizer under their namespace.
pub fn tracking_namespace_index() -> kcm_runtime::informer::IndexFn<CachedPod> {
    Arc::new(|p: &CachedPod| {
        if !p.has_tracking_finalizer() {
            return Vec::new();
        }
        kcm_runtime::informer::namespace_of(p)
    })
}

/// An orphan-queue item: one pod by name, or every pod a selector matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OrphanKey {
    Name {
        namespace: String,
        name: String,
    },
    /// The selector as JSON (LabelSelector is not hashable).
    Selector {
        namespace: String,
        selector: String,
    },
}

impl OrphanKey {
    /// The namespace of the pods the key stands for (its fair-share lane).
    pub fn namespace(&self) -> &str {
        match self {
            OrphanKey::Name { namespace, .. } | OrphanKey::Selector { namespace, .. } => namespace,
        }
    }
}

/// The controller; `P` performs its API writes and events. Its parts are
/// its own: built by [`JobController::new`] (and the `with_*` steps before
/// it is shared), read by the executor in this module.
pub struct JobController<P = ApiPort> {
    port: P,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<CachedPod>>,
    queue: WorkQueue<String>,
    orphan_queue: WorkQueue<OrphanKey>,
    expectations: ControllerExpectations,
    finalizer_expectations: UidTrackingExpectations,
    /// UIDs of Jobs we marked finished whose update we have not seen yet.
    finished_jobs: Mutex<HashSet<String>>,
    backoff: BackoffStore,
    config: Config,
    /// Read-your-writes (1.36+), see [`consistency`].
    rw: consistency::ReadYourWrites,
    /// The runtime's one clock: the `now` each sync decides with.
    clock: kcm_runtime::clock::Clock,
    /// Our status writes and the foreign ones seen (`--on-conflict`).
    conflict: crate::conflict::Ledger,
    /// The Workload and PodGroup informers, with `WorkloadWithJob` on
    /// (1.37's v1beta1 ones, or 1.36's v1alpha2 ones).
    scheduling: Option<scheduling::Scheduling>,
    /// The `job_controller_*` families of the minor it behaves as.
    metrics: crate::metrics::Metrics,
}

/// The core/v1 reference of a Job, for events.
pub fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// Adds the indexes the controller reads to its informers.
pub fn add_indexes(jobs: &Informer<Job>, pods: &Informer<CachedPod>) {
    jobs.add_index(BY_NAMESPACE, namespace_index());
    pods.add_index(BY_CONTROLLER_UID, pod_controller_uid_index());
    pods.add_index(BY_ORPHAN_NAMESPACE, orphan_namespace_index());
    pods.add_index(BY_TRACKING_NAMESPACE, tracking_namespace_index());
}

impl<P: JobPort> JobController<P> {
    /// A controller over `jobs` and `pods` (indexed by [`add_indexes`])
    /// writing through `port`, with empty queues, expectations and
    /// back-off records: what a process starts with. KCM and the model
    /// tests build it the same way. Its queues count in `runtime`'s
    /// families, its own in `metrics`.
    pub fn new(
        port: P,
        jobs: Arc<Informer<Job>>,
        pods: Arc<Informer<CachedPod>>,
        config: Config,
        clock: Clock,
        runtime: &Metrics,
        metrics: crate::metrics::Metrics,
    ) -> Self {
        let rate = RetryRateLimit::per_key(JOB_API_BACKOFF, MAX_JOB_API_BACKOFF);
        let read_your_writes = config.read_your_writes;
        JobController {
            port,
            jobs,
            pods,
            // Beyond upstream: namespaces take turns, so one namespace's
            // burst of Jobs does not hold back another's (docs/fair-share.md).
            queue: WorkQueue::fair("job", rate, namespace_lane::<String>, runtime),
            orphan_queue: WorkQueue::fair("job_orphan_pod", rate, OrphanKey::namespace, runtime),
            expectations: ControllerExpectations::with_clock(clock.clone()),
            finalizer_expectations: UidTrackingExpectations::new(),
            finished_jobs: Mutex::default(),
            backoff: BackoffStore::new(),
            config,
            rw: consistency::ReadYourWrites::new(read_your_writes),
            conflict: crate::conflict::Ledger::new(Default::default()),
            scheduling: None,
            clock,
            metrics,
        }
    }

    /// What it does when another writer changes a Job's status
    /// (`--on-conflict`).
    #[must_use]
    pub fn with_on_conflict(mut self, on_conflict: crate::conflict::OnConflict) -> Self {
        self.conflict = crate::conflict::Ledger::new(on_conflict);
        self
    }

    /// The Workload and PodGroup informers it keeps with `WorkloadWithJob`.
    #[must_use]
    pub fn with_scheduling(mut self, scheduling: scheduling::Scheduling) -> Self {
        self.scheduling = Some(scheduling);
        self
    }

    /// The port it writes through (the model tests' world).
    #[cfg(test)]
    pub(crate) fn port(&self) -> &P {
        &self.port
    }

    /// Its expectations (the model tests check they are met).
    #[cfg(test)]
    pub(crate) fn expectations(&self) -> &ControllerExpectations {
        &self.expectations
    }

    /// Its back-off records (the model tests read the wait).
    #[cfg(test)]
    pub(crate) fn backoff(&self) -> &BackoffStore {
        &self.backoff
    }

    /// The profile it syncs with.
    #[cfg(test)]
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub fn event(&self, job: &Job, warning: bool, reason: &str, message: impl Into<String>) {
        let kind = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.port.event(job, kind, reason, message.into());
    }

    /// Waits for the caches, then runs `workers` job workers and as many
    /// orphan workers on the host until `stop`; in-flight syncs finish first.
    pub async fn run(self: Arc<Self>, host: Host, workers: u32, stop: CancellationToken)
    where
        P: 'static,
    {
        host.track(&self.jobs);
        host.track(&self.pods);
        if let Some(s) = &self.scheduling {
            s.track(&host);
        }
        if !host.wait_for_sync(&stop).await {
            return;
        }
        let n = usize::try_from(workers).unwrap_or(usize::MAX).max(1);
        // Beyond upstream (docs/fair-share.md): one namespace holds at most
        // n workers, as upstream's n; n spare workers start syncs of
        // namespaces that have none running, so a few long syncs elsewhere
        // (Jobs creating hundreds of pods) do not hold a newcomer back.
        self.queue
            .limit_in_flight(InFlightLimit { base: n, spare: n });
        let jc = Arc::clone(&self);
        let jobs = host
            .workers(&self.queue, "job")
            .count(n.saturating_mul(2))
            .run(
                move |key: String| {
                    let jc = Arc::clone(&jc);
                    async move { jc.sync_job(&key).await }
                },
                stop.clone(),
            );
        let jc = Arc::clone(&self);
        let orphans = host
            .workers(&self.orphan_queue, "orphan pods")
            .count(n)
            .run(
                move |key: OrphanKey| {
                    let jc = Arc::clone(&jc);
                    async move { jc.sync_orphan(&key).await }
                },
                stop,
            );
        futures::join!(jobs, orphans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(finalizers: serde_json::Value, owned: bool) -> CachedPod {
        let mut p =
            json!({ "metadata": { "name": "p", "namespace": "ns", "finalizers": finalizers } });
        if owned {
            p["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "uid": "u", "controller": true }]);
        }
        serde_json::from_value(p).expect("pod")
    }

    #[test]
    fn only_pods_with_the_tracking_finalizer_are_sweep_candidates() {
        let index = tracking_namespace_index();
        let tracked = json!([crate::pods::JOB_TRACKING_FINALIZER]);
        assert_eq!(index(&pod(tracked.clone(), true)), vec!["ns".to_string()]);
        assert_eq!(index(&pod(tracked, false)), vec!["ns".to_string()]);
        assert!(index(&pod(json!(["other"]), true)).is_empty());
        assert!(index(&pod(json!(null), true)).is_empty());
    }
}

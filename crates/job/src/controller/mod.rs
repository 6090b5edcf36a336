//! The Job controller's wiring: informers, event handlers, the `job` and
//! `job_orphan_pod` queues, expectations, and the workers that run syncs.

mod claim;
mod handlers;
mod orphans;
mod pod_control;
mod sync_job;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kcm_runtime::events::{EventType, Recorder};
use kcm_runtime::expectations::{ControllerExpectations, UidTrackingExpectations};
use kcm_runtime::informer::Informer;
use kcm_runtime::workqueue::WorkQueue;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::backoff::BackoffStore;
use crate::sync::Config;

/// Pod events are batched: a Job syncs at most once per this period for
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
pub fn orphan_namespace_index() -> kcm_runtime::informer::IndexFn<Pod> {
    Arc::new(|p: &Pod| {
        if handlers::controller_of(p).is_some() {
            return Vec::new();
        }
        p.metadata.namespace.clone().into_iter().collect()
    })
}

/// Index name: pods holding the Job tracking finalizer, by namespace. A
/// finished or deleted Job's finalizer sweep can only act on these, so it
/// walks them instead of every pod in the namespace (upstream lists the
/// whole namespace: with 1,000 Jobs finishing among 10,000 kept pods that
/// is some 10^7 pods visited for nothing).
pub const BY_TRACKING_NAMESPACE: &str = "job-tracking-namespace";

/// Files pods that still hold the tracking finalizer under their namespace.
pub fn tracking_namespace_index() -> kcm_runtime::informer::IndexFn<Pod> {
    Arc::new(|p: &Pod| {
        if !crate::pods::has_tracking_finalizer(p) {
            return Vec::new();
        }
        p.metadata.namespace.clone().into_iter().collect()
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

pub struct JobController {
    pub client: kube::Client,
    pub jobs: Arc<Informer<Job>>,
    pub pods: Arc<Informer<Pod>>,
    pub queue: WorkQueue<String>,
    pub orphan_queue: WorkQueue<OrphanKey>,
    pub expectations: ControllerExpectations,
    pub finalizer_expectations: UidTrackingExpectations,
    /// UIDs of Jobs we marked finished whose update we have not seen yet.
    pub finished_jobs: Mutex<HashSet<String>>,
    pub backoff: BackoffStore,
    pub recorder: Recorder,
    pub config: Config,
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

impl JobController {
    pub fn event(&self, job: &Job, warning: bool, reason: &str, message: impl Into<String>) {
        let kind = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder
            .event(&job_ref(job), kind, reason, message.into());
    }

    async fn job_worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync_job(&key).await;
            match result {
                Ok(()) => self.queue.forget(&key),
                Err(e) => {
                    tracing::warn!(job = %key, "syncing job: {e}");
                    self.queue.add_rate_limited(key.clone());
                }
            }
            self.queue.done(&key);
        }
    }

    async fn orphan_worker(self: Arc<Self>) {
        while let Some(key) = self.orphan_queue.get().await {
            match self.sync_orphan(&key).await {
                Ok(()) => self.orphan_queue.forget(&key),
                Err(e) => {
                    tracing::warn!(?key, "syncing orphan pods: {e}");
                    self.orphan_queue.add_rate_limited(key.clone());
                }
            }
            self.orphan_queue.done(&key);
        }
    }

    /// Waits for the caches, then runs `workers` job workers and as many
    /// orphan workers until `stop`; in-flight syncs finish first.
    pub async fn run(self: Arc<Self>, workers: u32, stop: CancellationToken) {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = async { self.jobs.wait_synced().await; self.pods.wait_synced().await } => {}
        }
        let mut tasks = Vec::new();
        for _ in 0..workers.max(1) {
            tasks.push(tokio::spawn(Arc::clone(&self).job_worker()));
            tasks.push(tokio::spawn(Arc::clone(&self).orphan_worker()));
        }
        stop.cancelled().await;
        self.queue.shutdown();
        self.orphan_queue.shutdown();
        futures::future::join_all(tasks).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(finalizers: serde_json::Value, owned: bool) -> Pod {
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

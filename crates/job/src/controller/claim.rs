//! Claiming pods for a Job (upstream getPodsForJob / ClaimPods), as
//! `sync::decide::claim` decides it: keep owned pods that match, release
//! owned pods that stopped matching, adopt matching orphans (after a live
//! check that the Job still exists).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kcm_pod::CachedPod;
use kcm_pod::meta::key_of;
use kcm_runtime::client::Written;
use kcm_runtime::informer::BY_CONTROLLER_UID;

use super::port::{JobPort, Settled};
use super::{BY_ORPHAN_NAMESPACE, JobController};
use crate::sync::decide;

impl<P: JobPort> JobController<P> {
    /// The Job's pods; errors of adoption or release are returned after the
    /// claimed list is complete (the sync then fails and retries). What to
    /// keep, release and adopt is [`decide::claim`]'s; this performs it.
    pub(super) async fn pods_for_job(
        &self,
        job: &Job,
    ) -> (Vec<Arc<CachedPod>>, Option<kube::Error>) {
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let job_key = key_of(&ns, job.metadata.name.as_deref().unwrap_or(""));
        // Only pods without a controller are adoption candidates: an index,
        // not a scan of every pod in the namespace on each sync.
        let c = decide::claim(
            job,
            self.pods.store().by_index(BY_CONTROLLER_UID, &uid),
            self.pods.store().by_index(BY_ORPHAN_NAMESPACE, &ns),
        );
        let mut claimed = c.keep;
        let mut error = None;
        let wrote = |w: &Written| {
            self.rw.on_write(
                &job_key,
                &uid,
                super::consistency::Resource::Pods,
                w.metadata.resource_version.as_deref(),
            );
        };
        for pod in &c.release {
            match self.port.release_pod(job, pod).await {
                Ok(Settled::Written(p)) => wrote(&p),
                Ok(Settled::Moot) => {}
                Err(e) => error = Some(e),
            }
        }
        if c.adopt.is_empty() {
            return (claimed, error);
        }
        // A live read: never adopt for a Job that was deleted or replaced
        // under the same name.
        match self.port.read_job(job).await {
            Ok(Some(fresh))
                if fresh.metadata.uid.as_deref() == Some(uid.as_str())
                    && fresh.metadata.deletion_timestamp.is_none() => {}
            Ok(_) => return (claimed, error),
            Err(e) => return (claimed, Some(e)),
        }
        for pod in c.adopt {
            match self.port.adopt_pod(job, &pod).await {
                Ok(Settled::Written(patched)) => {
                    wrote(&patched);
                    // Treat it as tracked for the rest of this sync.
                    claimed.push(Arc::new((*pod).clone().with_tracking_finalizer()));
                }
                Ok(Settled::Moot) => {}
                Err(e) => error = Some(e),
            }
        }
        (claimed, error)
    }
}

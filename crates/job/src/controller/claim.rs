//! Claiming pods for a Job (upstream getPodsForJob / ClaimPods): keep owned
//! pods that match, release owned pods that stopped matching, adopt
//! matching orphans (after a live check that the Job still exists).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_runtime::informer::BY_CONTROLLER_UID;

use super::handlers::controller_of;
use super::port::{JobPort, Settled};
use super::{BY_ORPHAN_NAMESPACE, JobController};
use crate::pods::JOB_TRACKING_FINALIZER;
use crate::selector;

impl<P: JobPort> JobController<P> {
    /// The Job's pods; errors of adoption or release are returned after the
    /// claimed list is complete (the sync then fails and retries).
    pub(super) async fn pods_for_job(&self, job: &Job) -> (Vec<Arc<Pod>>, Option<kube::Error>) {
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let job_key = format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or(""),
            job.metadata.name.as_deref().unwrap_or("")
        );
        let sel = job
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        // Parsed once: a sync walks every pod the Job owns (10,000 in W2).
        let selects = selector::matcher(&sel);
        let deleting = job.metadata.deletion_timestamp.is_some();
        let mut claimed = Vec::new();
        let mut error = None;
        for pod in self.pods.store().by_index(BY_CONTROLLER_UID, &uid) {
            if pod.metadata.namespace.as_deref() != Some(ns.as_str()) {
                continue;
            }
            if selects(pod.metadata.labels.as_ref()) {
                claimed.push(pod);
            } else if !deleting {
                match self.port.release_pod(job, &pod).await {
                    Ok(Settled::Written(p)) => self.rw.on_write(
                        &job_key,
                        &uid,
                        super::consistency::Resource::Pods,
                        p.metadata.resource_version.as_deref(),
                    ),
                    Ok(Settled::Moot) => {}
                    Err(e) => error = Some(e),
                }
            }
        }
        if deleting {
            return (claimed, error);
        }
        let mut checked = false;
        // Only pods without a controller are candidates: an index, not a
        // scan of every pod in the namespace on each sync.
        for pod in self.pods.store().by_index(BY_ORPHAN_NAMESPACE, &ns) {
            if controller_of(&pod).is_some()
                || pod.metadata.deletion_timestamp.is_some()
                || !selects(pod.metadata.labels.as_ref())
            {
                continue;
            }
            if !checked {
                // A live read: never adopt for a Job that was deleted or
                // replaced under the same name.
                match self.port.read_job(job).await {
                    Ok(Some(fresh))
                        if fresh.metadata.uid.as_deref() == Some(uid.as_str())
                            && fresh.metadata.deletion_timestamp.is_none() => {}
                    Ok(_) => return (claimed, error),
                    Err(e) => return (claimed, Some(e)),
                }
                checked = true;
            }
            match self.port.adopt_pod(job, &pod).await {
                Ok(Settled::Written(patched)) => {
                    self.rw.on_write(
                        &job_key,
                        &uid,
                        super::consistency::Resource::Pods,
                        patched.metadata.resource_version.as_deref(),
                    );
                    // Treat it as tracked for the rest of this sync.
                    let mut p = (*pod).clone();
                    p.metadata
                        .finalizers
                        .get_or_insert_with(Vec::new)
                        .push(JOB_TRACKING_FINALIZER.into());
                    claimed.push(Arc::new(p));
                }
                Ok(Settled::Moot) => {}
                Err(e) => error = Some(e),
            }
        }
        (claimed, error)
    }
}

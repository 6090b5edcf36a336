//! Finalizer clean-up for pods whose Job is gone, finished or never was
//! (upstream syncOrphanPod, handleSingleOrphanPod).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kcm_pod::CachedPod;
use kcm_runtime::informer::key_of;
use kcm_runtime::selector::Selector;

use super::handlers::is_finished;
use super::port::{JobPort, Settled};
use super::{BY_TRACKING_NAMESPACE, JobController, OrphanKey};

impl<P: JobPort> JobController<P> {
    pub(super) async fn sync_orphan(&self, key: &OrphanKey) -> Result<(), kube::Error> {
        match key {
            OrphanKey::Name { namespace, name } => {
                match self.pods.store().get(&key_of(namespace, name)) {
                    Some(pod) => self.handle_orphan(&pod).await,
                    None => Ok(()),
                }
            }
            OrphanKey::Selector {
                namespace,
                selector,
            } => {
                let Ok(sel) = serde_json::from_str::<LabelSelector>(selector) else {
                    return Ok(());
                };
                // A selector upstream cannot convert matches nothing.
                let Ok(sel) = Selector::parse(Some(&sel)) else {
                    return Ok(());
                };
                // Only pods with the finalizer have anything to clean up.
                for pod in self.pods.store().by_index(BY_TRACKING_NAMESPACE, namespace) {
                    if sel.matches(pod.labels())
                        && let Err(e) = self.handle_orphan(&pod).await
                    {
                        // Retried for this pod alone, with back-off (upstream
                        // 1.37; earlier versions only logged, so a finalizer
                        // could stay until the pod changed again).
                        tracing::warn!(pod = %pod.key(), "removing tracking finalizer, will retry: {e}");
                        self.orphan_queue.add_rate_limited(OrphanKey::Name {
                            namespace: namespace.clone(),
                            name: pod.name().to_string(),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    async fn handle_orphan(&self, pod: &CachedPod) -> Result<(), kube::Error> {
        if !pod.has_tracking_finalizer() {
            return Ok(());
        }
        if let Some(r) = pod.controller() {
            if &*r.kind != "Job" || &*r.api_version != "batch/v1" {
                return Ok(());
            }
            let ns = pod.namespace();
            let job = self
                .jobs
                .store()
                .get(&key_of(ns, &r.name))
                .filter(|j| j.metadata.uid.as_deref() == Some(&*r.uid));
            let keep = match job {
                Some(job) => self.config.managed_elsewhere(&job).is_some() || !is_finished(&job),
                // Beside KCM, a pod whose Job is gone is KCM's: its orphan
                // sweep removes the finalizer whoever managed the Job.
                None => self.config.beside_kcm(),
            };
            if keep {
                return Ok(());
            }
        } else if self.config.beside_kcm() {
            // Ownerless pods are KCM's too.
            return Ok(());
        }
        // Only a pod no existing Job owns: its author may have planted it.
        let owner = pod.controller().and_then(|r| {
            self.jobs
                .store()
                .get(&key_of(pod.namespace(), &r.name))
                .filter(|j| j.metadata.uid.as_deref() == Some(&*r.uid))
        });
        if owner.is_none() {
            self.metrics.untrusted.record(
                crate::untrusted::Reason::OrphanTrackingFinalizer,
                &pod.key(),
                || {
                    "the Job tracking finalizer on a pod no Job of its namespace owns; removing it"
                        .into()
                },
                self.clock.instant(),
            );
        }
        // NotFound counts as done, with no version to record.
        let rv = match self.port.remove_finalizer(pod).await? {
            Settled::Written(w) => w.metadata.resource_version,
            Settled::Moot => None,
        };
        // Filed under the owning Job only while it exists, so a deleted
        // Job's orphans leave no record behind.
        if let Some(r) = pod.controller() {
            let ns = pod.namespace();
            if self.jobs.store().get(&key_of(ns, &r.name)).is_some() {
                self.record_pod_write(pod, rv.as_deref());
            }
        }
        Ok(())
    }
}

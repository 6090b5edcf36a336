//! The pod half of a sync's executor: performs the [`PodWork`] the pure
//! stages decided (DELETE active pods of a finishing Job, remove pods for
//! scale-down or suspension, create pods in slow-start batches), records
//! the pod events and lowers expectations for what will not be observed.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kcm_conditions::pod::is_pod_ready;
use kcm_pod::CachedPod;

use super::JobController;
use super::port::{JobPort, Settle, Settled, error_message, fan_out, slow_start};
use crate::sync::Prepared;
use crate::sync::manage::{Outcome, PodWork};

/// What removing one pod (finalizer patch, then DELETE) came to.
struct Removal {
    /// Counted in the ready decrement (upstream: unless the patch failed).
    ready: bool,
    /// The first write that did not apply decides: Moot when the pod is
    /// gone, the error otherwise.
    result: Settle<()>,
    /// Ok(pod name) for a successful DELETE, Err(message) for a failed one
    /// other than NotFound; None when no event is due.
    delete_event: Option<Result<String, String>>,
}

/// Removes the tracking finalizer, then deletes the pod (upstream
/// `deleteJobPods` for one pod). The DELETE is not tried if the patch did
/// not apply, even when the pod is gone.
async fn remove_pod<P: JobPort>(port: &P, p: &CachedPod) -> Removal {
    if p.has_tracking_finalizer() {
        let result = match port.remove_finalizer(p).await {
            Ok(Settled::Written(_)) => None,
            Ok(Settled::Moot) => Some(Ok(Settled::Moot)),
            Err(e) => Some(Err(e)),
        };
        if let Some(result) = result {
            return Removal {
                ready: false,
                result,
                delete_event: None,
            };
        }
    }
    let ready = is_pod_ready(p);
    let result = port.delete_pod(p).await;
    let delete_event = match &result {
        Ok(Settled::Written(())) => Some(Ok(p.name().to_string())),
        Ok(Settled::Moot) => None,
        Err(e) => Some(Err(error_message(e))),
    };
    Removal {
        ready,
        result,
        delete_event,
    }
}

impl<P: JobPort> JobController<P> {
    /// Performs `work` against the API server; returns what it achieved
    /// (for [`crate::sync::manage::after_pods`]) and the first error.
    pub(super) async fn do_pod_work(
        &self,
        key: &str,
        p: &Prepared,
        work: &PodWork,
    ) -> (Outcome, Option<kube::Error>) {
        let job = &p.job;
        match work {
            PodWork::DeleteActive(pods) => {
                let results = fan_out(pods.iter().cloned(), |p: Arc<CachedPod>| async move {
                    let r = self.port.delete_pod(&p).await;
                    (p.name().to_string(), is_pod_ready(&p), r)
                })
                .await;
                let mut out = Outcome::default();
                let mut error = None;
                for (name, ready, r) in results {
                    // Upstream counts every ready pod, deleted or not.
                    out.deleted_ready += i32::from(ready);
                    match r {
                        Ok(Settled::Written(())) => {
                            out.deleted += 1;
                            self.event(
                                job,
                                false,
                                "SuccessfulDelete",
                                format!("Deleted pod: {name}"),
                            );
                        }
                        Ok(Settled::Moot) => out.deleted += 1,
                        Err(e) => {
                            self.event(
                                job,
                                true,
                                "FailedDelete",
                                format!("Error deleting: {}", error_message(&e)),
                            );
                            error.get_or_insert(e);
                        }
                    }
                }
                (out, error)
            }
            PodWork::Remove(pods) => {
                self.expectations
                    .expect_deletions(key, i64::try_from(pods.len()).unwrap_or(i64::MAX));
                let results = fan_out(pods.iter().cloned(), |p: Arc<CachedPod>| async move {
                    remove_pod(&self.port, &p).await
                })
                .await;
                let mut out = Outcome::default();
                let mut error = None;
                for r in results {
                    out.deleted_ready += i32::from(r.ready);
                    // Like upstream deleteJobPods: any failure, NotFound
                    // included, lowers the deletion expectation (the
                    // informer will not report this deletion); only
                    // other errors make the removal count as failed.
                    match r.result {
                        Ok(Settled::Written(())) => out.deleted += 1,
                        Ok(Settled::Moot) => {
                            self.expectations.deletion_observed(key);
                            out.deleted += 1;
                        }
                        Err(e) => {
                            self.expectations.deletion_observed(key);
                            error.get_or_insert(e);
                        }
                    }
                    // Events as RealPodControl.DeletePod records them; the
                    // finalizer patch records none.
                    match r.delete_event {
                        Some(Ok(name)) => self.event(
                            job,
                            false,
                            "SuccessfulDelete",
                            format!("Deleted pod: {name}"),
                        ),
                        Some(Err(msg)) => {
                            self.event(job, true, "FailedDelete", format!("Error deleting: {msg}"))
                        }
                        None => {}
                    }
                }
                (out, error)
            }
            PodWork::Create(pods) => self.create_pods(key, p, pods).await,
            PodWork::Backoff(_) | PodWork::Nothing => (Outcome::default(), None),
        }
    }

    /// Slow start ([`slow_start`]): after a batch with an error the rest
    /// are skipped and their expectations lowered.
    async fn create_pods(
        &self,
        key: &str,
        prepared: &Prepared,
        pods: &[Pod],
    ) -> (Outcome, Option<kube::Error>) {
        let job = &prepared.job;
        self.expectations
            .expect_creations(key, i64::try_from(pods.len()).unwrap_or(i64::MAX));
        let mut out = Outcome::default();
        let mut error: Option<kube::Error> = None;
        let (mut ok, mut failed) = (0u64, 0u64);
        let create = |p: Pod| async move { self.port.create_pod(job, &p).await };
        let attempted = slow_start(pods, create, |results| {
            let mut batch_failed = false;
            for r in results {
                match r {
                    Ok(Settled::Written(created)) => {
                        ok += 1;
                        self.rw.on_write(
                            key,
                            job.metadata.uid.as_deref().unwrap_or(""),
                            super::consistency::Resource::Pods,
                            created.metadata.resource_version.as_deref(),
                        );
                        self.event(
                            job,
                            false,
                            "SuccessfulCreate",
                            format!("Created pod: {}", created.metadata.name.unwrap_or_default()),
                        );
                    }
                    // The namespace is going away: nothing to undo or report.
                    Ok(Settled::Moot) => {}
                    Err(e) => {
                        self.expectations.creation_observed(key);
                        out.not_created += 1;
                        failed += 1;
                        // Upstream counts failed creations as attempted too.
                        ok += 1;
                        batch_failed = true;
                        self.event(
                            job,
                            true,
                            "FailedCreate",
                            format!("Error creating: {}", error_message(&e)),
                        );
                        error.get_or_insert(e);
                    }
                }
            }
            !batch_failed
        })
        .await;
        // After a failed batch the rest are skipped: they will not be seen.
        let skipped = pods.len() - attempted;
        for _ in 0..skipped {
            self.expectations.creation_observed(key);
        }
        out.not_created += i32::try_from(skipped).unwrap_or(i32::MAX);
        let per_failed = crate::pods::only_replace_failed_pods(job)
            && job
                .spec
                .as_ref()
                .and_then(|s| s.pod_replacement_policy.as_deref())
                == Some("Failed");
        // Without JobPodReplacementPolicy upstream counts every creation as new.
        let (failed_before, terminating) = (prepared.failed, prepared.counts.terminating);
        let reason = if !prepared.config.pod_replacement_policy {
            "new"
        } else if per_failed && failed_before > 0 {
            "recreate_failed"
        } else if failed_before > 0 || terminating > 0 {
            "recreate_terminating_or_failed"
        } else {
            "new"
        };
        if ok > 0 {
            self.metrics
                .pods_creation
                .with_label_values(&[reason, "succeeded"])
                .inc_by(ok);
        }
        if failed > 0 {
            self.metrics
                .pods_creation
                .with_label_values(&[reason, "failed"])
                .inc_by(failed);
        }
        (out, error)
    }
}

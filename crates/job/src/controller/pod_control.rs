//! The pod half of a sync's executor: performs the [`PodWork`] the pure
//! stages decided (DELETE active pods of a finishing Job, remove pods for
//! scale-down or suspension, create pods in slow-start batches), records
//! the pod events and lowers expectations for what will not be observed.

use kcm_runtime::client::{LeanApi, Written};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use super::JobController;
use super::orphans::remove_finalizer_patch;
use super::sync_job::{is_not_found, name_of};
use crate::metrics::metrics;
use crate::pods::{has_tracking_finalizer, is_ready};
use crate::sync::JobCtx;
use crate::sync::manage::{Outcome, PodWork};

/// An error as client-go prints it in events: an API error is just the
/// status message (`pods "x" is forbidden: ...`), not kube's debug dump.
fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// What removing one pod (finalizer patch, then DELETE) came to.
struct Removal {
    /// Counted in the ready decrement (upstream: unless the patch failed).
    ready: bool,
    /// The first error, NotFound included.
    error: Option<kube::Error>,
    /// Ok(pod name) for a successful DELETE, Err(message) for a failed one
    /// other than NotFound; None when no event is due.
    delete_event: Option<Result<String, String>>,
}

/// Removes the tracking finalizer, then deletes the pod (upstream
/// `deleteJobPods` for one pod). The DELETE is not tried if the patch
/// failed, even with NotFound.
async fn remove_pod(api: &LeanApi<Pod>, p: &Pod) -> Removal {
    let name = name_of(p);
    if has_tracking_finalizer(p)
        && let Err(e) = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(remove_finalizer_patch()),
            )
            .await
    {
        return Removal {
            ready: false,
            error: Some(e),
            delete_event: None,
        };
    }
    let ready = is_ready(p);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Removal {
            ready,
            error: None,
            delete_event: Some(Ok(name)),
        },
        Err(e) if is_not_found(&e) => Removal {
            ready,
            error: Some(e),
            delete_event: None,
        },
        Err(e) => Removal {
            ready,
            delete_event: Some(Err(error_message(&e))),
            error: Some(e),
        },
    }
}

impl JobController {
    /// Performs `work` against the API server; returns what it achieved
    /// (for [`crate::sync::manage::apply_outcome`]) and the first error.
    pub(super) async fn do_pod_work(
        &self,
        key: &str,
        ctx: &JobCtx,
        work: &PodWork,
    ) -> (Outcome, Option<kube::Error>) {
        let ns = ctx.job.metadata.namespace.clone().unwrap_or_default();
        let api = self.pods_lean(&ns);
        let job = &ctx.job;
        match work {
            PodWork::DeleteActive(pods) => {
                let results: Vec<(String, bool, Result<(), kube::Error>)> =
                    futures::stream::iter(pods.iter().cloned())
                        .map(|p: Arc<Pod>| {
                            let api = api.clone();
                            async move {
                                let r = api
                                    .delete(&name_of(&p), &DeleteParams::default())
                                    .await
                                    .map(|_| ());
                                (name_of(&p), is_ready(&p), r)
                            }
                        })
                        .buffer_unordered(64)
                        .collect()
                        .await;
                let mut out = Outcome::default();
                let mut error = None;
                for (name, ready, r) in results {
                    // Upstream counts every ready pod, deleted or not.
                    out.deleted_ready += i32::from(ready);
                    match r {
                        Ok(()) => {
                            out.deleted += 1;
                            self.event(
                                job,
                                false,
                                "SuccessfulDelete",
                                format!("Deleted pod: {name}"),
                            );
                        }
                        Err(e) if is_not_found(&e) => out.deleted += 1,
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
                let results: Vec<Removal> = futures::stream::iter(pods.iter().cloned())
                    .map(|p: Arc<Pod>| {
                        let api = api.clone();
                        async move { remove_pod(&api, &p).await }
                    })
                    .buffer_unordered(64)
                    .collect()
                    .await;
                let mut out = Outcome::default();
                let mut error = None;
                for r in results {
                    out.deleted_ready += i32::from(r.ready);
                    // Like upstream deleteJobPods: any failure, NotFound
                    // included, lowers the deletion expectation (the
                    // informer will not report this deletion); only
                    // other errors make the removal count as failed.
                    match r.error {
                        None => out.deleted += 1,
                        Some(e) => {
                            self.expectations.deletion_observed(key);
                            if is_not_found(&e) {
                                out.deleted += 1;
                            } else {
                                error.get_or_insert(e);
                            }
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
            PodWork::Create(pods) => self.create_pods(key, ctx, pods).await,
            PodWork::Backoff(_) | PodWork::Nothing => (Outcome::default(), None),
        }
    }

    /// Slow start: batches of 1, 2, 4, ...; after a batch with an error the
    /// rest are skipped and their expectations lowered.
    async fn create_pods(
        &self,
        key: &str,
        ctx: &JobCtx,
        pods: &[Pod],
    ) -> (Outcome, Option<kube::Error>) {
        let job = &ctx.job;
        let api = self.pods_lean(job.metadata.namespace.as_deref().unwrap_or(""));
        self.expectations
            .expect_creations(key, i64::try_from(pods.len()).unwrap_or(i64::MAX));
        let mut out = Outcome::default();
        let mut error: Option<kube::Error> = None;
        let (mut ok, mut failed) = (0u64, 0u64);
        let mut next = 0usize;
        let mut batch = 1usize;
        while next < pods.len() {
            let end = (next + batch).min(pods.len());
            let results: Vec<Result<Written, kube::Error>> =
                futures::stream::iter(pods[next..end].to_vec())
                    .map(|p: Pod| {
                        let api = api.clone();
                        async move { api.create(&PostParams::default(), &p).await }
                    })
                    .buffer_unordered(64)
                    .collect()
                    .await;
            let mut batch_failed = false;
            for r in results {
                match r {
                    Ok(created) => {
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
                    Err(e) if namespace_terminating(&e) => {}
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
            next = end;
            if batch_failed && next < pods.len() {
                let skipped = pods.len() - next;
                for _ in 0..skipped {
                    self.expectations.creation_observed(key);
                }
                out.not_created += i32::try_from(skipped).unwrap_or(i32::MAX);
                break;
            }
            batch = (batch * 2).min(pods.len() - next).max(1);
        }
        let per_failed = crate::pods::only_replace_failed_pods(job)
            && job
                .spec
                .as_ref()
                .and_then(|s| s.pod_replacement_policy.as_deref())
                == Some("Failed");
        let reason = if per_failed && ctx.failed > 0 {
            "recreate_failed"
        } else if ctx.failed > 0 || ctx.terminating > 0 {
            "recreate_terminating_or_failed"
        } else {
            "new"
        };
        if ok > 0 {
            metrics()
                .pods_creation
                .with_label_values(&[reason, "succeeded"])
                .inc_by(ok);
        }
        if failed > 0 {
            metrics()
                .pods_creation
                .with_label_values(&[reason, "failed"])
                .inc_by(failed);
        }
        (out, error)
    }
}

//! The executor of one Job sync: reads the caches, runs the pure stages of
//! [`crate::sync`] and performs their API calls in order, stopping at the
//! first failed status write (the key is then retried with back-off).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use kcm_pod::CachedPod;
use tracing::Instrument;

use super::JobController;
use super::consistency::Resource;
use super::port::{JobPort, Settled, fan_out};
use crate::metrics::{self, metrics};
use crate::sync::decide::{self, Guard, guard};
use crate::sync::manage::{apply_outcome, pod_work};
use crate::sync::tracking::{self, Tracking};
use crate::sync::{ACTION_RECONCILING, Input, JobCtx, prepare};

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("invalid job key {0:?}: either namespace or name is missing")]
    InvalidKey(String),
    #[error("getting pods for the job: {0}")]
    Claim(kube::Error),
    #[error("tracking status: adding uncounted pods to status: {0}")]
    Flush1(kube::Error),
    #[error("tracking status: removing uncounted pods from status: {0}")]
    Flush2(kube::Error),
    #[error("tracking status: removing tracking finalizers: {0}")]
    RemoveFinalizers(kube::Error),
    #[error("managing pods: {0}")]
    Pods(kube::Error),
    #[error("ensuring Workload and PodGroup for Job {job}: {source}")]
    Scheduling {
        job: String,
        source: super::scheduling::EnsureError,
    },
    #[error(transparent)]
    Stale(#[from] super::consistency::Stale),
}

pub(super) fn name_of(p: &CachedPod) -> String {
    p.name().to_string()
}

impl<P: JobPort> JobController<P> {
    /// Files a pod write of ours under the pod's controller (1.36+).
    pub(super) fn record_pod_write(&self, pod: &CachedPod, rv: Option<&str>) {
        let ns = pod.namespace();
        if let Some(owner) = super::handlers::controller_of(pod) {
            self.rw.on_write(
                &format!("{ns}/{}", owner.name),
                &owner.uid,
                Resource::Pods,
                rv,
            );
        }
    }

    pub(crate) async fn sync_job(&self, key: &str) -> Result<(), SyncError> {
        let started = self.clock.instant();
        let Some((ns, name)) = key
            .split_once('/')
            .filter(|(n, m)| !n.is_empty() && !m.is_empty())
        else {
            return Err(SyncError::InvalidKey(key.to_string()));
        };
        // 1.36+: not on caches older than our own last writes.
        if let Err(stale) = self.rw.check(key, |r| match r {
            Resource::Pods => self.pods.last_resource_version(),
            Resource::Jobs => self.jobs.last_resource_version(),
        }) {
            metrics::stale_sync_skips()
                .with_label_values(&stale.resource.labels())
                .inc();
            return Err(stale.into());
        }
        let shared = self.jobs.store().get(key);
        let uid = shared
            .as_ref()
            .and_then(|j| j.metadata.uid.clone())
            .unwrap_or_default();
        let marked_finished = self.finished_jobs.lock().contains(&uid);
        let shared = match (
            guard(shared.as_deref(), marked_finished, &self.config),
            shared,
        ) {
            (Guard::Sync, Some(job)) => job,
            (Guard::Gone, _) => {
                self.conflict.forget(key);
                self.rw.forget(key, None);
                self.expectations.delete_expectations(key);
                self.finalizer_expectations.delete_expectations(key);
                self.backoff.remove(key);
                return Ok(());
            }
            (Guard::Finished, _) => {
                self.rw.forget(key, Some(&uid));
                self.backoff.remove(key);
                self.finished_jobs.lock().remove(&uid);
                return Ok(());
            }
            (Guard::UnknownCompletionMode(e), Some(job)) => {
                self.event(&job, e.warning, &e.reason, e.message);
                return Ok(());
            }
            _ => return Ok(()),
        };
        // Another Job controller writing this Job: report, and maybe stop.
        if self.conflict_blocks(key) {
            return Ok(());
        }
        let mode = decide::mode(&shared);
        let span = tracing::info_span!("sync", job = %key);
        let (action, result) = self
            .sync_inner(key, ns, name, (*shared).clone())
            .instrument(span)
            .await;
        let res = if result.is_ok() { "success" } else { "error" };
        let m = metrics();
        m.sync_duration
            .with_label_values(&[mode, res, action])
            .observe(started.elapsed().as_secs_f64());
        m.syncs.with_label_values(&[mode, res, action]).inc();
        result
    }

    async fn sync_inner(
        &self,
        key: &str,
        ns: &str,
        name: &str,
        job: Job,
    ) -> (&'static str, Result<(), SyncError>) {
        let satisfied = self.expectations.satisfied(key);
        let (pods, claim_error) = self.pods_for_job(&job).await;
        if let Some(e) = claim_error {
            return (ACTION_RECONCILING, Err(SyncError::Claim(e)));
        }
        // Before pod management: new pods name the PodGroup.
        let pod_group = match self.ensure_scheduling(&job, pods.len()).await {
            Ok(pg) => pg,
            Err(source) => {
                let job = key.to_string();
                return (
                    ACTION_RECONCILING,
                    Err(SyncError::Scheduling { job, source }),
                );
            }
        };
        let input = Input {
            job,
            pods,
            satisfied,
            expected_rm_finalizers: self.finalizer_expectations.get_uids(key),
            stored_backoff: self.backoff.get(key),
            now: self.clock.now(),
            config: self.config,
        };
        let mut ctx = prepare(input);
        ctx.pod_group = pod_group;
        let work = pod_work(&mut ctx);
        if tracking::record_success_before_deletes(&mut ctx, &work)
            && let Err(e) = self.write_status(ns, name, &mut ctx).await
        {
            return (ctx.action, Err(SyncError::Flush1(e)));
        }
        let (outcome, pod_error) = self.do_pod_work(key, &ctx, &work).await;
        apply_outcome(&mut ctx, &work, outcome);
        for e in std::mem::take(&mut ctx.events) {
            self.event(&ctx.job, e.warning, &e.reason, e.message);
        }
        let needs_flush = decide::set_counts(&mut ctx);
        let action = ctx.action;
        if let Some(after) = ctx.requeue_after {
            self.queue.add_after(key.to_string(), after);
        }
        if let Err(e) = self.track(key, ns, name, &mut ctx, needs_flush).await {
            return (action, Err(e));
        }
        (
            action,
            pod_error.map_or(Ok(()), |e| Err(SyncError::Pods(e))),
        )
    }

    async fn write_status(
        &self,
        ns: &str,
        name: &str,
        ctx: &mut JobCtx,
    ) -> Result<(), kube::Error> {
        let key = format!("{ns}/{name}");
        let written = self.ledgered_status_write(&key, &ctx.job).await?;
        self.rw.on_write(
            &key,
            ctx.job.metadata.uid.as_deref().unwrap_or(""),
            Resource::Jobs,
            written.metadata.resource_version.as_deref(),
        );
        ctx.job.metadata.resource_version = written.metadata.resource_version;
        Ok(())
    }

    fn record_pods_finished(&self, ctx: &JobCtx, old: &JobStatus) {
        let d = decide::pods_finished(&ctx.job, old);
        let m = metrics();
        for (result, label, n) in &d.indexes {
            m.finished_indexes
                .with_label_values(&[result, label])
                .inc_by(*n);
        }
        m.pods_finished
            .with_label_values(&[d.mode, "succeeded"])
            .inc_by(d.succeeded);
        m.pods_finished
            .with_label_values(&[d.mode, "failed"])
            .inc_by(d.failed);
    }

    /// Upstream trackJobStatusAndRemoveFinalizers.
    async fn track(
        &self,
        key: &str,
        ns: &str,
        name: &str,
        ctx: &mut JobCtx,
        needs_flush: bool,
    ) -> Result<(), SyncError> {
        let mut plan: Tracking = tracking::plan(ctx, needs_flush);
        if plan.flush {
            self.write_status(ns, name, ctx)
                .await
                .map_err(SyncError::Flush1)?;
            self.backoff.update(key, ctx.new_backoff);
            self.record_pods_finished(ctx, &plan.old_status);
            plan.old_status = ctx.job.status.clone().unwrap_or_default();
        }
        for (action, n) in &plan.policy_actions {
            metrics()
                .pod_failures_handled_by_failure_policy
                .with_label_values(&[action])
                .inc_by(*n);
        }
        let (removed, rm_error) = self.remove_finalizers(key, &plan.remove_finalizers).await;
        let fin = tracking::finish(ctx, &mut plan, &removed, rm_error.is_some());
        if let Some(e) = rm_error {
            if fin.flush {
                self.write_status(ns, name, ctx)
                    .await
                    .map_err(SyncError::Flush2)?;
            }
            return Err(SyncError::RemoveFinalizers(e));
        }
        if fin.flush {
            self.write_status(ns, name, ctx)
                .await
                .map_err(SyncError::Flush2)?;
            if fin.finished {
                self.job_finished(ctx);
            }
            self.record_pods_finished(ctx, &plan.old_status);
        }
        Ok(())
    }

    fn job_finished(&self, ctx: &JobCtx) {
        let Some(f) = decide::finished(ctx) else {
            return;
        };
        for e in f.events {
            self.event(&ctx.job, e.warning, &e.reason, e.message);
        }
        metrics()
            .jobs_finished
            .with_label_values(&[f.mode, f.result, &f.reason])
            .inc();
        if let Some(uid) = ctx.job.metadata.uid.clone() {
            self.finished_jobs.lock().insert(uid);
        }
    }

    /// Patches the finalizer away from `pods` concurrently. Returns the UIDs
    /// now free of it (NotFound included) and the first other error.
    async fn remove_finalizers(
        &self,
        key: &str,
        pods: &[Arc<CachedPod>],
    ) -> (HashSet<String>, Option<kube::Error>) {
        if pods.is_empty() {
            return (HashSet::new(), None);
        }
        let uids: Vec<String> = pods.iter().map(|p| p.uid().to_string()).collect();
        self.finalizer_expectations
            .expect_finalizers_removed(key, uids);
        let results = fan_out(pods.iter().cloned(), |p: Arc<CachedPod>| async move {
            let uid = p.uid().to_string();
            let r = self.port.remove_finalizer(&p).await;
            if let Ok(Settled::Written(w)) = &r {
                self.record_pod_write(&p, w.metadata.resource_version.as_deref());
            }
            (uid, r)
        })
        .await;
        let mut removed = HashSet::new();
        let mut error = None;
        for (uid, r) in results {
            match r {
                Ok(Settled::Written(_)) => {
                    removed.insert(uid);
                }
                // Gone or failed: the informer will not report the removal.
                Ok(Settled::Moot) => {
                    self.finalizer_expectations
                        .finalizer_removal_observed(key, &uid);
                    removed.insert(uid);
                }
                Err(e) => {
                    self.finalizer_expectations
                        .finalizer_removal_observed(key, &uid);
                    error.get_or_insert(e);
                }
            }
        }
        (removed, error)
    }
}

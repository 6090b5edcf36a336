//! The executor of one Job sync, in upstream `syncJob`'s order: the guards,
//! the snapshot (claimed pods, the Workload's PodGroup), then each stage of
//! [`crate::sync`] and the API calls it asks for, the Job's status handed
//! from one stage to the next. It stops at the first failed status write
//! (the key is then retried with back-off); the stages' requeue is applied
//! once, at the end, whatever happened.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use kcm_pod::CachedPod;
use kcm_pod::meta::key_of;
use tracing::Instrument;

use super::JobController;
use super::consistency::Resource;
use super::port::{JobPort, Settled, fan_out};
use crate::sync::decide::{self, Guard, guard};
use crate::sync::manage::{after_pods, pod_work};
use crate::sync::tracking;
use crate::sync::{ACTION_RECONCILING, Input, Prepared, Requeue, prepare};

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
        source: crate::workload::EnsureError,
    },
    #[error(transparent)]
    Stale(#[from] super::consistency::Stale),
}

impl<P: JobPort> JobController<P> {
    /// Files a pod write of ours under the pod's controller (1.36+).
    pub(super) fn record_pod_write(&self, pod: &CachedPod, rv: Option<&str>) {
        let ns = pod.namespace();
        if let Some(owner) = pod.controller() {
            self.rw
                .on_write(&key_of(ns, &owner.name), &owner.uid, Resource::Pods, rv);
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
            if let Some(c) = &self.metrics.stale_sync_skips {
                c.with_label_values(&stale.resource.labels()).inc();
            }
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
        let (action, requeue, result) = self
            .sync_inner(key, ns, name, (*shared).clone())
            .instrument(span)
            .await;
        // The stages' wait (deadline, back-off), counted from the sync's
        // start, whatever else happened.
        if let Some(after) = requeue.wait() {
            let waited = self.clock.instant().saturating_duration_since(started);
            self.queue
                .add_after(key.to_string(), after.saturating_sub(waited));
        }
        let res = if result.is_ok() { "success" } else { "error" };
        let m = &self.metrics;
        m.sync_duration
            .with_label_values(&[mode, res, action])
            .observe(started.elapsed().as_secs_f64());
        m.syncs.with_label_values(&[mode, res, action]).inc();
        result
    }

    /// From the snapshot to the last status write: (the `action` label,
    /// when to sync again, the result).
    async fn sync_inner(
        &self,
        key: &str,
        ns: &str,
        name: &str,
        job: Job,
    ) -> (&'static str, Requeue, Result<(), SyncError>) {
        let satisfied = self.expectations.satisfied(key);
        let (pods, claim_error) = self.pods_for_job(&job).await;
        if let Some(e) = claim_error {
            return (ACTION_RECONCILING, Requeue::NONE, Err(SyncError::Claim(e)));
        }
        // Before pod management: new pods name the PodGroup.
        let pod_group = match self.ensure_scheduling(&job, pods.len()).await {
            Ok(pg) => pg,
            Err(source) => {
                let job = key.to_string();
                let e = SyncError::Scheduling { job, source };
                return (ACTION_RECONCILING, Requeue::NONE, Err(e));
            }
        };
        // 1. The snapshot's facts and the terminal decision.
        let p = prepare(Input {
            job,
            pods,
            satisfied,
            expected_rm_finalizers: self.finalizer_expectations.get_uids(key),
            stored_backoff: self.backoff.get(key),
            now: self.clock.now(),
            config: self.config.clone(),
            pod_group,
        });
        // The working copy: its status goes from stage to stage and is
        // written where they say.
        let mut job = p.job.clone();
        // 2. What to do to pods; a met success policy's condition first.
        let managed = pod_work(&p);
        if let Some(status) = tracking::success_first(&p, &managed.work, status(&job)) {
            job.status = Some(status);
            if let Err(e) = self.write_status(ns, name, &mut job).await {
                return (managed.action, Requeue::NONE, Err(SyncError::Flush1(e)));
            }
        }
        let (outcome, pod_error) = self.do_pod_work(key, &p, &managed.work).await;
        // 3. What the pod calls came to.
        let after = after_pods(&p, &managed, outcome, status(&job));
        for e in &after.events {
            self.event(&job, e.warning, &e.reason, e.message.clone());
        }
        // 4. The counts.
        let (counted, needs_flush) = decide::with_counts(
            &after.status,
            after.counts,
            after.suspend_changed,
            &p.config,
        );
        job.status = Some(counted);
        let requeue = p.requeue.min(after.requeue);
        // 5, 6. Tracking finished pods, and the terminal condition.
        let tracked = self
            .track(key, (ns, name), &p, &mut job, &after, needs_flush)
            .await;
        let result = tracked.and(pod_error.map_or(Ok(()), |e| Err(SyncError::Pods(e))));
        (managed.action, requeue, result)
    }

    async fn write_status(&self, ns: &str, name: &str, job: &mut Job) -> Result<(), kube::Error> {
        let key = key_of(ns, name);
        let written = self.ledgered_status_write(&key, job).await?;
        self.rw.on_write(
            &key,
            job.metadata.uid.as_deref().unwrap_or(""),
            Resource::Jobs,
            written.metadata.resource_version.as_deref(),
        );
        job.metadata.resource_version = written.metadata.resource_version;
        Ok(())
    }

    fn record_pods_finished(&self, job: &Job, old: &JobStatus) {
        let d = decide::pods_finished(job, old);
        let m = &self.metrics;
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

    /// Upstream trackJobStatusAndRemoveFinalizers: stages 5 and 6 and
    /// their writes.
    async fn track(
        &self,
        key: &str,
        (ns, name): (&str, &str),
        p: &Prepared,
        job: &mut Job,
        after: &crate::sync::manage::AfterPods,
        needs_flush: bool,
    ) -> Result<(), SyncError> {
        let plan = tracking::plan(p, after.finished.as_ref(), status(job), needs_flush);
        job.status = Some(plan.status.clone());
        let mut old_status = plan.old_status.clone();
        if plan.flush {
            self.write_status(ns, name, job)
                .await
                .map_err(SyncError::Flush1)?;
            self.backoff.update(key, p.new_backoff);
            self.record_pods_finished(job, &old_status);
            old_status = status(job).clone();
        }
        for (action, n) in &plan.policy_actions {
            self.metrics
                .pod_failures_handled_by_failure_policy
                .with_label_values(&[action])
                .inc_by(*n);
        }
        let (removed, rm_error) = self.remove_finalizers(key, &plan.remove_finalizers).await;
        let terminating = after.counts.terminating;
        let fin = tracking::finish(
            p,
            &plan,
            status(job),
            terminating,
            &removed,
            rm_error.is_some(),
        );
        job.status = Some(fin.status);
        if let Some(e) = rm_error {
            if fin.flush {
                self.write_status(ns, name, job)
                    .await
                    .map_err(SyncError::Flush2)?;
            }
            return Err(SyncError::RemoveFinalizers(e));
        }
        if fin.flush {
            self.write_status(ns, name, job)
                .await
                .map_err(SyncError::Flush2)?;
            if fin.finished
                && let Some(f) = plan.finished.as_ref()
            {
                self.job_finished(job, f);
            }
            self.record_pods_finished(job, &old_status);
        }
        Ok(())
    }

    fn job_finished(&self, job: &Job, f: &JobCondition) {
        let f = decide::finished(job, f);
        for e in f.events {
            self.event(job, e.warning, &e.reason, e.message);
        }
        self.metrics
            .jobs_finished
            .with_label_values(&[f.mode, f.result, &f.reason])
            .inc();
        if let Some(uid) = job.metadata.uid.clone() {
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

/// The status of the working copy (stage 1 always leaves one).
fn status(job: &Job) -> &JobStatus {
    static EMPTY: std::sync::OnceLock<JobStatus> = std::sync::OnceLock::new();
    job.status
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(JobStatus::default))
}

//! The executor of `WorkloadWithJob` on 1.36 (`scheduling.k8s.io/v1alpha2`,
//! upstream 1.36's `ensureWorkloadAndPodGroup`): for a gang candidate,
//! finds or creates its Workload (only while the Job is new) and PodGroup
//! from the two informers' indexes, following [`crate::workload::v136`].
//! Every doubt (a list failure, several matches, a single match the Job does
//! not control, a Workload without exactly one template) means default
//! scheduling for this sync, as upstream; only a failed create fails it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_runtime::informer::{IndexFn, Informable, Informer};
use kube::Resource;

use super::JobController;
use super::port::JobPort;
use super::scheduling::{BY_JOB_NAME, BY_WORKLOAD_NAME, EnsureError, cached};
use crate::workload::v1alpha2::{PodGroup, Workload};
use crate::workload::{self as wl, v136};

/// A cached v1alpha2 Workload (its managedFields dropped).
#[derive(Clone, Debug)]
pub struct CachedWorkload(pub Workload);

/// A cached v1alpha2 PodGroup (its managedFields dropped).
#[derive(Clone, Debug)]
pub struct CachedPodGroup(pub PodGroup);

cached!(CachedWorkload, Workload);
cached!(CachedPodGroup, PodGroup);

/// Upstream's `retry.DefaultRetry` around each get-or-create: an
/// AlreadyExists answer (another sync, or a cache behind the server) looks
/// again, at most five times, 10 ms apart.
const ATTEMPTS: usize = 5;
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// The two informers the gate adds on 1.36.
#[derive(Clone)]
pub struct Scheduling {
    pub workloads: Arc<Informer<CachedWorkload>>,
    pub pod_groups: Arc<Informer<CachedPodGroup>>,
}

impl Scheduling {
    /// Adds the indexes the executor reads (upstream's names and keys).
    pub fn new(
        workloads: Arc<Informer<CachedWorkload>>,
        pod_groups: Arc<Informer<CachedPodGroup>>,
    ) -> Self {
        let by_job: IndexFn<CachedWorkload> =
            Arc::new(|w: &CachedWorkload| v136::workload_job_key(&w.0).into_iter().collect());
        workloads.add_index(BY_JOB_NAME, by_job);
        let by_workload: IndexFn<CachedPodGroup> =
            Arc::new(|p: &CachedPodGroup| v136::pod_group_workload_key(&p.0).into_iter().collect());
        pod_groups.add_index(BY_WORKLOAD_NAME, by_workload);
        Scheduling {
            workloads,
            pod_groups,
        }
    }

    fn workloads_of_job(&self, ns: &str, job: &str) -> Vec<Workload> {
        let found = self
            .workloads
            .store()
            .by_index(BY_JOB_NAME, &format!("{ns}/{job}"));
        found.iter().map(|w| w.0.clone()).collect()
    }

    fn pod_groups_of(&self, w: &Workload) -> Vec<PodGroup> {
        let key = wl::index_key(&w.metadata, w.metadata.name.as_deref().unwrap_or(""));
        let found = self.pod_groups.store().by_index(BY_WORKLOAD_NAME, &key);
        found.iter().map(|p| p.0.clone()).collect()
    }
}

fn already_exists(e: &EnsureError) -> bool {
    matches!(e, EnsureError::Api(kube::Error::Api(s)) if s.reason == "AlreadyExists")
}

/// Whether an attempt's result calls for another (`retry.OnError`); waits
/// before it. (A loop at each call site: an async closure here makes the
/// sync future not provably `Send`.)
async fn again<T>(r: &Result<T, EnsureError>, attempt: usize) -> bool {
    let retry = attempt + 1 < ATTEMPTS && r.as_ref().is_err_and(already_exists);
    if retry {
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    retry
}

impl<P: JobPort> JobController<P> {
    /// The PodGroup the Job's new pods name (None: default scheduling).
    pub(super) async fn ensure_scheduling_v136(
        &self,
        s: &Scheduling,
        job: &Job,
        pods: usize,
    ) -> Result<Option<String>, EnsureError> {
        if !v136::eligible(job, self.config.workload_with_job) {
            return Ok(None);
        }
        let mut attempt = 0;
        let workload = loop {
            let r = self.workload(s, job, pods).await;
            if !again(&r, attempt).await {
                break r?;
            }
            attempt += 1;
        };
        let Some(workload) = workload else {
            return Ok(None);
        };
        let mut attempt = 0;
        let pg = loop {
            let r = self.pod_group(s, job, &workload).await;
            if !again(&r, attempt).await {
                break r?;
            }
            attempt += 1;
        };
        Ok(pg.and_then(|p| p.metadata.name))
    }

    /// Upstream `getOrCreateWorkload`, one attempt.
    async fn workload(
        &self,
        s: &Scheduling,
        job: &Job,
        pods: usize,
    ) -> Result<Option<Workload>, EnsureError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let name = job.metadata.name.as_deref().unwrap_or("");
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let found = v136::find(&s.workloads_of_job(ns, name), |w| &w.metadata, uid);
        match found {
            v136::Found::None if !wl::is_new_job(job, pods) => Ok(None),
            v136::Found::None => {
                let created = self
                    .port
                    .create_workload_v1alpha2(&v136::desired_workload(job))
                    .await?;
                let msg = format!(
                    "Created Workload {} for Job {name}",
                    created.metadata.name.as_deref().unwrap_or("")
                );
                self.event(job, false, "WorkloadCreated", msg);
                Ok(Some(created))
            }
            v136::Found::Mine(w) if v136::usable(&w) => Ok(Some(w)),
            v136::Found::Mine(w) => {
                tracing::debug!(job = name, workload = ?w.metadata.name, templates = w.spec.pod_group_templates.len(),
                    "Workload has unsupported number of PodGroupTemplates, falling back to default scheduling");
                Ok(None)
            }
            v136::Found::Foreign => {
                tracing::debug!(
                    job = name,
                    "Workload not owned by this Job, skipping workload integration"
                );
                Ok(None)
            }
            v136::Found::Many(n) => {
                tracing::error!(
                    "found {n} Workloads referencing Job {ns}/{name}, falling back to default scheduling"
                );
                Ok(None)
            }
        }
    }

    /// Upstream `getOrCreatePodGroup`, one attempt (no new-Job check).
    async fn pod_group(
        &self,
        s: &Scheduling,
        job: &Job,
        workload: &Workload,
    ) -> Result<Option<PodGroup>, EnsureError> {
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let wl_name = workload.metadata.name.clone().unwrap_or_default();
        match v136::find(&s.pod_groups_of(workload), |p| &p.metadata, uid) {
            v136::Found::None => {
                let Some(desired) = v136::new_pod_group(job, workload) else {
                    return Err(EnsureError::NoTemplate {
                        template: String::new(),
                        workload: wl_name,
                    });
                };
                Ok(Some(self.port.create_pod_group_v1alpha2(&desired).await?))
            }
            v136::Found::Mine(p) => Ok(Some(p)),
            v136::Found::Foreign => {
                tracing::debug!(job = ?job.metadata.name, workload = wl_name,
                    "PodGroup not owned by this Job, skipping workload integration");
                Ok(None)
            }
            v136::Found::Many(n) => {
                tracing::error!(
                    "found {n} PodGroups referencing Workload {}/{wl_name}, falling back to default scheduling",
                    workload.metadata.namespace.as_deref().unwrap_or("")
                );
                Ok(None)
            }
        }
    }
}

//! The executor of `WorkloadWithJob`, written once for every minor: before
//! pod management it finds or creates the Job's Workload and PodGroup from
//! the two informers' indexes and keeps the gang `minCount` in step
//! (upstream `ensureWorkloadAndPodGroup`), asking the minor's pure
//! [`Rules`] at each step (1.37's [`V137`], 1.36's [`V136`]) and writing
//! through the port's generic `create` and `patch`. The informers exist
//! only with the gate on, and, as upstream's, only index: their events
//! enqueue nothing.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_pod::meta::name_of;
use kcm_runtime::informer::{BY_NAMESPACE, IndexFn, Informable, Informer, key_of, namespace_index};
use kube::Resource;

use super::JobController;
use super::port::{JobPort, error_message};
use crate::workload::rules::Object;
use crate::workload::v136::V136;
use crate::workload::{self as wl, EnsureError, Lookup, Rules, Source, V137};

/// Index: Workloads by `ns/<job>` of their Job controllerRef.
pub const BY_JOB_NAME: &str = "workloadByJobName";
/// Index: PodGroups by `ns/<workload>` they belong to.
pub const BY_WORKLOAD_NAME: &str = "podGroupByWorkloadName";

/// Pause between get-or-create attempts that met AlreadyExists (upstream
/// `retry.DefaultRetry`).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// A cached Workload or PodGroup of any minor (its managedFields dropped).
#[derive(Clone, Debug)]
pub struct Cached<T>(pub T);

impl<T: Object> Informable for Cached<T> {
    type Wire = T;
    fn from_wire(mut wire: T) -> Self {
        wire.meta_mut().managed_fields = None;
        Cached(wire)
    }
    fn namespace(&self) -> &str {
        self.0.meta().namespace.as_deref().unwrap_or("")
    }
    fn name(&self) -> &str {
        name_of(self.0.meta())
    }
    fn resource_version(&self) -> &str {
        self.0.meta().resource_version.as_deref().unwrap_or("")
    }
}

/// The two informers the gate adds, for the minor `R`.
pub struct Informers<R: Rules> {
    pub workloads: Arc<Informer<Cached<R::Workload>>>,
    pub pod_groups: Arc<Informer<Cached<R::PodGroup>>>,
}

impl<R: Rules> Informers<R> {
    /// Adds the indexes the executor reads (upstream's names and keys).
    pub fn new(
        workloads: Arc<Informer<Cached<R::Workload>>>,
        pod_groups: Arc<Informer<Cached<R::PodGroup>>>,
    ) -> Self {
        let by_job: IndexFn<Cached<R::Workload>> =
            Arc::new(|w: &Cached<R::Workload>| R::workload_job_key(&w.0).into_iter().collect());
        workloads.add_index(BY_JOB_NAME, by_job);
        if R::DELEGATION {
            workloads.add_index(BY_NAMESPACE, namespace_index());
        }
        let by_workload: IndexFn<Cached<R::PodGroup>> = Arc::new(|p: &Cached<R::PodGroup>| {
            R::pod_group_workload_key(&p.0).into_iter().collect()
        });
        pod_groups.add_index(BY_WORKLOAD_NAME, by_workload);
        Informers {
            workloads,
            pod_groups,
        }
    }

    fn workloads_of_job(&self, ns: &str, job: &str) -> Vec<R::Workload> {
        let found = self
            .workloads
            .store()
            .by_index(BY_JOB_NAME, &key_of(ns, job));
        found.iter().map(|w| w.0.clone()).collect()
    }

    fn workloads_in(&self, ns: &str) -> Vec<R::Workload> {
        let found = self.workloads.store().by_index(BY_NAMESPACE, ns);
        found.iter().map(|w| w.0.clone()).collect()
    }

    fn pod_groups_of(&self, w: &R::Workload) -> Vec<R::PodGroup> {
        let key = wl::index_key(w.meta(), name_of(w.meta()));
        let found = self.pod_groups.store().by_index(BY_WORKLOAD_NAME, &key);
        found.iter().map(|p| p.0.clone()).collect()
    }
}

/// The gate's informers of the minor kcm-rs behaves as.
pub enum Scheduling {
    V137(Informers<V137>),
    V136(Informers<V136>),
}

impl Scheduling {
    /// Starts the controller's host tracking both informers.
    pub fn track(&self, host: &kcm_runtime::host::Host) {
        match self {
            Scheduling::V137(s) => {
                host.track(&s.workloads);
                host.track(&s.pod_groups);
            }
            Scheduling::V136(s) => {
                host.track(&s.workloads);
                host.track(&s.pod_groups);
            }
        }
    }
}

impl<P: JobPort> JobController<P> {
    /// The PodGroup the Job's new pods name (None: default scheduling).
    pub(super) async fn ensure_scheduling(
        &self,
        job: &Job,
        pods: usize,
    ) -> Result<Option<String>, EnsureError> {
        match self.scheduling.as_ref() {
            None => Ok(None),
            Some(Scheduling::V137(s)) => self.ensure(s, job, pods).await,
            Some(Scheduling::V136(s)) => self.ensure(s, job, pods).await,
        }
    }

    async fn ensure<R: Rules>(
        &self,
        s: &Informers<R>,
        job: &Job,
        pods: usize,
    ) -> Result<Option<String>, EnsureError> {
        let Some(source) = R::source(job, self.config.workload_with_job) else {
            return Ok(None);
        };
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let job_name = job.metadata.name.as_deref().unwrap_or("");
        let new_job = wl::is_new_job(job, pods);
        let workload = match &source {
            Source::Root => {
                let mut attempt = 0;
                loop {
                    let found = s.workloads_of_job(ns, job_name);
                    let r = match R::workload(job, &found, new_job) {
                        Ok(lookup) => self.settle(job, lookup, R::FULL_EVENTS).await,
                        Err(e) => Err(e),
                    };
                    if !again::<R, _>(&r, attempt).await {
                        break r?;
                    }
                    attempt += 1;
                }
            }
            Source::Delegated(template) => {
                self.settle(job, R::parent(job, template, &s.workloads_in(ns)), false)
                    .await?
            }
        };
        let Some(workload) = workload else {
            return Ok(None);
        };
        let mut attempt = 0;
        let pod_group = loop {
            let found = s.pod_groups_of(&workload);
            let r = match R::pod_group(job, &source, &workload, &found, new_job) {
                Ok(lookup) => self.settle(job, lookup, R::FULL_EVENTS).await,
                Err(e) => Err(e),
            };
            if !again::<R, _>(&r, attempt).await {
                break r?;
            }
            attempt += 1;
        };
        let (resize_workload, resize_pod_group) =
            R::resize(job, &source, &workload, pod_group.as_ref());
        if let Some(patch) = resize_workload {
            let name = name_of(workload.meta());
            self.port.patch::<R::Workload>(ns, name, patch).await?;
        }
        if let (Some(patch), Some(pg)) = (resize_pod_group, pod_group.as_ref()) {
            let name = name_of(pg.meta());
            self.port.patch::<R::PodGroup>(ns, name, patch).await?;
        }
        Ok(pod_group.map(|p| name_of(p.meta()).to_string()))
    }

    /// Performs what a lookup decided: the object to use, or None for
    /// default scheduling (logged), after creating it when asked (with its
    /// event; `failure_event`: a failed create gets one too).
    async fn settle<T: Object>(
        &self,
        job: &Job,
        lookup: Lookup<T>,
        failure_event: bool,
    ) -> Result<Option<T>, EnsureError> {
        let job_name = job.metadata.name.as_deref().unwrap_or("");
        let kind = T::kind(&());
        match lookup {
            Lookup::Use(t) => Ok(Some(t)),
            Lookup::Default { why, error: true } => {
                tracing::error!(job = job_name, "{why}");
                Ok(None)
            }
            Lookup::Default { why, error: false } => {
                tracing::debug!(job = job_name, "{why}");
                Ok(None)
            }
            Lookup::Create(desired) => match self.port.create(&desired).await {
                Ok(created) => {
                    // 1.36 records only its Workload's creation.
                    if kind == "Workload" || failure_event {
                        let name = name_of(created.meta());
                        let msg = format!("Created {kind} {name} for Job {job_name}");
                        self.event(job, false, &format!("{kind}Created"), msg);
                    }
                    Ok(Some(created))
                }
                Err(e) => {
                    if failure_event && kind == "Workload" {
                        let msg = format!(
                            "Failed to create Workload for Job {job_name}: {}",
                            error_message(&e)
                        );
                        self.event(job, true, "FailedWorkloadCreate", msg);
                    }
                    Err(e.into())
                }
            },
        }
    }
}

/// Whether an attempt's result calls for another (upstream 1.36's
/// `retry.OnError` on AlreadyExists); waits before it. (A loop at each call
/// site: an async closure here makes the sync future not provably `Send`.)
async fn again<R: Rules, T>(r: &Result<T, EnsureError>, attempt: usize) -> bool {
    let retry = attempt + 1 < R::ATTEMPTS && r.as_ref().is_err_and(EnsureError::already_exists);
    if retry {
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    retry
}

//! The executor of `WorkloadWithJob` (1.37; 1.36's is
//! [`super::scheduling_v136`]): before pod management, finds
//! or creates the Job's Workload and PodGroup and keeps the gang
//! `minCount` in step (upstream `ensureWorkloadAndPodGroup`), following the
//! pure decisions of [`crate::workload`]. The Workload and PodGroup
//! informers exist only with the gate on, and, as upstream's, only index:
//! their events enqueue nothing.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kcm_runtime::informer::{BY_NAMESPACE, IndexFn, Informable, Informer, namespace_index};
use kube::Resource;

use super::JobController;
use super::port::JobPort;
use crate::workload::{self as wl, Mode, Pick};

/// Index: Workloads by `ns/<job>` of their Job controllerRef.
pub const BY_JOB_NAME: &str = "workloadByJobName";
/// Index: PodGroups by `ns/<workload>` of their workloadRef.
pub const BY_WORKLOAD_NAME: &str = "podGroupByWorkloadName";

/// A cached Workload (its managedFields dropped).
#[derive(Clone, Debug)]
pub struct CachedWorkload(pub Workload);

/// A cached PodGroup (its managedFields dropped).
#[derive(Clone, Debug)]
pub struct CachedPodGroup(pub PodGroup);

macro_rules! cached {
    ($cached:ident, $wire:ty) => {
        impl Informable for $cached {
            type Wire = $wire;
            fn from_wire(mut wire: $wire) -> Self {
                wire.meta_mut().managed_fields = None;
                $cached(wire)
            }
            fn namespace(&self) -> &str {
                self.0.metadata.namespace.as_deref().unwrap_or("")
            }
            fn name(&self) -> &str {
                self.0.metadata.name.as_deref().unwrap_or("")
            }
            fn resource_version(&self) -> &str {
                self.0.metadata.resource_version.as_deref().unwrap_or("")
            }
        }
    };
}
pub(super) use cached;
cached!(CachedWorkload, Workload);
cached!(CachedPodGroup, PodGroup);

/// The two informers the gate adds.
#[derive(Clone)]
pub struct Scheduling {
    pub workloads: Arc<Informer<CachedWorkload>>,
    pub pod_groups: Arc<Informer<CachedPodGroup>>,
}

impl Scheduling {
    /// Adds the indexes the executor reads.
    pub fn new(
        workloads: Arc<Informer<CachedWorkload>>,
        pod_groups: Arc<Informer<CachedPodGroup>>,
    ) -> Self {
        let by_job: IndexFn<CachedWorkload> =
            Arc::new(|w: &CachedWorkload| wl::workload_job_key(&w.0).into_iter().collect());
        workloads.add_index(BY_JOB_NAME, by_job);
        workloads.add_index(BY_NAMESPACE, namespace_index());
        let by_workload: IndexFn<CachedPodGroup> =
            Arc::new(|p: &CachedPodGroup| wl::pod_group_workload_key(&p.0).into_iter().collect());
        pod_groups.add_index(BY_WORKLOAD_NAME, by_workload);
        Scheduling {
            workloads,
            pod_groups,
        }
    }

    fn workloads_of_job(&self, ns: &str, job: &str) -> Vec<Workload> {
        let key = format!("{ns}/{job}");
        let found = self.workloads.store().by_index(BY_JOB_NAME, &key);
        found.iter().map(|w| w.0.clone()).collect()
    }

    fn workloads_in(&self, ns: &str) -> Vec<Workload> {
        let found = self.workloads.store().by_index(BY_NAMESPACE, ns);
        found.iter().map(|w| w.0.clone()).collect()
    }

    fn pod_groups_of(&self, w: &Workload) -> Vec<PodGroup> {
        let key = wl::index_key(&w.metadata, w.metadata.name.as_deref().unwrap_or(""));
        let found = self.pod_groups.store().by_index(BY_WORKLOAD_NAME, &key);
        found.iter().map(|p| p.0.clone()).collect()
    }
}

/// Why the scheduling objects could not be ensured (the sync is retried).
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error(
        "workload {ns}/{workload} for job {ns}/{job} has {templates} PodGroupTemplates, want exactly 1"
    )]
    Templates {
        ns: String,
        workload: String,
        job: String,
        templates: usize,
    },
    #[error("podGroupTemplate {template:?} not found in workload {workload:?}")]
    NoTemplate { template: String, workload: String },
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl<P: JobPort> JobController<P> {
    /// The PodGroup the Job's new pods name (None: default scheduling).
    pub(super) async fn ensure_scheduling(
        &self,
        job: &Job,
        pods: usize,
    ) -> Result<Option<String>, EnsureError> {
        if let Some(s) = self.scheduling_v136.as_ref() {
            return self.ensure_scheduling_v136(s, job, pods).await;
        }
        let Some(s) = self.scheduling.as_ref() else {
            return Ok(None);
        };
        let new_job = wl::is_new_job(job, pods);
        let pg = match wl::mode(job, self.config.workload_with_job) {
            Mode::None => None,
            Mode::PodGroupOnly => self.delegated(s, job, new_job).await?,
            Mode::Both => self.root(s, job, new_job).await?,
        };
        Ok(pg.map(|p| name(&p.metadata)))
    }

    async fn root(
        &self,
        s: &Scheduling,
        job: &Job,
        new_job: bool,
    ) -> Result<Option<PodGroup>, EnsureError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let job_name = job.metadata.name.as_deref().unwrap_or("");
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let workloads = s.workloads_of_job(ns, job_name);
        let workload = match wl::pick_owned(&workloads, |w| &w.metadata, uid) {
            Pick::None if !new_job => return Ok(None),
            Pick::None => {
                let desired = wl::desired_workload(job);
                match self.port.create_workload(&desired).await {
                    Ok(created) => {
                        let msg = format!(
                            "Created Workload {} for Job {job_name}",
                            name(&created.metadata)
                        );
                        self.event(job, false, "WorkloadCreated", msg);
                        created
                    }
                    Err(e) => {
                        let msg = format!(
                            "Failed to create Workload for Job {job_name}: {}",
                            super::pod_control::error_message(&e)
                        );
                        self.event(job, true, "FailedWorkloadCreate", msg);
                        return Err(e.into());
                    }
                }
            }
            Pick::One(w) => {
                let n = wl::templates(&w).len();
                if n != 1 {
                    return Err(EnsureError::Templates {
                        ns: ns.into(),
                        workload: name(&w.metadata),
                        job: job_name.into(),
                        templates: n,
                    });
                }
                w
            }
            Pick::Many(n) => {
                tracing::error!(
                    "found {n} Workloads referencing Job {ns}/{job_name}, falling back to default scheduling"
                );
                return Ok(None);
            }
        };
        let groups = s.pod_groups_of(&workload);
        let pg = match wl::pick_owned(&groups, |p| &p.metadata, uid) {
            Pick::None if !new_job => None,
            Pick::None => Some(self.create_pod_group(job, &workload, "", true).await?),
            Pick::One(p) => Some(p),
            Pick::Many(n) => {
                tracing::error!(
                    "found {n} PodGroups referencing Workload {ns}/{}, falling back to default scheduling",
                    name(&workload.metadata)
                );
                None
            }
        };
        // Elastic gangs: the Job's minCount, whatever the pods are doing.
        if let Some(min) = wl::desired_min_count(job) {
            if let Some(patch) = wl::workload_min_count_patch(&workload, min) {
                self.port
                    .patch_workload(ns, &name(&workload.metadata), patch)
                    .await?;
            }
            self.pod_group_min_count(ns, pg.as_ref(), min).await?;
        }
        Ok(pg)
    }

    async fn delegated(
        &self,
        s: &Scheduling,
        job: &Job,
        new_job: bool,
    ) -> Result<Option<PodGroup>, EnsureError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let workloads = s.workloads_in(ns);
        let Some(parent) = wl::parent_workload(job, &workloads) else {
            tracing::debug!(job = ?job.metadata.name, "parent-owned Workload not found yet for delegated Job");
            return Ok(None);
        };
        let template_name = wl::delegated_template(job).unwrap_or("");
        let Some(template) = wl::template(parent, template_name) else {
            tracing::debug!(
                job = ?job.metadata.name,
                template = template_name,
                "delegated PodGroupTemplate not found in the parent Workload"
            );
            return Ok(None);
        };
        let groups = s.pod_groups_of(parent);
        let mut pg = groups
            .into_iter()
            .find(|p| wl::controlled_by(&p.metadata, uid));
        if pg.is_none() && new_job {
            pg = Some(
                self.create_pod_group(job, parent, template_name, false)
                    .await?,
            );
        }
        // The parent's template decides the gang size.
        if let Some(gang) = template.scheduling_policy.gang.as_ref() {
            self.pod_group_min_count(ns, pg.as_ref(), gang.min_count)
                .await?;
        }
        Ok(pg)
    }

    /// Patches the PodGroup's minCount to `min` when it differs.
    async fn pod_group_min_count(
        &self,
        ns: &str,
        pg: Option<&PodGroup>,
        min: i32,
    ) -> Result<(), EnsureError> {
        if let Some(p) = pg
            && let Some(patch) = wl::pod_group_min_count_patch(p, min)
        {
            self.port
                .patch_pod_group(ns, &name(&p.metadata), patch)
                .await?;
        }
        Ok(())
    }

    async fn create_pod_group(
        &self,
        job: &Job,
        workload: &Workload,
        template: &str,
        link_workload: bool,
    ) -> Result<PodGroup, EnsureError> {
        let Some(desired) = wl::new_pod_group(job, workload, template, link_workload) else {
            return Err(EnsureError::NoTemplate {
                template: template.into(),
                workload: name(&workload.metadata),
            });
        };
        let created = self.port.create_pod_group(&desired).await?;
        let msg = format!(
            "Created PodGroup {} for Job {}",
            name(&created.metadata),
            job.metadata.name.as_deref().unwrap_or("")
        );
        self.event(job, false, "PodGroupCreated", msg);
        Ok(created)
    }
}

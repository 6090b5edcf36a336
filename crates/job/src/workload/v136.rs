//! `WorkloadWithJob` on 1.36 (alpha, `scheduling.k8s.io/v1alpha2`): the
//! pure decisions of 1.36's `job_scheduling_manager.go`, which differ from
//! 1.37's ([`super`]) in more than the wire shape:
//!
//! - only gang candidates get objects (`IsGangSchedulingCandidate`:
//!   parallelism > 1, Indexed, completions == parallelism, no
//!   `schedulingGroup` in the template), owned or not by another controller
//!   (no delegation, no `spec.scheduling`);
//! - the Workload has one gang template whose `minCount` is the
//!   parallelism, never patched afterwards;
//! - lookups count every object the index returns: a single one the Job
//!   does not control, or several, mean default scheduling;
//! - only the Workload waits for a new Job; a missing PodGroup is created
//!   whenever the Job has its Workload.
//!
//! Names are 1.37's ([`super::workload_name`], [`super::pod_group_name`]).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kcm_pod::meta::{is_controlled_by, name_of};
use serde_json::{Value, json};

use super::rules::{EnsureError, Lookup, Rules, Source};
use super::v1alpha2::{
    API_VERSION, PodGroup, PodGroupSpec, PodGroupTemplate, PodGroupTemplateReference,
    TypedLocalObjectReference, Workload, WorkloadPodGroupTemplateReference, WorkloadSpec,
};
use super::{Found, pod_group_name, template_name, workload_name};
use crate::pods::controller_ref;

/// Whether the Job gets a Workload and PodGroup (upstream
/// `shouldManageWorkloadForJob`).
pub fn eligible(job: &Job, gate: bool) -> bool {
    if !gate {
        return false;
    }
    let Some(spec) = job.spec.as_ref() else {
        return false;
    };
    let Some(parallelism) = spec.parallelism.filter(|p| *p > 1) else {
        return false;
    };
    let grouped = spec
        .template
        .spec
        .as_ref()
        .is_some_and(|s| s.scheduling_group.is_some());
    crate::pods::is_indexed(job) && spec.completions == Some(parallelism) && !grouped
}

/// Whether the Workload has the shape 1.36 supports (exactly one
/// template; upstream `validateWorkloadStructure`).
pub fn usable(w: &Workload) -> bool {
    w.spec.pod_group_templates.len() == 1
}

/// The Workload 1.36 creates for `job` (upstream `createWorkloadForJob`):
/// one gang template of the parallelism, controlled by the Job, which
/// `spec.controllerRef` names.
pub fn desired_workload(job: &Job) -> Workload {
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(0);
    Workload {
        metadata: ObjectMeta {
            name: Some(workload_name(job)),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![controller_ref(job)]),
            ..Default::default()
        },
        spec: WorkloadSpec {
            controller_ref: Some(TypedLocalObjectReference {
                api_group: "batch".into(),
                kind: "Job".into(),
                name: job.metadata.name.clone().unwrap_or_default(),
            }),
            pod_group_templates: vec![PodGroupTemplate {
                name: template_name(job),
                scheduling_policy: json!({ "gang": { "minCount": parallelism } }),
            }],
        },
    }
}

/// The PodGroup for `job` from the Workload's first template (upstream
/// `createPodGroupForWorkload`): controlled by the Job, owned (not
/// controlled, no blockOwnerDeletion) by the Workload, the template's
/// policy copied. None: the Workload has no template.
pub fn new_pod_group(job: &Job, workload: &Workload) -> Option<PodGroup> {
    let t = workload.spec.pod_group_templates.first()?;
    let wl_name = workload.metadata.name.clone().unwrap_or_default();
    Some(PodGroup {
        metadata: ObjectMeta {
            name: Some(pod_group_name(&wl_name, &t.name)),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![
                controller_ref(job),
                OwnerReference {
                    api_version: API_VERSION.into(),
                    kind: "Workload".into(),
                    name: wl_name.clone(),
                    uid: workload.metadata.uid.clone().unwrap_or_default(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        spec: PodGroupSpec {
            pod_group_template_ref: Some(PodGroupTemplateReference {
                workload: Some(WorkloadPodGroupTemplateReference {
                    workload_name: wl_name,
                    pod_group_template_name: t.name.clone(),
                }),
            }),
            scheduling_policy: t.scheduling_policy.clone(),
        },
    })
}

/// 1.36's rules (`scheduling.k8s.io/v1alpha2`): gang candidates only, every
/// match counts, never resized; AlreadyExists retried as upstream.
pub struct V136;

impl Rules for V136 {
    type Workload = Workload;
    type PodGroup = PodGroup;
    const ATTEMPTS: usize = 5;
    const FULL_EVENTS: bool = false;
    const DELEGATION: bool = false;

    fn source(job: &Job, gate: bool) -> Option<Source> {
        eligible(job, gate).then_some(Source::Root)
    }

    /// Index value of a Workload: `ns/<job>` when its controllerRef is a Job.
    fn workload_job_key(w: &Workload) -> Option<String> {
        let r = w.spec.controller_ref.as_ref()?;
        (r.api_group == "batch" && r.kind == "Job" && !r.name.is_empty())
            .then(|| super::index_key(&w.metadata, &r.name))
    }

    /// Index value of a PodGroup: `ns/<workload>` from its podGroupTemplateRef.
    fn pod_group_workload_key(pg: &PodGroup) -> Option<String> {
        let r = pg.spec.pod_group_template_ref.as_ref()?.workload.as_ref()?;
        (!r.workload_name.is_empty()).then(|| super::index_key(&pg.metadata, &r.workload_name))
    }

    /// Upstream `getOrCreateWorkload`.
    fn workload(
        job: &Job,
        found: &[Workload],
        new_job: bool,
    ) -> Result<Lookup<Workload>, EnsureError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let name = job.metadata.name.as_deref().unwrap_or("");
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        // Every match counts, controlled by the Job or not: upstream
        // switches on `len(matched)` before checking `IsControlledBy`.
        Ok(match Found::of(found) {
            Found::None if !new_job => {
                Lookup::quietly("no Workload for a Job that already started")
            }
            Found::None => Lookup::Create(desired_workload(job)),
            Found::One(w) if !is_controlled_by(&w.metadata, uid) => {
                Lookup::quietly("Workload not owned by this Job, skipping workload integration")
            }
            Found::One(w) if usable(&w) => Lookup::Use(w),
            Found::One(w) => Lookup::quietly(format!(
                "Workload {} has {} PodGroupTemplates (unsupported), falling back to default scheduling",
                name_of(&w.metadata),
                w.spec.pod_group_templates.len()
            )),
            Found::Many(n) => Lookup::loudly(format!(
                "found {n} Workloads referencing Job {ns}/{name}, falling back to default scheduling"
            )),
        })
    }

    fn parent(_: &Job, _: &str, _: &[Workload]) -> Lookup<Workload> {
        Lookup::quietly("1.36 delegates no PodGroups")
    }

    /// Upstream `getOrCreatePodGroup` (no new-Job check).
    fn pod_group(
        job: &Job,
        _: &Source,
        workload: &Workload,
        found: &[PodGroup],
        _: bool,
    ) -> Result<Lookup<PodGroup>, EnsureError> {
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let wl_name = name_of(&workload.metadata);
        Ok(match Found::of(found) {
            Found::None => match new_pod_group(job, workload) {
                Some(pg) => Lookup::Create(pg),
                None => {
                    return Err(EnsureError::NoTemplate {
                        template: String::new(),
                        workload: wl_name.into(),
                    });
                }
            },
            Found::One(p) if !is_controlled_by(&p.metadata, uid) => {
                Lookup::quietly("PodGroup not owned by this Job, skipping workload integration")
            }
            Found::One(p) => Lookup::Use(p),
            Found::Many(n) => Lookup::loudly(format!(
                "found {n} PodGroups referencing Workload {}/{wl_name}, falling back to default scheduling",
                workload.metadata.namespace.as_deref().unwrap_or("")
            )),
        })
    }

    fn resize(
        _: &Job,
        _: &Source,
        _: &Workload,
        _: Option<&PodGroup>,
    ) -> (Option<Value>, Option<Value>) {
        (None, None)
    }
}

#[cfg(test)]
mod tests;

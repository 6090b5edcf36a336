//! `WorkloadWithJob` (1.37, alpha): the scheduling objects a Job gets, as
//! pure decisions over the Job and the cached objects (upstream
//! `job_scheduling_manager.go`); `controller::scheduling` performs them.
//! 1.36's narrower feature (`scheduling.k8s.io/v1alpha2`) is [`v136`], over
//! the types of [`v1alpha2`]; names are shared.
//!
//! A root Job (no controller owner) gets a `scheduling.k8s.io/v1beta1`
//! Workload compiled from `spec.scheduling` (one PodGroupTemplate, Basic by
//! default) and a PodGroup from that template; a Job whose controller
//! delegated it (the `scheduling.k8s.io/group-template-name` annotation)
//! gets only a PodGroup, from the named template of the parent's Workload.
//! Pods then name the PodGroup in `spec.schedulingGroup`. Objects are
//! created only for a Job that never started; the gang `minCount` follows
//! the Job (or, delegated, the parent's template) afterwards.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::scheduling::v1beta1::{
    AllDisruptionMode, BasicSchedulingPolicy, DisruptionMode, GangSchedulingPolicy, PodGroup,
    PodGroupResourceClaim, PodGroupSchedulingConstraints, PodGroupSchedulingPolicy, PodGroupSpec,
    PodGroupTemplate, SingleDisruptionMode, TopologyConstraint, TypedLocalObjectReference,
    Workload, WorkloadReference, WorkloadSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use kcm_pod::meta::{controller_of, is_controlled_by, name_of};
use kcm_runtime::hash::fnv32a;
use kcm_runtime::informer::key_of;

use crate::pods::controller_ref;

pub mod rules;
pub mod v136;
pub mod v1alpha2;

pub use rules::{EnsureError, Lookup, Rules, Source};

/// The scheduling API (and with it the rules) of the minor's Job
/// controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// 1.36: gang candidates only, [`v136`].
    V1alpha2,
    /// 1.37: every root or delegated Job, this module.
    V1beta1,
}

/// The annotation by which a parent controller hands PodGroup management
/// of one of its Workload's templates to the Job controller.
pub const GROUP_TEMPLATE_ANNOTATION: &str = "scheduling.k8s.io/group-template-name";
/// The API version of the objects (1.37; 1.36 used v1alpha2).
pub const API_VERSION: &str = "scheduling.k8s.io/v1beta1";
/// Longest object name (a DNS-1123 subdomain).
const MAX_NAME: usize = 253;

/// Which scheduling objects the controller manages for a Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// None: the gate is off, the pods already name a group, or a parent
    /// owns everything.
    None,
    /// Workload and PodGroup (a root Job).
    Both,
    /// Only the PodGroup, from the parent's Workload (delegated).
    PodGroupOnly,
}

/// The objects' management mode for `job` (upstream `getManagementMode`).
pub fn mode(job: &Job, gate: bool) -> Mode {
    if !gate {
        return Mode::None;
    }
    let grouped = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .is_some_and(|s| s.scheduling_group.is_some());
    if grouped {
        return Mode::None;
    }
    if controller_of(&job.metadata).is_none() {
        return Mode::Both;
    }
    if delegated_template(job).is_some() {
        return Mode::PodGroupOnly;
    }
    Mode::None
}

/// The template name a parent delegated (the annotation, empty allowed).
pub fn delegated_template(job: &Job) -> Option<&str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(GROUP_TEMPLATE_ANNOTATION)
        .map(String::as_str)
}

/// Whether the Job never started, so objects may be created for it: no
/// pods, no start time, nothing counted, never suspended (upstream
/// `isNewJob`, a conservative alpha heuristic).
pub fn is_new_job(job: &Job, pods: usize) -> bool {
    let Some(status) = job.status.as_ref() else {
        return pods == 0;
    };
    pods == 0
        && status.start_time.is_none()
        && status.succeeded.unwrap_or(0) == 0
        && status.failed.unwrap_or(0) == 0
        && !status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Suspended")
}

/// What a lookup among the index's candidates came to. Which candidates
/// count is the minor's rule: 1.37 counts those the Job controls, 1.36
/// every match and checks the one it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<T> {
    None,
    One(T),
    /// Ambiguous: upstream falls back to default scheduling.
    Many(usize),
}

impl<T: Clone> Found<T> {
    /// Of the candidates `items` yields.
    pub fn of<'a>(items: impl IntoIterator<Item = &'a T>) -> Found<T>
    where
        T: 'a,
    {
        let mut items = items.into_iter();
        match (items.next(), items.next()) {
            (None, _) => Found::None,
            (Some(one), None) => Found::One(one.clone()),
            (Some(_), Some(_)) => Found::Many(2 + items.count()),
        }
    }

    /// Of the candidates whose controller is the Job with `uid`.
    pub fn controlled<'a>(items: &'a [T], meta: impl Fn(&T) -> &ObjectMeta, uid: &str) -> Found<T>
    where
        T: 'a,
    {
        Found::of(items.iter().filter(|i| is_controlled_by(meta(i), uid)))
    }
}

/// apimachinery's `rand.SafeEncodeString` of the decimal hash: each digit
/// mapped into an alphabet without vowels.
fn safe_encode(hash: u32) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The first `n` bytes of `s` (names are ASCII; never splits a character).
fn prefix(s: &str, n: usize) -> &str {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// `<job name>-<hash of the UID>` (upstream `computeWorkloadName`: the
/// hash is of the UID as `DeepHashObject` prints a `types.UID`).
pub fn workload_name(job: &Job) -> String {
    let uid = job.metadata.uid.as_deref().unwrap_or("");
    let hash = safe_encode(fnv32a(&[b"(types.UID)", uid.as_bytes()]));
    let name = job.metadata.name.as_deref().unwrap_or("");
    format!("{}-{hash}", prefix(name, MAX_NAME - hash.len() - 1))
}

/// `<workload>-<template>-<hash>`, each part cut to fit (upstream
/// `computePodGroupName`).
pub fn pod_group_name(workload: &str, template: &str) -> String {
    let hash = safe_encode(fnv32a(&[workload.as_bytes(), template.as_bytes()]));
    let room = MAX_NAME - hash.len() - 2;
    let (mut w, mut t) = (workload, template);
    if w.len() + t.len() > room {
        let half = room / 2;
        if w.len() <= half {
            t = prefix(t, room - w.len());
        } else if t.len() <= half {
            w = prefix(w, room - t.len());
        } else {
            w = prefix(w, room - half);
            t = prefix(t, half);
        }
    }
    format!("{w}-{t}-{hash}")
}

/// The one PodGroupTemplate a Job compiles to.
pub fn template_name(job: &Job) -> String {
    format!("{}-pgt-0", job.metadata.name.as_deref().unwrap_or(""))
}

fn empty() -> Value {
    json!({})
}

/// The Workload `job` compiles to (upstream `generateWorkload` through the
/// shared workload builder): Basic unless `spec.scheduling` says Gang,
/// whose unset `minCount` is the parallelism (at least 1); the template's
/// priority class; topology keys, disruption mode and resource claims as
/// given. Owned by the Job, which `spec.controllerRef` names.
pub fn desired_workload(job: &Job) -> Workload {
    let spec = job.spec.clone().unwrap_or_default();
    let sched = spec.scheduling.unwrap_or_default();
    let gang = sched.scheduling_policy.as_ref().and_then(|p| {
        // Basic wins when both are set, as the builder's mapping reads it.
        if p.basic.is_some() {
            return None;
        }
        let g = p.gang.as_ref()?;
        Some(
            g.min_count
                .unwrap_or_else(|| spec.parallelism.unwrap_or(1).max(1)),
        )
    });
    let scheduling_policy = match gang {
        Some(min_count) => PodGroupSchedulingPolicy {
            gang: Some(GangSchedulingPolicy { min_count }),
            basic: None,
        },
        None => PodGroupSchedulingPolicy {
            basic: Some(BasicSchedulingPolicy(empty())),
            gang: None,
        },
    };
    let topology: Vec<TopologyConstraint> = sched
        .scheduling_constraints
        .and_then(|c| c.topology)
        .unwrap_or_default()
        .into_iter()
        .map(|t| TopologyConstraint { key: t.key })
        .collect();
    let disruption_mode = sched.disruption_mode.and_then(|d| {
        if d.single.is_some() {
            Some(DisruptionMode {
                single: Some(SingleDisruptionMode(empty())),
                all: None,
            })
        } else if d.all.is_some() {
            Some(DisruptionMode {
                all: Some(AllDisruptionMode(empty())),
                single: None,
            })
        } else {
            None
        }
    });
    let claims: Vec<PodGroupResourceClaim> = sched
        .resource_claims
        .unwrap_or_default()
        .into_iter()
        .map(|c| PodGroupResourceClaim {
            name: c.name,
            resource_claim_name: c.resource_claim_name,
            resource_claim_template_name: c.resource_claim_template_name,
        })
        .collect();
    let priority_class_name = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.clone())
        .filter(|p| !p.is_empty());
    let template = PodGroupTemplate {
        name: template_name(job),
        priority_class_name,
        scheduling_policy,
        scheduling_constraints: (!topology.is_empty()).then_some(PodGroupSchedulingConstraints {
            topology: Some(topology),
        }),
        disruption_mode,
        resource_claims: (!claims.is_empty()).then_some(claims),
        ..Default::default()
    };
    Workload {
        metadata: ObjectMeta {
            name: Some(workload_name(job)),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![controller_ref(job)]),
            ..Default::default()
        },
        spec: WorkloadSpec {
            controller_ref: Some(TypedLocalObjectReference {
                api_group: Some("batch".into()),
                kind: "Job".into(),
                name: job.metadata.name.clone().unwrap_or_default(),
            }),
            pod_group_templates: Some(vec![template]),
            composite_pod_group_templates: None,
        },
    }
}

/// The Workload's templates ("" when unset).
pub fn templates(w: &Workload) -> &[PodGroupTemplate] {
    w.spec.pod_group_templates.as_deref().unwrap_or(&[])
}

/// The template named `name`; an empty name means the first one.
pub fn template<'a>(w: &'a Workload, name: &str) -> Option<&'a PodGroupTemplate> {
    let all = templates(w);
    if name.is_empty() {
        return all.first();
    }
    all.iter().find(|t| t.name == name)
}

/// The PodGroup for `job` from `workload`'s template `template_name`
/// (upstream `createPodGroup`): controlled by the Job; a root Job's also
/// owned (not controlled) by its Workload, a delegated one's not, so the
/// parent stays the Workload's only owner. None: no such template.
pub fn new_pod_group(
    job: &Job,
    workload: &Workload,
    template_name: &str,
    link_workload: bool,
) -> Option<PodGroup> {
    let t = template(workload, template_name)?;
    let wl_name = workload.metadata.name.clone().unwrap_or_default();
    let mut owners = vec![controller_ref(job)];
    if link_workload {
        owners.push(OwnerReference {
            api_version: API_VERSION.into(),
            kind: "Workload".into(),
            name: wl_name.clone(),
            uid: workload.metadata.uid.clone().unwrap_or_default(),
            ..Default::default()
        });
    }
    Some(PodGroup {
        metadata: ObjectMeta {
            name: Some(pod_group_name(&wl_name, &t.name)),
            namespace: workload.metadata.namespace.clone(),
            owner_references: Some(owners),
            ..Default::default()
        },
        spec: PodGroupSpec {
            workload_ref: Some(WorkloadReference {
                workload_name: wl_name,
                template_name: t.name.clone(),
            }),
            scheduling_policy: t.scheduling_policy.clone(),
            scheduling_constraints: t.scheduling_constraints.clone(),
            disruption_mode: t.disruption_mode.clone(),
            priority_class_name: t.priority_class_name.clone(),
            resource_claims: t.resource_claims.clone().filter(|c| !c.is_empty()),
            priority: t.priority,
            ..Default::default()
        },
        status: None,
    })
}

/// The parent's Workload of a delegated Job: the first in its namespace
/// whose `spec.controllerRef` names the Job's controller (group, kind,
/// name; upstream `findParentWorkload`).
pub fn parent_workload<'a>(job: &Job, workloads: &'a [Workload]) -> Option<&'a Workload> {
    let parent = controller_of(&job.metadata)?;
    let group = api_group(&parent.api_version)?;
    workloads.iter().find(|w| {
        w.spec.controller_ref.as_ref().is_some_and(|r| {
            r.api_group.as_deref().unwrap_or("") == group
                && r.kind == parent.kind
                && r.name == parent.name
        })
    })
}

/// The group of an apiVersion (`schema.ParseGroupVersion`): "" for `v1`,
/// None when malformed.
fn api_group(api_version: &str) -> Option<&str> {
    match api_version.split_once('/') {
        None => Some(""),
        Some((g, v)) if !v.contains('/') => Some(g),
        Some(_) => None,
    }
}

/// The gang `minCount` of the Job's compiled Workload (None: Basic).
pub fn desired_min_count(job: &Job) -> Option<i32> {
    let w = desired_workload(job);
    templates(&w)
        .first()?
        .scheduling_policy
        .gang
        .as_ref()
        .map(|g| g.min_count)
}

/// The patch that sets a Workload's gang `minCount`, when its single gang
/// template has another one. Lists without a merge key are replaced whole
/// in a strategic merge patch, so the patch carries every template.
pub fn workload_min_count_patch(w: &Workload, min_count: i32) -> Option<Value> {
    let [t] = templates(w) else {
        return None;
    };
    let gang = t.scheduling_policy.gang.as_ref()?;
    if gang.min_count == min_count {
        return None;
    }
    let mut updated = t.clone();
    updated.scheduling_policy.gang = Some(GangSchedulingPolicy { min_count });
    Some(json!({ "spec": { "podGroupTemplates": [updated] } }))
}

/// The patch that sets a gang PodGroup's `minCount`, when it differs.
pub fn pod_group_min_count_patch(pg: &PodGroup, min_count: i32) -> Option<Value> {
    let gang = pg.spec.scheduling_policy.gang.as_ref()?;
    (gang.min_count != min_count)
        .then(|| json!({ "spec": { "schedulingPolicy": { "gang": { "minCount": min_count } } } }))
}

/// The key the Workload and PodGroup indexes file an object under: the
/// cache key of `name` in the namespace of `meta`.
pub fn index_key(meta: &ObjectMeta, name: &str) -> String {
    key_of(meta.namespace.as_deref().unwrap_or(""), name)
}

/// 1.37's rules (`scheduling.k8s.io/v1beta1`): root and delegated Jobs,
/// lookups among the objects the Job controls, the gang size kept in step.
pub struct V137;

impl Rules for V137 {
    type Workload = Workload;
    type PodGroup = PodGroup;
    const ATTEMPTS: usize = 1;
    const FULL_EVENTS: bool = true;
    const DELEGATION: bool = true;

    fn source(job: &Job, gate: bool) -> Option<Source> {
        match mode(job, gate) {
            Mode::None => None,
            Mode::Both => Some(Source::Root),
            Mode::PodGroupOnly => Some(Source::Delegated(
                delegated_template(job).unwrap_or("").to_string(),
            )),
        }
    }

    /// Index value of a Workload: `ns/<job>` when its controllerRef is a Job.
    fn workload_job_key(w: &Workload) -> Option<String> {
        let r = w.spec.controller_ref.as_ref()?;
        (r.api_group.as_deref() == Some("batch") && r.kind == "Job" && !r.name.is_empty())
            .then(|| index_key(&w.metadata, &r.name))
    }

    /// Index value of a PodGroup: `ns/<workload>` from its workloadRef.
    fn pod_group_workload_key(pg: &PodGroup) -> Option<String> {
        let r = pg.spec.workload_ref.as_ref()?;
        (!r.workload_name.is_empty()).then(|| index_key(&pg.metadata, &r.workload_name))
    }

    fn workload(
        job: &Job,
        found: &[Workload],
        new_job: bool,
    ) -> Result<Lookup<Workload>, EnsureError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or("");
        let name = job.metadata.name.as_deref().unwrap_or("");
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        Ok(match Found::controlled(found, |w| &w.metadata, uid) {
            Found::None if !new_job => {
                Lookup::quietly("no Workload for a Job that already started")
            }
            Found::None => Lookup::Create(desired_workload(job)),
            Found::One(w) => {
                let n = templates(&w).len();
                if n != 1 {
                    return Err(EnsureError::Templates {
                        ns: ns.into(),
                        workload: name_of(&w.metadata).into(),
                        job: name.into(),
                        templates: n,
                    });
                }
                Lookup::Use(w)
            }
            Found::Many(n) => Lookup::loudly(format!(
                "found {n} Workloads referencing Job {ns}/{name}, falling back to default scheduling"
            )),
        })
    }

    fn parent(job: &Job, template_name: &str, in_namespace: &[Workload]) -> Lookup<Workload> {
        let Some(parent) = parent_workload(job, in_namespace) else {
            return Lookup::quietly("parent-owned Workload not found yet for delegated Job");
        };
        if template(parent, template_name).is_none() {
            return Lookup::quietly(format!(
                "delegated PodGroupTemplate {template_name:?} not found in the parent Workload"
            ));
        }
        Lookup::Use(parent.clone())
    }

    fn pod_group(
        job: &Job,
        source: &Source,
        workload: &Workload,
        found: &[PodGroup],
        new_job: bool,
    ) -> Result<Lookup<PodGroup>, EnsureError> {
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let create = |template: &str, link: bool| {
            new_pod_group(job, workload, template, link)
                .map(Lookup::Create)
                .ok_or_else(|| EnsureError::NoTemplate {
                    template: template.into(),
                    workload: name_of(&workload.metadata).into(),
                })
        };
        match source {
            Source::Root => Ok(match Found::controlled(found, |p| &p.metadata, uid) {
                Found::None if !new_job => {
                    Lookup::quietly("no PodGroup for a Job that already started")
                }
                Found::None => return create("", true),
                Found::One(p) => Lookup::Use(p),
                Found::Many(n) => Lookup::loudly(format!(
                    "found {n} PodGroups referencing Workload {}/{}, falling back to default scheduling",
                    workload.metadata.namespace.as_deref().unwrap_or(""),
                    name_of(&workload.metadata)
                )),
            }),
            Source::Delegated(template) => {
                match found.iter().find(|p| is_controlled_by(&p.metadata, uid)) {
                    Some(p) => Ok(Lookup::Use(p.clone())),
                    None if new_job => create(template, false),
                    None => Ok(Lookup::quietly(
                        "no PodGroup for a delegated Job that already started",
                    )),
                }
            }
        }
    }

    fn resize(
        job: &Job,
        source: &Source,
        workload: &Workload,
        pod_group: Option<&PodGroup>,
    ) -> (Option<Value>, Option<Value>) {
        // Root: elastic gangs follow the Job's minCount, whatever the pods
        // are doing; delegated: the parent's template decides.
        let (workload_patch, min) = match source {
            Source::Root => match desired_min_count(job) {
                Some(min) => (workload_min_count_patch(workload, min), min),
                None => return (None, None),
            },
            Source::Delegated(t) => {
                let gang = template(workload, t).and_then(|t| t.scheduling_policy.gang.as_ref());
                match gang {
                    Some(g) => (None, g.min_count),
                    None => return (None, None),
                }
            }
        };
        let pod_group_patch = pod_group.and_then(|p| pod_group_min_count_patch(p, min));
        (workload_patch, pod_group_patch)
    }
}

#[cfg(test)]
mod tests;

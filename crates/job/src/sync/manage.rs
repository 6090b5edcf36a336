//! Stages 2 and 3: what to do to pods (upstream `manageJob`, the deletion of
//! active pods when the Job is finishing) and folding in the outcome.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kcm_conditions::job::{ensure_job_condition_status, new_job_condition};
use kcm_pod::CachedPod;

use super::prepare::{REASON_COMPLETIONS_REACHED, suspended};
use super::{
    ACTION_PODS_CREATED, ACTION_PODS_DELETED, ACTION_TRACKING, JobCtx, JobEvent,
    MAX_POD_CREATE_DELETE_PER_SYNC,
};
use crate::active_pods::active_pods_order;
use crate::backoff::{remaining_time, remaining_time_per_index};
use crate::indexes::{
    self, add_completion_index_env_var, pod_generate_name, pod_generate_name_with_index,
};
use crate::pods::{
    JOB_COMPLETION_INDEX, JOB_INDEX_FAILURE_COUNT, JOB_INDEX_IGNORED_FAILURE_COUNT,
    JOB_TRACKING_FINALIZER, is_ready, only_replace_failed_pods,
};

/// What a sync does to pods; at most one kind per sync.
#[derive(Debug, Clone)]
pub enum PodWork {
    /// The Job is finishing: DELETE every active pod, keeping finalizers
    /// (they are counted as failed unless the Job succeeds).
    DeleteActive(Vec<Arc<CachedPod>>),
    /// Scale-down, suspension or duplicates: remove the finalizer, then
    /// DELETE (never counted). Deletions are expected.
    Remove(Vec<Arc<CachedPod>>),
    /// Create these pods (slow start 1, 2, 4, ...). Creations are expected.
    Create(Vec<Pod>),
    /// Creation waits for the pod-failure back-off.
    Backoff(Duration),
    Nothing,
}

/// What the executor achieved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Pods deleted (NotFound counts as deleted).
    pub deleted: i32,
    /// Of the deleted pods, those that were ready (upstream's quirks on
    /// failures apply: see the executor).
    pub deleted_ready: i32,
    /// Pods not created (failed or skipped by slow start).
    pub not_created: i32,
}

/// The controller ownerRef a Job puts on its pods.
pub fn controller_ref(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pods `manageJob` would create, fully formed (generateName, labels,
/// annotations, finalizer, ownerReference, spec).
fn pods_to_create(ctx: &JobCtx, indexes: &[Option<i32>]) -> Vec<Pod> {
    let job = &ctx.job;
    let name = job.metadata.name.clone().unwrap_or_default();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut meta = template.metadata.clone().unwrap_or_default();
    let mut spec = template.spec.clone().unwrap_or_default();
    let indexed = crate::pods::is_indexed(job);
    if indexed {
        add_completion_index_env_var(&mut spec);
    }
    // Upstream also puts a PodGroup ownerReference on the template, which
    // building the pod from it drops: only the group name reaches the pod.
    if let Some(pg) = &ctx.pod_group {
        spec.scheduling_group = Some(PodSchedulingGroup {
            pod_group_name: Some(pg.clone()),
        });
    }
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == JOB_TRACKING_FINALIZER) {
        finalizers.push(JOB_TRACKING_FINALIZER.to_string());
    }
    let per_index = job
        .spec
        .as_ref()
        .is_some_and(|s| s.backoff_limit_per_index.is_some());
    indexes
        .iter()
        .map(|ix| {
            let mut m = ObjectMeta {
                namespace: job.metadata.namespace.clone(),
                labels: meta.labels.clone(),
                annotations: meta.annotations.clone(),
                finalizers: meta.finalizers.clone(),
                owner_references: Some(vec![controller_ref(job)]),
                generate_name: Some(pod_generate_name(&name)),
                ..Default::default()
            };
            let mut s = spec.clone();
            if let Some(i) = ix {
                m.annotations
                    .get_or_insert_with(Default::default)
                    .insert(JOB_COMPLETION_INDEX.into(), i.to_string());
                m.labels
                    .get_or_insert_with(Default::default)
                    .insert(JOB_COMPLETION_INDEX.into(), i.to_string());
                s.hostname = Some(format!("{name}-{i}"));
                m.generate_name = Some(pod_generate_name_with_index(&name, *i));
                if per_index {
                    let held = ctx.held.get(i).map(Arc::as_ref);
                    let counts =
                        held.is_none_or(|p| super::prepare::counts_as_failure(job, ctx.config, p));
                    let (failed, ignored) = indexes::new_index_failure_counts(job, held, counts);
                    let ann = m.annotations.get_or_insert_with(Default::default);
                    ann.insert(JOB_INDEX_FAILURE_COUNT.into(), failed.to_string());
                    if ignored > 0 {
                        ann.insert(JOB_INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
                    }
                }
            }
            Pod {
                metadata: m,
                spec: Some(s),
                status: None,
            }
        })
        .collect()
}

/// Active pods to remove: Indexed duplicates and out-of-range first, then
/// the "delete first" end of the ActivePods order, at least `rm_at_least`.
fn active_pods_for_removal(ctx: &JobCtx, rm_at_least: usize) -> Vec<Arc<CachedPod>> {
    let order = |a: &CachedPod, b: &CachedPod| active_pods_order(a, b);
    let (mut rm, mut left): (Vec<Arc<CachedPod>>, Vec<Arc<CachedPod>>) =
        if crate::pods::is_indexed(&ctx.job) {
            let (r, l) =
                indexes::duplicated_index_pods_for_removal(&ctx.job, &ctx.active_pods, &order);
            (
                r.into_iter().cloned().collect(),
                l.into_iter().cloned().collect(),
            )
        } else {
            (Vec::new(), ctx.active_pods.clone())
        };
    if rm.len() < rm_at_least {
        left.sort_by(|a, b| active_pods_order(a, b));
        let more = rm_at_least - rm.len();
        rm.extend(left.into_iter().take(more));
    }
    rm
}

/// Stage 2: the pod work of this sync. Sets `manage_called` and `action`.
pub fn pod_work(ctx: &mut JobCtx) -> PodWork {
    if ctx.finished.is_some() {
        return PodWork::DeleteActive(ctx.active_pods.clone());
    }
    if !ctx.satisfied || ctx.job.metadata.deletion_timestamp.is_some() {
        return PodWork::Nothing;
    }
    ctx.manage_called = true;
    let spec = ctx.job.spec.clone().unwrap_or_default();
    let active = ctx.active;
    if suspended(&ctx.job) {
        ctx.action = ACTION_PODS_DELETED;
        let n = usize::try_from(active).unwrap_or(0);
        return PodWork::Remove(active_pods_for_removal(ctx, n));
    }
    let parallelism = spec.parallelism.unwrap_or(1);
    let want_active = match spec.completions {
        None if ctx.succeeded > 0 => active,
        None => parallelism,
        Some(c) => c.saturating_sub(ctx.succeeded).clamp(0, parallelism.max(0)),
    };
    let rm_at_least = usize::try_from((active - want_active).max(0)).unwrap_or(0);
    let mut to_delete = active_pods_for_removal(ctx, rm_at_least);
    to_delete.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
    if !to_delete.is_empty() {
        ctx.action = ACTION_PODS_DELETED;
        return PodWork::Remove(to_delete);
    }
    let terminating = if only_replace_failed_pods(&ctx.job) {
        ctx.terminating
    } else {
        0
    };
    let diff = want_active - terminating - active;
    if diff <= 0 {
        ctx.action = ACTION_TRACKING;
        return PodWork::Nothing;
    }
    ctx.action = ACTION_PODS_CREATED;
    let per_index = spec.backoff_limit_per_index.is_some();
    if !per_index {
        let wait = remaining_time(&ctx.new_backoff, ctx.now);
        if !wait.is_zero() {
            return PodWork::Backoff(wait);
        }
    }
    let diff = usize::try_from(diff)
        .unwrap_or(0)
        .min(MAX_POD_CREATE_DELETE_PER_SYNC);
    let indexes: Vec<Option<i32>> = if crate::pods::is_indexed(&ctx.job) {
        let mut pending = indexes::first_pending_indexes(
            &ctx.job,
            &ctx.pods,
            &ctx.succeeded_indexes,
            ctx.failed_indexes.as_ref(),
            diff,
        );
        if per_index {
            let mut now_ok = Vec::new();
            let mut min_wait: Option<Duration> = None;
            for i in pending {
                let wait = remaining_time_per_index(ctx.held.get(&i).map(Arc::as_ref), ctx.now);
                if wait.is_zero() {
                    now_ok.push(i);
                } else {
                    min_wait = Some(min_wait.map_or(wait, |m| m.min(wait)));
                }
            }
            if now_ok.is_empty()
                && let Some(wait) = min_wait
            {
                return PodWork::Backoff(wait);
            }
            pending = now_ok;
        }
        pending.into_iter().map(Some).collect()
    } else {
        vec![None; diff]
    };
    if indexes.is_empty() {
        return PodWork::Nothing;
    }
    PodWork::Create(pods_to_create(ctx, &indexes))
}

/// Stage 3: fold in what the pod work achieved, then the completion check
/// and (when manageJob ran) the suspend bookkeeping.
pub fn apply_outcome(ctx: &mut JobCtx, work: &PodWork, outcome: Outcome) {
    match work {
        PodWork::DeleteActive(pods) => {
            if outcome.deleted != ctx.active || !ctx.satisfied {
                // Not finished yet: pods or finalizers may still be out there.
                ctx.finished = None;
            }
            let _ = pods;
            ctx.active -= outcome.deleted;
            ctx.terminating += outcome.deleted;
            ctx.ready -= outcome.deleted_ready;
        }
        PodWork::Remove(_) => {
            ctx.active -= outcome.deleted;
            ctx.terminating += outcome.deleted;
            ctx.ready -= outcome.deleted_ready;
        }
        PodWork::Create(pods) => {
            let n = i32::try_from(pods.len()).unwrap_or(i32::MAX);
            ctx.active = ctx.active + n - outcome.not_created;
        }
        PodWork::Backoff(wait) => ctx.requeue((*wait).max(Duration::from_secs(1))),
        PodWork::Nothing => {}
    }
    if matches!(work, PodWork::DeleteActive(_)) {
        return;
    }
    let complete = match ctx.completions() {
        None => ctx.succeeded > 0 && ctx.active == 0,
        Some(c) => ctx.succeeded >= c && ctx.active == 0,
    };
    if complete {
        // Upstream's newSuccessCondition gives no reason or message
        // without JobSuccessPolicy.
        let (reason, message) = if ctx.config.success_policy {
            (
                REASON_COMPLETIONS_REACHED,
                "Reached expected number of succeeded pods",
            )
        } else {
            ("", "")
        };
        // Upstream newSuccessCondition: `Complete` at once when terminal
        // conditions are not delayed.
        let type_ = if ctx.config.delay_terminal() {
            "SuccessCriteriaMet"
        } else {
            "Complete"
        };
        ctx.finished = Some(new_job_condition(type_, "True", reason, message, ctx.now));
        return;
    }
    if !ctx.manage_called {
        return;
    }
    let now = ctx.now;
    let is_suspended = suspended(&ctx.job);
    let status = ctx.job.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if is_suspended {
        if ensure_job_condition_status(
            conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        ) {
            ctx.suspend_changed = true;
            ctx.events.push(JobEvent {
                warning: false,
                reason: "Suspended".into(),
                message: "Job suspended".into(),
            });
            // 1.35+: so the API server lets scheduling directives change
            // while the Job is suspended.
            if ctx.config.clear_start_time_on_suspend {
                status.start_time = None;
            }
        }
    } else if ensure_job_condition_status(
        conditions,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        now,
    ) {
        ctx.suspend_changed = true;
        ctx.events.push(JobEvent {
            warning: false,
            reason: "Resumed".into(),
            message: "Job resumed".into(),
        });
        // ActiveDeadlineSeconds counts continuous activity: restart it.
        status.start_time = Some(Time(now));
    }
}

/// Ready pods among `pods`.
pub fn count_ready(pods: &[Arc<CachedPod>]) -> i32 {
    i32::try_from(pods.iter().filter(|p| is_ready(p)).count()).unwrap_or(i32::MAX)
}

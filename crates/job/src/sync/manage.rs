//! Stages 2 and 3: what to do to pods (upstream `manageJob`, the deletion of
//! active pods when the Job is finishing), and what the pod calls achieved
//! comes to (the counts, completion, the suspend bookkeeping).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kcm_conditions::job::{ensure_job_condition_status, new_job_condition};
use kcm_conditions::pod::is_pod_ready;
use kcm_pod::CachedPod;

use super::prepare::{REASON_COMPLETIONS_REACHED, suspended};
use super::{
    ACTION_PODS_CREATED, ACTION_PODS_DELETED, ACTION_RECONCILING, ACTION_TRACKING, Counts,
    JobEvent, MAX_POD_CREATE_DELETE_PER_SYNC, Prepared, Requeue,
};
use crate::active_pods::active_pods_order;
use crate::backoff::{remaining_time, remaining_time_per_index};
use crate::indexes::{
    self, add_completion_index_env_var, pod_generate_name, pod_generate_name_with_index,
};
use crate::pods::{
    JOB_COMPLETION_INDEX, JOB_INDEX_FAILURE_COUNT, JOB_INDEX_IGNORED_FAILURE_COUNT,
    JOB_TRACKING_FINALIZER, controller_ref, only_replace_failed_pods,
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

/// The pods `manageJob` would create, fully formed (generateName, labels,
/// annotations, finalizer, ownerReference, spec).
fn pods_to_create(p: &Prepared, indexes: &[Option<i32>]) -> Vec<Pod> {
    let job = &p.job;
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
    if let Some(pg) = &p.pod_group {
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
                    let held = p.indexes.held.get(i).map(Arc::as_ref);
                    let counts = held.is_none_or(|h| p.verdicts.counts(h));
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
fn active_pods_for_removal(p: &Prepared, rm_at_least: usize) -> Vec<Arc<CachedPod>> {
    let order = |a: &CachedPod, b: &CachedPod| active_pods_order(a, b);
    let (mut rm, mut left): (Vec<Arc<CachedPod>>, Vec<Arc<CachedPod>>) =
        if crate::pods::is_indexed(&p.job) {
            let (r, l) = indexes::duplicated_index_pods_for_removal(&p.job, &p.active_pods, &order);
            (
                r.into_iter().cloned().collect(),
                l.into_iter().cloned().collect(),
            )
        } else {
            (Vec::new(), p.active_pods.clone())
        };
    if rm.len() < rm_at_least {
        left.sort_by(|a, b| active_pods_order(a, b));
        let more = rm_at_least - rm.len();
        rm.extend(left.into_iter().take(more));
    }
    rm
}

/// Stage 2's decision: the pod work, the sync's `action` metric label, and
/// whether `manageJob` ran (its suspend bookkeeping follows in stage 3).
#[derive(Debug, Clone)]
pub struct Managed {
    pub work: PodWork,
    pub action: &'static str,
    pub manage_called: bool,
}

/// Stage 2: the pod work of this sync.
pub fn pod_work(p: &Prepared) -> Managed {
    let done = |work: PodWork, action: &'static str, manage_called: bool| Managed {
        work,
        action,
        manage_called,
    };
    if p.finished.is_some() {
        return done(
            PodWork::DeleteActive(p.active_pods.clone()),
            ACTION_RECONCILING,
            false,
        );
    }
    if !p.satisfied || p.job.metadata.deletion_timestamp.is_some() {
        return done(PodWork::Nothing, ACTION_RECONCILING, false);
    }
    let (work, action) = manage(p);
    done(work, action, true)
}

/// Upstream `manageJob`: the pod work and its `action` label.
fn manage(p: &Prepared) -> (PodWork, &'static str) {
    let spec = p.job.spec.clone().unwrap_or_default();
    let active = p.counts.active;
    if suspended(&p.job) {
        let n = usize::try_from(active).unwrap_or(0);
        return (
            PodWork::Remove(active_pods_for_removal(p, n)),
            ACTION_PODS_DELETED,
        );
    }
    let parallelism = spec.parallelism.unwrap_or(1);
    let want_active = match spec.completions {
        None if p.succeeded > 0 => active,
        None => parallelism,
        Some(c) => c.saturating_sub(p.succeeded).clamp(0, parallelism.max(0)),
    };
    let rm_at_least = usize::try_from((active - want_active).max(0)).unwrap_or(0);
    let mut to_delete = active_pods_for_removal(p, rm_at_least);
    to_delete.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
    if !to_delete.is_empty() {
        return (PodWork::Remove(to_delete), ACTION_PODS_DELETED);
    }
    let terminating = if only_replace_failed_pods(&p.job) {
        p.counts.terminating
    } else {
        0
    };
    let diff = want_active - terminating - active;
    if diff <= 0 {
        return (PodWork::Nothing, ACTION_TRACKING);
    }
    let per_index = spec.backoff_limit_per_index.is_some();
    if !per_index {
        let wait = remaining_time(&p.new_backoff, p.now);
        if !wait.is_zero() {
            return (PodWork::Backoff(wait), ACTION_PODS_CREATED);
        }
    }
    let diff = usize::try_from(diff)
        .unwrap_or(0)
        .min(MAX_POD_CREATE_DELETE_PER_SYNC);
    let indexes: Vec<Option<i32>> = if crate::pods::is_indexed(&p.job) {
        let mut pending = indexes::first_pending_indexes(
            &p.job,
            &p.pods,
            &p.indexes.succeeded,
            p.indexes.failed.as_ref(),
            diff,
        );
        if per_index {
            let mut now_ok = Vec::new();
            let mut min_wait: Option<Duration> = None;
            for i in pending {
                let held = p.indexes.held.get(&i).map(Arc::as_ref);
                let wait = remaining_time_per_index(held, p.now);
                if wait.is_zero() {
                    now_ok.push(i);
                } else {
                    min_wait = Some(min_wait.map_or(wait, |m| m.min(wait)));
                }
            }
            if now_ok.is_empty()
                && let Some(wait) = min_wait
            {
                return (PodWork::Backoff(wait), ACTION_PODS_CREATED);
            }
            pending = now_ok;
        }
        pending.into_iter().map(Some).collect()
    } else {
        vec![None; diff]
    };
    if indexes.is_empty() {
        return (PodWork::Nothing, ACTION_PODS_CREATED);
    }
    (
        PodWork::Create(pods_to_create(p, &indexes)),
        ACTION_PODS_CREATED,
    )
}

/// Stage 3's decision.
#[derive(Debug, Clone)]
pub struct AfterPods {
    /// The counts once the pod work is accounted for.
    pub counts: Counts,
    /// The condition the sync goes on to write: stage 1's, none when a
    /// finishing Job's pods are not all gone yet, or `Complete` (or
    /// `SuccessCriteriaMet`) when the completions are reached.
    pub finished: Option<JobCondition>,
    /// The status with `manageJob`'s Suspended condition and start time.
    pub status: JobStatus,
    /// The Suspended condition changed (the counts must be written).
    pub suspend_changed: bool,
    pub events: Vec<JobEvent>,
    pub requeue: Requeue,
}

/// Stage 3: what the pod work achieved (`outcome`) comes to, then the
/// completion check and (when manageJob ran) the suspend bookkeeping on
/// `status`.
pub fn after_pods(p: &Prepared, m: &Managed, outcome: Outcome, status: &JobStatus) -> AfterPods {
    let mut counts = p.counts;
    let mut out = AfterPods {
        counts,
        finished: p.finished.clone(),
        status: status.clone(),
        suspend_changed: false,
        events: Vec::new(),
        requeue: Requeue::NONE,
    };
    match &m.work {
        PodWork::DeleteActive(_) | PodWork::Remove(_) => {
            counts.active -= outcome.deleted;
            counts.terminating += outcome.deleted;
            counts.ready -= outcome.deleted_ready;
        }
        PodWork::Create(pods) => {
            let n = i32::try_from(pods.len()).unwrap_or(i32::MAX);
            counts.active = counts.active + n - outcome.not_created;
        }
        PodWork::Backoff(wait) => out.requeue = Requeue::after((*wait).max(Duration::from_secs(1))),
        PodWork::Nothing => {}
    }
    out.counts = counts;
    if matches!(m.work, PodWork::DeleteActive(_)) {
        if outcome.deleted != p.counts.active || !p.satisfied {
            // Not finished yet: pods or finalizers may still be out there.
            out.finished = None;
        }
        return out;
    }
    let complete = match p.completions() {
        None => p.succeeded > 0 && counts.active == 0,
        Some(c) => p.succeeded >= c && counts.active == 0,
    };
    if complete {
        // Upstream's newSuccessCondition gives no reason or message
        // without JobSuccessPolicy.
        let (reason, message) = if p.config.success_policy {
            (
                REASON_COMPLETIONS_REACHED,
                "Reached expected number of succeeded pods",
            )
        } else {
            ("", "")
        };
        // Upstream newSuccessCondition: `Complete` at once when terminal
        // conditions are not delayed.
        let type_ = if p.config.delay_terminal() {
            "SuccessCriteriaMet"
        } else {
            "Complete"
        };
        out.finished = Some(new_job_condition(type_, "True", reason, message, p.now));
        return out;
    }
    if m.manage_called {
        suspend_bookkeeping(p, &mut out);
    }
    out
}

/// `manageJob`'s Suspended condition, its event and the start time it
/// clears (1.35+) or restarts.
fn suspend_bookkeeping(p: &Prepared, out: &mut AfterPods) {
    let now = p.now;
    let status = &mut out.status;
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let event = |reason: &str, message: &str| JobEvent {
        warning: false,
        reason: reason.into(),
        message: message.into(),
    };
    if suspended(&p.job) {
        if ensure_job_condition_status(
            conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        ) {
            out.suspend_changed = true;
            out.events.push(event("Suspended", "Job suspended"));
            // 1.35+: so the API server lets scheduling directives change
            // while the Job is suspended.
            if p.config.clear_start_time_on_suspend {
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
        out.suspend_changed = true;
        out.events.push(event("Resumed", "Job resumed"));
        // ActiveDeadlineSeconds counts continuous activity: restart it.
        status.start_time = Some(Time(now));
    }
}

/// Ready pods among `pods`.
pub fn count_ready(pods: &[Arc<CachedPod>]) -> i32 {
    i32::try_from(pods.iter().filter(|p| is_pod_ready(p)).count()).unwrap_or(i32::MAX)
}

//! Stages 4 and 5: finalizer tracking (KEP-2307). Terminated pods are first
//! written into `uncountedTerminatedPods`, then lose their finalizer, then
//! move into the counters; the terminal condition comes only when nothing
//! is uncounted and nothing is terminating.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_conditions::job::{ensure_job_condition_status, new_job_condition};
use kcm_pod::CachedPod;

use super::manage::PodWork;
use super::{JobCtx, MAX_UNCOUNTED_PODS, uid};
use crate::pod_failure_policy::{effective_policy, match_pod_failure_policy};
use crate::pods::{
    completion_index, has_tracking_finalizer, is_indexed, is_pod_failed, phase, valid_index,
};

/// The plan after stage 4.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// Write the status (flush #1) before removing finalizers.
    pub flush: bool,
    /// Pods whose tracking finalizer goes, in order.
    pub remove_finalizers: Vec<Arc<CachedPod>>,
    /// UIDs of claimed pods that still carry the finalizer (no removal in flight).
    pub uids_with_finalizer: HashSet<String>,
    /// Failures matched by a pod failure policy rule, per action, for the metric.
    pub policy_actions: BTreeMap<&'static str, u64>,
    /// 500 uncounted pods reached: the Job cannot finish this sync.
    pub reached_max: bool,
    /// Counters before this sync's writes, for the pods-finished metric.
    pub old_status: JobStatus,
}

/// Moves uncounted UIDs whose pod no longer has the finalizer into the
/// counters; true if anything moved (upstream cleanUncountedPodsWithoutFinalizers).
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut changed = false;
    for (list, counter) in [
        (&mut u.succeeded, &mut status.succeeded),
        (&mut u.failed, &mut status.failed),
    ] {
        let before = list.as_ref().map_or(0, Vec::len);
        let kept: Vec<String> = list
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|x| with_finalizer.contains(x))
            .collect();
        let moved = before - kept.len();
        if moved > 0 {
            changed = true;
            *counter = Some(
                counter
                    .unwrap_or(0)
                    .saturating_add(i32::try_from(moved).unwrap_or(i32::MAX)),
            );
        }
        *list = if kept.is_empty() { None } else { Some(kept) };
    }
    changed
}

fn can_remove_finalizer(ctx: &JobCtx, pod: &CachedPod, failed: bool) -> bool {
    if ctx.job.metadata.deletion_timestamp.is_some()
        || ctx.finished.is_some()
        || phase(pod) == "Succeeded"
    {
        return true;
    }
    if !failed {
        return false;
    }
    let per_index = ctx
        .job
        .spec
        .as_ref()
        .is_some_and(|s| s.backoff_limit_per_index.is_some());
    if per_index
        && let Some(i) = completion_index(pod)
        && ctx.held.get(&i).is_some_and(|h| uid(h) == uid(pod))
    {
        // Kept until the replacement pod exists, which copies its counts.
        return false;
    }
    true
}

fn is_success_criteria(c: Option<&JobCondition>) -> bool {
    c.is_some_and(|c| c.type_ == "SuccessCriteriaMet")
}

/// Stage 4: the first status write and the finalizer removals.
pub fn plan(ctx: &mut JobCtx, needs_flush: bool) -> Tracking {
    let mut flush = needs_flush;
    let indexed = is_indexed(&ctx.job);
    let mut pods = ctx.pods.clone();
    if indexed {
        pods.sort_by_key(|p| completion_index(p).unwrap_or(-1));
    }
    let uids_with_finalizer: HashSet<String> = pods
        .iter()
        .filter(|p| has_tracking_finalizer(p) && !ctx.expected_rm.contains(uid(p)))
        .map(|p| uid(p).to_string())
        .collect();
    let old_status = ctx.job.status.clone().unwrap_or_default();
    let status = ctx.job.status.get_or_insert_with(Default::default);
    if clean_uncounted(status, &uids_with_finalizer) {
        flush = true;
    }
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut un_succeeded = u.succeeded.take().unwrap_or_default();
    let mut un_failed = u.failed.take().unwrap_or_default();
    let policy = effective_policy(&ctx.job, ctx.config.pod_failure_policy).cloned();
    let mut remove = Vec::new();
    let mut new_succeeded_indexes = Vec::new();
    let mut policy_actions = BTreeMap::new();
    let mut reached_max = false;
    let failing = ctx.finished.is_some() && !is_success_criteria(ctx.finished.as_ref());
    for pod in &pods {
        if !has_tracking_finalizer(pod) || ctx.expected_rm.contains(uid(pod)) {
            continue;
        }
        let failed = is_pod_failed(pod, &ctx.job);
        if !can_remove_finalizer(ctx, pod, failed) {
            continue;
        }
        remove.push(Arc::clone(pod));
        let id = uid(pod).to_string();
        if phase(pod) == "Succeeded" && !ctx.uncounted_failed.contains(&id) {
            if indexed {
                if let Some(i) = valid_index(pod, &ctx.job)
                    && !ctx.prev_succeeded_indexes.has(i)
                {
                    new_succeeded_indexes.push(i);
                    flush = true;
                }
            } else if !ctx.uncounted_succeeded.contains(&id) {
                un_succeeded.push(id);
                flush = true;
            }
        } else if (failed || failing)
            && !ctx.uncounted_failed.contains(&id)
            && (!indexed || valid_index(pod, &ctx.job).is_some())
        {
            match &policy {
                Some(p) => {
                    let m = match_pod_failure_policy(Some(p), pod);
                    if let Some(a) = m.action {
                        *policy_actions.entry(a.as_str()).or_insert(0) += 1;
                    }
                    if m.counts_towards_backoff {
                        un_failed.push(id);
                        flush = true;
                    }
                }
                None => {
                    un_failed.push(id);
                    flush = true;
                }
            }
        }
        if new_succeeded_indexes.len() + un_succeeded.len() + un_failed.len() >= MAX_UNCOUNTED_PODS
        {
            reached_max = true;
            break;
        }
    }
    let status = ctx.job.status.get_or_insert_with(Default::default);
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    u.succeeded = (!un_succeeded.is_empty()).then_some(un_succeeded);
    u.failed = (!un_failed.is_empty()).then_some(un_failed);
    if indexed {
        new_succeeded_indexes.sort_unstable();
        ctx.succeeded_indexes = ctx
            .succeeded_indexes
            .with_ordered_indexes(&new_succeeded_indexes);
        let s = ctx.succeeded_indexes.to_string();
        if status.completed_indexes.as_deref().unwrap_or("") != s {
            flush = true;
        }
        status.succeeded = Some(ctx.succeeded_indexes.total());
        status.completed_indexes = Some(s);
        let failed = ctx.failed_indexes.as_ref().map(ToString::to_string);
        if status.failed_indexes != failed {
            status.failed_indexes = failed;
            flush = true;
        }
    }
    let now = ctx.now;
    if let Some(f) = ctx.finished.clone() {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let (reason, message) = (
            f.reason.clone().unwrap_or_default(),
            f.message.clone().unwrap_or_default(),
        );
        if f.type_ == "FailureTarget" {
            conditions.push(f);
            flush = true;
            ctx.finished = Some(new_job_condition("Failed", "True", &reason, &message, now));
        } else if f.type_ == "SuccessCriteriaMet" {
            if super::prepare::true_condition(conditions, "SuccessCriteriaMet").is_none() {
                conditions.push(f);
                flush = true;
            }
            ctx.finished = Some(new_job_condition(
                "Complete", "True", &reason, &message, now,
            ));
        }
    }
    Tracking {
        flush,
        remove_finalizers: remove,
        uids_with_finalizer,
        policy_actions,
        reached_max,
        old_status,
    }
}

/// Stage 2b, between the pod work's decision and its writes: when a met
/// success policy is about to delete the Job's remaining pods, the interim
/// `SuccessCriteriaMet` condition goes into the status first, and the
/// executor writes it before deleting (returns true). Upstream writes it
/// after the deletes, with the next flush; when that write fails, the next
/// sync sees no `SuccessCriteriaMet`, counts the deleted pods as failed
/// (terminating, not succeeded), checks the backoff limit before the
/// success policy and can end the Job Failed. Deliberate deviation: one
/// more status write per Job that ends by its success policy with pods
/// still running (found by the fault runs of `make chaos`).
pub fn record_success_before_deletes(ctx: &mut JobCtx, work: &PodWork) -> bool {
    let PodWork::DeleteActive(pods) = work else {
        return false;
    };
    let Some(f) = ctx
        .finished
        .clone()
        .filter(|f| f.type_ == "SuccessCriteriaMet")
    else {
        return false;
    };
    if pods.is_empty() {
        return false;
    }
    let status = ctx.job.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if super::prepare::true_condition(conditions, "SuccessCriteriaMet").is_some() {
        return false;
    }
    conditions.push(f);
    true
}

/// What stage 5 decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// Write the status now.
    pub flush: bool,
    /// The terminal condition was added by this write.
    pub finished: bool,
}

/// Stage 5, after the finalizer removals: `removed` are the UIDs whose
/// finalizer is gone (NotFound included). If some removal failed the caller
/// writes the status when `flush` says so and retries the sync.
pub fn finish(
    ctx: &mut JobCtx,
    tracking: &mut Tracking,
    removed: &HashSet<String>,
    removal_failed: bool,
) -> Finish {
    for id in removed {
        tracking.uids_with_finalizer.remove(id);
    }
    let status = ctx.job.status.get_or_insert_with(Default::default);
    let mut flush = clean_uncounted(status, &tracking.uids_with_finalizer);
    if removal_failed {
        return Finish {
            flush,
            finished: false,
        };
    }
    let finished = !tracking.reached_max && enact_finished(ctx);
    if finished {
        flush = true;
    }
    Finish { flush, finished }
}

/// Adds the terminal condition when nothing is uncounted or terminating.
fn enact_finished(ctx: &mut JobCtx) -> bool {
    let Some(f) = ctx.finished.clone() else {
        return false;
    };
    let status = ctx.job.status.get_or_insert_with(Default::default);
    let uncounted = status.uncounted_terminated_pods.as_ref().map_or(0, |u| {
        u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
    });
    // Terminating pods hold the terminal condition back only where it is
    // delayed (upstream enactJobFinished).
    if uncounted > 0 || (ctx.config.delay_terminal() && ctx.terminating > 0) {
        return false;
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let (reason, message) = (
        f.reason.clone().unwrap_or_default(),
        f.message.clone().unwrap_or_default(),
    );
    ensure_job_condition_status(conditions, &f.type_, "True", &reason, &message, ctx.now);
    if f.type_ == "Complete" {
        status.completion_time = f.last_transition_time.clone();
    }
    // A Job can finish without ever having started: suspended before its
    // first status write landed (a crash, a failed write) while a pod it
    // had created ran to the end. The API server refuses a finished Job
    // without `startTime` (JobManagedBy validation), so upstream's write
    // would be refused on every retry; start it now, which keeps
    // `completionTime >= startTime`. Deliberate deviation (docs/bad-input.md).
    // The one case the API server accepts, a suspended Job with zero
    // completions, keeps upstream's status (no startTime).
    let zero_while_suspended = super::prepare::suspended(&ctx.job) && ctx.completions() == Some(0);
    let status = ctx.job.status.get_or_insert_with(Default::default);
    if status.start_time.is_none() && !zero_while_suspended {
        status.start_time = Some(Time(ctx.now));
    }
    true
}

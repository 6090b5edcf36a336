//! Stages 5 and 6: finalizer tracking (KEP-2307). Terminated pods are first
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
use super::{MAX_UNCOUNTED_PODS, Prepared, uid};
use crate::pods::{completion_index, is_indexed, is_pod_failed, valid_index};

/// Stage 5's decision.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// The status with the uncounted UIDs, indexes and interim condition.
    pub status: JobStatus,
    /// The condition the sync may still add (interim conditions turned
    /// into their terminal one).
    pub finished: Option<JobCondition>,
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

fn can_remove_finalizer(
    p: &Prepared,
    finished: Option<&JobCondition>,
    pod: &CachedPod,
    failed: bool,
) -> bool {
    if p.job.metadata.deletion_timestamp.is_some()
        || finished.is_some()
        || pod.phase() == "Succeeded"
    {
        return true;
    }
    if !failed {
        return false;
    }
    let per_index = p
        .job
        .spec
        .as_ref()
        .is_some_and(|s| s.backoff_limit_per_index.is_some());
    if per_index
        && let Some(i) = completion_index(pod)
        && p.indexes.held.get(&i).is_some_and(|h| uid(h) == uid(pod))
    {
        // Kept until the replacement pod exists, which copies its counts.
        return false;
    }
    true
}

fn is_success_criteria(c: Option<&JobCondition>) -> bool {
    c.is_some_and(|c| c.type_ == "SuccessCriteriaMet")
}

/// Stage 5: the first status write and the finalizer removals, from the
/// status so far and the condition stage 3 left.
pub fn plan(
    p: &Prepared,
    finished: Option<&JobCondition>,
    status: &JobStatus,
    needs_flush: bool,
) -> Tracking {
    let mut flush = needs_flush;
    let indexed = is_indexed(&p.job);
    let mut pods = p.pods.clone();
    if indexed {
        pods.sort_by_key(|p| completion_index(p).unwrap_or(-1));
    }
    let uids_with_finalizer: HashSet<String> = pods
        .iter()
        .filter(|pod| pod.has_tracking_finalizer() && !p.expected_rm.contains(uid(pod)))
        .map(|pod| uid(pod).to_string())
        .collect();
    let old_status = status.clone();
    let mut status = status.clone();
    if clean_uncounted(&mut status, &uids_with_finalizer) {
        flush = true;
    }
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut un_succeeded = u.succeeded.take().unwrap_or_default();
    let mut un_failed = u.failed.take().unwrap_or_default();
    let mut remove = Vec::new();
    let mut new_succeeded_indexes = Vec::new();
    let mut policy_actions = BTreeMap::new();
    let mut reached_max = false;
    let failing = finished.is_some() && !is_success_criteria(finished);
    for pod in &pods {
        if !pod.has_tracking_finalizer() || p.expected_rm.contains(uid(pod)) {
            continue;
        }
        let failed = is_pod_failed(pod, &p.job);
        if !can_remove_finalizer(p, finished, pod, failed) {
            continue;
        }
        remove.push(Arc::clone(pod));
        let id = uid(pod).to_string();
        if pod.phase() == "Succeeded" && !p.uncounted.failed.contains(&id) {
            if indexed {
                if let Some(i) = valid_index(pod, &p.job)
                    && !p.indexes.prev_succeeded.has(i)
                {
                    new_succeeded_indexes.push(i);
                    flush = true;
                }
            } else if !p.uncounted.succeeded.contains(&id) {
                un_succeeded.push(id);
                flush = true;
            }
        } else if (failed || failing)
            && !p.uncounted.failed.contains(&id)
            && (!indexed || valid_index(pod, &p.job).is_some())
        {
            let m = p.verdicts.of(pod);
            if let Some(a) = m.action {
                *policy_actions.entry(a.as_str()).or_insert(0) += 1;
            }
            if m.counts_towards_backoff {
                un_failed.push(id);
                flush = true;
            }
        }
        if new_succeeded_indexes.len() + un_succeeded.len() + un_failed.len() >= MAX_UNCOUNTED_PODS
        {
            reached_max = true;
            break;
        }
    }
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    u.succeeded = (!un_succeeded.is_empty()).then_some(un_succeeded);
    u.failed = (!un_failed.is_empty()).then_some(un_failed);
    if indexed {
        new_succeeded_indexes.sort_unstable();
        let succeeded = p
            .indexes
            .succeeded
            .with_ordered_indexes(&new_succeeded_indexes);
        let s = succeeded.to_string();
        if status.completed_indexes.as_deref().unwrap_or("") != s {
            flush = true;
        }
        status.succeeded = Some(succeeded.total());
        status.completed_indexes = Some(s);
        let failed = p.indexes.failed.as_ref().map(ToString::to_string);
        if status.failed_indexes != failed {
            status.failed_indexes = failed;
            flush = true;
        }
    }
    let mut finished = finished.cloned();
    if let Some(f) = finished.clone() {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let (reason, message) = (
            f.reason.clone().unwrap_or_default(),
            f.message.clone().unwrap_or_default(),
        );
        if f.type_ == "FailureTarget" {
            conditions.push(f);
            flush = true;
            finished = Some(new_job_condition(
                "Failed", "True", &reason, &message, p.now,
            ));
        } else if f.type_ == "SuccessCriteriaMet" {
            if super::prepare::true_condition(conditions, "SuccessCriteriaMet").is_none() {
                conditions.push(f);
                flush = true;
            }
            finished = Some(new_job_condition(
                "Complete", "True", &reason, &message, p.now,
            ));
        }
    }
    Tracking {
        status,
        finished,
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
/// `SuccessCriteriaMet` condition goes into the status first: the status
/// the executor writes before deleting (None: nothing to write first).
/// Upstream writes it after the deletes, with the next flush; when that
/// write fails, the next sync sees no `SuccessCriteriaMet`, counts the
/// deleted pods as failed (terminating, not succeeded), checks the backoff
/// limit before the success policy and can end the Job Failed. Deliberate
/// deviation: one more status write per Job that ends by its success policy
/// with pods still running (found by the fault runs of `make chaos`).
pub fn success_first(p: &Prepared, work: &PodWork, status: &JobStatus) -> Option<JobStatus> {
    let PodWork::DeleteActive(pods) = work else {
        return None;
    };
    let f = p
        .finished
        .clone()
        .filter(|f| f.type_ == "SuccessCriteriaMet")?;
    if pods.is_empty() {
        return None;
    }
    let mut status = status.clone();
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if super::prepare::true_condition(conditions, "SuccessCriteriaMet").is_some() {
        return None;
    }
    conditions.push(f);
    Some(status)
}

/// Stage 6's decision.
#[derive(Debug, Clone)]
pub struct Finish {
    /// The status with the freed UIDs counted and, when allowed, the
    /// terminal condition.
    pub status: JobStatus,
    /// Write the status now.
    pub flush: bool,
    /// The terminal condition was added by this write.
    pub finished: bool,
}

/// Stage 6, after the finalizer removals: `removed` are the UIDs whose
/// finalizer is gone (NotFound included), `status` the status so far and
/// `terminating` the pods still terminating. If some removal failed the
/// executor writes the status when `flush` says so and retries the sync.
pub fn finish(
    p: &Prepared,
    tracking: &Tracking,
    status: &JobStatus,
    terminating: i32,
    removed: &HashSet<String>,
    removal_failed: bool,
) -> Finish {
    let mut with_finalizer = tracking.uids_with_finalizer.clone();
    for id in removed {
        with_finalizer.remove(id);
    }
    let mut status = status.clone();
    let mut flush = clean_uncounted(&mut status, &with_finalizer);
    if removal_failed {
        return Finish {
            status,
            flush,
            finished: false,
        };
    }
    let finished = !tracking.reached_max
        && tracking
            .finished
            .as_ref()
            .is_some_and(|f| enact_finished(p, f, &mut status, terminating));
    if finished {
        flush = true;
    }
    Finish {
        status,
        flush,
        finished,
    }
}

/// Adds the terminal condition `f` when nothing is uncounted or
/// terminating.
fn enact_finished(
    p: &Prepared,
    f: &JobCondition,
    status: &mut JobStatus,
    terminating: i32,
) -> bool {
    let uncounted = status.uncounted_terminated_pods.as_ref().map_or(0, |u| {
        u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
    });
    // Terminating pods hold the terminal condition back only where it is
    // delayed (upstream enactJobFinished).
    if uncounted > 0 || (p.config.delay_terminal() && terminating > 0) {
        return false;
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let (reason, message) = (
        f.reason.clone().unwrap_or_default(),
        f.message.clone().unwrap_or_default(),
    );
    ensure_job_condition_status(conditions, &f.type_, "True", &reason, &message, p.now);
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
    let zero_while_suspended = super::prepare::suspended(&p.job) && p.completions() == Some(0);
    if status.start_time.is_none() && !zero_while_suspended {
        status.start_time = Some(Time(p.now));
    }
    true
}

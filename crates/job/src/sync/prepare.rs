//! Stage 1 of a sync: counts and the terminal decision (upstream `syncJob`
//! up to the branch on the finished condition).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{JobCondition, UncountedTerminatedPods};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_conditions::job::new_job_condition;
use kcm_pod::CachedPod;

use super::{ACTION_RECONCILING, Config, Input, JobCtx, uid};
use crate::backoff::{finished_time, new_backoff_record, past_backoff_limit_on_failure};
use crate::indexes::{self, OrderedIntervals};
use crate::pod_failure_policy::{
    Action, effective_policy, get_fail_job_message, match_pod_failure_policy,
};
use crate::pods::{
    has_tracking_finalizer, is_active, is_indexed, is_pod_failed, is_ready, is_terminating, phase,
    valid_index,
};
use crate::success_policy::match_success_policy;

pub const REASON_POD_FAILURE_POLICY: &str = "PodFailurePolicy";
pub const REASON_BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const REASON_MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
pub const REASON_FAILED_INDEXES: &str = "FailedIndexes";
pub const REASON_COMPLETIONS_REACHED: &str = "CompletionsReached";

/// `spec.suspend` is true.
pub fn suspended(job: &k8s_openapi::api::batch::v1::Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

/// Does the failure of `p` count (not ignored by the pod failure policy)?
pub fn counts_as_failure(
    ctx_job: &k8s_openapi::api::batch::v1::Job,
    config: Config,
    p: &CachedPod,
) -> bool {
    match effective_policy(ctx_job, config.pod_failure_policy) {
        Some(policy) => match_pod_failure_policy(Some(policy), p).counts_towards_backoff,
        None => true,
    }
}

/// (counts_towards_backoff, fail_index) for the index helpers.
pub(crate) fn verdict(
    job: &k8s_openapi::api::batch::v1::Job,
    config: Config,
    p: &CachedPod,
) -> (bool, bool) {
    let m = match_pod_failure_policy(effective_policy(job, config.pod_failure_policy), p);
    (
        m.counts_towards_backoff,
        m.action == Some(Action::FailIndex),
    )
}

fn failure(type_: &str, reason: &str, message: &str, now: jiff::Timestamp) -> JobCondition {
    new_job_condition(type_, "True", reason, message, now)
}

/// Stage 1: everything `syncJob` computes before it acts on pods.
pub fn prepare(input: Input) -> JobCtx {
    let Input {
        job,
        pods,
        satisfied,
        expected_rm_finalizers,
        stored_backoff,
        now,
        config,
    } = input;
    let mut job = config.view(job);
    let status = job.status.get_or_insert_with(Default::default);
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(UncountedTerminatedPods::default)
        .clone();
    let uncounted_succeeded: HashSet<String> = uncounted
        .succeeded
        .unwrap_or_default()
        .into_iter()
        .collect();
    let uncounted_failed: HashSet<String> =
        uncounted.failed.unwrap_or_default().into_iter().collect();
    let active_pods: Vec<Arc<CachedPod>> = pods.iter().filter(|p| is_active(p)).cloned().collect();
    let ready =
        i32::try_from(active_pods.iter().filter(|p| is_ready(p)).count()).unwrap_or(i32::MAX);
    let terminating =
        i32::try_from(pods.iter().filter(|p| is_terminating(p)).count()).unwrap_or(i32::MAX);

    // New finished pods: tracked, not yet uncounted, not awaiting finalizer
    // removal, and (Indexed) with a valid index.
    let indexed = is_indexed(&job);
    let valid = |p: &CachedPod| {
        has_tracking_finalizer(p)
            && !expected_rm_finalizers.contains(uid(p))
            && (!indexed || valid_index(p, &job).is_some())
    };
    // A pod already recorded in uncounted.failed (it was terminating, counted
    // as failed, and the sync stopped before its finalizer went) that then
    // reached Succeeded stays a failure: tracking never moves it to
    // succeeded. Upstream still counts it here as well, so one pod could
    // count for both and complete the Job with `succeeded < completions`;
    // we exclude it (deviation, only reachable after an interrupted sync).
    let new_succeeded: Vec<&CachedPod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| {
            valid(p)
                && !uncounted_succeeded.contains(uid(p))
                && !uncounted_failed.contains(uid(p))
                && phase(p) == "Succeeded"
        })
        .collect();
    let new_failed: Vec<&CachedPod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| valid(p) && !uncounted_failed.contains(uid(p)) && is_pod_failed(p, &job))
        .collect();
    let status = job.status.clone().unwrap_or_default();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let succeeded = status
        .succeeded
        .unwrap_or(0)
        .saturating_add(count(new_succeeded.len()))
        .saturating_add(count(uncounted_succeeded.len()));
    let counted_new_failed = new_failed
        .iter()
        .filter(|p| counts_as_failure(&job, config, p))
        .count();
    let failed = status
        .failed
        .unwrap_or(0)
        .saturating_add(count(counted_new_failed))
        .saturating_add(count(uncounted_failed.len()));
    if status.start_time.is_none()
        && !suspended(&job)
        && let Some(s) = job.status.as_mut()
    {
        s.start_time = Some(Time(now));
    }
    let new_backoff = new_backoff_record(stored_backoff.as_ref(), &new_succeeded, &new_failed);

    let mut ctx = JobCtx {
        active: count(active_pods.len()),
        job,
        pods,
        active_pods,
        ready,
        terminating,
        uncounted_succeeded,
        uncounted_failed,
        expected_rm: expected_rm_finalizers,
        succeeded,
        failed,
        new_backoff,
        finished: None,
        prev_succeeded_indexes: OrderedIntervals::default(),
        succeeded_indexes: OrderedIntervals::default(),
        failed_indexes: None,
        held: Default::default(),
        satisfied,
        now,
        config,
        requeue_after: None,
        action: ACTION_RECONCILING,
        manage_called: false,
        suspend_changed: false,
        events: Vec::new(),
        pod_group: None,
    };
    decide_finished(&mut ctx);
    ctx
}

/// The first condition of `type_` whose status is `True`.
///
/// Deliberate deviation from upstream, which looks only at the *first*
/// condition of a type (`findConditionByType`): a hand-edited
/// `FailureTarget` (or `SuccessCriteriaMet`) with status `False` placed
/// before the controller's own `True` one hid it, so every later sync
/// appended another `True` condition and wrote the status again, about once
/// a second for as long as pods were terminating (the list grows without
/// bound). The API server's own status validation already reads "any
/// condition of the type is True" (`IsConditionTrue`); so does this.
pub fn true_condition<'a>(conditions: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The terminal decision in upstream's order (§2.4).
fn decide_finished(ctx: &mut JobCtx) {
    let now = ctx.now;
    let spec = ctx.job.spec.clone().unwrap_or_default();
    let conditions = ctx
        .job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let is_true = |t: &str| true_condition(&conditions, t).cloned();
    let failure_type = ctx.config.failure_type();
    // Upstream hasSuccessCriteriaMetCondition: read only where the
    // condition can be the controller's.
    if ctx.config.success_policy || ctx.config.delay_terminal() {
        ctx.finished = is_true("SuccessCriteriaMet");
    }
    if ctx.finished.is_none() {
        if let Some(ft) = is_true("FailureTarget") {
            let (r, m) = (
                ft.reason.unwrap_or_default(),
                ft.message.unwrap_or_default(),
            );
            ctx.finished = Some(failure("Failed", &r, &m, now));
        } else {
            let pods: Vec<&CachedPod> = ctx.pods.iter().map(Arc::as_ref).collect();
            if let Some(msg) = get_fail_job_message(&ctx.job, &pods, ctx.config.pod_failure_policy)
            {
                ctx.finished = Some(failure(
                    "FailureTarget",
                    REASON_POD_FAILURE_POLICY,
                    &msg,
                    now,
                ));
            }
        }
    }
    if ctx.finished.is_none() {
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        let pods: Vec<&CachedPod> = ctx.pods.iter().map(Arc::as_ref).collect();
        if ctx.failed > backoff_limit || past_backoff_limit_on_failure(&ctx.job, &pods) {
            ctx.finished = Some(failure(
                failure_type,
                REASON_BACKOFF_LIMIT_EXCEEDED,
                "Job has reached the specified backoff limit",
                now,
            ));
        } else if past_active_deadline(ctx) {
            ctx.finished = Some(failure(
                failure_type,
                REASON_DEADLINE_EXCEEDED,
                "Job was active longer than specified deadline",
                now,
            ));
        } else if let (Some(ads), false) = (spec.active_deadline_seconds, suspended(&ctx.job)) {
            let elapsed = elapsed_since_start(ctx);
            let deadline = Duration::from_secs(u64::try_from(ads).unwrap_or(0));
            ctx.requeue(deadline.saturating_sub(elapsed));
        }
    }
    if is_indexed(&ctx.job) {
        let (prev, merged) = indexes::succeeded_indexes(&ctx.job, &ctx.pods);
        ctx.succeeded = merged.total();
        ctx.prev_succeeded_indexes = prev;
        ctx.succeeded_indexes = merged;
        if spec.backoff_limit_per_index.is_some() {
            let job = ctx.job.clone();
            let config = ctx.config;
            let v = move |p: &CachedPod| verdict(&job, config, p);
            let failed = indexes::failed_indexes(&ctx.job, &ctx.pods, &v);
            if ctx.finished.is_none() {
                let completions = spec.completions.unwrap_or(0);
                if spec.max_failed_indexes.is_some_and(|m| failed.total() > m) {
                    ctx.finished = Some(failure(
                        failure_type,
                        REASON_MAX_FAILED_INDEXES_EXCEEDED,
                        "Job has exceeded the specified maximal number of failed indexes",
                        now,
                    ));
                } else if failed.total() > 0
                    && failed.total().saturating_add(ctx.succeeded_indexes.total()) >= completions
                {
                    ctx.finished = Some(failure(
                        failure_type,
                        REASON_FAILED_INDEXES,
                        "Job has failed indexes",
                        now,
                    ));
                }
            }
            let finish = |p: &CachedPod| Some(finished_time(p));
            ctx.held = indexes::pods_with_delayed_deletion_per_index(
                &ctx.job,
                &ctx.pods,
                &ctx.succeeded_indexes,
                &failed,
                &ctx.expected_rm,
                &finish,
            )
            .into_iter()
            .map(|(i, p)| (i, Arc::clone(p)))
            .collect();
            ctx.failed_indexes = Some(failed);
        }
        if ctx.finished.is_none()
            && let Some((reason, message)) = match_success_policy(&ctx.job, &ctx.succeeded_indexes)
        {
            ctx.finished = Some(new_job_condition(
                "SuccessCriteriaMet",
                "True",
                &reason,
                &message,
                now,
            ));
        }
    }
}

fn elapsed_since_start(ctx: &JobCtx) -> Duration {
    let Some(start) = ctx.job.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return Duration::ZERO;
    };
    let secs = ctx.now.duration_since(start.0).as_secs_f64();
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
}

/// ADS set, started, not suspended, and at least ADS seconds since start.
fn past_active_deadline(ctx: &JobCtx) -> bool {
    let Some(ads) = ctx
        .job
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
    else {
        return false;
    };
    if suspended(&ctx.job)
        || ctx
            .job
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
    {
        return false;
    }
    elapsed_since_start(ctx) >= Duration::from_secs(u64::try_from(ads).unwrap_or(0))
}

/// Bad input through the sync stages, on the in-memory executor of
/// `sync::tests` (issue 14; docs/bad-input.md).
#[cfg(test)]
#[path = "tests/bad_input.rs"]
mod bad_input_tests;

//! Stage 1 of a sync: counts and the terminal decision (upstream `syncJob`
//! up to the branch on the finished condition).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, UncountedTerminatedPods};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_conditions::job::new_job_condition;
use kcm_conditions::pod::{is_pod_active, is_pod_ready, is_pod_terminating};
use kcm_pod::CachedPod;

use super::{Config, Counts, Indexes, Input, Prepared, Requeue, Uncounted, Verdicts, uid};
use crate::backoff::{finished_time, new_backoff_record, past_backoff_limit_on_failure};
use crate::indexes;
use crate::pods::{is_indexed, is_pod_failed, valid_index};
use crate::success_policy::match_success_policy;

pub const REASON_POD_FAILURE_POLICY: &str = "PodFailurePolicy";
pub const REASON_BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const REASON_MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
pub const REASON_FAILED_INDEXES: &str = "FailedIndexes";
pub const REASON_COMPLETIONS_REACHED: &str = "CompletionsReached";

/// `spec.suspend` is true.
pub fn suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

fn failure(type_: &str, reason: &str, message: &str, now: jiff::Timestamp) -> JobCondition {
    new_job_condition(type_, "True", reason, message, now)
}

/// Stage 1: everything `syncJob` computes before it acts on pods.
pub fn prepare(input: Input) -> Prepared {
    let Input {
        job,
        pods,
        satisfied,
        expected_rm_finalizers,
        stored_backoff,
        now,
        config,
        pod_group,
    } = input;
    let mut job = config.view(job);
    let verdicts = Verdicts::new(&job);
    let status = job.status.get_or_insert_with(Default::default);
    let stored = status
        .uncounted_terminated_pods
        .get_or_insert_with(UncountedTerminatedPods::default)
        .clone();
    let uncounted = Uncounted {
        succeeded: stored.succeeded.unwrap_or_default().into_iter().collect(),
        failed: stored.failed.unwrap_or_default().into_iter().collect(),
    };
    let active_pods: Vec<Arc<CachedPod>> =
        pods.iter().filter(|p| is_pod_active(p)).cloned().collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let counts = Counts {
        active: count(active_pods.len()),
        ready: count(active_pods.iter().filter(|p| is_pod_ready(p)).count()),
        terminating: count(pods.iter().filter(|p| is_pod_terminating(p)).count()),
    };

    // New finished pods: tracked, not yet uncounted, not awaiting finalizer
    // removal, and (Indexed) with a valid index.
    let indexed = is_indexed(&job);
    let valid = |p: &CachedPod| {
        p.has_tracking_finalizer()
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
                && !uncounted.succeeded.contains(uid(p))
                && !uncounted.failed.contains(uid(p))
                && p.phase() == "Succeeded"
        })
        .collect();
    let new_failed: Vec<&CachedPod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| valid(p) && !uncounted.failed.contains(uid(p)) && is_pod_failed(p, &job))
        .collect();
    let status = job.status.clone().unwrap_or_default();
    let succeeded = status
        .succeeded
        .unwrap_or(0)
        .saturating_add(count(new_succeeded.len()))
        .saturating_add(count(uncounted.succeeded.len()));
    let counted_new_failed = new_failed.iter().filter(|p| verdicts.counts(p)).count();
    let failed = status
        .failed
        .unwrap_or(0)
        .saturating_add(count(counted_new_failed))
        .saturating_add(count(uncounted.failed.len()));
    if status.start_time.is_none()
        && !suspended(&job)
        && let Some(s) = job.status.as_mut()
    {
        s.start_time = Some(Time(now));
    }
    let new_backoff = new_backoff_record(stored_backoff.as_ref(), &new_succeeded, &new_failed);

    let facts = Facts {
        job: &job,
        pods: &pods,
        verdicts: &verdicts,
        expected_rm: &expected_rm_finalizers,
        failed,
        now,
        config: &config,
    };
    let decision = decide_finished(&facts);
    Prepared {
        succeeded: decision.succeeded.unwrap_or(succeeded),
        finished: decision.finished,
        indexes: decision.indexes,
        requeue: decision.requeue,
        job,
        pods,
        active_pods,
        counts,
        uncounted,
        expected_rm: expected_rm_finalizers,
        failed,
        new_backoff,
        verdicts,
        satisfied,
        now,
        config,
        pod_group,
    }
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

/// What the terminal decision reads.
struct Facts<'a> {
    job: &'a Job,
    pods: &'a [Arc<CachedPod>],
    verdicts: &'a Verdicts,
    expected_rm: &'a HashSet<String>,
    failed: i32,
    now: jiff::Timestamp,
    config: &'a Config,
}

/// What the terminal decision found.
#[derive(Default)]
struct Decision {
    finished: Option<JobCondition>,
    /// Indexed Jobs count succeeded indexes, not pods.
    succeeded: Option<i32>,
    indexes: Indexes,
    requeue: Requeue,
}

/// The terminal decision in upstream's order (§2.4).
fn decide_finished(f: &Facts<'_>) -> Decision {
    let (job, now) = (f.job, f.now);
    let spec = job.spec.clone().unwrap_or_default();
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let is_true = |t: &str| true_condition(&conditions, t).cloned();
    let failure_type = f.config.failure_type();
    let mut d = Decision::default();
    // Upstream hasSuccessCriteriaMetCondition: read only where the
    // condition can be the controller's.
    if f.config.success_policy || f.config.delay_terminal() {
        d.finished = is_true("SuccessCriteriaMet");
    }
    let pods: Vec<&CachedPod> = f.pods.iter().map(Arc::as_ref).collect();
    if d.finished.is_none() {
        if let Some(ft) = is_true("FailureTarget") {
            let (r, m) = (
                ft.reason.unwrap_or_default(),
                ft.message.unwrap_or_default(),
            );
            d.finished = Some(failure("Failed", &r, &m, now));
        } else if let Some(msg) = f.verdicts.fail_job_message(job, &pods) {
            d.finished = Some(failure(
                "FailureTarget",
                REASON_POD_FAILURE_POLICY,
                &msg,
                now,
            ));
        }
    }
    if d.finished.is_none() {
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        if f.failed > backoff_limit || past_backoff_limit_on_failure(job, &pods) {
            d.finished = Some(failure(
                failure_type,
                REASON_BACKOFF_LIMIT_EXCEEDED,
                "Job has reached the specified backoff limit",
                now,
            ));
        } else if past_active_deadline(job, now) {
            d.finished = Some(failure(
                failure_type,
                REASON_DEADLINE_EXCEEDED,
                "Job was active longer than specified deadline",
                now,
            ));
        } else if let (Some(ads), false) = (spec.active_deadline_seconds, suspended(job)) {
            let deadline = Duration::from_secs(u64::try_from(ads).unwrap_or(0));
            d.requeue = Requeue::after(deadline.saturating_sub(elapsed_since_start(job, now)));
        }
    }
    if !is_indexed(job) {
        return d;
    }
    let (prev, merged) = indexes::succeeded_indexes(job, f.pods);
    d.succeeded = Some(merged.total());
    d.indexes.prev_succeeded = prev;
    d.indexes.succeeded = merged;
    if spec.backoff_limit_per_index.is_some() {
        let v = |p: &CachedPod| f.verdicts.index_verdict(p);
        let failed = indexes::failed_indexes(job, f.pods, &v);
        if d.finished.is_none() {
            let completions = spec.completions.unwrap_or(0);
            if spec.max_failed_indexes.is_some_and(|m| failed.total() > m) {
                d.finished = Some(failure(
                    failure_type,
                    REASON_MAX_FAILED_INDEXES_EXCEEDED,
                    "Job has exceeded the specified maximal number of failed indexes",
                    now,
                ));
            } else if failed.total() > 0
                && failed.total().saturating_add(d.indexes.succeeded.total()) >= completions
            {
                d.finished = Some(failure(
                    failure_type,
                    REASON_FAILED_INDEXES,
                    "Job has failed indexes",
                    now,
                ));
            }
        }
        let finish = |p: &CachedPod| Some(finished_time(p));
        d.indexes.held = indexes::pods_with_delayed_deletion_per_index(
            job,
            f.pods,
            &d.indexes.succeeded,
            &failed,
            f.expected_rm,
            &finish,
        )
        .into_iter()
        .map(|(i, p)| (i, Arc::clone(p)))
        .collect();
        d.indexes.failed = Some(failed);
    }
    if d.finished.is_none()
        && let Some((reason, message)) = match_success_policy(job, &d.indexes.succeeded)
    {
        d.finished = Some(new_job_condition(
            "SuccessCriteriaMet",
            "True",
            &reason,
            &message,
            now,
        ));
    }
    d
}

fn elapsed_since_start(job: &Job, now: jiff::Timestamp) -> Duration {
    let Some(start) = job.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return Duration::ZERO;
    };
    let secs = now.duration_since(start.0).as_secs_f64();
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
}

/// ADS set, started, not suspended, and at least ADS seconds since start.
fn past_active_deadline(job: &Job, now: jiff::Timestamp) -> bool {
    let Some(ads) = job.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    if suspended(job)
        || job
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
    {
        return false;
    }
    elapsed_since_start(job, now) >= Duration::from_secs(u64::try_from(ads).unwrap_or(0))
}

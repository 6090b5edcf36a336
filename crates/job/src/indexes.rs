//! Completion-index bookkeeping of Indexed Jobs (upstream
//! indexed_job_utils.go): succeeded and failed index sets, the indexes to
//! create next, the failed pods held back for per-index back-off, duplicate
//! removal, and the shape of created pods (generateName, env var).
//!
//! Everything here is pure: pod-failure-policy decisions, pod finish times and
//! the `ActivePods` deletion order come in as closures from the caller.
//!
//! CachedPod slices are generic over `P: Borrow<CachedPod>`, so `&[Arc<CachedPod>]`, `&[CachedPod]`
//! and `&[&CachedPod]` all work; selections are returned as references into the
//! input slice.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec};
use kcm_conditions::pod::{is_pod_active, is_pod_terminating};
use kcm_pod::CachedPod;

use crate::pods::{
    JOB_COMPLETION_INDEX, JOB_COMPLETION_INDEX_ENV, completion_index, completions,
    index_failure_count, index_ignored_failure_count, is_pod_failed, only_replace_failed_pods,
    valid_index,
};

mod intervals;
#[cfg(test)]
mod tests;

pub use intervals::OrderedIntervals;

/// Longest `generateName` that still leaves room for the 5 random characters
/// the API server appends within the 63-character name limit (upstream
/// `names.MaxGeneratedNameLength`).
pub const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// Longest DNS-1123 subdomain, the limit a pod name prefix is checked against.
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

/// Sort key standing in for upstream's "unknown index" (−1): such pods sort
/// before every real index.
const UNKNOWN_INDEX: i32 = -1;

fn has_pod_failure_policy(job: &Job) -> bool {
    job.spec
        .as_ref()
        .is_some_and(|s| s.pod_failure_policy.is_some())
}

fn backoff_limit_per_index(job: &Job) -> Option<i32> {
    job.spec.as_ref().and_then(|s| s.backoff_limit_per_index)
}

fn sorted_vec(set: BTreeSet<i32>) -> Vec<i32> {
    set.into_iter().collect()
}

/// Indexes (known, any value) of the pods passing `keep`.
fn indexes_of<P: Borrow<CachedPod>>(
    pods: &[P],
    keep: impl Fn(&CachedPod) -> bool,
) -> BTreeSet<i32> {
    pods.iter()
        .map(Borrow::borrow)
        .filter(|p| keep(p))
        .filter_map(completion_index)
        .collect()
}

/// Upstream `calculateSucceededIndexes`: returns `(prev, merged)` where `prev`
/// is `status.completedIndexes` parsed against `spec.completions` and `merged`
/// adds the indexes of pods that are `Succeeded`, have a valid index and still
/// carry the tracking finalizer (i.e. are not counted yet).
pub fn succeeded_indexes<P: Borrow<CachedPod>>(
    job: &Job,
    pods: &[P],
) -> (OrderedIntervals, OrderedIntervals) {
    let prev_str = job
        .status
        .as_ref()
        .and_then(|s| s.completed_indexes.as_deref())
        .unwrap_or("");
    let prev = OrderedIntervals::parse(prev_str, completions(job));
    let new: BTreeSet<i32> = pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p| p.phase() == "Succeeded" && p.has_tracking_finalizer())
        .filter_map(|p| valid_index(p, job))
        .collect();
    let merged = prev.with_ordered_indexes(&sorted_vec(new));
    (prev, merged)
}

/// The pod-failure-policy verdict for one failed pod, supplied by the caller
/// as `(counts_towards_backoff, fail_index)`:
///
/// * `counts_towards_backoff` — the failure counts against
///   `backoffLimitPerIndex` (false only for an `Ignore` match; upstream
///   `matchPodFailurePolicy`'s second result);
/// * `fail_index` — the matched rule's action is `FailIndex`.
///
/// The closure is consulted only when `spec.podFailurePolicy` is set and only
/// for pods that are failed ([`is_pod_failed`]); without a policy the verdict
/// is `(true, false)` and the closure is not called.
pub type FailureVerdict<'a> = &'a dyn Fn(&CachedPod) -> (bool, bool);

/// Upstream `isIndexFailed`: the pod is failed and either the policy says
/// `FailIndex`, or the failure counts and the pod's
/// `job-index-failure-count` annotation is `>= backoffLimitPerIndex` (so an
/// index fails on its `backoffLimitPerIndex + 1`-th counted failure).
/// Without `backoffLimitPerIndex` only `FailIndex` can fail an index.
pub fn is_index_failed(job: &Job, pod: &CachedPod, verdict: FailureVerdict<'_>) -> bool {
    if !is_pod_failed(pod, job) {
        return false;
    }
    let counts = if has_pod_failure_policy(job) {
        let (counts, fail_index) = verdict(pod);
        if fail_index {
            return true;
        }
        counts
    } else {
        true
    };
    counts && backoff_limit_per_index(job).is_some_and(|limit| index_failure_count(pod) >= limit)
}

/// Upstream `calculateFailedIndexes`: `status.failedIndexes` (if set) parsed
/// against `spec.completions`, plus the valid indexes of pods that still carry
/// the tracking finalizer and satisfy [`is_index_failed`].
pub fn failed_indexes<P: Borrow<CachedPod>>(
    job: &Job,
    pods: &[P],
    verdict: FailureVerdict<'_>,
) -> OrderedIntervals {
    let prev = job
        .status
        .as_ref()
        .and_then(|s| s.failed_indexes.as_deref())
        .map(|s| OrderedIntervals::parse(s, completions(job)))
        .unwrap_or_default();
    let new: BTreeSet<i32> = pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p| p.has_tracking_finalizer())
        .filter_map(|p| valid_index(p, job).filter(|_| is_index_failed(job, p, verdict)))
        .collect();
    prev.with_ordered_indexes(&sorted_vec(new))
}

/// Upstream `firstPendingIndexes`: up to `count` smallest indexes in
/// `[0, completions)` that are not succeeded, not held by an active pod of
/// `pods`, not in `failed` and — only with `podReplacementPolicy: Failed` —
/// not held by a terminating pod. `pods` are all pods claimed by the Job
/// (active and terminating ones are picked out here).
pub fn first_pending_indexes<P: Borrow<CachedPod>>(
    job: &Job,
    pods: &[P],
    succeeded: &OrderedIntervals,
    failed: Option<&OrderedIntervals>,
    count: usize,
) -> Vec<i32> {
    let completions = completions(job);
    if count == 0 || completions <= 0 {
        return Vec::new();
    }
    let active = indexes_of(pods, is_pod_active);
    let mut taken = succeeded.with_ordered_indexes(&sorted_vec(active));
    if only_replace_failed_pods(job) {
        let terminating = indexes_of(pods, is_pod_terminating);
        taken = taken.with_ordered_indexes(&sorted_vec(terminating));
    }
    if let Some(failed) = failed {
        taken = taken.merge(failed);
    }
    let limit = i64::from(completions);
    let cap = count.min(usize::try_from(completions).unwrap_or(0));
    let mut out = Vec::with_capacity(cap);
    let mut candidate: i64 = 0;
    let emit_below = |bound: i64, candidate: &mut i64, out: &mut Vec<i32>| {
        while *candidate < limit && out.len() < count && *candidate < bound {
            let Ok(c) = i32::try_from(*candidate) else {
                break;
            };
            out.push(c);
            *candidate += 1;
        }
    };
    for &(first, last) in taken.intervals() {
        emit_below(i64::from(first), &mut candidate, &mut out);
        candidate = candidate.max(i64::from(last) + 1);
    }
    emit_below(limit, &mut candidate, &mut out);
    out
}

/// Upstream `getPodsWithDelayedDeletionPerIndex` (§4.8): for every index that
/// is not in `succeeded`, not in `failed` and not held by an active pod, the
/// failed pod whose finalizer is kept until its replacement exists, so that the
/// replacement can inherit its failure counts.
///
/// Candidates are the pods with the tracking finalizer, whose UID is not in
/// `expected_rm_finalizers` (finalizer removal already under way), with a
/// valid index, that are failed ([`is_pod_failed`]). They are visited in slice
/// order: the first becomes the index's pick; a later one replaces the pick
/// when its absolute count (failure + ignored-failure annotations) is `>=` the
/// pick's and its finish time is not before the pick's. `finish_time` is the
/// caller's back-off finish time; `None` orders before every timestamp (as Go's
/// zero time does).
pub fn pods_with_delayed_deletion_per_index<'a, P: Borrow<CachedPod>>(
    job: &Job,
    pods: &'a [P],
    succeeded: &OrderedIntervals,
    failed: &OrderedIntervals,
    expected_rm_finalizers: &HashSet<String>,
    finish_time: &dyn Fn(&CachedPod) -> Option<Timestamp>,
) -> BTreeMap<i32, &'a P> {
    let active = indexes_of(pods, is_pod_active);
    let absolute = |p: &CachedPod| {
        i64::from(index_failure_count(p)) + i64::from(index_ignored_failure_count(p))
    };
    let mut held: BTreeMap<i32, &'a P> = BTreeMap::new();
    for entry in pods {
        let p: &CachedPod = entry.borrow();
        let uid = p.uid();
        if !p.has_tracking_finalizer() || expected_rm_finalizers.contains(uid) {
            continue;
        }
        let Some(ix) = valid_index(p, job) else {
            continue;
        };
        if !is_pod_failed(p, job) || succeeded.has(ix) || failed.has(ix) || active.contains(&ix) {
            continue;
        }
        match held.get(&ix) {
            Some(pick) => {
                let pick: &CachedPod = (*pick).borrow();
                if absolute(pick) <= absolute(p) && finish_time(p) >= finish_time(pick) {
                    held.insert(ix, entry);
                }
            }
            None => {
                held.insert(ix, entry);
            }
        }
    }
    held
}

/// Upstream `appendDuplicatedIndexPodsForRemoval` for an Indexed Job's active
/// pods; returns `(to_remove, left)`.
///
/// Pods are ordered by completion index (stable; unknown index first). Pods
/// with an unknown index and pods with index `>= completions` are removed; of
/// each group sharing an index, the group is sorted with `active_order`
/// (upstream `ActivePods`, "delete first" first) and all but the last are
/// removed, the last is kept in `left`. The order of `to_remove` follows
/// upstream: unknown-index pods, duplicates index by index except the highest
/// valid index, out-of-range pods, then the highest valid index's duplicates.
pub fn duplicated_index_pods_for_removal<'a, P: Borrow<CachedPod>>(
    job: &Job,
    active_pods: &'a [P],
    active_order: &dyn Fn(&CachedPod, &CachedPod) -> Ordering,
) -> (Vec<&'a P>, Vec<&'a P>) {
    let completions = completions(job);
    let key = |p: &P| completion_index(p.borrow()).unwrap_or(UNKNOWN_INDEX);
    let mut sorted: Vec<&'a P> = active_pods.iter().collect();
    sorted.sort_by_key(|p| key(p));
    let cut = sorted
        .iter()
        .position(|p| key(p) >= completions)
        .unwrap_or(sorted.len());
    let (in_range, out_of_range) = sorted.split_at(cut);

    let mut rm: Vec<&'a P> = Vec::new();
    let mut left: Vec<&'a P> = Vec::new();
    let mut split_group = |group: &[&'a P], rm: &mut Vec<&'a P>| {
        let Some(first) = group.first() else { return };
        if key(first) == UNKNOWN_INDEX {
            rm.extend_from_slice(group);
            return;
        }
        let mut group = group.to_vec();
        group.sort_by(|a, b| active_order((*a).borrow(), (*b).borrow()));
        if let Some(keep) = group.pop() {
            rm.extend(group);
            left.push(keep);
        }
    };
    let groups: Vec<&[&'a P]> = in_range.chunk_by(|a, b| key(a) == key(b)).collect();
    let (last_group, earlier) = match groups.split_last() {
        Some((last, earlier)) => (Some(*last), earlier),
        None => (None, &groups[..]),
    };
    for group in earlier {
        split_group(group, &mut rm);
    }
    rm.extend_from_slice(out_of_range);
    if let Some(group) = last_group {
        split_group(group, &mut rm);
    }
    (rm, left)
}

/// Upstream `getNewIndexFailureCounts`: the `(job-index-failure-count,
/// job-index-ignored-failure-count)` values for the replacement of `held_pod`
/// (see [`pods_with_delayed_deletion_per_index`]). Without a held pod: `(0, 0)`.
/// Otherwise the held pod's counts, with the failure count incremented when
/// its failure counts (`counts_towards`, forced true when the Job has no
/// pod failure policy) and the ignored count incremented otherwise.
/// Increments saturate at `i32::MAX`.
pub fn new_index_failure_counts(
    job: &Job,
    held_pod: Option<&CachedPod>,
    counts_towards: bool,
) -> (i32, i32) {
    let Some(p) = held_pod else {
        return (0, 0);
    };
    let (failed, ignored) = (index_failure_count(p), index_ignored_failure_count(p));
    if counts_towards || !has_pod_failure_policy(job) {
        (failed.saturating_add(1), ignored)
    } else {
        (failed, ignored.saturating_add(1))
    }
}

/// Upstream `podGenerateNameWithIndex`: `"<jobName>-<index>-"`; when longer
/// than [`MAX_GENERATED_NAME_LENGTH`], the job-name part is cut so that the
/// whole prefix is exactly that long and still ends in `-<index>-`.
pub fn pod_generate_name_with_index(job_name: &str, index: i32) -> String {
    let suffix = format!("-{index}-");
    if job_name.len() + suffix.len() <= MAX_GENERATED_NAME_LENGTH {
        return format!("{job_name}{suffix}");
    }
    let mut keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(suffix.len());
    // Upstream cuts bytes; valid Job names are ASCII, so backing off to a
    // char boundary only matters for names the API server would refuse.
    while !job_name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &job_name[..keep])
}

/// Upstream `getPodsPrefix` for NonIndexed pods: `"<jobName>-"`, or just
/// `"<jobName>"` when the dashed form is not a valid name prefix (the API
/// server truncates the base to [`MAX_GENERATED_NAME_LENGTH`] itself).
pub fn pod_generate_name(job_name: &str) -> String {
    let prefix = format!("{job_name}-");
    if is_valid_name_prefix(&prefix) {
        prefix
    } else {
        job_name.to_string()
    }
}

/// Upstream `NameIsDNSSubdomain(prefix, true)`: a trailing dash is masked
/// (upstream drops the dash *and* the character before it, then appends `a`)
/// and the result must be a DNS-1123 subdomain.
fn is_valid_name_prefix(prefix: &str) -> bool {
    if prefix.len() > 1 && prefix.ends_with('-') {
        match prefix.get(..prefix.len() - 2) {
            Some(head) => is_dns1123_subdomain(&format!("{head}a")),
            None => false, // non-ASCII before the dash: never a valid name
        }
    } else {
        is_dns1123_subdomain(prefix)
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` labels joined by `.`, at most 253 bytes.
fn is_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    s.len() <= DNS1123_SUBDOMAIN_MAX_LENGTH && s.split('.').all(label_ok)
}

/// Upstream `addCompletionIndexEnvVariables`: every init container and every
/// container without an env var named `JOB_COMPLETION_INDEX` gets one that
/// reads the pod's completion-index *label* through the downward API
/// (`PodIndexLabel` is GA and locked on in 1.34).
pub fn add_completion_index_env_var(spec: &mut PodSpec) {
    let field_path = format!("metadata.labels['{JOB_COMPLETION_INDEX}']");
    let add = |c: &mut Container| {
        let env = c.env.get_or_insert_with(Vec::new);
        if env.iter().any(|v| v.name == JOB_COMPLETION_INDEX_ENV) {
            return;
        }
        env.push(EnvVar {
            name: JOB_COMPLETION_INDEX_ENV.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: field_path.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    };
    spec.init_containers.iter_mut().flatten().for_each(&add);
    spec.containers.iter_mut().for_each(&add);
}

//! The Job's history replayed through the controller's own first stage
//! ([`crate::sync::prepare`]): terminal pods are fed in the order they
//! finished, one sync per pod, from a status that holds only what the pods
//! still in the API cannot tell (failures of pods that are gone).
//!
//! Replaying the stored policy and a proposed one from the same start makes
//! their difference the policy's alone, not an artefact of reconstruction.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use kcm_pod::CachedPod;

use crate::indexes::{self, OrderedIntervals};
use crate::pods::{completions, is_pod_failed, valid_index};
use crate::sync::Verdicts;
use crate::sync::{Config, Input, prepare};

/// Conditions a replay decides again; `Suspended` and others are kept.
const DECIDED: &[&str] = &["FailureTarget", "Failed", "SuccessCriteriaMet", "Complete"];

/// What the controller's first stage concluded after one more pod finished.
#[derive(Clone, Debug)]
pub struct Step {
    pub failed: i32,
    pub failed_indexes: Option<OrderedIntervals>,
    /// The terminal or interim condition decided at this step, if any.
    pub finished: Option<JobCondition>,
}

fn uid(p: &CachedPod) -> &str {
    p.uid()
}

/// Is `p`'s failure already in the stored counters (finalizer gone, or its
/// UID waits in `uncountedTerminatedPods.failed`)?
fn accounted(p: &CachedPod, uncounted: &HashSet<&str>) -> bool {
    !p.has_tracking_finalizer() || uncounted.contains(uid(p))
}

/// Whether the failure of `p` counts, as the controller's sync decides it
/// ([`Verdicts`] over the Job the sync would read).
pub fn counts_as_failure(job: &Job, config: &Config, p: &CachedPod) -> bool {
    Verdicts::new(&config.view(job.clone())).counts(p)
}

/// (counts towards back-off, fails its index), as the sync decides it.
pub(crate) fn verdict(job: &Job, config: &Config, p: &CachedPod) -> (bool, bool) {
    Verdicts::new(&config.view(job.clone())).index_verdict(p)
}

/// `stored` without what `present` pods account for: the status a replay
/// starts from. `stored` is the Job as the API holds it (its own policy);
/// `spec_of` supplies the spec the replay runs (stored or proposed).
pub fn base_job(stored: &Job, spec_of: &Job, present: &[Arc<CachedPod>], config: &Config) -> Job {
    let status = stored.status.clone().unwrap_or_default();
    let u = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let un_failed: HashSet<&str> = u.failed.iter().flatten().map(String::as_str).collect();
    let un_succeeded: HashSet<&str> = u.succeeded.iter().flatten().map(String::as_str).collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let present_failed = present
        .iter()
        .filter(|p| is_pod_failed(p, stored) && accounted(p, &un_failed))
        .filter(|p| counts_as_failure(stored, config, p))
        .count();
    let present_succeeded = present
        .iter()
        .filter(|p| p.phase() == "Succeeded" && accounted(p, &un_succeeded))
        .count();
    // Counted, plus what waits to be counted, minus what the present pods
    // will count again.
    let base = |counted: Option<i32>, uncounted: usize, present: usize| {
        counted
            .unwrap_or(0)
            .saturating_add(count(uncounted))
            .saturating_sub(count(present))
            .max(0)
    };
    let failed = base(status.failed, un_failed.len(), present_failed);
    let succeeded = base(status.succeeded, un_succeeded.len(), present_succeeded);
    let n = completions(stored);
    // Indexes the present pods will decide again.
    let redecided_done: BTreeSet<i32> = present
        .iter()
        .filter(|p| p.phase() == "Succeeded")
        .filter_map(|p| valid_index(p, stored))
        .collect();
    let v = |p: &CachedPod| verdict(stored, config, p);
    let redecided_failed: BTreeSet<i32> = present
        .iter()
        .filter(|p| indexes::is_index_failed(stored, p, &v))
        .filter_map(|p| valid_index(p, stored))
        .collect();
    let without = |s: &Option<String>, drop: &BTreeSet<i32>| {
        s.as_deref().map(|s| {
            let kept: Vec<i32> = OrderedIntervals::parse(s, n)
                .iter()
                .filter(|i| !drop.contains(i))
                .collect();
            OrderedIntervals::default()
                .with_ordered_indexes(&kept)
                .to_string()
        })
    };
    let mut job = spec_of.clone();
    job.status = Some(JobStatus {
        failed: Some(failed),
        succeeded: Some(succeeded),
        completed_indexes: without(&status.completed_indexes, &redecided_done),
        failed_indexes: without(&status.failed_indexes, &redecided_failed),
        conditions: status.conditions.clone().map(|cs| {
            cs.into_iter()
                .filter(|c| !DECIDED.contains(&c.type_.as_str()))
                .collect()
        }),
        start_time: status.start_time.clone(),
        uncounted_terminated_pods: None,
        ..Default::default()
    });
    job
}

/// A copy of `p` that the replay treats as not yet accounted.
pub fn tracked(p: &CachedPod) -> Arc<CachedPod> {
    Arc::new(p.clone().with_tracking_finalizer())
}

/// One sync of `base` per entry of `terminal` (finish time ascending), each
/// seeing `background` (non-terminal pods) and the terminal pods so far.
/// Stops after the first step that decides a condition: later pods finished
/// while the Job was already ending.
pub fn run(
    base: &Job,
    background: &[Arc<CachedPod>],
    terminal: &[(Arc<CachedPod>, Timestamp)],
    config: &Config,
) -> Vec<Step> {
    let mut pods: Vec<Arc<CachedPod>> = background.to_vec();
    let mut steps = Vec::with_capacity(terminal.len());
    for (p, at) in terminal {
        pods.push(Arc::clone(p));
        let ctx = prepare(Input {
            job: base.clone(),
            pods: pods.clone(),
            satisfied: true,
            expected_rm_finalizers: HashSet::new(),
            stored_backoff: None,
            now: *at,
            config: config.clone(),
            pod_group: None,
        });
        let done = ctx.finished.is_some();
        steps.push(Step {
            failed: ctx.failed,
            failed_indexes: ctx.indexes.failed,
            finished: ctx.finished,
        });
        if done {
            break;
        }
    }
    steps
}

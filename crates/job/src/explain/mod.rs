//! `kcm-rs explain`: why a Job's pods were decided as they were, rule by
//! rule, and what a proposed policy would have done.
//!
//! Layout:
//! - `mod.rs`: the report types and [`explain`], which assembles them;
//! - `replay.rs`: the Job's failures replayed through the controller's own
//!   [`crate::sync::prepare`], one pod at a time in finish order;
//! - `describe.rs`: rule text, what a pod shows, why a rule did not match;
//! - `gone.rs`: pods that left the API, from the Job's and pods' events.
//!
//! Nothing here decides a pod a second time: each pod's rule and action are
//! [`match_pod_failure_policy`]'s, its index verdict
//! [`indexes::is_index_failed`]'s, counters and the Job's condition are
//! `prepare`'s. Pure: the caller fetches the Job, pods and events and picks
//! `now`.

pub mod describe;
mod fetched;
mod gone;
mod replay;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, PodFailurePolicy};
use k8s_openapi::api::core::v1::{Event, Pod};
use kcm_pod::CachedPod;
use serde::Serialize;

use crate::backoff::finished_time;
use crate::indexes;
use crate::pod_failure_policy::{Action, match_pod_failure_policy};
use crate::pods::{index_failure_count, is_pod_failed};
use crate::sync::Config;
use replay::{counts_as_failure, verdict as verdict_of};

pub use describe::{ConditionSeen, Evidence, RuleTrace};
use fetched::Fetched;
pub use gone::GonePod;

/// A proposed change to evaluate against the Job's real failures.
#[derive(Clone, Debug, Default)]
pub struct WhatIf {
    /// The proposed `podFailurePolicy`; `None` removes the policy.
    pub policy: Option<PodFailurePolicy>,
    pub backoff_limit: Option<i32>,
    pub backoff_limit_per_index: Option<i32>,
}

/// What `explain` reads; all of it from the API (or files) and a clock.
pub struct Request<'a> {
    pub job: &'a Job,
    /// The Job's pods (owned by it), any order.
    pub pods: &'a [Pod],
    /// Events of the namespace: the Job's own and its pods'.
    pub events: &'a [Event],
    pub config: Config,
    pub now: Timestamp,
    pub what_if: Option<&'a WhatIf>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionText {
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
}

impl ConditionText {
    fn of(c: &JobCondition) -> Self {
        ConditionText {
            type_: c.type_.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Budgets {
    pub completions: Option<i32>,
    pub parallelism: Option<i32>,
    /// Upstream's default of 6 when unset.
    pub backoff_limit: i32,
    pub backoff_limit_per_index: Option<i32>,
    pub max_failed_indexes: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusSeen {
    pub active: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub failed_indexes: Option<String>,
    pub completed_indexes: Option<String>,
    pub conditions: Vec<ConditionText>,
}

/// What one failure did to the counters, as the replay saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Effect {
    /// Counted towards `backoffLimit` (every action but `Ignore`).
    pub counted: bool,
    /// `failed` after this pod (failures of pods no longer in the API not
    /// included: their time is unknown), and the limit it is held against.
    pub failed: i32,
    pub backoff_limit: i32,
    /// The index's counted failures before and after this pod
    /// (`job-index-failure-count`), with `backoffLimitPerIndex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_failures: Option<(i32, i32)>,
    pub index_failed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_indexes: Option<String>,
    /// The condition this failure brought the Job to, if it was the one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_job: Option<ConditionText>,
}

/// One failed pod: what it shows, which rule decided it, what it did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodReport {
    pub pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    pub finished_at: String,
    pub evidence: Evidence,
    /// The deciding rule's index; `None`: no rule decided (or no policy).
    pub rule: Option<usize>,
    /// The action (`FailJob`, `Ignore`, `Count`, `FailIndex`), or `default`.
    pub action: String,
    /// Set when the replay reached this pod before the Job ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleTrace>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// `Failed`, `Failing` (FailureTarget, pods still terminating),
    /// `Complete`, `Completing`, `Suspended` or `Running`; under a what-if
    /// `would fail`, `would complete` or `would not fail`.
    pub state: String,
    /// The terminal or interim condition the Job has or will get.
    pub condition: Option<ConditionText>,
    /// The pod whose failure decided it, when one did.
    pub decided_by: Option<String>,
    /// What the replay of the pods still present concluded.
    pub replay: Option<ConditionText>,
    /// The replay reaches the condition the Job carries (always true while
    /// the Job has none and the replay decides none).
    pub agrees: bool,
    /// Counted failures the Job still tolerates (`backoffLimit - failed`);
    /// one more fails it.
    pub failures_left: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gone {
    /// Counted failures of pods no longer in the API (from the counters).
    pub counted_failures: i32,
    pub pods: Vec<GonePod>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub pod: String,
    pub before: String,
    pub after: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WhatIfReport {
    pub rules: Vec<String>,
    pub budgets: Budgets,
    pub failures: Vec<PodReport>,
    /// Pods the proposal decides differently.
    pub changed: Vec<Change>,
    pub verdict: Verdict,
    /// The proposal ends the Job otherwise (another condition, or none).
    pub ends_differently: bool,
    /// Pods stopped by the real Job's end whose outcome under the proposal
    /// cannot be known (they never got to finish).
    pub unknown: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub job: String,
    /// `spec.managedBy` when set (a Job synced by another controller, such
    /// as kcm-rs beside KCM). Text output only: schema version 1 of the
    /// JSON has no such field, and the Job itself carries it.
    #[serde(skip)]
    pub managed_by: Option<String>,
    pub completion_mode: String,
    pub budgets: Budgets,
    /// False when the gate `JobPodFailurePolicy` is off or no policy is set.
    pub policy_applied: bool,
    pub rules: Vec<String>,
    pub status: StatusSeen,
    pub failures: Vec<PodReport>,
    /// Pods that failed only because the Job ended and stopped them.
    pub stopped: Vec<PodReport>,
    pub gone: Gone,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIfReport>,
}

/// Builds the whole report; see the module documentation.
pub fn explain(req: &Request<'_>) -> Explanation {
    let job = req.job;
    let config = &req.config;
    // The controller decides on pods as cached; the report also shows what
    // only the fetched pods hold (reasons, containers).
    let present: Vec<Arc<CachedPod>> = req.pods.iter().map(|p| Arc::new(p.into())).collect();
    let full = Fetched::new(req.pods);
    let end = decided_at(job);
    let stopped: Vec<&Arc<CachedPod>> = present
        .iter()
        .filter(|p| is_pod_failed(p, job) && stopped_by_end(p, end))
        .collect();
    let stopped_names: Vec<String> = stopped.iter().map(|p| name(p)).collect();
    let actual = run_replay(job, job, &present, &full, &stopped_names, req.now, config);
    let verdict = verdict(job, &actual);
    let status = job.status.clone().unwrap_or_default();
    let stopped_reports = stopped
        .iter()
        .map(|p| {
            let mut r = pod_report(job, config, p, full.of(p));
            r.note = Some("stopped when the Job ended; counted by its last sync".into());
            r
        })
        .collect();
    let what_if = req.what_if.map(|w| {
        let proposed = proposed_job(job, w);
        let replayed = run_replay(
            job,
            &proposed,
            &present,
            &full,
            &stopped_names,
            req.now,
            config,
        );
        let changed = actual
            .failures
            .iter()
            .zip(&replayed.failures)
            .filter(|(a, b)| a.action != b.action || counted(a) != counted(b))
            .map(|(a, b)| Change {
                pod: a.pod.clone(),
                before: describe_action(a),
                after: describe_action(b),
            })
            .collect();
        let mut v = verdict_of_replay(&proposed, &replayed);
        v.state = match v.condition.as_ref().map(|c| c.type_.as_str()) {
            Some("SuccessCriteriaMet") => "would complete",
            Some(_) => "would fail",
            None => "would not fail",
        }
        .into();
        let ends_differently = v.condition.as_ref().map(|c| (&c.type_, &c.reason))
            != actual.decision.as_ref().map(|c| (&c.type_, &c.reason));
        // Stopped pods would have run on if the proposal ends later or never.
        let unknown = if ends_differently {
            stopped_names.clone()
        } else {
            Vec::new()
        };
        WhatIfReport {
            rules: rule_texts(&proposed),
            budgets: budgets(&proposed),
            failures: replayed.failures,
            changed,
            verdict: v,
            ends_differently,
            unknown,
        }
    });
    Explanation {
        job: format!("{}/{}", ns(job), job.metadata.name.as_deref().unwrap_or("")),
        managed_by: job.spec.as_ref().and_then(|s| s.managed_by.clone()),
        completion_mode: crate::sync::decide::mode(job).into(),
        budgets: budgets(job),
        policy_applied: config.policy(job).is_some(),
        rules: rule_texts(job),
        status: StatusSeen {
            active: status.active.unwrap_or(0),
            succeeded: status.succeeded.unwrap_or(0),
            failed: status.failed.unwrap_or(0),
            failed_indexes: status.failed_indexes.clone(),
            completed_indexes: status.completed_indexes.clone(),
            conditions: status
                .conditions
                .iter()
                .flatten()
                .filter(|c| c.status == "True")
                .map(ConditionText::of)
                .collect(),
        },
        failures: actual.failures,
        stopped: stopped_reports,
        gone: Gone {
            counted_failures: actual.gone_failed,
            pods: gone::gone_pods(job, req.pods, req.events, config),
        },
        verdict,
        what_if,
    }
}

/// `decided_by` when only the failures of pods no longer in the API (or
/// time, for `activeDeadlineSeconds`) bring the Job to its condition.
pub const GONE: &str = "(failures of pods no longer in the API, or the deadline)";

/// A replay's per-pod reports and the condition it reached.
struct Replayed {
    failures: Vec<PodReport>,
    decision: Option<ConditionText>,
    decided_by: Option<String>,
    failed: i32,
    /// Counted failures of pods no longer in the API.
    gone_failed: i32,
}

fn run_replay(
    stored: &Job,
    spec_of: &Job,
    present: &[Arc<CachedPod>],
    full: &Fetched<'_>,
    stopped: &[String],
    now: Timestamp,
    config: &Config,
) -> Replayed {
    let base = replay::base_job(stored, spec_of, present, config);
    let is_terminal = |p: &CachedPod| is_pod_failed(p, stored) || p.phase() == "Succeeded";
    let background: Vec<Arc<CachedPod>> = present
        .iter()
        .filter(|p| !is_terminal(p))
        .cloned()
        .collect();
    let mut terminal: Vec<(Arc<CachedPod>, Timestamp)> = present
        .iter()
        .filter(|p| is_terminal(p) && !stopped.contains(&name(p)))
        .map(|p| (replay::tracked(p), finished_time(p).max(start_of(stored))))
        .collect();
    terminal.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| name(&a.0).cmp(&name(&b.0))));
    // Failures of pods that are gone have no time: most were stopped when
    // the Job ended. They join after the pods present, in the last step.
    let gone_failed = base.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
    let mut stepping = base.clone();
    if let Some(s) = stepping.status.as_mut() {
        s.failed = Some(0);
    }
    let steps = replay::run(&stepping, &background, &terminal, config);
    let limit = budgets(spec_of).backoff_limit;
    let mut failures = Vec::new();
    let mut decision = None;
    let mut decided_by = None;
    let mut failed = 0;
    for (i, (p, _)) in terminal.iter().enumerate() {
        let step = steps.get(i);
        if let Some(s) = step {
            failed = s.failed;
        }
        if !is_pod_failed(p, stored) {
            if let Some(c) = step.and_then(|s| s.finished.as_ref()) {
                decision = Some(ConditionText::of(c));
                decided_by = Some(name(p));
            }
            continue;
        }
        let mut r = pod_report(spec_of, config, p, full.of(p));
        match step {
            Some(s) => {
                let ends = s.finished.as_ref().map(ConditionText::of);
                if ends.is_some() {
                    decision.clone_from(&ends);
                    decided_by = Some(name(p));
                }
                r.effect = Some(Effect {
                    counted: r.action != Action::Ignore.as_str(),
                    failed: s.failed,
                    backoff_limit: limit,
                    index_failures: index_failures(spec_of, config, p),
                    index_failed: index_failed(spec_of, config, p),
                    failed_indexes: s.failed_indexes.as_ref().map(ToString::to_string),
                    ends_job: ends,
                });
            }
            None => {
                r.note = Some("finished after the Job's condition was decided".into());
            }
        }
        failures.push(r);
    }
    // No terminal pod decided it: the Job may still fail on time (deadline).
    if decision.is_none() {
        let ctx = crate::sync::prepare(crate::sync::Input {
            job: base.clone(),
            pods: background
                .iter()
                .cloned()
                .chain(terminal.into_iter().map(|t| t.0))
                .collect(),
            satisfied: true,
            expected_rm_finalizers: Default::default(),
            stored_backoff: None,
            now,
            config: config.clone(),
            pod_group: None,
        });
        decision = ctx.finished.as_ref().map(ConditionText::of);
        if decision.is_some() && gone_failed > 0 {
            decided_by = Some(GONE.into());
        }
        failed = ctx.failed;
    }
    Replayed {
        failures,
        decision,
        decided_by,
        failed,
        gone_failed,
    }
}

fn pod_report(job: &Job, config: &Config, p: &CachedPod, full: &Pod) -> PodReport {
    let policy = config.policy(job);
    let policy = policy.as_ref();
    let m = match_pod_failure_policy(policy, p);
    PodReport {
        pod: name(p),
        index: crate::pods::valid_index(p, job),
        finished_at: finished_time(p).to_string(),
        evidence: describe::evidence(full),
        rule: m.rule,
        action: m.action.map_or("default", Action::as_str).to_string(),
        effect: None,
        rules: policy
            .map(|pol| describe::trace(pol, p, full, m.rule))
            .unwrap_or_default(),
        note: None,
    }
}

fn index_failures(job: &Job, config: &Config, p: &CachedPod) -> Option<(i32, i32)> {
    let spec = job.spec.as_ref()?;
    spec.backoff_limit_per_index?;
    crate::pods::valid_index(p, job)?;
    let before = index_failure_count(p);
    let counts = counts_as_failure(job, config, p);
    Some((before, before.saturating_add(i32::from(counts))))
}

fn index_failed(job: &Job, config: &Config, p: &CachedPod) -> bool {
    indexes::is_index_failed(job, p, &|p: &CachedPod| verdict_of(job, config, p))
}

fn counted(r: &PodReport) -> bool {
    r.action != Action::Ignore.as_str()
}

fn describe_action(r: &PodReport) -> String {
    match r.rule {
        Some(i) => format!("{} (rule {i})", r.action),
        None => "default (counted)".into(),
    }
}

fn verdict(job: &Job, replayed: &Replayed) -> Verdict {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let is_true = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    let mut v = verdict_of_replay(job, replayed);
    let stored = [
        ("Failed", "Failed"),
        ("FailureTarget", "Failing"),
        ("Complete", "Complete"),
        ("SuccessCriteriaMet", "Completing"),
    ]
    .iter()
    .find_map(|(t, state)| is_true(t).map(|c| (ConditionText::of(c), *state)));
    if let Some((c, state)) = stored {
        v.agrees = replayed
            .decision
            .as_ref()
            .is_some_and(|d| d.reason == c.reason && d.message == c.message)
            // Completion by count is decided after the first stage.
            || (c.type_ == "Complete" && replayed.decision.is_none());
        v.state = state.into();
        v.condition = Some(c);
    } else if is_true("Suspended").is_some() && v.condition.is_none() {
        v.state = "Suspended".into();
    }
    v
}

fn verdict_of_replay(job: &Job, replayed: &Replayed) -> Verdict {
    let limit = budgets(job).backoff_limit;
    Verdict {
        state: match &replayed.decision {
            Some(c) if c.type_ == "SuccessCriteriaMet" => "Completing".into(),
            Some(_) => "Failing".into(),
            None => "Running".into(),
        },
        condition: replayed.decision.clone(),
        decided_by: replayed.decided_by.clone(),
        replay: replayed.decision.clone(),
        agrees: true,
        failures_left: limit.saturating_sub(replayed.failed).max(0),
    }
}

fn proposed_job(job: &Job, w: &WhatIf) -> Job {
    let mut j = job.clone();
    let spec = j.spec.get_or_insert_with(Default::default);
    spec.pod_failure_policy.clone_from(&w.policy);
    if w.backoff_limit.is_some() {
        spec.backoff_limit = w.backoff_limit;
    }
    if w.backoff_limit_per_index.is_some() {
        spec.backoff_limit_per_index = w.backoff_limit_per_index;
    }
    j
}

fn budgets(job: &Job) -> Budgets {
    let spec = job.spec.clone().unwrap_or_default();
    Budgets {
        completions: spec.completions,
        parallelism: spec.parallelism,
        // API defaulting: 6, or unlimited beside backoffLimitPerIndex.
        backoff_limit: spec
            .backoff_limit
            .unwrap_or(if spec.backoff_limit_per_index.is_some() {
                i32::MAX
            } else {
                6
            }),
        backoff_limit_per_index: spec.backoff_limit_per_index,
        max_failed_indexes: spec.max_failed_indexes,
    }
}

fn rule_texts(job: &Job) -> Vec<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref())
        .map(|p| p.rules.iter().map(describe::rule_text).collect())
        .unwrap_or_default()
}

/// When the Job's first decided condition (interim or terminal) appeared.
fn decided_at(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status == "True" && ["FailureTarget", "Failed"].contains(&c.type_.as_str()))
        .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .min()
}

/// A pod deleted once the Job had failed: the controller stopped it.
fn stopped_by_end(p: &CachedPod, end: Option<Timestamp>) -> bool {
    let (Some(end), Some(deleted)) = (end, p.deletion_timestamp()) else {
        return false;
    };
    // Pods a component marked as disrupted were deleted for their own reason.
    let disrupted = p.condition("DisruptionTarget").is_some();
    !disrupted && deleted >= end
}

fn start_of(job: &Job) -> Timestamp {
    job.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(crate::backoff::GO_ZERO_TIME, |t| t.0)
}

fn ns(job: &Job) -> &str {
    job.metadata.namespace.as_deref().unwrap_or("")
}

fn name(p: &CachedPod) -> String {
    p.name().to_string()
}

//! Matching failed pods against a Job's `spec.podFailurePolicy` (KEP-3329).
//!
//! Upstream: `pkg/controller/job/pod_failure_policy.go` (`matchPodFailurePolicy`)
//! and `job_controller.go` (`getFailJobMessage`), Kubernetes v1.34.
//!
//! Everything here is pure: no clock, no API calls, no shared state.

use std::fmt;

use k8s_openapi::api::batch::v1::{
    Job, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use kcm_pod::{CachedPod, Condition, ContainerState};

use crate::pods::is_pod_failed;

#[cfg(test)]
mod tests;

/// The action of a pod failure policy rule (`PodFailurePolicyAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Mark the Job failed (interim `FailureTarget`, reason `PodFailurePolicy`).
    FailJob,
    /// Mark the pod's completion index failed (only meaningful with
    /// `backoffLimitPerIndex`).
    FailIndex,
    /// Do not count the failure towards any back-off limit.
    Ignore,
    /// Count the failure as usual (explicitly matched).
    Count,
}

impl Action {
    /// The API spelling, also the `action` label of the
    /// `job_controller_pod_failures_handled_by_failure_policy_total` metric.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::FailJob => "FailJob",
            Action::FailIndex => "FailIndex",
            Action::Ignore => "Ignore",
            Action::Count => "Count",
        }
    }

    /// Parses the API spelling (case-sensitive). Unknown values are `None`:
    /// the API reserves the right to add actions and clients must skip rules
    /// whose action they do not know.
    pub fn from_api(value: &str) -> Option<Action> {
        match value {
            "FailJob" => Some(Action::FailJob),
            "FailIndex" => Some(Action::FailIndex),
            "Ignore" => Some(Action::Ignore),
            "Count" => Some(Action::Count),
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of matching one failed pod against a pod failure policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyMatch {
    /// Set only when a `FailJob` rule decided; becomes the message of the
    /// `FailureTarget`/`Failed` conditions.
    pub fail_job_message: Option<String>,
    /// Whether the failure counts towards `backoffLimit` (and
    /// `backoffLimitPerIndex`); false only for `Ignore`.
    pub counts_towards_backoff: bool,
    /// The action of the deciding rule; `None` when no rule decided (default
    /// handling, which counts the failure but is not labelled in metrics).
    pub action: Option<Action>,
    /// The index of the deciding rule in `rules` (what `kcm-rs explain`
    /// names); `None` when no rule decided.
    pub rule: Option<usize>,
}

impl PolicyMatch {
    /// No policy, or no rule decided: count the failure, no action.
    pub const fn unmatched() -> PolicyMatch {
        PolicyMatch {
            fail_job_message: None,
            counts_towards_backoff: true,
            action: None,
            rule: None,
        }
    }

    fn decided(rule: usize, action: Action, fail_job_message: Option<String>) -> PolicyMatch {
        PolicyMatch {
            fail_job_message,
            counts_towards_backoff: action != Action::Ignore,
            action: Some(action),
            rule: Some(rule),
        }
    }
}

/// Matches a failed pod against `policy` (upstream `matchPodFailurePolicy`).
///
/// Rules are tried in order; the first rule that matches the pod *and* has a
/// known action decides. A rule with an unknown action is skipped even when
/// it matches. A rule uses `onExitCodes` when present, otherwise
/// `onPodConditions`; a rule with neither never matches.
///
/// `FailIndex` is returned whether or not the Job sets
/// `backoffLimitPerIndex`: API validation forbids that combination, and
/// upstream's matcher (with the `JobBackoffLimitPerIndex` gate GA and locked
/// on in 1.34) does not look at the Job either; callers only treat it
/// specially when per-index back-off is in use, so otherwise it behaves like
/// `Count` (but is still reported as `FailIndex` in the metric).
///
/// The caller is expected to pass a pod that is already known to be failed;
/// this function does not check the pod's phase.
pub fn match_pod_failure_policy(policy: Option<&PodFailurePolicy>, pod: &CachedPod) -> PolicyMatch {
    let Some(policy) = policy else {
        return PolicyMatch::unmatched();
    };
    for (index, rule) in policy.rules.iter().enumerate() {
        if let RuleOutcome::Decides(action, matched) = rule_outcome(rule, pod) {
            let message = (action == Action::FailJob).then(|| matched.fail_job_message(pod, index));
            return PolicyMatch::decided(index, action, message);
        }
    }
    PolicyMatch::unmatched()
}

/// How one rule relates to one failed pod, on its own (rules before it
/// ignored). [`match_pod_failure_policy`] takes the first `Decides`;
/// `kcm-rs explain` shows every rule's outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleOutcome<'a> {
    /// The rule matches and its action is known: it decides, unless an
    /// earlier rule decided first.
    Decides(Action, Matched<'a>),
    /// The rule matches but its action is unknown to this version: skipped.
    UnknownAction(Matched<'a>),
    /// The rule does not match the pod.
    NoMatch,
}

/// One rule against one pod: `onExitCodes` when present, otherwise
/// `onPodConditions`; a rule with neither never matches.
pub fn rule_outcome<'a>(rule: &PodFailurePolicyRule, pod: &'a CachedPod) -> RuleOutcome<'a> {
    let matched = if let Some(requirement) = &rule.on_exit_codes {
        match_on_exit_codes(pod, requirement).map(|(container, exit_code)| Matched::ExitCode {
            container,
            exit_code,
        })
    } else if let Some(patterns) = &rule.on_pod_conditions {
        match_on_pod_conditions(pod, patterns).map(Matched::Condition)
    } else {
        None
    };
    match matched {
        None => RuleOutcome::NoMatch,
        // Unknown actions: skip the rule, as the API documents for clients.
        Some(m) => match Action::from_api(&rule.action) {
            Some(action) => RuleOutcome::Decides(action, m),
            None => RuleOutcome::UnknownAction(m),
        },
    }
}

/// Upstream `getFailJobMessage`: the message of the first pod, in `pods`
/// order, that is failed and that a `FailJob` rule matched; `verdict` is
/// the policy's match of a pod (the sync's [`Verdicts`](crate::sync::Verdicts)
/// match each pod once). "Failed" is [`is_pod_failed`], which never counts
/// a terminating (not yet `Failed`) pod of a Job that has a pod failure
/// policy.
pub fn fail_job_message(
    job: &Job,
    pods: &[&CachedPod],
    verdict: &dyn Fn(&CachedPod) -> PolicyMatch,
) -> Option<String> {
    pods.iter()
        .filter(|pod| is_pod_failed(pod, job))
        .find_map(|pod| verdict(pod).fail_job_message)
}

/// What made a rule match: the `FailJob` message and `kcm-rs explain` name it.
#[derive(Clone, Debug, PartialEq)]
pub enum Matched<'a> {
    /// The first terminated container whose exit code satisfied the rule.
    ExitCode { container: &'a str, exit_code: i32 },
    /// The first pod condition (in the pod's order) a pattern matched.
    Condition(&'a Condition),
}

impl Matched<'_> {
    /// The `FailJob` condition message upstream writes for this match.
    pub fn fail_job_message(&self, pod: &CachedPod, rule_index: usize) -> String {
        let (namespace, name) = (pod.namespace(), pod.name());
        match self {
            Matched::ExitCode {
                container,
                exit_code,
            } => format!(
                "Container {container} for pod {namespace}/{name} failed with exit code \
                 {exit_code} matching FailJob rule at index {rule_index}"
            ),
            Matched::Condition(condition) => format!(
                "Pod {namespace}/{name} has condition {} matching FailJob rule at index \
                 {rule_index}",
                condition.type_
            ),
        }
    }
}

/// The first terminated container (regular containers first, then init
/// containers) whose exit code satisfies `requirement`: its name and exit code.
fn match_on_exit_codes<'a>(
    pod: &'a CachedPod,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'a str, i32)> {
    pod.container_statuses()
        .iter()
        .chain(pod.init_container_statuses())
        .find_map(|cs| match_container(cs, requirement))
}

fn match_container<'a>(
    cs: &'a ContainerState,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'a str, i32)> {
    // Only the current state counts; a container still terminating (or
    // restarted, with the exit code only in lastState) has no exit code yet.
    let terminated = cs.terminated.as_ref()?;
    if requirement
        .container_name
        .as_ref()
        .is_some_and(|name| **name != *cs.name)
    {
        return None;
    }
    // Successful containers never match, whatever the operator (so
    // `NotIn [x]` does not fire for sidecars that exited cleanly).
    if terminated.exit_code == 0 {
        return None;
    }
    operator_matches(terminated.exit_code, requirement).then_some((&*cs.name, terminated.exit_code))
}

/// `In` / `NotIn`; any other operator never matches (the API reserves new
/// operators and clients must treat unknown ones as unsatisfied).
fn operator_matches(exit_code: i32, requirement: &PodFailurePolicyOnExitCodesRequirement) -> bool {
    match requirement.operator.as_str() {
        "In" => requirement.values.contains(&exit_code),
        "NotIn" => !requirement.values.contains(&exit_code),
        _ => false,
    }
}

/// The first pod condition (in the pod's order) matched by any pattern.
fn match_on_pod_conditions<'a>(
    pod: &'a CachedPod,
    patterns: &[PodFailurePolicyOnPodConditionsPattern],
) -> Option<&'a Condition> {
    pod.conditions().iter().find(|condition| {
        patterns.iter().any(|pattern| {
            *condition.type_ == *pattern.type_ && &*condition.status == pattern_status(pattern)
        })
    })
}

/// The status a pattern asks for. API defaulting sets a missing one to
/// `True`; the same default applies to objects that bypassed defaulting.
pub fn pattern_status(pattern: &PodFailurePolicyOnPodConditionsPattern) -> &str {
    match pattern.status.as_deref() {
        None | Some("") => "True",
        Some(s) => s,
    }
}

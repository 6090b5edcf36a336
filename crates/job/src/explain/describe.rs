//! Words for `kcm-rs explain`: a rule as one line, what a failed pod shows,
//! and why a rule did not decide it. The decision itself is never made
//! here: it comes from [`crate::pod_failure_policy::rule_outcome`].

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyRule};
use k8s_openapi::api::core::v1::Pod;
use kcm_pod::CachedPod;
use serde::Serialize;

use crate::pod_failure_policy::{Matched, RuleOutcome, pattern_status, rule_outcome};

/// One rule as a line: `FailJob if exit code In [42] (container main)`.
pub fn rule_text(rule: &PodFailurePolicyRule) -> String {
    if let Some(r) = &rule.on_exit_codes {
        let container = r
            .container_name
            .as_deref()
            .map(|c| format!(" (container {c})"))
            .unwrap_or_default();
        format!(
            "{} if exit code {} {:?}{container}",
            rule.action, r.operator, r.values
        )
    } else if let Some(patterns) = &rule.on_pod_conditions {
        let conds: Vec<String> = patterns
            .iter()
            .map(|p| format!("{}={}", p.type_, pattern_status(p)))
            .collect();
        format!("{} if condition {}", rule.action, conds.join(" or "))
    } else {
        format!("{} (no onExitCodes or onPodConditions)", rule.action)
    }
}

/// What a failed pod shows: its first failed container and its conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// The first terminated container with a non-zero exit code (regular
    /// containers first, then init containers), as the matcher looks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `True` conditions other than the kubelet's readiness ones, with reason.
    pub conditions: Vec<ConditionSeen>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionSeen {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Conditions every running pod has; they say nothing about a failure.
const ROUTINE_CONDITIONS: &[&str] = &[
    "Ready",
    "ContainersReady",
    "Initialized",
    "PodScheduled",
    "PodReadyToStartContainers",
];

pub fn evidence(pod: &Pod) -> Evidence {
    let Some(status) = pod.status.as_ref() else {
        return Evidence::default();
    };
    let failed = [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|cs| {
            let t = cs.state.as_ref()?.terminated.as_ref()?;
            (t.exit_code != 0).then(|| (cs.name.clone(), t.exit_code))
        });
    let conditions = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status == "True" && !ROUTINE_CONDITIONS.contains(&c.type_.as_str()))
        .map(|c| ConditionSeen {
            type_: c.type_.clone(),
            reason: c.reason.clone(),
        })
        .collect();
    Evidence {
        container: failed.as_ref().map(|f| f.0.clone()),
        exit_code: failed.map(|f| f.1),
        conditions,
    }
}

/// What one rule says about one pod, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleTrace {
    pub rule: usize,
    pub text: String,
    /// `decided`, `shadowed` (matches, but an earlier rule decided),
    /// `unknown-action` or `no-match`.
    pub outcome: &'static str,
    pub why: String,
}

/// Every rule of `policy` against `pod` (as cached, which is what the
/// controller decides on; `full` is the same pod as fetched, for the
/// reasons and containers the cache does not keep), in order; `decided` is
/// the index [`crate::pod_failure_policy::match_pod_failure_policy`]
/// returned.
pub fn trace(
    policy: &PodFailurePolicy,
    pod: &CachedPod,
    full: &Pod,
    decided: Option<usize>,
) -> Vec<RuleTrace> {
    policy
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let (outcome, why) = match rule_outcome(rule, pod) {
                RuleOutcome::Decides(_, m) if Some(i) == decided => {
                    ("decided", matched_text(&m, full))
                }
                RuleOutcome::Decides(_, m) => (
                    "shadowed",
                    format!(
                        "{}, but rule {} decided first",
                        matched_text(&m, full),
                        decided.map(|d| d.to_string()).unwrap_or_default()
                    ),
                ),
                RuleOutcome::UnknownAction(m) => (
                    "unknown-action",
                    format!(
                        "{}, but action {:?} is unknown to this version: skipped",
                        matched_text(&m, full),
                        rule.action
                    ),
                ),
                RuleOutcome::NoMatch => ("no-match", why_not(rule, full)),
            };
            RuleTrace {
                rule: i,
                text: rule_text(rule),
                outcome,
                why,
            }
        })
        .collect()
}

fn matched_text(m: &Matched<'_>, full: &Pod) -> String {
    match m {
        Matched::ExitCode {
            container,
            exit_code,
        } => format!("container {container} exited with {exit_code}"),
        Matched::Condition(c) => match reason_of(full, &c.type_, &c.status) {
            Some(r) => format!("condition {}={} (reason {r})", c.type_, c.status),
            None => format!("condition {}={}", c.type_, c.status),
        },
    }
}

/// The reason of the pod's first condition of `type_` with `status` (the
/// one the matcher found), if it has one.
fn reason_of<'a>(pod: &'a Pod, type_: &str, status: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)?
        .reason
        .as_deref()
}

/// Why a rule that [`rule_outcome`] found not matching did not match.
fn why_not(rule: &PodFailurePolicyRule, pod: &Pod) -> String {
    let status = pod.status.as_ref();
    if let Some(r) = &rule.on_exit_codes {
        let terminated: Vec<(String, i32)> = status
            .into_iter()
            .flat_map(|s| [&s.container_statuses, &s.init_container_statuses])
            .flatten()
            .flatten()
            .filter(|cs| r.container_name.as_ref().is_none_or(|n| *n == cs.name))
            .filter_map(|cs| {
                let t = cs.state.as_ref()?.terminated.as_ref()?;
                Some((cs.name.clone(), t.exit_code))
            })
            .collect();
        if terminated.is_empty() {
            return match &r.container_name {
                Some(n) => format!("no terminated container named {n}"),
                None => "no container has terminated".into(),
            };
        }
        if terminated.iter().all(|t| t.1 == 0) {
            return "every terminated container exited 0, which never matches".into();
        }
        if !matches!(r.operator.as_str(), "In" | "NotIn") {
            return format!("operator {:?} is unknown: never matches", r.operator);
        }
        let codes: Vec<String> = terminated
            .iter()
            .filter(|t| t.1 != 0)
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        return format!(
            "exit codes {} not {} {:?}",
            codes.join(", "),
            r.operator,
            r.values
        );
    }
    if let Some(patterns) = &rule.on_pod_conditions {
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        let parts: Vec<String> = patterns
            .iter()
            .map(|p| {
                let want = pattern_status(p);
                match conditions.iter().find(|c| c.type_ == p.type_) {
                    Some(c) => format!("{}={}, the rule wants {want}", c.type_, c.status),
                    None => format!("no {} condition", p.type_),
                }
            })
            .collect();
        return parts.join("; ");
    }
    "the rule has neither onExitCodes nor onPodConditions".into()
}

//! `kcm-rs lint`: pod failure policy mistakes that API validation lets
//! through (or that manifests carry before they reach it).
//!
//! Layout: `mod.rs` finds the Job specs in a manifest (Job, CronJob,
//! JobSet-style `replicatedJobs`, `List`) and checks each; `shadow.rs`
//! decides whether an earlier rule matches every pod a later one would.
//! Each finding names the rule by its path and says the fix in one line.
//! Pure: no API calls.

mod shadow;

#[cfg(test)]
mod tests;

use std::collections::HashSet;

use k8s_openapi::api::batch::v1::{JobSpec, PodFailurePolicyRule};
use serde::Serialize;
use serde_json::Value;

use crate::pod_failure_policy::Action;

/// Pod condition types some Kubernetes component sets; a rule on another
/// type matches only if something outside Kubernetes sets it.
pub const KNOWN_CONDITION_TYPES: &[&str] = &[
    "DisruptionTarget",
    "PodScheduled",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodReadyToStartContainers",
    "PodResizePending",
    "PodResizeInProgress",
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `Kind namespace/name` (or `Kind name`) of the object.
    pub object: String,
    /// Where in the object, e.g. `spec.podFailurePolicy.rules[2]`.
    pub path: String,
    /// A stable identifier of the check (`shadowed-rule`, …).
    pub check: &'static str,
    pub problem: String,
    pub fix: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LintError {
    #[error("{object}: {path} is not a valid Job spec: {source}")]
    Spec {
        object: String,
        path: String,
        source: serde_json::Error,
    },
}

/// Lints one decoded manifest document. Kinds without a Job spec (a
/// ConfigMap in the same file, say) give no findings.
pub fn lint_document(doc: &Value) -> Result<Vec<Finding>, LintError> {
    let kind = doc["kind"].as_str().unwrap_or("");
    let object = object_name(doc);
    let mut specs: Vec<(String, &Value)> = Vec::new();
    match kind {
        "List" | "JobList" | "CronJobList" => {
            let mut out = Vec::new();
            for item in doc["items"].as_array().into_iter().flatten() {
                out.extend(lint_document(item)?);
            }
            return Ok(out);
        }
        "Job" => specs.push(("spec".into(), &doc["spec"])),
        "CronJob" => specs.push((
            "spec.jobTemplate.spec".into(),
            &doc["spec"]["jobTemplate"]["spec"],
        )),
        _ => {
            // JobSet and lookalikes: a list of Job templates.
            for (i, rj) in doc["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                specs.push((
                    format!("spec.replicatedJobs[{i}].template.spec"),
                    &rj["template"]["spec"],
                ));
            }
        }
    }
    let mut out = Vec::new();
    for (path, spec) in specs {
        if spec.is_null() {
            continue;
        }
        let parsed: JobSpec =
            serde_json::from_value(spec.clone()).map_err(|source| LintError::Spec {
                object: object.clone(),
                path: path.clone(),
                source,
            })?;
        out.extend(lint_job_spec(&parsed, &object, &path));
    }
    Ok(out)
}

fn object_name(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or("object");
    let name = doc["metadata"]["name"].as_str().unwrap_or("<unnamed>");
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Every check over one Job spec at `path` of `object`.
pub fn lint_job_spec(spec: &JobSpec, object: &str, path: &str) -> Vec<Finding> {
    let Some(policy) = &spec.pod_failure_policy else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |path: String, check, problem: String, fix: String| {
        out.push(Finding {
            object: object.to_string(),
            path,
            check,
            problem,
            fix,
        });
    };
    let tpl = spec.template.spec.as_ref();
    let restart = tpl
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if restart != "Never" {
        push(
            format!("{path}.template.spec.restartPolicy"),
            "restart-policy",
            format!("podFailurePolicy needs restartPolicy Never, not {restart}"),
            "set template.spec.restartPolicy: Never".into(),
        );
    }
    let containers: HashSet<&str> = tpl
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    let gates: HashSet<&str> = tpl
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.condition_type.as_str())
        .collect();
    for (i, rule) in policy.rules.iter().enumerate() {
        let at = format!("{path}.podFailurePolicy.rules[{i}]");
        let action = Action::from_api(&rule.action);
        if action.is_none() {
            push(
                format!("{at}.action"),
                "unknown-action",
                format!(
                    "action {:?} is not FailJob, FailIndex, Ignore or Count",
                    rule.action
                ),
                "use one of FailJob, FailIndex, Ignore, Count".into(),
            );
        }
        if action == Some(Action::FailIndex) && spec.backoff_limit_per_index.is_none() {
            push(
                format!("{at}.action"),
                "failindex-without-per-index",
                "FailIndex needs backoffLimitPerIndex; without it the Job is rejected".into(),
                "set spec.backoffLimitPerIndex, or use FailJob or Count".into(),
            );
        }
        match (&rule.on_exit_codes, &rule.on_pod_conditions) {
            (Some(_), Some(_)) | (None, None) => push(
                at.clone(),
                "one-requirement",
                "a rule needs exactly one of onExitCodes and onPodConditions".into(),
                "split the rule in two, or add the missing requirement".into(),
            ),
            (Some(r), None) => {
                let at = format!("{at}.onExitCodes");
                if r.values.is_empty() {
                    push(
                        format!("{at}.values"),
                        "empty-values",
                        "no exit codes listed".into(),
                        "list the exit codes this rule is about".into(),
                    );
                }
                if r.operator == "In" && r.values.contains(&0) {
                    push(
                        format!("{at}.values"),
                        "exit-code-zero",
                        "exit code 0 never matches: only failed containers are looked at".into(),
                        "remove 0 from values".into(),
                    );
                }
                if !matches!(r.operator.as_str(), "In" | "NotIn") {
                    push(
                        format!("{at}.operator"),
                        "unknown-operator",
                        format!("operator {:?} never matches", r.operator),
                        "use In or NotIn".into(),
                    );
                }
                if let Some(c) = &r.container_name
                    && tpl.is_some()
                    && !containers.contains(c.as_str())
                {
                    let mut names: Vec<&str> = containers.iter().copied().collect();
                    names.sort_unstable();
                    push(
                        format!("{at}.containerName"),
                        "unknown-container",
                        format!("no container {c:?} in the pod template: the rule matches nothing"),
                        format!("use one of: {}", names.join(", ")),
                    );
                }
            }
            (None, Some(patterns)) => {
                let at = format!("{at}.onPodConditions");
                if patterns.is_empty() {
                    push(
                        at.clone(),
                        "empty-values",
                        "no condition patterns listed".into(),
                        "add a pattern such as type: DisruptionTarget".into(),
                    );
                }
                for (j, p) in patterns.iter().enumerate() {
                    if !KNOWN_CONDITION_TYPES.contains(&p.type_.as_str())
                        && !gates.contains(p.type_.as_str())
                    {
                        push(
                            format!("{at}[{j}].type"),
                            "unknown-condition",
                            format!(
                                "no Kubernetes component sets pod condition {:?}; the rule \
                                 matches only if something else in the cluster does",
                                p.type_
                            ),
                            "use DisruptionTarget, or the type your own component sets".into(),
                        );
                    }
                }
            }
        }
        if let Some(first) = shadowing_rule(&policy.rules, i) {
            push(
                at.clone(),
                "shadowed-rule",
                format!(
                    "never decides: rule {first} ({}) matches every pod this rule matches",
                    crate::explain::describe::rule_text(&policy.rules[first])
                ),
                format!("move this rule above rule {first}, or remove it"),
            );
        }
    }
    out
}

/// The first earlier rule (with a known action) that decides every pod
/// `rules[i]` would match.
fn shadowing_rule(rules: &[PodFailurePolicyRule], i: usize) -> Option<usize> {
    (0..i).find(|&j| {
        Action::from_api(&rules[j].action).is_some() && shadow::covers(&rules[j], &rules[i])
    })
}

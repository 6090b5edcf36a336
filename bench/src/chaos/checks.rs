//! The checks of a chaos run: on the Job watch history (counters, the
//! uncounted lists), the pod watch history (parallelism, DisruptionTarget),
//! the audit log (DisruptionTarget before delete) and against the calm run.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::Value;

use super::{ChaosReport, TRACKING};
use kcm_e2e::history::{PodHistory, condition};

pub(super) fn has_tracking(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == TRACKING))
}

/// Counters never decrease; a UID never re-enters the uncounted lists.
/// `names`: pod names by UID, for the messages.
pub(super) fn check_jobs(
    history: &[(std::time::Instant, Job)],
    names: &HashMap<String, String>,
    out: &mut Vec<String>,
) {
    let mut last: HashMap<String, (i32, i32)> = HashMap::new();
    let mut listed: HashMap<String, HashSet<String>> = HashMap::new();
    let mut left: HashMap<String, HashSet<String>> = HashMap::new();
    for (_, j) in history {
        let name = j.metadata.name.clone().unwrap_or_default();
        let s = j.status.clone().unwrap_or_default();
        let now = (s.succeeded.unwrap_or(0), s.failed.unwrap_or(0));
        if let Some(before) = last.get(&name)
            && (now.0 < before.0 || now.1 < before.1)
        {
            out.push(format!("{name}: counters went from {before:?} to {now:?}"));
        }
        last.insert(name.clone(), now);
        let u = s.uncounted_terminated_pods.unwrap_or_default();
        let uids: HashSet<String> = u.succeeded.into_iter().chain(u.failed).flatten().collect();
        let prev = listed.entry(name.clone()).or_default();
        let gone = left.entry(name.clone()).or_default();
        for uid in prev.difference(&uids) {
            gone.insert(uid.clone());
        }
        for uid in uids.intersection(gone) {
            let pod = names.get(uid).map_or("?", String::as_str);
            out.push(format!(
                "{name}: pod {pod} ({uid}) counted again after leaving uncountedTerminatedPods"
            ));
        }
        *prev = uids;
    }
}

/// No Job counts more pods than it had: `succeeded` at most the distinct
/// pods seen Succeeded, `failed` at most those seen Failed or deleted
/// before succeeding; a Job complete by its completions counts every
/// succeeded pod. (A pod counted twice breaks the first.)
pub(super) fn check_counts(history: &PodHistory, jobs: &[Job], out: &mut Vec<String>) {
    // job -> (uids seen Succeeded, uids seen Failed or deleted unsucceeded)
    let mut seen: HashMap<String, (HashSet<String>, HashSet<String>)> = HashMap::new();
    let events = history.all();
    let succeeded_uids: HashSet<String> = events
        .iter()
        .filter(|s| s.pod().status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Succeeded"))
        .filter_map(|s| s.pod().metadata.uid.clone())
        .collect();
    for s in &events {
        let p = s.pod();
        let (Some(uid), Some(job)) = (
            p.metadata.uid.clone(),
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("batch.kubernetes.io/job-name").cloned()),
        ) else {
            continue;
        };
        let phase = p.status.as_ref().and_then(|st| st.phase.as_deref());
        let entry = seen.entry(job).or_default();
        if phase == Some("Succeeded") {
            entry.0.insert(uid);
        } else if phase == Some("Failed") || (s.deleting() && !succeeded_uids.contains(&uid)) {
            entry.1.insert(uid);
        }
    }
    for j in jobs {
        let name = j.metadata.name.clone().unwrap_or_default();
        let st = j.status.clone().unwrap_or_default();
        let (ok, failed) = seen.get(&name).cloned().unwrap_or_default();
        let (s, f) = (st.succeeded.unwrap_or(0), st.failed.unwrap_or(0));
        let n = |set: &HashSet<String>| i32::try_from(set.len()).unwrap_or(i32::MAX);
        if s > n(&ok) {
            out.push(format!(
                "{name}: succeeded {s}, but only {} pods succeeded (a pod counted twice)",
                ok.len()
            ));
        }
        if f > n(&failed) {
            out.push(format!(
                "{name}: failed {f}, but only {} pods failed or were deleted (a pod counted twice)",
                failed.len()
            ));
        }
        let by_completions = st.conditions.unwrap_or_default().iter().any(|c| {
            c.type_ == "Complete"
                && c.status == "True"
                && c.reason.as_deref() == Some("CompletionsReached")
        });
        if by_completions && s != n(&ok) {
            out.push(format!(
                "{name}: complete with succeeded {s}, but {} pods succeeded",
                ok.len()
            ));
        }
    }
}

/// What [`check_pods`] read off the pod history for the audit check.
pub(super) struct Seen {
    /// Pods seen terminal.
    pub terminal: HashSet<String>,
    /// Pods seen with `DisruptionTarget` True no later than their first
    /// state with a deletionTimestamp.
    pub target_before_delete: HashSet<String>,
}

/// Parallelism, and DisruptionTarget before delete, from the pod history.
/// `late`: pods whose create reached the API server after its sender was
/// gone (a killed process's delayed request): no live controller decided
/// them, so they are left out of the parallelism count (the controller
/// then removes the surplus, which the outcome comparison covers).
pub(super) fn check_pods(
    history: &PodHistory,
    jobs: &[Job],
    late: &HashSet<String>,
    report: &mut ChaosReport,
) -> Seen {
    let parallelism: HashMap<String, i32> = jobs
        .iter()
        .map(|j| {
            let p = j.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
            (j.metadata.name.clone().unwrap_or_default(), p)
        })
        .collect();
    let events = history.all();
    let mut state: HashMap<String, (String, bool)> = HashMap::new(); // pod -> (job, active)
    let mut terminal_seen: HashSet<String> = HashSet::new();
    let mut with_dt: HashSet<String> = HashSet::new();
    let mut deleting: HashSet<String> = HashSet::new();
    let mut target_before_delete: HashSet<String> = HashSet::new();
    for seen in &events {
        let p = seen.pod();
        let name = p.name_any();
        let job = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("batch.kubernetes.io/job-name").cloned())
            .unwrap_or_default();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("");
        let active =
            !seen.deleting() && !matches!(phase, "Succeeded" | "Failed") && !late.contains(&name);
        state.insert(name.clone(), (job.clone(), active));
        if matches!(phase, "Succeeded" | "Failed") {
            terminal_seen.insert(name.clone());
        }
        let target = condition(p, "DisruptionTarget").is_some_and(|c| c.status == "True");
        let first_deleting = seen.deleting() && deleting.insert(name.clone());
        if target {
            with_dt.insert(name.clone());
            if !seen.deleting() || first_deleting {
                target_before_delete.insert(name.clone());
            }
        }
        let n = state.values().filter(|(j, a)| *j == job && *a).count();
        let max = parallelism.get(&job).copied().unwrap_or(i32::MAX);
        if i32::try_from(n).unwrap_or(i32::MAX) > max {
            report
                .violations
                .push(format!("{job}: {n} active pods, parallelism {max}"));
        }
    }
    report.pods = state.len();
    report.evicted = with_dt.len();
    Seen {
        terminal: terminal_seen,
        target_before_delete,
    }
}

/// From the audit log: every pod DELETE by taint eviction or pod GC came
/// after that component's own `pods/status` PATCH of the pod (the
/// `DisruptionTarget` append), except pod GC's deletes of terminated pods,
/// which upstream makes without one. (Other components may delete a pod
/// first; the taint manager may then still append its condition, as
/// upstream does, so the order is checked per deleting component.) A PATCH
/// the server applied but answered with an error (a 504 from an overloaded
/// server) is not a 2xx in the log; the pod history then shows the
/// condition before the deletion, which is what the order is for.
pub(super) fn check_disruption_order(
    audit: &std::path::Path,
    ns: &str,
    seen: &Seen,
    out: &mut Vec<String>,
) -> usize {
    let terminal = &seen.terminal;
    let Ok(text) = std::fs::read_to_string(audit) else {
        out.push("no audit log".into());
        return 0;
    };
    let mut patched: HashSet<(String, String)> = HashSet::new();
    let mut deletes = 0;
    for e in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let o = &e["objectRef"];
        if e["stage"] != "ResponseComplete" || o["resource"] != "pods" || o["namespace"] != ns {
            continue;
        }
        let agent = e["userAgent"].as_str().unwrap_or("");
        let component = ["taint-eviction-controller", "pod-garbage-collector"]
            .into_iter()
            .find(|c| agent.ends_with(&format!("/{c}")));
        let Some(component) = component else { continue };
        let pod = o["name"].as_str().unwrap_or("").to_string();
        let ok = e["responseStatus"]["code"]
            .as_i64()
            .is_some_and(|c| (200..300).contains(&c));
        match (e["verb"].as_str(), o["subresource"].as_str()) {
            (Some("patch"), Some("status")) if ok => {
                patched.insert((component.to_string(), pod));
            }
            (Some("delete"), None) if ok => {
                deletes += 1;
                let exempt = component == "pod-garbage-collector" && terminal.contains(&pod);
                if !exempt
                    && !patched.contains(&(component.to_string(), pod.clone()))
                    && !seen.target_before_delete.contains(&pod)
                {
                    out.push(format!(
                        "{pod}: deleted by {component} before its DisruptionTarget"
                    ));
                }
            }
            _ => {}
        }
    }
    deletes
}

/// Differences between a run (kills, faults) and the calm one, as lines.
pub fn compare(with: &ChaosReport, without: &ChaosReport) -> Vec<String> {
    let mut out = Vec::new();
    for (name, a) in &without.ends {
        let Some(b) = with.ends.get(name) else {
            out.push(format!("{name}: missing in this run"));
            continue;
        };
        if a.condition != b.condition {
            out.push(format!(
                "{name}: {:?} in the calm run, {:?} in this one",
                a.condition, b.condition
            ));
        }
        // Deterministic per index: Indexed Jobs whose every index ran to
        // its own end (not cut short by a success policy).
        if name == "per-index"
            && (a.completed_indexes != b.completed_indexes || a.failed_indexes != b.failed_indexes)
        {
            out.push(format!(
                "{name}: indexes {a:?} in the calm run, {b:?} in this one"
            ));
        }
        // Jobs that complete count every pod they needed, no more.
        if a.condition.starts_with("Complete")
            && name != "success-policy"
            && (a.succeeded, a.failed) != (b.succeeded, b.failed)
        {
            out.push(format!(
                "{name}: succeeded/failed {:?} in the calm run, {:?} in this one",
                (a.succeeded, a.failed),
                (b.succeeded, b.failed)
            ));
        }
    }
    out
}

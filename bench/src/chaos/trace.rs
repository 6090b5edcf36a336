//! `history.log` of a chaos run: every Job status and pod event the test's
//! watches saw, merged in arrival order, with pod names for the UIDs of
//! `uncountedTerminatedPods`, to read beside kcm-rs's logs and the proxy's
//! record when a check fails.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Instant, SystemTime};

use k8s_openapi::api::batch::v1::Job;

use super::checks::has_tracking;
use kcm_e2e::history::{PodHistory, Seen};

/// UID → pod name, from every pod event seen.
pub(super) fn pod_names(pods: &PodHistory) -> HashMap<String, String> {
    pods.all()
        .iter()
        .filter_map(|s| {
            let m = &s.pod().metadata;
            Some((m.uid.clone()?, m.name.clone()?))
        })
        .collect()
}

fn wall(at: Instant, anchor: (Instant, SystemTime)) -> String {
    let t = match at.checked_duration_since(anchor.0) {
        Some(d) => anchor.1 + d,
        None => anchor.1 - anchor.0.duration_since(at),
    };
    kcm_e2e::faults::rfc3339(Some(t))
}

fn job_line(j: &Job, names: &HashMap<String, String>) -> String {
    let s = j.status.clone().unwrap_or_default();
    let named = |uids: Option<Vec<String>>| {
        uids.unwrap_or_default()
            .iter()
            .map(|u| names.get(u).cloned().unwrap_or_else(|| u.clone()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let u = s.uncounted_terminated_pods.unwrap_or_default();
    let conds = s
        .conditions
        .unwrap_or_default()
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}/{}", c.type_, c.reason.as_deref().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "job {} rv={} active={} ready={} terminating={} succeeded={} failed={} \
         uncounted.succeeded=[{}] uncounted.failed=[{}] completed={} failedIndexes={} conditions=[{}]",
        j.metadata.name.as_deref().unwrap_or(""),
        j.metadata.resource_version.as_deref().unwrap_or(""),
        s.active.unwrap_or(0),
        s.ready.unwrap_or(0),
        s.terminating.unwrap_or(0),
        s.succeeded.unwrap_or(0),
        s.failed.unwrap_or(0),
        named(u.succeeded),
        named(u.failed),
        s.completed_indexes.as_deref().unwrap_or("-"),
        s.failed_indexes.as_deref().unwrap_or("-"),
        conds
    )
}

fn pod_line(seen: &Seen) -> String {
    let p = seen.pod();
    let m = &p.metadata;
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("-");
    let ann = |k: &str| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(k).cloned())
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "pod {} uid={} rv={} {} phase={} deleting={} finalizer={} index={}",
        m.name.as_deref().unwrap_or(""),
        m.uid.as_deref().unwrap_or(""),
        m.resource_version.as_deref().unwrap_or(""),
        if matches!(seen, Seen::Deleted(_)) {
            "DELETED"
        } else {
            "applied"
        },
        phase,
        seen.deleting(),
        has_tracking(p),
        ann("batch.kubernetes.io/job-completion-index"),
    )
}

/// Writes the merged history to `path`.
pub(super) fn write(
    path: &std::path::Path,
    jobs: &[(Instant, Job)],
    pods: &PodHistory,
    anchor: (Instant, SystemTime),
) -> std::io::Result<()> {
    let names = pod_names(pods);
    let mut lines: Vec<(Instant, String)> = jobs
        .iter()
        .map(|(at, j)| (*at, job_line(j, &names)))
        .collect();
    let mut seen_names: Vec<String> = pods
        .all()
        .iter()
        .filter_map(|s| s.pod().metadata.name.clone())
        .collect();
    seen_names.sort();
    seen_names.dedup();
    for name in seen_names {
        lines.extend(
            pods.timed(&name, None)
                .iter()
                .map(|(at, s)| (*at, pod_line(s))),
        );
    }
    lines.sort_by_key(|(at, _)| *at);
    let mut out = String::new();
    for (at, l) in lines {
        let _ = writeln!(out, "{} {l}", wall(at, anchor));
    }
    std::fs::write(path, out)
}

//! Real graceful termination on a real node (`make realnode-termination`;
//! ignored by `cargo test`: it needs a node session, see docs/real-node.md).
//! The pods of `e2e/realnode/scenarios/job.yaml` with `IGNORE_TERM=1` ignore
//! SIGTERM, so only the kubelet's SIGKILL at the end of their grace period
//! ends them (exit 137):
//!
//! - `failjob`: a real exit 42 fails the Job by FailJob while two siblings
//!   ignore SIGTERM (grace 20 s): `FailureTarget` at once, `Failed` only once
//!   they are gone;
//! - `replace-failed`: `podReplacementPolicy: Failed` creates the
//!   replacement of a deleted pod only once it is Failed (about 20 s later);
//!   `replace-terminating` is the control (`TerminatingOrFailed`: at once);
//! - `deadline`: `activeDeadlineSeconds` deletes the running pods
//!   (`DeadlineExceeded`), `Failed` once they are gone;
//! - `suspend`: suspending deletes the running pods.
//!
//! Each with kcm-rs and with KCM's four controllers on the same node: the
//! same checks must pass for both, and the facts (conditions, counts, exit
//! codes) must be the same; the timings are printed.
//! The table goes to bench/results/realnode-kep/<minor>-termination.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kcm_e2e::realnode::procs::Which;
use kcm_e2e::realnode::{
    self, PodEnd, RealNode, Scenario, between, job_has, pod_spec, procs, scenario_job, secs,
    set_env, terminal, wait_seen,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

const JOB: &str = "term";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    FailJob,
    ReplaceFailed,
    ReplaceTerminating,
    Deadline,
    Suspend,
}

impl Case {
    const ALL: [Case; 5] = [
        Case::FailJob,
        Case::ReplaceFailed,
        Case::ReplaceTerminating,
        Case::Deadline,
        Case::Suspend,
    ];
    fn slug(self) -> &'static str {
        match self {
            Case::FailJob => "failjob",
            Case::ReplaceFailed => "replace-failed",
            Case::ReplaceTerminating => "replace-terminating",
            Case::Deadline => "deadline",
            Case::Suspend => "suspend",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Case::FailJob => "FailJob (exit 42) while 2 siblings ignore SIGTERM, grace 20 s",
            Case::ReplaceFailed => {
                "podReplacementPolicy: Failed, a pod deleted (ignores SIGTERM, grace 20 s)"
            }
            Case::ReplaceTerminating => {
                "control: podReplacementPolicy: TerminatingOrFailed, the same deletion"
            }
            Case::Deadline => "activeDeadlineSeconds 15, 2 pods ignore SIGTERM, grace 10 s",
            Case::Suspend => "suspend: true, 2 pods ignore SIGTERM, grace 10 s",
        }
    }
}

/// What one case showed: facts that must match between kcm-rs and KCM,
/// checks that must hold for both, and timings.
#[derive(Debug, Default)]
struct Outcome {
    facts: Vec<(&'static str, String)>,
    checks: Vec<(&'static str, bool)>,
    timings: Vec<(&'static str, Option<Duration>)>,
    error: Option<String>,
}

impl Outcome {
    fn fact(&mut self, k: &'static str, v: impl ToString) {
        self.facts.push((k, v.to_string()));
    }
    fn check(&mut self, k: &'static str, ok: bool) {
        self.checks.push((k, ok));
    }
    fn time(&mut self, k: &'static str, d: Option<Duration>) {
        self.timings.push((k, d));
    }
}

fn job_for(node: &RealNode, ns: &str, case: Case) -> Job {
    let mut job = scenario_job(node, ns, JOB);
    set_env(&mut job, "IGNORE_TERM", "1");
    let spec = job.spec.as_mut().expect("spec");
    match case {
        Case::FailJob => {
            spec.parallelism = Some(3);
            spec.completions = Some(3);
        }
        Case::ReplaceFailed | Case::ReplaceTerminating => {
            spec.pod_failure_policy = None;
            spec.backoff_limit = Some(6);
            spec.pod_replacement_policy = Some(
                if case == Case::ReplaceFailed {
                    "Failed"
                } else {
                    "TerminatingOrFailed"
                }
                .into(),
            );
        }
        Case::Deadline => {
            spec.pod_failure_policy = None;
            spec.active_deadline_seconds = Some(15);
        }
        Case::Suspend => spec.pod_failure_policy = None,
    }
    let grace = match case {
        Case::FailJob | Case::ReplaceFailed | Case::ReplaceTerminating => 20,
        Case::Deadline | Case::Suspend => 10,
    };
    pod_spec(&mut job).termination_grace_period_seconds = Some(grace);
    job
}

async fn run(node: &RealNode, case: Case) -> Outcome {
    let sc = Scenario::new(node, &format!("term-{}", case.slug())).await;
    let mut out = Outcome::default();
    if let Err(e) = drive(&sc, case, &mut out).await {
        out.error = Some(e);
    }
    if let Err(e) = sc.cleanup().await {
        out.error.get_or_insert(e);
    }
    out
}

/// Max `status.terminating` and `status.active` over the Job's events
/// (before `until`, when given).
fn max_seen(sc: &Scenario<'_>, until: Option<Instant>, f: impl Fn(&Job) -> i32) -> i32 {
    sc.jobw
        .of(JOB)
        .iter()
        .filter(|(at, _)| until.is_none_or(|u| *at < u))
        .map(|(_, j)| f(j))
        .max()
        .unwrap_or(0)
}

fn terminating(j: &Job) -> i32 {
    j.status.as_ref().and_then(|s| s.terminating).unwrap_or(0)
}

fn active(j: &Job) -> i32 {
    j.status.as_ref().and_then(|s| s.active).unwrap_or(0)
}

/// The Job as first seen with condition `type_`.
fn first_with(sc: &Scenario<'_>, type_: &str) -> Option<(Instant, Job)> {
    sc.jobw.first(JOB, |j| job_has(j, type_))
}

/// Waits until every listed pod is gone (deleted from the API).
async fn wait_gone(sc: &Scenario<'_>, pods: &[String], timeout: Duration) -> Option<Instant> {
    let end = Instant::now() + timeout;
    loop {
        if pods.iter().all(|p| sc.history.deleted(p)) {
            return Some(Instant::now());
        }
        if Instant::now() > end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ends(sc: &Scenario<'_>, pods: &[String]) -> String {
    let mut v: Vec<String> = pods
        .iter()
        .map(|p| PodEnd::of(&sc.history, p).render())
        .collect();
    v.sort();
    v.join("; ")
}

async fn drive(sc: &Scenario<'_>, case: Case, out: &mut Outcome) -> Result<(), String> {
    let job = job_for(sc.node, &sc.ns, case);
    let n = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1) as usize;
    sc.create_job(&job).await;
    let pods = sc.wait_running(JOB, n, Duration::from_secs(120)).await?;
    match case {
        Case::FailJob => {
            let (victim, siblings) = (&pods[0], &pods[1..]);
            sc.node.signal(&sc.ns, victim, "42");
            let t42 = Instant::now();
            failed_after_grace(
                sc,
                out,
                "PodFailurePolicy",
                siblings,
                20,
                ("exit 42", Some(t42)),
            )
            .await
        }
        Case::Deadline => {
            let wait = sc.wait_job(JOB, Duration::from_secs(90), "FailureTarget", |j| {
                job_has(j, "FailureTarget")
            });
            wait.await?;
            let start = sc
                .jobw
                .first(JOB, |j| {
                    j.status.as_ref().is_some_and(|s| s.start_time.is_some())
                })
                .map(|(t, _)| t);
            failed_after_grace(sc, out, "DeadlineExceeded", &pods, 10, ("start", start)).await
        }
        Case::ReplaceFailed | Case::ReplaceTerminating => replace(sc, case, &pods, out).await,
        Case::Suspend => suspend(sc, &pods, out).await,
    }
}

/// The Job condition labels in the order they appeared.
fn conditions(sc: &Scenario<'_>) -> Vec<String> {
    sc.jobw
        .conditions(JOB)
        .into_iter()
        .map(|(_, l)| l)
        .collect()
}

/// When the last of `pods` was seen being deleted.
fn last_deleting(sc: &Scenario<'_>, pods: &[String]) -> Option<Instant> {
    pods.iter()
        .filter_map(|p| sc.history.deleting_at(p, None))
        .max()
}

/// When the last of `pods` was seen terminal.
fn last_ended(sc: &Scenario<'_>, pods: &[String]) -> Option<Instant> {
    let ended = |p: &String| {
        sc.history
            .first_at(p, None, |s| terminal(s.pod()))
            .map(|(_, t)| t)
    };
    pods.iter().filter_map(ended).max()
}

fn all_killed(sc: &Scenario<'_>, pods: &[String]) -> bool {
    pods.iter()
        .all(|p| PodEnd::of(&sc.history, p).exit == "137")
}

/// The Job fails for `reason` while `killed` (which ignore SIGTERM, grace
/// `grace` s) are deleted: `FailureTarget` at once, `Failed` only once they
/// are gone. `from` names what the first timing starts at.
async fn failed_after_grace(
    sc: &Scenario<'_>,
    out: &mut Outcome,
    reason: &str,
    killed: &[String],
    grace: u64,
    from: (&'static str, Option<Instant>),
) -> Result<(), String> {
    sc.wait_job(JOB, Duration::from_secs(90), "Failed", |j| {
        job_has(j, "Failed")
    })
    .await?;
    let (ft, _) = first_with(sc, "FailureTarget").ok_or("no FailureTarget seen")?;
    let (fd, failed) = first_with(sc, "Failed").ok_or("no Failed seen")?;
    let conds = conditions(sc);
    let (deleting, ended) = (last_deleting(sc, killed), last_ended(sc, killed));
    let st = failed.status.clone().unwrap_or_default();
    out.fact("conditions", conds.join(" → "));
    out.fact("pods killed", ends(sc, killed));
    out.fact(
        "terminating while FailureTarget only",
        max_seen(sc, Some(fd), terminating),
    );
    out.fact(
        "at Failed: active/terminating",
        format!("{}/{}", active(&failed), terminating(&failed)),
    );
    out.fact(
        "failed/succeeded at Failed",
        format!("{}/{}", st.failed.unwrap_or(0), st.succeeded.unwrap_or(0)),
    );
    out.check(
        "FailureTarget then Failed",
        conds
            == [
                format!("FailureTarget({reason})"),
                format!("Failed({reason})"),
            ],
    );
    out.check(
        "pods deleted, killed at grace end (137)",
        all_killed(sc, killed),
    );
    out.check(
        "Failed after the pods ended",
        ended.is_some_and(|e| e <= fd),
    );
    out.check(
        "Failed at least grace - 3 s after FailureTarget",
        between(Some(ft), Some(fd)) >= Some(Duration::from_secs(grace - 3)),
    );
    out.check(
        "at Failed: none active or terminating",
        active(&failed) == 0 && terminating(&failed) == 0,
    );
    out.time(
        match from.0 {
            "start" => "start → FailureTarget",
            _ => "exit 42 → FailureTarget",
        },
        between(from.1, Some(ft)),
    );
    out.time("FailureTarget → pods deleting", between(Some(ft), deleting));
    out.time("FailureTarget → pods ended", between(Some(ft), ended));
    out.time("FailureTarget → Failed", between(Some(ft), Some(fd)));
    Ok(())
}

/// One pod deleted: when does its replacement come?
async fn replace(
    sc: &Scenario<'_>,
    case: Case,
    pods: &[String],
    out: &mut Outcome,
) -> Result<(), String> {
    let victim = &pods[0];
    sc.pods
        .delete(victim, &DeleteParams::default())
        .await
        .map_err(|e| format!("delete {victim}: {e}"))?;
    let t_del = Instant::now();
    // The replacement: the first new pod name the watch shows.
    let end = Instant::now() + Duration::from_secs(60);
    let rep_at = loop {
        let found = sc.history.all().iter().find_map(|s| {
            let name = s.pod().metadata.name.clone()?;
            (!pods.contains(&name)).then_some(name)
        });
        if let Some(name) = found {
            break sc.history.first_at(&name, None, |_| true).map(|(_, t)| t);
        }
        if Instant::now() > end {
            return Err("no replacement within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let victim_end = wait_seen(&sc.history, victim, Duration::from_secs(60), terminal).await;
    sc.wait_running(JOB, 2, Duration::from_secs(60)).await?;
    let after = rep_at.zip(victim_end).is_some_and(|(r, v)| r >= v);
    out.fact("replacement after the deleted pod is Failed", after);
    out.fact("deleted pod", ends(sc, std::slice::from_ref(victim)));
    out.fact("max terminating", max_seen(sc, None, terminating));
    let gap = between(Some(t_del), rep_at);
    if case == Case::ReplaceFailed {
        out.check("replacement only once the pod is Failed", after);
        out.check(
            "replacement >= 15 s after the delete",
            gap >= Some(Duration::from_secs(15)),
        );
    } else {
        // The replacement comes after the Job's backoff for the deleted pod
        // (10 s), before the pod has ended.
        out.check("replacement while the pod terminates", !after);
    }
    out.check(
        "deleted pod killed at grace end (137)",
        all_killed(sc, std::slice::from_ref(victim)),
    );
    out.time("delete → replacement", gap);
    out.time(
        "delete → deleted pod Failed",
        between(Some(t_del), victim_end),
    );
    let job = sc.jobs.get(JOB).await.map_err(|e| e.to_string())?;
    out.fact("failed", job.status.and_then(|s| s.failed).unwrap_or(0));
    Ok(())
}

/// Suspending deletes the running pods; they die at the end of their grace.
async fn suspend(sc: &Scenario<'_>, pods: &[String], out: &mut Outcome) -> Result<(), String> {
    let patch = Patch::Merge(json!({"spec": {"suspend": true}}));
    sc.jobs
        .patch(JOB, &PatchParams::default(), &patch)
        .await
        .map_err(|e| format!("suspend: {e}"))?;
    let t_s = Instant::now();
    let gone = wait_gone(sc, pods, Duration::from_secs(60)).await;
    let j = sc
        .wait_job(
            JOB,
            Duration::from_secs(30),
            "Suspended, nothing active",
            |j| job_has(j, "Suspended") && active(j) == 0 && terminating(j) == 0,
        )
        .await?;
    let conds = conditions(sc);
    let st = j.status.clone().unwrap_or_default();
    out.fact("conditions", conds.join(" → "));
    out.fact("pods", ends(sc, pods));
    out.fact(
        "failed/succeeded/active",
        format!(
            "{}/{}/{}",
            st.failed.unwrap_or(0),
            st.succeeded.unwrap_or(0),
            active(&j)
        ),
    );
    out.fact("max terminating", max_seen(sc, None, terminating));
    out.check(
        "Suspended(JobSuspended)",
        conds.iter().any(|c| c == "Suspended(JobSuspended)"),
    );
    out.check(
        "running pods deleted and killed (137)",
        all_killed(sc, pods),
    );
    out.check("pods gone", gone.is_some());
    out.check("not Failed", !job_has(&j, "Failed"));
    let suspended = first_with(sc, "Suspended").map(|(t, _)| t);
    out.time("suspend → Suspended", between(Some(t_s), suspended));
    out.time(
        "suspend → pods deleting",
        between(Some(t_s), last_deleting(sc, pods)),
    );
    out.time(
        "suspend → pods ended",
        between(Some(t_s), last_ended(sc, pods)),
    );
    out.time("suspend → pods gone", between(Some(t_s), gone));
    Ok(())
}

fn render(node: &RealNode, results: &BTreeMap<(Case, Which), Outcome>, cases: &[Case]) -> String {
    let mut s = format!(
        "# Real graceful termination, Kubernetes {}\n\n{}\n\n\
         `make realnode-termination K8S_VERSIONS={}` (e2e/tests/realnode_termination.rs). The pods \
         ignore SIGTERM (`trap '' TERM`), so the kubelet's SIGKILL at the end of the grace period \
         ends them (exit 137). Facts must be the same under kcm-rs and KCM; checks must pass for both.\n",
        node.version,
        realnode::run_header(node),
        node.version
    );
    for &c in cases {
        let (rs, kcm) = (&results[&(c, Which::KcmRs)], &results[&(c, Which::Kcm)]);
        s.push_str(&format!(
            "\n## {}: {}\n\n| | kcm-rs | KCM | same |\n|---|---|---|---|\n",
            c.slug(),
            c.label()
        ));
        for (e, label) in [(&rs.error, "kcm-rs"), (&kcm.error, "KCM")] {
            if let Some(e) = e {
                s.push_str(&format!(
                    "| ERROR ({label}) | {} | | |\n",
                    e.replace('|', "\\|").replace('\n', " ")
                ));
            }
        }
        for (k, v) in &rs.facts {
            let other = kcm
                .facts
                .iter()
                .find(|(k2, _)| k2 == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("-");
            s.push_str(&format!(
                "| {k} | {v} | {other} | {} |\n",
                if v == other { "yes" } else { "**no**" }
            ));
        }
        for (k, ok) in &rs.checks {
            let other = kcm.checks.iter().find(|(k2, _)| k2 == k).map(|(_, v)| *v);
            let mark = |b: bool| if b { "pass" } else { "**FAIL**" };
            s.push_str(&format!(
                "| check: {k} | {} | {} | |\n",
                mark(*ok),
                other.map_or("-", mark)
            ));
        }
        for (k, d) in &rs.timings {
            let other = kcm
                .timings
                .iter()
                .find(|(k2, _)| k2 == k)
                .and_then(|(_, d)| *d);
            s.push_str(&format!("| {k} (s) | {} | {} | |\n", secs(*d), secs(other)));
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real node session: make realnode-termination"]
async fn graceful_termination_of_real_pods_kcm_rs_as_kcm() {
    let node = RealNode::from_session().await;
    let cases = procs::selected("KCM_TERM_CASES", &Case::ALL, Case::slug);
    node.wait_ready_untainted(Duration::from_secs(60))
        .await
        .expect("node");
    let (results, mut failures) =
        procs::both_passes(&node, "termination", &cases, Case::slug, |c| run(&node, c)).await;
    let table = render(&node, &results, &cases);
    realnode::write_result(&format!("{}-termination.md", node.version), &table);
    for ((case, which), o) in &results {
        if let Some(e) = &o.error {
            failures.push(format!("{} {}: {e}", which.label(), case.slug()));
        }
        for (k, ok) in &o.checks {
            if !ok {
                failures.push(format!(
                    "{} {}: check failed: {k}",
                    which.label(),
                    case.slug()
                ));
            }
        }
    }
    for &c in &cases {
        let (rs, kcm) = (&results[&(c, Which::KcmRs)], &results[&(c, Which::Kcm)]);
        if rs.facts != kcm.facts {
            failures.push(format!(
                "{}: kcm-rs {:?} != KCM {:?}",
                c.slug(),
                rs.facts,
                kcm.facts
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

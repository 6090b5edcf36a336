//! Upgrade and rollback by rolling update (image A -> B -> A) while a stream
//! of Jobs runs: every Job must end exactly (no pod lost, none counted
//! twice, none left with the tracking finalizer); the audit log gives each
//! handover's service gap (the old leader's last write to the new one's
//! first); the PodDisruptionBudget guards the replicas.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams};
use kube::{Api, ResourceExt};

use super::audit::{Event, sa};
use super::checks::{Problems, SELECTOR};
use super::jobs;
use super::monitoring;
use super::node::{Node, run};

/// A token that may read kcm-rs's /metrics: the one the installed
/// ServiceMonitor of `ns` scrapes with (the monitoring component's
/// kcm-rs-metrics-scraper, bound to system:kcm-rs:metrics-reader).
pub async fn metrics_token(node: &Node, ns: &str) -> String {
    let sm = monitoring::service_monitor(node, ns);
    monitoring::endpoint_token(&node.client().await, &sm, 0).await
}

/// `kcm_rs_build_info`'s git_commit as each running replica reports it on
/// its /metrics (HTTPS, from the node, as a scraper).
pub async fn commits(client: &kube::Client, ns: &str, token: &str) -> BTreeMap<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("pods");
    let mut out = BTreeMap::new();
    for p in list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let auth = format!("Authorization: Bearer {token}");
        let url = format!("https://{ip}:10257/metrics");
        let body = run(std::process::Command::new("curl").args([
            "-sk",
            "--max-time",
            "5",
            "-H",
            &auth,
            &url,
        ]))
        .unwrap_or_default();
        let commit = body
            .lines()
            .find(|l| l.starts_with("kcm_rs_build_info{"))
            .and_then(|l| l.split("git_commit=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_string();
        out.insert(p.name_any(), commit);
    }
    out
}

fn n(x: Option<i32>) -> i32 {
    x.unwrap_or(0)
}

fn pdb_line(pdb: &PodDisruptionBudget) -> String {
    let s = pdb.status.clone().unwrap_or_default();
    format!(
        "expectedPods={} currentHealthy={} desiredHealthy={} disruptionsAllowed={}",
        n(s.expected_pods),
        n(s.current_healthy),
        n(s.desired_healthy),
        n(s.disruptions_allowed)
    )
}

/// The PDB in place: its status (written by kcm-rs's own disruption
/// controller) allows one disruption; evicting both replicas at once, the
/// second eviction is refused (429) until the first is replaced.
pub async fn pdb(client: &kube::Client, ns: &str, p: &mut Problems) -> String {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let before = pdbs.get("kcm-rs").await.expect("the PDB kcm-rs");
    let s = before.status.clone().unwrap_or_default();
    p.check(
        n(s.expected_pods) == 2 && n(s.disruptions_allowed) == 1,
        format!("PDB {ns}/kcm-rs: {}", pdb_line(&before)),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("pods");
    let mut answers = Vec::new();
    for pod in list.items.iter().take(2) {
        let r = pods.evict(&pod.name_any(), &EvictParams::default()).await;
        answers.push(match r {
            Ok(_) => "201".to_string(),
            Err(kube::Error::Api(e)) => e.code.to_string(),
            Err(e) => e.to_string(),
        });
    }
    p.check(
        answers == ["201", "429"],
        format!("evicting both replicas: {answers:?} (the second refused by the PDB)"),
    );
    format!(
        "PDB `{ns}/kcm-rs` before: {}; evicting both replicas at once: {}\n",
        pdb_line(&before),
        answers.join(", ")
    )
}

/// One leadership handover seen in the audit log.
pub struct Handover {
    pub from: String,
    pub to: String,
    /// Old leader's last Lease write -> new leader's first.
    pub lease_gap: Duration,
    /// Old leader's last controller write -> new leader's first.
    pub work_gap: Option<Duration>,
}

/// The handovers: the Lease's writers in order, told apart by source
/// address (each replica its pod IP); the controllers' writes around each.
pub fn handovers(events: &[Event], ns: &str, lease: &str, controllers: &[String]) -> Vec<Handover> {
    let process = sa(ns, "kcm-rs");
    let lease_writes: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.user == process
                && e.resource == "coordination.k8s.io/leases"
                && e.name == lease
                && e.is_write()
                && e.code < 300
        })
        .collect();
    let work: Vec<&Event> = events
        .iter()
        .filter(|e| controllers.contains(&e.user) && e.is_write() && e.code < 300)
        .collect();
    let mut out = Vec::new();
    for pair in lease_writes.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.source == b.source {
            continue;
        }
        let last = work
            .iter()
            .filter(|e| e.source == a.source && e.at <= b.at)
            .map(|e| e.at)
            .max();
        let first = work
            .iter()
            .filter(|e| e.source == b.source && e.at >= b.at)
            .map(|e| e.at)
            .min();
        let gap = |x: jiff::Timestamp, y: jiff::Timestamp| {
            Duration::try_from(y.duration_since(x)).unwrap_or_default()
        };
        out.push(Handover {
            from: a.source.clone(),
            to: b.source.clone(),
            lease_gap: gap(a.at, b.at),
            work_gap: last.zip(first).map(|(x, y)| gap(x, y)),
        });
    }
    out
}

/// The handovers as a Markdown table (pod IPs, the Lease's and the
/// controllers' gaps).
pub fn gaps_markdown(hs: &[Handover]) -> String {
    let mut gaps = String::from(
        "| handover (pod IPs) | Lease: old leader's last write -> new leader's first | controllers: old leader's last write -> new leader's first |\n|---|---|---|\n",
    );
    for h in hs {
        gaps.push_str(&format!(
            "| {} -> {} | {:.2} s | {} |\n",
            h.from,
            h.to,
            h.lease_gap.as_secs_f64(),
            h.work_gap
                .map_or("no write on one side".into(), |g| format!(
                    "{:.2} s",
                    g.as_secs_f64()
                ))
        ));
    }
    gaps
}

/// Creates a stream Job every `every` until `stop`; returns their names.
pub fn stream(
    client: kube::Client,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut names = Vec::new();
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            let job = jobs::stream_job(n);
            names.push(jobs::create(&client, &job).await.name_any());
            n += 1;
            tokio::time::sleep(every).await;
        }
        names
    })
}

pub struct Rollout {
    pub what: String,
    pub took: Duration,
    pub commits: BTreeMap<String, String>,
}

/// `kubectl <args>` on the Deployment, then its rollout to the end.
pub async fn roll(
    node: &Node,
    client: &kube::Client,
    ns: &str,
    token: &str,
    what: &str,
    args: &[&str],
) -> Rollout {
    let began = Instant::now();
    node.kubectl(args);
    node.rollout_status(ns, "300s");
    let took = began.elapsed();
    // The replaced pods may still be terminating: the new ones only.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Rollout {
        what: what.into(),
        took,
        commits: commits(client, ns, token).await,
    }
}

/// The stream Jobs by end: how many, their pods, the pods whose end the
/// Job's status misses (lost) or counts twice, and the pods left with the
/// tracking finalizer.
pub fn jobs_markdown(ends: &BTreeMap<String, jobs::End>) -> String {
    #[derive(Default)]
    struct Row {
        jobs: usize,
        pods: usize,
        lost: usize,
        twice: usize,
        finalizers: usize,
    }
    let mut tally: BTreeMap<String, Row> = BTreeMap::new();
    for e in ends.values() {
        let r = tally.entry(e.line.clone()).or_default();
        let (lost, twice) = e.lost_and_twice();
        r.jobs += 1;
        r.pods += e.pods_ended.0 + e.pods_ended.1 + e.unfinished;
        r.lost += lost;
        r.twice += twice;
        r.finalizers += e.finalizers;
    }
    let mut s = String::from(
        "| Jobs | end | pods | pods lost (ended, not in the status) | counted twice (in the status, no pod) | left with the tracking finalizer |\n|---|---|---|---|---|---|\n",
    );
    for (line, r) in tally {
        s.push_str(&format!(
            "| {} | {line} | {} | {} | {} | {} |\n",
            r.jobs, r.pods, r.lost, r.twice, r.finalizers
        ));
    }
    s
}

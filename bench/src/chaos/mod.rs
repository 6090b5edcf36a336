//! The chaos driver (`make chaos`): a mixed Job workload through the pod
//! simulator while a seeded schedule SIGKILLs the kcm-rs binary and starts
//! it again; the same seed once without kills; then the checks of issue
//! "[reliability]" on the final API state and on a watch history of every
//! pod and Job:
//!
//! * the same terminal condition (type, reason, message with pod names
//!   normalised) on every Job as the run without kills, and the same
//!   `completedIndexes`/`failedIndexes` where they are deterministic;
//! * counters never decrease; a UID never re-enters
//!   `uncountedTerminatedPods` once it left (counted once); no Job counts
//!   more succeeded or failed pods than the history shows (and a Job
//!   complete by its completions counts every succeeded pod);
//! * no pod keeps the tracking finalizer; never more active pods than
//!   `parallelism`; every `DisruptionTarget` before its pod's delete.
//!
//! Outcomes are deterministic: the simulator draws them from the Job name
//! and the pod's index (Indexed) or give every pod of a Job the same plan.
//!
//! kcm-rs always talks to the API server through a [`FaultProxy`], which
//! counts its requests; with [`ChaosConfig::faults`] the proxy also injects
//! API faults (without: rate 0, it only forwards). kcm-rs exiting on its
//! own (e.g. its start-up probe met a fault) is logged in
//! [`ChaosReport::exits`] and it is started again.

use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use kcm_e2e::control_plane::tail;
use kcm_e2e::faults::{self, Fault, FaultProxy, FaultSettings};

mod checks;
mod trace;
pub use checks::compare;
use checks::{check_counts, check_disruption_order, check_jobs, check_pods, has_tracking};
use kcm_e2e::history::PodHistory;
use kcm_e2e::{ControlPlane, HarnessError, TestNamespace};
use kcm_sim::{self as sim, SimConfig, SimStats};

const TRACKING: &str = "batch.kubernetes.io/job-tracking";
/// The taint put on one simulated node: pods of Jobs that do not tolerate it
/// are evicted (with `DisruptionTarget`, reason `DeletionByTaintManager`).
const TAINT_KEY: &str = "chaos.kcm-rs.io/evict";

#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub seed: u64,
    /// SIGKILLs to deliver (the run lasts until they are all delivered and
    /// every Job is terminal).
    pub kills: usize,
    /// Completions of the NonIndexed Jobs; more means a longer run.
    pub scale: i32,
    pub timeout: Duration,
    /// API faults injected between kcm-rs and the API server; `None`: the
    /// proxy only forwards (and counts requests).
    pub faults: Option<FaultSettings>,
    /// Where to copy the logs of every run (kcm-rs, the proxy's record,
    /// `history.log` of Job and pod events, audit); `None`: only runs with
    /// violations are kept, under the system's temporary directory.
    pub keep_dir: Option<std::path::PathBuf>,
}

/// What one run ended with, per Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    pub condition: String,
    pub completed_indexes: Option<String>,
    pub failed_indexes: Option<String>,
    pub succeeded: i32,
    pub failed: i32,
}

#[derive(Debug, Default, Clone)]
pub struct ChaosReport {
    pub kills: usize,
    /// Requests kcm-rs sent (every process, through the proxy).
    pub requests: usize,
    /// Of those, watches.
    pub watch_requests: usize,
    /// Watches that got a fault (any kind).
    pub faulted_watches: usize,
    /// Faults the proxy injected, per kind.
    pub faults: BTreeMap<Fault, usize>,
    /// Of those, error answers that replaced an applied write.
    pub faults_after_write: usize,
    /// One line per kind, e.g. `429 ×12, 409 ×3 (2 after the write)`.
    pub fault_summary: String,
    /// kcm-rs exits not caused by a kill: `kcm-rs-N: status: last log line`.
    pub exits: Vec<String>,
    /// Where the logs were copied (see [`ChaosConfig::keep_dir`]).
    pub kept: Option<std::path::PathBuf>,
    pub pods: usize,
    /// Pods that got a `DisruptionTarget` condition.
    pub evicted: usize,
    /// Pod deletes by taint eviction and pod GC (from the audit log).
    pub disruption_deletes: usize,
    pub ends: BTreeMap<String, JobEnd>,
    /// Invariants broken (must be empty).
    pub violations: Vec<String>,
    pub elapsed: Duration,
}

impl ChaosReport {
    /// kcm-rs's requests per pod seen.
    pub fn requests_per_pod(&self) -> f64 {
        self.requests as f64 / self.pods.max(1) as f64
    }
    /// Faults injected, all kinds.
    pub fn faults_total(&self) -> usize {
        self.faults.values().sum()
    }
}

/// A small deterministic generator (xorshift64*), so a seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The workload: name → Job spec fields (template and annotations added).
fn workload(scale: i32) -> Vec<(String, Value, &'static str)> {
    let n = scale.max(2);
    let pol = |rules: Value| json!({ "rules": rules });
    let fail42 = json!({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}});
    let ignore = json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]});
    let count = json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}});
    let fail_index =
        json!({"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}});
    vec![
        // (name, spec, simulator annotations "run;outcomes")
        (
            "ok".into(),
            json!({"completions": n, "parallelism": 3}),
            "500ms..1500ms;",
        ),
        (
            "failjob".into(),
            json!({"completions": n, "parallelism": 3,
            "podFailurePolicy": pol(json!([fail42, ignore]))}),
            "1500ms..2500ms;100=42",
        ),
        (
            "count".into(),
            json!({"completions": n, "parallelism": 2, "backoffLimit": 3,
            "podFailurePolicy": pol(json!([fail42, ignore, count]))}),
            "800ms..1200ms;100=1",
        ),
        (
            "per-index".into(),
            json!({"completions": n, "parallelism": 3,
            "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "podFailurePolicy": pol(json!([ignore, fail_index, count]))}),
            "500ms..1500ms;70=0,20=1,10=3",
        ),
        (
            "success-policy".into(),
            json!({"completions": n, "parallelism": n,
            "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededIndexes": "0-1"}]}}),
            "1s..2s;",
        ),
        (
            "resumed".into(),
            json!({"completions": n, "parallelism": 2, "suspend": true}),
            "500ms..1s;",
        ),
        (
            "disrupted".into(),
            json!({"completions": n, "parallelism": 3,
            "podFailurePolicy": pol(json!([ignore, count]))}),
            "2s..3s;",
        ),
    ]
}

fn job_object(name: &str, spec: &Value, plan: &str) -> Result<Job, HarnessError> {
    let (run, outcomes) = plan.split_once(';').unwrap_or((plan, ""));
    let mut ann = serde_json::Map::new();
    ann.insert(sim::ANN_RUN.into(), json!(run));
    if !outcomes.is_empty() {
        ann.insert(sim::outcomes::ANN_OUTCOMES.into(), json!(outcomes));
    }
    // Every Job but "disrupted" tolerates the chaos taint.
    let tolerations = if name == "disrupted" {
        json!([])
    } else {
        json!([{"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}])
    };
    let mut body = json!({
        "metadata": {"name": name},
        "spec": {"template": {"metadata": {"annotations": ann},
            "spec": {"restartPolicy": "Never", "tolerations": tolerations,
                "containers": [{"name": "main", "image": "busybox"}]}}}
    });
    if let (Some(dst), Some(src)) = (body["spec"].as_object_mut(), spec.as_object()) {
        dst.extend(src.clone());
    }
    Ok(serde_json::from_value(body)?)
}

fn kcm_rs(
    bin: &std::path::Path,
    cp: &ControlPlane,
    kubeconfig: &std::path::Path,
    n: usize,
) -> Result<Child, HarnessError> {
    let log = std::fs::File::create(cp.dir().join(format!("kcm-rs-{n}.log")))?;
    Command::new(bin)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "--leader-elect=false",
            "--secure-port=0",
            "--pod-gc-period=1s",
            "--pod-gc-quarantine=1s",
            // Terminated pods over this are collected while Jobs run.
            "--terminated-pod-gc-threshold=10",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            what: bin.display().to_string(),
            source,
        })
}

/// Every watch event of the namespace's Jobs, in order.
type JobEvents = Arc<Mutex<Vec<(Instant, Job)>>>;

fn job_history(client: &kube::Client, ns: &str) -> (JobEvents, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = ev {
                sink.lock().push((Instant::now(), j));
            }
        }
    });
    (seen, task)
}

fn terminal(j: &Job) -> Option<String> {
    let cs = j.status.as_ref()?.conditions.as_ref()?;
    cs.iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        .map(|c| {
            format!(
                "{} {} {}",
                c.type_,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        })
}

/// Pod names in messages differ between runs: `ns/<job>-xxxxx` → `<pod>`.
fn normalise(msg: &str, ns: &str) -> String {
    msg.split(' ')
        .map(|w| {
            if w.starts_with(&format!("{ns}/")) {
                "<pod>"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One run: the workload with `kills` SIGKILLs (0: none).
pub async fn run(
    cfg: &ChaosConfig,
    bin: &std::path::Path,
    kills: usize,
) -> Result<ChaosReport, HarnessError> {
    let began = Instant::now();
    let anchor = (began, std::time::SystemTime::now());
    let cp = ControlPlane::start_with_audit()?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "chaos").await?;
    let settings = cfg.faults.clone().unwrap_or_else(FaultSettings::none);
    let stall = settings.stall;
    let proxy = FaultProxy::start(&cp, settings).await?;
    let via = proxy.kubeconfig().to_path_buf();
    let stats = Arc::new(SimStats::default());
    let sim_cfg = SimConfig::default();
    let sim_task = tokio::spawn(sim::run(
        client.clone(),
        sim_cfg.clone(),
        Arc::clone(&stats),
    ));
    let pods_history = PodHistory::start(&client, &ns.name).await;
    let (jobs_history, jobs_task) = job_history(&client, &ns.name);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let work = workload(cfg.scale);
    for (name, spec, plan) in &work {
        jobs.create(&PostParams::default(), &job_object(name, spec, plan)?)
            .await?;
    }
    let mut report = ChaosReport::default();
    let mut rng = Rng(cfg.seed.max(1));
    let mut started = 0;
    let mut child = kcm_rs(bin, &cp, &via, started)?;
    let (mut resumed, mut tainted) = (false, false);
    let deadline = Instant::now() + cfg.timeout;
    loop {
        let all_done = {
            let list = jobs.list(&Default::default()).await?;
            list.items.iter().all(|j| terminal(j).is_some())
        };
        if all_done && report.kills >= kills {
            break;
        }
        if Instant::now() > deadline {
            report
                .violations
                .push(format!("not finished within {:?}", cfg.timeout));
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Exited on its own: note why, start it again.
            let log = cp.dir().join(format!("kcm-rs-{started}.log"));
            report
                .exits
                .push(format!("kcm-rs-{started}: {status}: {}", tail(&log, 1)));
            started += 1;
            child = kcm_rs(bin, &cp, &via, started)?;
        }
        let secs = began.elapsed().as_secs_f64();
        if !resumed && secs > 4.0 {
            let p = json!({"spec": {"suspend": false}});
            jobs.patch("resumed", &PatchParams::default(), &Patch::Merge(&p))
                .await?;
            resumed = true;
        }
        if !tainted && secs > 6.0 {
            let nodes: Api<Node> = Api::all(client.clone());
            let t = json!({"spec": {"taints": [{"key": TAINT_KEY, "effect": "NoExecute"}]}});
            let node = format!("{}0", sim_cfg.node_prefix);
            nodes
                .patch(&node, &PatchParams::default(), &Patch::Merge(&t))
                .await?;
            tainted = true;
        }
        if report.kills < kills {
            tokio::time::sleep(Duration::from_millis(rng.between(300, 1500))).await;
            // SIGKILL: no clean-up, no lease release, mid-write.
            let _ = child.start_kill();
            let _ = child.wait().await;
            report.kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(0, 300))).await;
            started += 1;
            child = kcm_rs(bin, &cp, &via, started)?;
        } else {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Let the last syncs release every finalizer.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let settle = Instant::now();
    while pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .any(has_tracking)
    {
        if settle.elapsed() > Duration::from_secs(30) + stall {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let records = proxy.records();
    drop(proxy);
    report.requests = records.len();
    report.watch_requests = records.iter().filter(|r| r.watch).count();
    report.faulted_watches = records
        .iter()
        .filter(|r| r.watch && r.fault.is_some())
        .count();
    report.faults = faults::fault_counts(&records);
    report.faults_after_write = records.iter().filter(|r| r.after).count();
    report.fault_summary = faults::summary(&records);
    let final_jobs = jobs.list(&Default::default()).await?.items;
    let final_pods = pods.list(&Default::default()).await?.items;
    for j in &final_jobs {
        let s = j.status.clone().unwrap_or_default();
        let name = j.metadata.name.clone().unwrap_or_default();
        report.ends.insert(
            name,
            JobEnd {
                condition: terminal(j)
                    .map(|c| normalise(&c, &ns.name))
                    .unwrap_or_default(),
                completed_indexes: s.completed_indexes,
                failed_indexes: s.failed_indexes,
                succeeded: s.succeeded.unwrap_or(0),
                failed: s.failed.unwrap_or(0),
            },
        );
    }
    for p in final_pods.iter().filter(|p| has_tracking(p)) {
        report
            .violations
            .push(format!("tracking finalizer left on {}", p.name_any()));
    }
    let names = trace::pod_names(&pods_history);
    check_jobs(&jobs_history.lock(), &names, &mut report.violations);
    check_counts(&pods_history, &final_jobs, &mut report.violations);
    let late: HashSet<String> = records
        .iter()
        .filter(|r| r.landed_after_client())
        .filter_map(|r| r.created.clone())
        .collect();
    if !late.is_empty() {
        eprintln!(
            "chaos: {} pods created by requests that landed after their sender died: {late:?}",
            late.len()
        );
    }
    let seen = check_pods(&pods_history, &final_jobs, &late, &mut report);
    report.disruption_deletes =
        check_disruption_order(&cp.audit_log(), &ns.name, &seen, &mut report.violations);
    jobs_task.abort();
    sim_task.abort();
    faults::write_records(&cp.dir().join("fault-proxy.log"), &records)?;
    trace::write(
        &cp.dir().join("history.log"),
        &jobs_history.lock(),
        &pods_history,
        anchor,
    )?;
    if cfg.keep_dir.is_some() || !report.violations.is_empty() {
        report.kept = keep_logs(&cp, cfg, kills).ok();
    }
    report.elapsed = began.elapsed();
    Ok(report)
}

/// Copies the logs (kcm-rs's, the proxy's record, the watch history, the
/// audit log) out of the control plane's directory (removed when it stops).
fn keep_logs(
    cp: &ControlPlane,
    cfg: &ChaosConfig,
    kills: usize,
) -> std::io::Result<std::path::PathBuf> {
    let base = cfg.keep_dir.clone().unwrap_or_else(std::env::temp_dir);
    let name = format!(
        "kcm-chaos-seed{}-kills{kills}-{}-{}",
        cfg.seed,
        if cfg.faults.is_some() {
            "faults"
        } else {
            "nofaults"
        },
        jiff::Timestamp::now().as_second()
    );
    let dir = base.join(name);
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(cp.dir())? {
        let entry = entry?;
        let file = entry.file_name();
        let f = file.to_string_lossy();
        // Logs only: the kubeconfigs hold the admin's key.
        if f.ends_with(".log") {
            std::fs::copy(entry.path(), dir.join(&file))?;
        }
    }
    Ok(dir)
}

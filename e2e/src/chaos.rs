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
//!   `uncountedTerminatedPods` once it left (counted once);
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::control_plane::tail;
use crate::faults::{self, Fault, FaultProxy, FaultSettings};
use crate::history::{PodHistory, condition};
use crate::sim::{self, SimConfig, SimStats};
use crate::{ControlPlane, HarnessError, TestNamespace};

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
    /// Where to copy the logs (kcm-rs, proxy records, audit) of a run with
    /// violations; `None`: a new directory under the system's temporary one.
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
    /// Where the logs of a run with violations were copied.
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
fn job_history(
    client: &kube::Client,
    ns: &str,
) -> (Arc<Mutex<Vec<Job>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = ev {
                sink.lock().push(j);
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
            .push(format!("tracking finalizer left on {}", name_of(p)));
    }
    check_jobs(&jobs_history.lock(), &mut report.violations);
    let terminal = check_pods(&pods_history, &final_jobs, &mut report);
    report.disruption_deletes =
        check_disruption_order(&cp.audit_log(), &ns.name, &terminal, &mut report.violations);
    jobs_task.abort();
    sim_task.abort();
    faults::write_records(&cp.dir().join("fault-proxy.log"), &records)?;
    if !report.violations.is_empty() {
        report.kept = keep_logs(&cp, cfg, kills).ok();
    }
    report.elapsed = began.elapsed();
    Ok(report)
}

/// Copies the logs of a run with violations out of the control plane's
/// directory (removed when it stops).
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

fn has_tracking(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == TRACKING))
}

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Counters never decrease; a UID never re-enters the uncounted lists.
fn check_jobs(history: &[Job], out: &mut Vec<String>) {
    let mut last: HashMap<String, (i32, i32)> = HashMap::new();
    let mut listed: HashMap<String, HashSet<String>> = HashMap::new();
    let mut left: HashMap<String, HashSet<String>> = HashMap::new();
    for j in history {
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
            out.push(format!(
                "{name}: pod {uid} counted again after leaving uncountedTerminatedPods"
            ));
        }
        *prev = uids;
    }
}

/// Parallelism, and DisruptionTarget before delete, from the pod history.
fn check_pods(history: &PodHistory, jobs: &[Job], report: &mut ChaosReport) -> HashSet<String> {
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
    for seen in &events {
        let p = seen.pod();
        let name = name_of(p);
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
        let active = !seen.deleting() && !matches!(phase, "Succeeded" | "Failed");
        state.insert(name.clone(), (job.clone(), active));
        if matches!(phase, "Succeeded" | "Failed") {
            terminal_seen.insert(name.clone());
        }
        if condition(p, "DisruptionTarget").is_some_and(|c| c.status == "True") {
            with_dt.insert(name.clone());
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
    terminal_seen
}

/// From the audit log: every pod DELETE by taint eviction or pod GC came
/// after that component's own `pods/status` PATCH of the pod (the
/// `DisruptionTarget` append), except pod GC's deletes of terminated pods,
/// which upstream makes without one. (Other components may delete a pod
/// first; the taint manager may then still append its condition, as
/// upstream does, so the order is checked per deleting component.)
fn check_disruption_order(
    audit: &std::path::Path,
    ns: &str,
    terminal: &HashSet<String>,
    out: &mut Vec<String>,
) -> usize {
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
                if !exempt && !patched.contains(&(component.to_string(), pod.clone())) {
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

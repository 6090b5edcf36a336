//! What every workload shares: starting either controller manager with the
//! same flags, reading the API server's request counters, sampling a
//! process's CPU and peak RSS, running the simulator as its own process,
//! and creating objects in bulk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use serde_json::json;
use tokio::process::{Child, Command};

use kcm_e2e::procstat::{cpu_seconds, rss_mib};
use kcm_e2e::{ControlPlane, binaries};

/// Which controller manager a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    Upstream,
    KcmRs,
}

impl Impl {
    pub const BOTH: [Impl; 2] = [Impl::Upstream, Impl::KcmRs];

    pub fn label(self) -> &'static str {
        match self {
            Impl::Upstream => "upstream",
            Impl::KcmRs => "kcm-rs",
        }
    }
}

/// Where the binaries are and what every run shares.
#[derive(Debug, Clone)]
pub struct Env {
    pub kcm_rs: PathBuf,
    /// Extra flags for kcm-rs only (an A/B of one build, e.g. its
    /// `--kube-api-content-type`).
    pub kcm_rs_args: Vec<String>,
    /// Another kcm-rs binary in upstream KCM's place (an A/B of two
    /// builds: the rows' "upstream" side is this build, with the same
    /// `kcm_rs_args`).
    pub baseline: Option<PathBuf>,
    pub kcm_sim: PathBuf,
    pub started: Instant,
}

impl Env {
    /// Prints one progress line to stderr.
    pub fn progress(&self, msg: impl std::fmt::Display) {
        eprintln!("[{:>7.1}s] {msg}", self.started.elapsed().as_secs_f64());
    }
}

/// A controller manager process under measurement, with the API server it
/// talks to (kube-apiserver and its embedded etcd are one process here);
/// killed on drop.
pub struct Manager {
    child: Child,
    pub pid: u32,
    sampler: Sampler,
    server_pid: u32,
    server_sampler: Sampler,
    /// The API server's CPU seconds when the manager started.
    pub server_cpu_at_start: f64,
}

/// What the API server (with etcd) spent during a workload.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerCost {
    pub cpu_s: f64,
    /// Peak RSS since the controller manager started, MiB.
    pub peak_rss_mib: f64,
}

/// Starts `imp` against `cp` with `controllers` (KCM names) and the same
/// client QPS and burst, leader election off, no serving port. Upstream's
/// taint-eviction-controller needs the daemonset controller's pod index,
/// so it runs beside it (with no DaemonSets it does nothing else).
pub fn spawn_manager(
    env: &Env,
    cp: &ControlPlane,
    imp: Impl,
    controllers: &[&str],
    qps: u32,
    burst: u32,
    extra: &[String],
) -> anyhow::Result<Manager> {
    spawn_manager_via(
        env,
        cp,
        cp.kubeconfig(),
        imp,
        controllers,
        qps,
        burst,
        extra,
    )
}

/// [`spawn_manager`] talking to the API server through `kubeconfig` (a
/// fault proxy's), its costs still measured on `cp`.
#[allow(clippy::too_many_arguments)]
pub fn spawn_manager_via(
    env: &Env,
    cp: &ControlPlane,
    kubeconfig: &Path,
    imp: Impl,
    controllers: &[&str],
    qps: u32,
    burst: u32,
    extra: &[String],
) -> anyhow::Result<Manager> {
    let mut list: Vec<&str> = controllers.to_vec();
    let bin = match (imp, &env.baseline) {
        (Impl::Upstream, Some(b)) => b.clone(),
        (Impl::Upstream, None) => {
            if list.contains(&"taint-eviction-controller") {
                list.push("daemonset-controller");
            }
            binaries::ensure_built()?.join("kcm-e2e-controller-manager")
        }
        (Impl::KcmRs, _) => env.kcm_rs.clone(),
    };
    let log = std::fs::File::create(cp.dir().join(format!("{}.log", imp.label())))?;
    let child = Command::new(&bin)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--controllers={}", list.join(",")))
        .arg(format!("--kube-api-qps={qps}"))
        .arg(format!("--kube-api-burst={burst}"))
        .args(["--leader-elect=false", "--secure-port=0"])
        .args(extra)
        .args(match (imp, &env.baseline) {
            (Impl::KcmRs, _) | (Impl::Upstream, Some(_)) => env.kcm_rs_args.as_slice(),
            (Impl::Upstream, None) => &[],
        })
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id().context("controller manager exited at once")?;
    let server_pid = cp.pid();
    Ok(Manager {
        child,
        pid,
        sampler: Sampler::start(pid),
        server_pid,
        server_sampler: Sampler::start(server_pid),
        server_cpu_at_start: cpu_seconds(server_pid).unwrap_or(0.0),
    })
}

impl Manager {
    /// CPU seconds used so far.
    pub fn cpu(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or(0.0)
    }

    /// Peak RSS seen since start, MiB.
    pub fn peak_rss(&self) -> f64 {
        self.sampler.peak()
    }

    /// Current RSS, MiB.
    pub fn rss(&self) -> f64 {
        rss_mib(self.pid).unwrap_or(0.0)
    }

    /// CPU seconds the API server used so far.
    pub fn server_cpu(&self) -> f64 {
        cpu_seconds(self.server_pid).unwrap_or(0.0)
    }

    /// The API server's CPU since `cpu0` (a [`Manager::server_cpu`]) and
    /// its peak RSS since the manager started.
    pub fn server_cost(&self, cpu0: f64) -> ServerCost {
        ServerCost {
            cpu_s: self.server_cpu() - cpu0,
            peak_rss_mib: self.server_sampler.peak(),
        }
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Samples a process's RSS every 100 ms and keeps the peak.
struct Sampler {
    peak_kib: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let peak_kib = Arc::new(AtomicU64::new(0));
        let p = Arc::clone(&peak_kib);
        let task = tokio::spawn(async move {
            while let Some(mib) = rss_mib(pid) {
                p.fetch_max((mib * 1024.0) as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Sampler { peak_kib, task }
    }

    fn peak(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pod simulator as a process of its own, so its CPU is measurable.
pub struct SimProcess {
    child: Child,
    pid: u32,
    log: PathBuf,
}

pub fn spawn_sim(env: &Env, cp: &ControlPlane, nodes: usize) -> anyhow::Result<SimProcess> {
    let log_path = cp.dir().join("kcm-sim.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(&env.kcm_sim)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--nodes={nodes}"))
        .arg("--report-every=0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", env.kcm_sim.display()))?;
    let pid = child.id().context("kcm-sim exited at once")?;
    Ok(SimProcess {
        child,
        pid,
        log: log_path,
    })
}

impl SimProcess {
    pub fn cpu(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or(0.0)
    }

    /// Stops the simulator with SIGTERM and returns how many pod DELETE
    /// requests it sent (from its final counters line).
    pub async fn finish(mut self) -> anyhow::Result<f64> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let log = std::fs::read_to_string(&self.log)?;
        let line = log
            .lines()
            .rev()
            .find(|l| l.starts_with("kcm-sim final:"))
            .context("kcm-sim printed no final counters")?;
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("deletes="))
            .and_then(|v| v.parse().ok())
            .context("kcm-sim's final line has no deletes=")
    }
}

/// A Job watch positioned after its initial list, so every later event is
/// a change made after this call.
pub async fn job_watch_after_list(
    api: &kube::Api<Job>,
    config: kube::runtime::watcher::Config,
) -> futures::stream::BoxStream<
    'static,
    kube::runtime::watcher::Result<kube::runtime::watcher::Event<Job>>,
> {
    use kube::runtime::watcher;
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    while let Some(ev) = stream.next().await {
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    stream
}

/// `apiserver_request_total` summed by "VERB resource[/subresource]".
pub type Requests = BTreeMap<String, f64>;

pub async fn request_counts(client: &kube::Client) -> anyhow::Result<Requests> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |k: &str| {
            line.split(&format!(",{k}=\""))
                .nth(1)
                .or_else(|| line.split(&format!("{{{k}=\"")).nth(1))
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let sub = label("subresource");
        let key = if sub.is_empty() {
            format!("{} {}", label("verb"), label("resource"))
        } else {
            format!("{} {}/{}", label("verb"), label("resource"), sub)
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    Ok(out)
}

/// `after - before`, keeping positive deltas.
pub fn delta(before: &Requests, after: &Requests) -> Requests {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d))
        })
        .collect()
}

/// The requests a controller manager makes, as opposed to the simulated
/// kubelet's binds and status writes: every verb but LIST and WATCH (a
/// constant per process, not per pod) on pods, Jobs, Job status, PDB status
/// and events, and on pod status when the simulator does not write it (pod
/// GC and taint eviction write `DisruptionTarget` there). The simulated
/// kubelet's final grace-0 deletes are pod deletes too: callers subtract
/// the count [`SimProcess::finish`] reports. The benchmark itself only
/// watches while measuring.
pub fn controller_requests(d: &Requests, sim_writes_pod_status: bool) -> Requests {
    d.iter()
        .filter(|(k, _)| {
            let (verb, res) = k.split_once(' ').unwrap_or(("", k));
            let counted = matches!(
                res,
                "pods" | "jobs" | "jobs/status" | "events" | "poddisruptionbudgets/status"
            ) || (res == "pods/status" && !sim_writes_pod_status);
            counted && !matches!(verb, "LIST" | "WATCH")
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Creates `n` objects with `concurrency` requests in flight; returns how
/// many failed.
pub async fn create_many<F, Fut>(n: usize, concurrency: usize, make: F) -> usize
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let failed = AtomicU64::new(0);
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let fut = make(i);
            let failed = &failed;
            async move {
                if let Err(e) = fut.await
                    && failed.fetch_add(1, Ordering::Relaxed) < 5
                {
                    eprintln!("create {i}: {e:#}");
                }
            }
        })
        .await;
    failed.load(Ordering::Relaxed) as usize
}

/// A Job with one container named `main` and the given spec fields and
/// pod-template annotations merged in.
pub fn job(name: &str, spec: serde_json::Value, ann: serde_json::Value) -> anyhow::Result<Job> {
    let mut j = json!({
        "metadata": { "name": name },
        "spec": { "template": {
            "metadata": { "annotations": ann },
            "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "registry.example/bench:1" }] }
        }}
    });
    if let (Some(dst), Some(src)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(j)?)
}

/// The Job's terminal condition type (Complete or Failed), if any.
pub fn terminal(j: &Job) -> Option<&str> {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

/// The q-quantile (nearest rank) of `v`.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// Sum of all request counts.
pub fn total(r: &Requests) -> f64 {
    r.values().sum()
}

/// Path of the kcm-sim binary next to the running benchmark.
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
        .join(name)
}

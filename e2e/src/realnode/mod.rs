//! The real-node scenario tests' side of a node session
//! (`e2e/tests/realnode_kep3329/`, `e2e/tests/realnode_termination.rs`):
//! the node a session brought up (`e2e/realnode/node.sh`), the scenario Job
//! (`e2e/realnode/scenarios/job.yaml`) whose real pods act on signal files,
//! a watch of the Jobs beside [`PodHistory`], how pods ended, the namespace
//! of one scenario, and the result files. The processes (controllers under
//! test, the node's kubelet and helper KCM) are in [`procs`].

pub mod procs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::binaries::repo_root;
use crate::history::PodHistory;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;

/// KCM's names of the four controllers kcm-rs replaces.
pub const FOUR: &str = "job-controller,pod-garbage-collector-controller,taint-eviction-controller,disruption-controller";

/// The real node a session brought up (`node.sh env`).
pub struct RealNode {
    pub kubeconfig: PathBuf,
    pub version: String,
    pub name: String,
    pub state: PathBuf,
    pub client: kube::Client,
}

impl RealNode {
    /// The node of the running session; panics with how to start one.
    pub async fn from_session() -> RealNode {
        let out = Command::new(repo_root().join("e2e/realnode/node.sh"))
            .arg("env")
            .output()
            .expect("running e2e/realnode/node.sh env");
        assert!(
            out.status.success(),
            "no real node is up: run this test through `make realnode-kep` or \
             `make realnode-termination` (a node session, see docs/real-node.md): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let kubeconfig = PathBuf::from(&env["KUBECONFIG"]);
        let state = kubeconfig.parent().expect("state dir").to_path_buf();
        let client = crate::control_plane::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client of the real node's API server");
        RealNode {
            version: env["K8S_VERSION"].clone(),
            name: env["NODE_NAME"].clone(),
            kubeconfig,
            state,
            client,
        }
    }

    /// Where the pods of namespace `ns` look for their signal files (a
    /// hostPath directory: the test and the pods share it).
    pub fn signal_dir(&self, ns: &str) -> PathBuf {
        self.state.join("hostpath/scenarios").join(ns)
    }

    /// Tells pod `pod` what to do (`42`, `fill`): written whole, then renamed
    /// into place, so the pod never reads half a file.
    pub fn signal(&self, ns: &str, pod: &str, what: &str) {
        let dir = self.signal_dir(ns);
        std::fs::create_dir_all(&dir).expect("signal dir");
        let tmp = dir.join(format!(".{pod}.tmp"));
        std::fs::write(&tmp, what).expect("signal file");
        std::fs::rename(&tmp, dir.join(pod)).expect("signal file");
    }

    pub async fn node(&self) -> Option<Node> {
        Api::<Node>::all(self.client.clone())
            .get_opt(&self.name)
            .await
            .ok()
            .flatten()
    }

    /// The node's allocatable CPU in millicores.
    pub async fn allocatable_cpu_milli(&self) -> i64 {
        let node = self.node().await.expect("the node");
        let q = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").cloned())
            .expect("allocatable cpu");
        parse_cpu_milli(&q.0).expect("cpu quantity")
    }

    /// Waits until the node is Ready and has no taint (the kubelet back and
    /// node-lifecycle done with it).
    pub async fn wait_ready_untainted(&self, timeout: Duration) -> Result<(), String> {
        let end = Instant::now() + timeout;
        loop {
            let node = self.node().await;
            let ready = node.as_ref().is_some_and(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            let untainted = node.as_ref().is_some_and(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_none_or(|t| t.is_empty())
            });
            if ready && untainted {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!(
                    "node {} not Ready and untainted within {timeout:?}: {:?}",
                    self.name,
                    node.and_then(|n| n.spec).and_then(|s| s.taints)
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// "2", "1500m", "0.5" in millicores.
pub fn parse_cpu_milli(q: &str) -> Option<i64> {
    if let Some(m) = q.strip_suffix('m') {
        return m.parse().ok();
    }
    q.parse::<f64>().ok().map(|c| (c * 1000.0).round() as i64)
}

/// Every watch event of the Jobs of a namespace, with when it arrived.
pub struct JobWatch {
    events: Arc<Mutex<Vec<(Instant, Job)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl JobWatch {
    pub async fn start(client: &kube::Client, ns: &str) -> JobWatch {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let api: Api<Job> = Api::namespaced(client.clone(), ns);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(Event::Apply(j) | Event::InitApply(j)) => {
                        sink.lock().push((Instant::now(), j))
                    }
                    Ok(Event::InitDone) => {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("job watch: {e}"),
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(20), rx).await;
        JobWatch { events, task }
    }

    /// Job `name` as each event showed it.
    pub fn of(&self, name: &str) -> Vec<(Instant, Job)> {
        self.events
            .lock()
            .iter()
            .filter(|(_, j)| j.metadata.name.as_deref() == Some(name))
            .cloned()
            .collect()
    }

    /// The True conditions of Job `name` in the order they appeared, as
    /// `Type(Reason)`, each with when it was first seen.
    pub fn conditions(&self, name: &str) -> Vec<(Instant, String)> {
        let mut seen: Vec<(Instant, String)> = Vec::new();
        for (at, job) in self.of(name) {
            for c in job
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.status == "True")
            {
                let label = format!("{}({})", c.type_, c.reason.as_deref().unwrap_or(""));
                if !seen.iter().any(|(_, l)| *l == label) {
                    seen.push((at, label));
                }
            }
        }
        seen
    }

    /// The first event of Job `name` where `pred` holds.
    pub fn first(&self, name: &str, pred: impl Fn(&Job) -> bool) -> Option<(Instant, Job)> {
        self.of(name).into_iter().find(|(_, j)| pred(j))
    }
}

/// True when the Job has condition `type_` with status True.
pub fn job_has(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// The scenario Job of `e2e/realnode/scenarios/job.yaml`, named `name`, its
/// pods' signal directory that of namespace `ns` on `node`.
pub fn scenario_job(node: &RealNode, ns: &str, name: &str) -> Job {
    let path = repo_root().join("e2e/realnode/scenarios/job.yaml");
    let text = std::fs::read_to_string(&path).expect("scenario job");
    let mut job: Job = serde_yaml_ng::from_str(&text).expect("scenario job yaml");
    job.metadata.name = Some(name.to_string());
    job.metadata.namespace = Some(ns.to_string());
    let spec = pod_spec(&mut job);
    let vol = spec
        .volumes
        .as_mut()
        .and_then(|v| v.iter_mut().find(|v| v.name == "signal"))
        .and_then(|v| v.host_path.as_mut())
        .expect("signal volume");
    vol.path = node.signal_dir(ns).display().to_string();
    job
}

pub fn pod_spec(job: &mut Job) -> &mut k8s_openapi::api::core::v1::PodSpec {
    job.spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .expect("pod spec")
}

/// The Job's container `main`.
pub fn main_container(job: &mut Job) -> &mut k8s_openapi::api::core::v1::Container {
    pod_spec(job)
        .containers
        .iter_mut()
        .find(|c| c.name == "main")
        .expect("container main")
}

/// Sets an env var of container `main`.
pub fn set_env(job: &mut Job, name: &str, value: &str) {
    let env = main_container(job).env.get_or_insert_with(Vec::new);
    env.retain(|e| e.name != name);
    env.push(k8s_openapi::api::core::v1::EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    });
}

/// One scenario's namespace, its watches and its clean-up.
pub struct Scenario<'a> {
    pub node: &'a RealNode,
    pub ns: String,
    pub pods: Api<Pod>,
    pub jobs: Api<Job>,
    pub history: PodHistory,
    pub jobw: JobWatch,
}

impl<'a> Scenario<'a> {
    pub async fn new(node: &'a RealNode, prefix: &str) -> Scenario<'a> {
        let ns = crate::TestNamespace::create(&node.client, prefix)
            .await
            .expect("namespace")
            .name;
        std::fs::create_dir_all(node.signal_dir(&ns)).expect("signal dir");
        Scenario {
            node,
            pods: Api::namespaced(node.client.clone(), &ns),
            jobs: Api::namespaced(node.client.clone(), &ns),
            history: PodHistory::start(&node.client, &ns).await,
            jobw: JobWatch::start(&node.client, &ns).await,
            ns,
        }
    }

    pub async fn create_job(&self, job: &Job) -> Job {
        self.jobs
            .create(&PostParams::default(), job)
            .await
            .unwrap_or_else(|e| panic!("create Job: {e}"))
    }

    /// The pods of Job `job` (its `batch.kubernetes.io/job-name` label).
    pub async fn job_pods(&self, job: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
        self.pods
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Waits until `n` pods of Job `job` run (phase Running, not deleting)
    /// and returns their names.
    pub async fn wait_running(
        &self,
        job: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<String>, String> {
        let end = Instant::now() + timeout;
        loop {
            let running: Vec<String> = self
                .job_pods(job)
                .await
                .iter()
                .filter(|p| running(p))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            if running.len() >= n {
                return Ok(running);
            }
            if Instant::now() > end {
                return Err(format!(
                    "{n} running pods of {job} not within {timeout:?}: {running:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls Job `name` until `pred` holds.
    pub async fn wait_job(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Job) -> bool,
    ) -> Result<Job, String> {
        crate::wait::wait_for(&self.jobs, name, timeout, what, pred)
            .await
            .map_err(|e| e.to_string())
    }

    /// Deletes the namespace and waits for it to be gone (the controllers
    /// under test must still run: they remove the pods' Job finalizers).
    pub async fn cleanup(self) -> Result<(), String> {
        let nss: Api<Namespace> = Api::all(self.node.client.clone());
        let _ = nss.delete(&self.ns, &DeleteParams::default()).await;
        let r = crate::wait::wait_gone(&nss, &self.ns, Duration::from_secs(180))
            .await
            .map_err(|e| format!("namespace {} not gone: {e}", self.ns));
        let _ = std::fs::remove_dir_all(self.node.signal_dir(&self.ns));
        r
    }
}

/// Phase Running and not being deleted.
pub fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("-")
}

pub fn terminal(p: &Pod) -> bool {
    matches!(phase(p), "Failed" | "Succeeded")
}

/// The reason of a True DisruptionTarget condition, if any.
pub fn disruption_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .map(|c| c.reason.clone().unwrap_or_default())
}

/// Exit code of container `main`, once terminated.
pub fn exit_code(p: &Pod) -> Option<i32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "main")?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

/// How a pod ended, from everything its watch showed: the DisruptionTarget
/// reason it ever carried, its last phase, `status.reason`, exit code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodEnd {
    pub disruption: String,
    pub phase: String,
    pub reason: String,
    pub exit: String,
}

impl PodEnd {
    pub fn of(history: &PodHistory, pod: &str) -> PodEnd {
        let seen = history.of(pod);
        let disruption = seen
            .iter()
            .find_map(|s| disruption_reason(s.pod()))
            .unwrap_or_else(|| "-".into());
        // The last state that still had a status (a DELETED event repeats it).
        let last = seen.last().map(|s| s.pod().clone()).unwrap_or_default();
        PodEnd {
            disruption,
            phase: phase(&last).to_string(),
            reason: last
                .status
                .as_ref()
                .and_then(|s| s.reason.clone())
                .unwrap_or_else(|| "-".into()),
            exit: exit_code(&last).map_or_else(|| "-".into(), |c| c.to_string()),
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{} {}/{} exit {}",
            self.disruption, self.phase, self.reason, self.exit
        )
    }
}

/// Polls until `pred` holds for what the watch saw of `pod` (any event),
/// returning when it first did.
pub async fn wait_seen(
    history: &PodHistory,
    pod: &str,
    timeout: Duration,
    pred: impl Fn(&Pod) -> bool,
) -> Option<Instant> {
    let end = Instant::now() + timeout;
    loop {
        if let Some((_, at)) = history.first_at(pod, None, |s| pred(s.pod())) {
            return Some(at);
        }
        if Instant::now() > end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A pod that is gone, or terminal without the Job's tracking finalizer:
/// the Job controller has accounted for it.
pub fn accounted(history: &PodHistory, pod: &str) -> bool {
    history.deleted(pod)
        || history.last(pod, None).is_some_and(|p| {
            terminal(&p)
                && !p
                    .metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|f| f == "batch.kubernetes.io/job-tracking"))
        })
}

/// A bare pod (not a Job's) for the scenarios: `sh -c script`.
pub fn bare_pod(name: &str, script: &str) -> Pod {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script]
            }]
        }
    }))
    .expect("pod");
    p.metadata = ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    p
}

/// `d` as seconds with one decimal, or `-`.
pub fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

/// `later - earlier`, when both happened (and in that order).
pub fn between(earlier: Option<Instant>, later: Option<Instant>) -> Option<Duration> {
    Some(later?.checked_duration_since(earlier?).unwrap_or_default())
}

/// Where the result tables go: `$KCM_REALNODE_RESULTS` or
/// `bench/results/realnode-kep`.
pub fn results_dir() -> PathBuf {
    std::env::var_os("KCM_REALNODE_RESULTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("bench/results/realnode-kep"))
}

/// Writes `text` to `results_dir()/file` and prints it.
pub fn write_result(file: &str, text: &str) {
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("results dir");
    let path: &Path = &dir.join(file);
    std::fs::write(path, text).expect("results file");
    println!("{text}\n(written to {})", path.display());
}

/// A one-line account of what ran: minor, node, date.
pub fn run_header(node: &RealNode) -> String {
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let commit = Command::new("git")
        .args([
            "-C",
            &repo_root().display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "Kubernetes {} (kube-apiserver, kubelet, kube-scheduler and KCM of that minor), node `{}` \
         (containerd + runc, real containers), {date}, kcm-rs at {commit}.",
        node.version, node.name
    )
}

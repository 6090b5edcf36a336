//! A small pod lifecycle simulator: simulated nodes that "run" pods.
//!
//! It binds unscheduled pods to its nodes (round robin), marks them Running
//! and Ready, and after the time their annotations declare, terminates their
//! containers with the declared exit codes, or fails the pod with a declared
//! condition. Pods deleted while running are terminated (phase `Failed`, exit
//! code 137) and then removed with grace period 0, as a kubelet does.
//!
//! Annotations (all optional):
//! - `sim.kcm-rs.io/run`: how long every container runs, e.g. `5s`, `250ms`, `2m`
//!   (default [`DEFAULT_RUN`]); `never` keeps it running until deleted.
//! - `sim.kcm-rs.io/exit-code`: every container's exit code (default 0).
//! - `sim.kcm-rs.io/containers`: per-container overrides, `name=DURATION:CODE,...`.
//! - `sim.kcm-rs.io/fail-with-condition`: `Type:Reason`; at the end the pod fails
//!   with that condition (status True) and exit code 137.
//! - `sim.kcm-rs.io/outcomes`: weighted outcomes per pod of a Job, and `run`
//!   may be a range `1s..3s`; see [`outcomes`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use kcm_e2e::HarnessError;
use kcm_e2e::kubelet::{self, PodStatusUpdate};

pub mod outcomes;
use outcomes::Outcome;

pub const ANN_RUN: &str = "sim.kcm-rs.io/run";
pub const ANN_EXIT_CODE: &str = "sim.kcm-rs.io/exit-code";
pub const ANN_CONTAINERS: &str = "sim.kcm-rs.io/containers";
pub const ANN_FAIL_CONDITION: &str = "sim.kcm-rs.io/fail-with-condition";

/// How long a container runs when no annotation says.
pub const DEFAULT_RUN: Duration = Duration::from_secs(5);
/// The exit code of a container killed by a signal (128 + SIGKILL).
const KILLED_EXIT_CODE: i32 = 137;

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub nodes: usize,
    pub node_prefix: String,
    /// Bind pods that have no node (act as the scheduler).
    pub schedule: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            node_prefix: "sim-node-".into(),
            schedule: true,
        }
    }
}

/// What a pod's annotations ask of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    pub name: String,
    /// `None`: runs until the pod is deleted.
    pub run: Option<Duration>,
    pub exit_code: i32,
}

/// What a pod's annotations ask of the whole pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodPlan {
    pub containers: Vec<ContainerPlan>,
    pub fail_condition: Option<(String, String)>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad simulator annotation {key}={value:?}: {why}")]
pub struct PlanError {
    pub key: &'static str,
    pub value: String,
    pub why: String,
}

/// Parses `250ms`, `5s`, `2m`, `1h`, or `never` (returns `None`).
pub fn parse_duration(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if s == "never" {
        return Ok(None);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} has no number"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        other => return Err(format!("unknown unit {other:?} (use ms, s, m or h)")),
    };
    Ok(Some(d))
}

/// Reads a pod's simulator annotations (a range or weighted outcomes take
/// their first choice; see [`plan_with_draw`]).
pub fn plan_for(pod: &Pod) -> Result<PodPlan, PlanError> {
    plan_with_draw(pod, 0)
}

/// Reads a pod's simulator annotations; `draw` picks among weighted
/// outcomes and within a run-time range.
pub fn plan_with_draw(pod: &Pod, draw: u64) -> Result<PodPlan, PlanError> {
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let get = |k: &str| ann.get(k).map(String::as_str);
    let err = |key: &'static str, value: &str, why: String| PlanError {
        key,
        value: value.to_string(),
        why,
    };
    let run = match get(ANN_RUN) {
        Some(v) => outcomes::parse_run(v, draw).map_err(|why| err(ANN_RUN, v, why))?,
        None => Some(DEFAULT_RUN),
    };
    let mut exit_code = match get(ANN_EXIT_CODE) {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| err(ANN_EXIT_CODE, v, "not an integer".into()))?,
        None => 0,
    };
    let mut overrides = HashMap::new();
    if let Some(v) = get(ANN_CONTAINERS) {
        for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, rest) = part
                .split_once('=')
                .ok_or_else(|| err(ANN_CONTAINERS, v, format!("{part:?} lacks '='")))?;
            let (d, code) = rest.split_once(':').unwrap_or((rest, "0"));
            let d = parse_duration(d).map_err(|why| err(ANN_CONTAINERS, v, why))?;
            let code: i32 = code
                .trim()
                .parse()
                .map_err(|_| err(ANN_CONTAINERS, v, format!("exit code {code:?}")))?;
            overrides.insert(name.trim().to_string(), (d, code));
        }
    }
    let mut fail_condition = match get(ANN_FAIL_CONDITION) {
        Some(v) => {
            let (t, r) = v.split_once(':').unwrap_or((v, "Simulated"));
            if t.trim().is_empty() {
                return Err(err(ANN_FAIL_CONDITION, v, "empty condition type".into()));
            }
            Some((t.trim().to_string(), r.trim().to_string()))
        }
        None => None,
    };
    if let Some(v) = get(outcomes::ANN_OUTCOMES) {
        match outcomes::pick(&outcomes::parse_outcomes(v)?, draw) {
            Some(Outcome::Exit(code)) => exit_code = *code,
            Some(Outcome::Condition(t, r)) => fail_condition = Some((t.clone(), r.clone())),
            None => {}
        }
    }
    let containers = pod
        .spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .map(|name| {
            let (run, exit_code) = overrides.get(&name).cloned().unwrap_or((run, exit_code));
            ContainerPlan {
                name,
                run,
                exit_code,
            }
        })
        .collect();
    Ok(PodPlan {
        containers,
        fail_condition,
    })
}

/// Counters the simulator keeps, for reports.
#[derive(Debug, Default)]
pub struct SimStats {
    pub bound: AtomicUsize,
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
    pub killed: AtomicUsize,
    /// DELETE requests sent (grace period 0).
    pub deletes: AtomicUsize,
    pub errors: AtomicUsize,
}

impl SimStats {
    /// `bound=.. started=.. finished=.. killed=.. deletes=.. errors=..`
    pub fn summary(&self) -> String {
        let n = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        format!(
            "bound={} started={} finished={} killed={} deletes={} errors={}",
            n(&self.bound),
            n(&self.started),
            n(&self.finished),
            n(&self.killed),
            n(&self.deletes),
            n(&self.errors)
        )
    }
}

struct Sim {
    client: kube::Client,
    cfg: SimConfig,
    next_node: AtomicUsize,
    /// Pods this simulator has started, by UID; the handle is the finishing
    /// timer (None once finished or for pods that never end). Entries leave
    /// only when the pod is deleted, so a stale event never restarts a pod.
    running: Mutex<HashMap<String, Option<JoinHandle<()>>>>,
    /// Pods started so far per Job (namespace/job-name), for the draw of
    /// weighted outcomes.
    ordinals: Mutex<HashMap<String, u64>>,
    /// UIDs of pods being killed and removed.
    removing: Mutex<HashSet<String>>,
    stats: Arc<SimStats>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Sim {
    fn owns_node(&self, node: &str) -> bool {
        node.strip_prefix(&self.cfg.node_prefix)
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n < self.cfg.nodes)
    }

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }

    async fn handle(self: &Arc<Self>, pod: Pod) -> Result<(), HarnessError> {
        let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone()) else {
            return Ok(());
        };
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let api = self.pods(&pod);
        match node {
            None if self.cfg.schedule && !deleting && !is_terminal(&pod) => {
                let i = self.next_node.fetch_add(1, Ordering::Relaxed) % self.cfg.nodes.max(1);
                let node = format!("{}{}", self.cfg.node_prefix, i);
                match kubelet::bind_pod(&api, &name, &node).await {
                    Ok(()) => {
                        self.stats.bound.fetch_add(1, Ordering::Relaxed);
                    }
                    // Already bound by an earlier event of the same pod.
                    Err(HarnessError::Kube(kube::Error::Api(e))) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
            Some(node) if self.owns_node(&node) => {
                if deleting {
                    if let Some(Some(task)) = self.running.lock().insert(uid.clone(), None) {
                        task.abort();
                    }
                    // Kill and remove once per pod, as the kubelet's status
                    // manager does, not on every later event of the pod.
                    if !self.removing.lock().insert(uid.clone()) {
                        return Ok(());
                    }
                    let removed = self.remove(&api, &pod, &name, &uid).await;
                    if removed.is_err() {
                        self.removing.lock().remove(&uid);
                    }
                    return removed;
                } else if !is_terminal(&pod) {
                    {
                        let mut running = self.running.lock();
                        if running.contains_key(&uid) {
                            return Ok(());
                        }
                        running.insert(uid.clone(), None);
                    }
                    if let Err(e) = self.start(api, pod, name, uid.clone()).await {
                        // Let the next event of this pod try again.
                        self.running.lock().remove(&uid);
                        return Err(e);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The next draw for a pod of the same Job (or the pod itself when it
    /// has no Job).
    fn draw(&self, pod: &Pod) -> u64 {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let owner = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("batch.kubernetes.io/job-name"))
            .or(pod.metadata.name.as_ref())
            .map(String::as_str)
            .unwrap_or_default();
        // An Indexed Job's pod draws by its index, so a retry of the
        // index meets the same outcome.
        if let Some(index) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
            .and_then(|i| i.parse::<u64>().ok())
        {
            return outcomes::draw(owner, index);
        }
        let key = format!("{ns}/{owner}");
        let n = {
            let mut ords = self.ordinals.lock();
            let slot = ords.entry(key).or_default();
            *slot += 1;
            *slot - 1
        };
        // The namespace differs between runs; the Job's name does not.
        outcomes::draw(owner, n)
    }

    /// Terminates a pod being deleted (unless it already ended) and removes
    /// it with grace period 0.
    async fn remove(
        &self,
        api: &Api<Pod>,
        pod: &Pod,
        name: &str,
        uid: &str,
    ) -> Result<(), HarnessError> {
        if !is_terminal(pod) {
            self.kill(api, pod, name).await?;
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        self.stats.deletes.fetch_add(1, Ordering::Relaxed);
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn kill(&self, api: &Api<Pod>, pod: &Pod, name: &str) -> Result<(), HarnessError> {
        let now = Timestamp::now();
        let containers = plan_for(pod).map(|p| p.containers).unwrap_or_default();
        let update = PodStatusUpdate::default()
            .phase("Failed")
            .containers(
                containers
                    .iter()
                    .map(|c| kubelet::terminated(&c.name, KILLED_EXIT_CODE, now))
                    .collect(),
            )
            .ready(false);
        kubelet::update_pod_status(api, name, &update).await?;
        self.stats.killed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn start(
        self: &Arc<Self>,
        api: Api<Pod>,
        pod: Pod,
        name: String,
        uid: String,
    ) -> Result<(), HarnessError> {
        let plan = match plan_with_draw(&pod, self.draw(&pod)) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(pod = %name, "{e}; running with defaults");
                let mut p = plan_for(&Pod {
                    metadata: Default::default(),
                    ..pod.clone()
                })
                .unwrap_or(PodPlan {
                    containers: vec![],
                    fail_condition: None,
                });
                p.fail_condition = None;
                p
            }
        };
        let started = Timestamp::now();
        let init: Vec<_> = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .map(|v| {
                v.iter()
                    .map(|c| kubelet::terminated(&c.name, 0, started))
                    .collect()
            })
            .unwrap_or_default();
        let mut update = PodStatusUpdate::default()
            .phase("Running")
            .started(started)
            .containers(
                plan.containers
                    .iter()
                    .map(|c| kubelet::running(&c.name, true, started))
                    .collect(),
            )
            .ready(true);
        if !init.is_empty() {
            update = update.init_containers(init.clone());
        }
        kubelet::update_pod_status(&api, &name, &update).await?;
        self.stats.started.fetch_add(1, Ordering::Relaxed);
        // A container that never ends keeps the pod running until deleted.
        let Some(longest) = plan
            .containers
            .iter()
            .map(|c| c.run)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.into_iter().max().unwrap_or_default())
        else {
            return Ok(());
        };
        let me = Arc::clone(self);
        let key = uid.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(longest).await;
            let finished = |c: &ContainerPlan| {
                let at = started
                    .checked_add(c.run.unwrap_or_default())
                    .unwrap_or(started);
                let code = if plan.fail_condition.is_some() {
                    KILLED_EXIT_CODE
                } else {
                    c.exit_code
                };
                kubelet::terminated(&c.name, code, at)
            };
            let statuses: Vec<_> = plan.containers.iter().map(finished).collect();
            let failed = plan.fail_condition.is_some()
                || statuses.iter().any(|s| {
                    s.state
                        .as_ref()
                        .and_then(|st| st.terminated.as_ref())
                        .is_some_and(|t| t.exit_code != 0)
                });
            let mut update = PodStatusUpdate::default()
                .phase(if failed { "Failed" } else { "Succeeded" })
                .containers(statuses)
                .ready(false);
            if let Some((t, r)) = &plan.fail_condition {
                update = update.condition(kubelet::condition(t, true, r, "simulated by kcm-sim"));
            }
            match kubelet::update_pod_status(&api, &name, &update).await {
                Ok(_) => {
                    me.stats.finished.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    me.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(pod = %name, "finishing pod: {e}");
                }
            }
            if let Some(slot) = me.running.lock().get_mut(&key) {
                *slot = None;
            }
        });
        if let Some(slot) = self.running.lock().get_mut(&uid) {
            *slot = Some(task);
        } else {
            task.abort();
        }
        Ok(())
    }
}

/// Creates the simulated nodes (Ready) if they do not exist.
pub async fn create_nodes(client: &kube::Client, cfg: &SimConfig) -> Result<(), HarnessError> {
    for i in 0..cfg.nodes {
        let name = format!("{}{}", cfg.node_prefix, i);
        match kubelet::create_node(client, &name, true, vec![]).await {
            Ok(_) => {}
            Err(HarnessError::Kube(kube::Error::Api(e))) if e.code == 409 => {
                kubelet::set_node_ready(client, &name, true).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs the simulator until the watch stream ends or the task is dropped.
pub async fn run(
    client: kube::Client,
    cfg: SimConfig,
    stats: Arc<SimStats>,
) -> Result<(), HarnessError> {
    create_nodes(&client, &cfg).await?;
    let sim = Arc::new(Sim {
        client: client.clone(),
        cfg,
        next_node: AtomicUsize::new(0),
        running: Mutex::new(HashMap::new()),
        ordinals: Mutex::new(HashMap::new()),
        removing: Mutex::new(HashSet::new()),
        stats,
    });
    let pods = Api::<Pod>::all(client);
    let mut stream = watcher(pods, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Delete(pod))) => {
                if let Some(uid) = pod.metadata.uid.as_ref() {
                    sim.removing.lock().remove(uid);
                    if let Some(Some(task)) = sim.running.lock().remove(uid) {
                        task.abort();
                    }
                }
            }
            Ok(Some(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                let sim = Arc::clone(&sim);
                // Each pod is handled on its own task so one slow write never
                // holds up the others.
                tokio::spawn(async move {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if let Err(e) = sim.handle(pod).await {
                        sim.stats.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(pod = %name, "simulator: {e}");
                    }
                });
            }
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => {}
            Ok(None) => return Ok(()),
            Err(e) => tracing::warn!("simulator watch: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;

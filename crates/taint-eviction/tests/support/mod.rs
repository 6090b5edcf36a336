//! Test support shared by the end-to-end and differential tests: running
//! our controller in-process, nodes and pods, a recorder of pod watch
//! events, events, and the observable outcome of a scenario.
#![allow(dead_code)] // each test binary uses a different part

pub mod scenarios;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod, PodCondition, Taint};
use kcm_e2e::kubelet;
use kcm_features::FeatureGates;
use kcm_runtime::controller::{ControllerContext, Settings};
use kcm_runtime::informer::InformerFactory;
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Our controller running in-process on a runtime of its own (so it
/// outlives any one test's runtime); dropping it stops it.
pub struct Ours {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts `kcm_taint_eviction::SPEC` against the cluster of `kubeconfig`,
/// wired as the kcm-rs binary wires it, and returns once its informers have
/// synced.
pub fn start_ours(kubeconfig: &Path, features: FeatureGates) -> Ours {
    init_tracing();
    let path = kubeconfig.to_path_buf();
    let stop = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let token = stop.clone();
    let thread = std::thread::Builder::new()
        .name("taint-eviction".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            rt.block_on(async move {
                let ctx = match context(&path, features, token.clone()).await {
                    Ok(ctx) => ctx,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let started = match (kcm_taint_eviction::SPEC.init)(&ctx) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let run = tokio::spawn(started.run);
                ctx.informers.start(token.clone());
                let synced =
                    tokio::time::timeout(Duration::from_secs(30), ctx.informers.wait_for_sync());
                let _ = tx.send(synced.await.map_err(|_| "informers never synced".into()));
                token.cancelled().await;
                let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
            });
        })
        .expect("spawn controller thread");
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("starting our controller: {e}"),
        Err(e) => panic!("starting our controller: {e}"),
    }
    Ours {
        stop,
        thread: Some(thread),
    }
}

async fn context(
    kubeconfig: &Path,
    features: FeatureGates,
    stop: CancellationToken,
) -> Result<ControllerContext, String> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(config.clone()).map_err(|e| e.to_string())?;
    Ok(ControllerContext {
        informers: InformerFactory::new(client),
        kube_config: config,
        qps: 20.0,
        burst: 30,
        features,
        settings: Settings::default(),
        stop,
    })
}

/// A NoExecute taint with no value.
pub fn no_execute(key: &str) -> Taint {
    kubelet::taint(key, None, "NoExecute")
}

/// Creates a Ready node with the given NoExecute taint keys.
pub async fn create_node(client: &kube::Client, name: &str, no_execute_keys: &[&str]) {
    let taints = no_execute_keys.iter().map(|k| no_execute(k)).collect();
    kubelet::create_node(client, name, true, taints)
        .await
        .expect("create node");
}

/// Replaces the node's NoExecute taints (other taints are kept).
pub async fn set_no_execute(client: &kube::Client, name: &str, keys: &[&str]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node = nodes.get(name).await.expect("get node");
    let spec = node.spec.get_or_insert_with(Default::default);
    let mut taints: Vec<Taint> = spec
        .taints
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.effect != "NoExecute")
        .collect();
    taints.extend(keys.iter().map(|k| no_execute(k)));
    spec.taints = Some(taints);
    nodes
        .replace(name, &PostParams::default(), &node)
        .await
        .expect("update node taints");
}

pub async fn delete_node(client: &kube::Client, name: &str) {
    Api::<Node>::all(client.clone())
        .delete(name, &Default::default())
        .await
        .expect("delete node");
}

/// A pod bound to `node` with `Exists`/NoExecute tolerations for the given
/// keys and seconds, and a zero grace period so a DELETE removes it at once
/// (no kubelet runs).
pub fn pod(name: &str, node: &str, tolerations: &[(&str, Option<i64>)]) -> Pod {
    let tolerations: Vec<_> = tolerations
        .iter()
        .map(|(key, secs)| {
            let mut t = json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
            if let Some(s) = secs {
                t["tolerationSeconds"] = json!(s);
            }
            t
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
            "containers": [{"name": "main", "image": "busybox"}]
        }
    }))
    .expect("pod")
}

pub async fn create_pod(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod)
        .await
        .expect("create pod");
}

/// Every watch event of a namespace's pods, with the time it arrived.
pub struct History {
    seen: Arc<Mutex<Vec<(Instant, bool, Pod)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn disruption_target(pod: &Pod) -> Option<PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .cloned()
}

impl History {
    /// Starts watching; returns once the initial list is in.
    pub async fn start(client: &kube::Client, namespace: &str) -> History {
        let seen: Arc<Mutex<Vec<(Instant, bool, Pod)>>> = Arc::default();
        let sink = Arc::clone(&seen);
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Apply(p) | WatchEvent::InitApply(p)) => {
                        sink.lock().push((Instant::now(), false, p));
                    }
                    Ok(WatchEvent::Delete(p)) => sink.lock().push((Instant::now(), true, p)),
                    Ok(WatchEvent::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(WatchEvent::Init) => {}
                    Err(e) => tracing::warn!("pod history watch: {e}"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(20), ready_rx)
            .await
            .expect("history watch ready")
            .expect("history task");
        History { seen, task }
    }

    fn of(&self, name: &str, uid: Option<&str>) -> Vec<(Instant, bool, Pod)> {
        self.seen
            .lock()
            .iter()
            .filter(|(_, _, p)| p.name_any() == name)
            .filter(|(_, _, p)| uid.is_none() || p.metadata.uid.as_deref() == uid)
            .cloned()
            .collect()
    }

    /// When the pod (of that UID, if given) was first seen deleted or
    /// terminating.
    pub fn deleted_at(&self, name: &str, uid: Option<&str>) -> Option<Instant> {
        self.of(name, uid)
            .into_iter()
            .find(|(_, deleted, p)| *deleted || is_deleting(p))
            .map(|(t, _, _)| t)
    }

    /// Whether `DisruptionTarget` was on the pod in an event before the one
    /// that showed it deleted or terminating; `None` if it never was.
    pub fn condition_before_delete(&self, name: &str, uid: Option<&str>) -> Option<bool> {
        let events = self.of(name, uid);
        let del = events
            .iter()
            .position(|(_, deleted, p)| *deleted || is_deleting(p))?;
        Some(
            events[..del]
                .iter()
                .any(|(_, _, p)| disruption_target(p).is_some()),
        )
    }

    /// The pod as last seen.
    pub fn last(&self, name: &str, uid: Option<&str>) -> Option<Pod> {
        self.of(name, uid).pop().map(|(_, _, p)| p)
    }

    /// Polls until the pod is seen deleted or `timeout` passes.
    pub async fn wait_deleted(&self, name: &str, uid: Option<&str>, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.deleted_at(name, uid).is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.deleted_at(name, uid).is_some()
    }
}

/// `TaintManagerEviction` event messages about a pod, with their source
/// components.
pub async fn eviction_events(client: &kube::Client, ns: &str, pod: &str) -> BTreeSet<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .filter(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .map(|e| {
            format!(
                "{} {} [{}]",
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default()
            )
        })
        .collect()
}

/// Waits until the pod's eviction events include every message of `want`
/// (or the timeout passes) and returns what is there.
pub async fn wait_events(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    want: &[String],
    timeout: Duration,
) -> BTreeSet<String> {
    let end = Instant::now() + timeout;
    loop {
        let have = eviction_events(client, ns, pod).await;
        let all = want
            .iter()
            .all(|w| have.iter().any(|h| h.contains(w.as_str())));
        if all || Instant::now() >= end {
            return have;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How soon after the trigger a pod went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Not deleted within the observation window.
    Never,
    /// Within [`IMMEDIATE`] of the trigger.
    Immediate,
    /// After about this many seconds.
    After(u64),
}

/// The bound of "at once": both controllers act within milliseconds; the
/// margin covers a loaded machine.
pub const IMMEDIATE: Duration = Duration::from_millis(2500);

impl Timing {
    pub fn of(trigger: Instant, deleted: Option<Instant>) -> Timing {
        match deleted {
            None => Timing::Never,
            Some(at) => {
                let d = at.saturating_duration_since(trigger);
                if d < IMMEDIATE {
                    Timing::Immediate
                } else {
                    Timing::After(d.as_secs_f64().round() as u64)
                }
            }
        }
    }

    /// Same class; delays within a second of each other.
    pub fn similar(self, other: Timing) -> bool {
        match (self, other) {
            (Timing::After(a), Timing::After(b)) => a.abs_diff(b) <= 1,
            (a, b) => a == b,
        }
    }

    /// About `secs` after the trigger (allowing for a loaded machine).
    pub fn about(self, secs: u64) -> bool {
        matches!(self, Timing::After(s) if s + 1 >= secs && s <= secs + 2)
    }
}

/// What a scenario shows about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub timing: Timing,
    /// `DisruptionTarget` as last seen: (status, reason, message,
    /// observedGeneration).
    pub condition: Option<(String, String, String, Option<i64>)>,
    /// The condition was written before the delete (None: not deleted).
    pub condition_first: Option<bool>,
    /// `TaintManagerEviction` events: "type message [component]".
    pub events: BTreeSet<String>,
}

impl Observed {
    pub fn deleted(&self) -> bool {
        self.timing != Timing::Never
    }

    /// The events without "Cancelling deletion" ones, which upstream may
    /// also emit for a pod it has just deleted (its timer entry lingers
    /// until its delete handler returns).
    pub fn events_without_cancel(&self) -> BTreeSet<String> {
        self.events
            .iter()
            .filter(|e| !e.contains("Cancelling deletion"))
            .cloned()
            .collect()
    }

    /// Same outcome as `other`: deletion and its timing class, condition,
    /// condition order, events (cancel events compared only when neither
    /// was deleted).
    pub fn matches(&self, other: &Observed) -> bool {
        let events_match = if self.deleted() || other.deleted() {
            self.events_without_cancel() == other.events_without_cancel()
        } else {
            self.events == other.events
        };
        self.timing.similar(other.timing)
            && self.condition == other.condition
            && self.condition_first == other.condition_first
            && events_match
    }
}

/// Builds the observation of pod `name` (of `uid`, if given) from the
/// history and the events, after waiting for the events `want`.
pub async fn observe(
    client: &kube::Client,
    ns: &str,
    history: &History,
    name: &str,
    uid: Option<&str>,
    trigger: Instant,
    want: &[String],
) -> Observed {
    let events = wait_events(client, ns, name, want, Duration::from_secs(10)).await;
    let condition = history
        .last(name, uid)
        .as_ref()
        .and_then(disruption_target)
        .map(|c| {
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
                c.observed_generation,
            )
        });
    Observed {
        timing: Timing::of(trigger, history.deleted_at(name, uid)),
        condition,
        condition_first: history.condition_before_delete(name, uid),
        events,
    }
}

/// The condition our controller and upstream write.
pub fn expected_condition() -> Option<(String, String, String, Option<i64>)> {
    Some((
        "True".into(),
        "DeletionByTaintManager".into(),
        "Taint manager: deleting due to NoExecute taint".into(),
        Some(1),
    ))
}

pub fn marking(ns: &str, pod: &str) -> String {
    format!("Normal Marking for deletion Pod {ns}/{pod} [taint-eviction-controller]")
}

pub fn cancelling(ns: &str, pod: &str) -> String {
    format!("Normal Cancelling deletion of Pod {ns}/{pod} [taint-eviction-controller]")
}

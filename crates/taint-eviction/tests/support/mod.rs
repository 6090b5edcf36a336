//! Test support shared by the end-to-end and differential tests: what is
//! particular to taint eviction (NoExecute taints, tolerating pods, the
//! `TaintManagerEviction` events) and the observable outcome of a scenario.
//! Running the controller, watching pods and reading events come from
//! `kcm_e2e`.
#![allow(dead_code)] // each test binary uses a different part

pub mod scenarios;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint, Toleration};
use kcm_e2e::history::{self, PodHistory, Seen};
use kcm_e2e::in_process::{self, Detached};
use kcm_e2e::{ControlPlane, TestNamespace, events, kubelet};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::PostParams;

/// Starts our controller against `cp`, wired as the kcm-rs binary wires
/// it, on a runtime of its own so it outlives any one test; dropping it
/// stops it.
pub fn start_ours(cp: &ControlPlane, features: FeatureGates) -> Detached {
    in_process::init_tracing();
    in_process::start_detached(
        cp,
        &[kcm_taint_eviction::SPEC],
        Settings::default(),
        features,
    )
    .unwrap_or_else(|e| panic!("starting our controller: {e}"))
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

/// A pod bound to `node` with `Exists`/NoExecute tolerations for the given
/// keys and seconds, and a zero grace period so a DELETE removes it at once
/// (no kubelet runs).
pub fn pod(name: &str, node: &str, tolerations: &[(&str, Option<i64>)]) -> Pod {
    let mut pod = kubelet::simple_pod(name, false);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node.to_string());
    spec.termination_grace_period_seconds = Some(0);
    spec.tolerations = Some(
        tolerations
            .iter()
            .map(|(key, secs)| Toleration {
                key: Some(key.to_string()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: *secs,
                value: None,
            })
            .collect(),
    );
    pod
}

/// Watches the namespace's pods; returns once the initial list is in.
/// A namespace named after `prefix`, its pods, and a watch of them.
pub struct Watched {
    pub ns: String,
    pub pods: Api<Pod>,
    pub history: PodHistory,
}

pub async fn watched_namespace(client: &kube::Client, prefix: &str) -> Watched {
    let ns = TestNamespace::create(client, prefix)
        .await
        .expect("ns")
        .name;
    Watched {
        pods: Api::namespaced(client.clone(), &ns),
        history: watch_pods(client, &ns).await,
        ns,
    }
}

pub async fn watch_pods(client: &kube::Client, ns: &str) -> PodHistory {
    let history = PodHistory::start(client, ns).await;
    assert!(history.synced(), "pod history watch of {ns} not ready");
    history
}

pub fn disruption_target(pod: &Pod) -> Option<PodCondition> {
    history::condition(pod, "DisruptionTarget").cloned()
}

/// Whether `DisruptionTarget` was on the pod in an event before the one
/// that showed it deleted or terminating; `None` if it never was.
pub fn condition_before_delete(
    history: &PodHistory,
    name: &str,
    uid: Option<&str>,
) -> Option<bool> {
    let (deleted, _) = history.first_at(name, uid, Seen::deleting)?;
    let with = history.first_at(name, uid, |s| disruption_target(s.pod()).is_some());
    Some(with.is_some_and(|(i, _)| i < deleted))
}

/// Waits until the pod's `TaintManagerEviction` events ("type message
/// [component]") include every message of `want` (or the timeout passes)
/// and returns what is there.
pub async fn wait_events(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    want: &[String],
    timeout: Duration,
) -> BTreeSet<String> {
    events::wait_summaries(client, ns, pod, "TaintManagerEviction", want, timeout)
        .await
        .expect("list events")
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
    history: &PodHistory,
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
        timing: Timing::of(trigger, history.deleting_at(name, uid)),
        condition,
        condition_first: condition_before_delete(history, name, uid),
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

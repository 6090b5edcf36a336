//! Pure decisions of the pod garbage collector: which pods each pass
//! removes, in which order, and the status patch that marks a pod `Failed`
//! (with `DisruptionTarget` for orphans) before the force delete.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kcm_conditions::disruption::{MESSAGE_POD_GC_NODE_GONE, REASON_DELETION_BY_POD_GC};
use kcm_conditions::pod::{is_evicted, is_node_ready, is_pod_terminal};
use kcm_conditions::{disruption_status_patch, disruption_target};
use kcm_pod::CachedPod;

/// The taint that marks a node out of service (node shutdown, KEP-2268).
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Why a pod is collected: the `reason` label of the upstream metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Terminated,
    OutOfService,
    Orphaned,
    Unscheduled,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Terminated => "terminated",
            Reason::OutOfService => "out-of-service",
            Reason::Orphaned => "orphaned",
            Reason::Unscheduled => "unscheduled",
        }
    }
}

/// One pod to collect: the status patch to send first (none for pods
/// already terminal), then a force delete.
#[derive(Debug, Clone)]
pub struct Collect {
    pub namespace: String,
    pub name: String,
    pub reason: Reason,
    pub status_patch: Option<serde_json::Value>,
}

/// Options that change decisions.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--terminated-pod-gc-threshold`; <= 0 disables the terminated pass.
    pub terminated_pod_threshold: i64,
    /// `PodDisruptionConditions`: off means orphans get no DisruptionTarget.
    pub disruption_conditions: bool,
}

/// Everything one GC run decides before the orphan quarantine.
#[derive(Debug, Default)]
pub struct Plan {
    /// Terminated pods over the threshold (removed concurrently).
    pub terminated: Vec<Collect>,
    /// Terminating pods on NotReady, out-of-service nodes (concurrently).
    pub out_of_service: Vec<Collect>,
    /// Node names pods are bound to that the node cache lacks: candidates
    /// for the quarantine.
    pub missing_nodes: BTreeSet<String>,
    /// Terminating pods never scheduled (sequentially, after orphans).
    pub unscheduled: Vec<Collect>,
}

/// Anything but Pending, Running and Unknown (an empty phase included).
pub fn is_terminated(pod: &CachedPod) -> bool {
    !matches!(pod.phase(), "Pending" | "Running" | "Unknown")
}

fn node_name(pod: &CachedPod) -> &str {
    pod.node_name().unwrap_or("")
}

/// Upstream's order: kubelet-evicted first, then older creation time, then
/// name (namespace is not a tie-breaker).
pub fn gc_order(a: &CachedPod, b: &CachedPod) -> Ordering {
    let (ea, eb) = (is_evicted(a), is_evicted(b));
    if ea != eb {
        return if ea {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    a.creation_timestamp()
        .cmp(&b.creation_timestamp())
        .then_with(|| a.name().cmp(b.name()))
}

/// The patch that moves a non-terminal pod to `Failed` (stamping
/// `observedGeneration` as 1.34 does) and upserts `condition`; `None` for a
/// terminal pod, which is deleted without a status change.
pub fn mark_failed_patch(
    pod: &CachedPod,
    condition: Option<k8s_openapi::api::core::v1::PodCondition>,
    now: Timestamp,
) -> Option<serde_json::Value> {
    if is_pod_terminal(pod) {
        return None;
    }
    disruption_status_patch(pod, "Failed", pod.generation(), condition, now)
}

fn collect(pod: &CachedPod, reason: Reason, condition: bool, now: Timestamp) -> Collect {
    let cond = condition.then(|| {
        let mut c = disruption_target(REASON_DELETION_BY_POD_GC, MESSAGE_POD_GC_NODE_GONE, now);
        c.observed_generation = pod.generation();
        c
    });
    Collect {
        namespace: pod.namespace().to_string(),
        name: pod.name().to_string(),
        reason,
        status_patch: mark_failed_patch(pod, cond, now),
    }
}

/// The passes that need no API call to decide: terminated over threshold,
/// out-of-service, missing nodes, unscheduled terminating.
pub fn decide(pods: &[Arc<CachedPod>], nodes: &[Arc<Node>], now: Timestamp, cfg: Config) -> Plan {
    let mut plan = Plan::default();
    if cfg.terminated_pod_threshold > 0 {
        let mut terminated: Vec<&CachedPod> = pods
            .iter()
            .map(Arc::as_ref)
            .filter(|p| is_terminated(p))
            .collect();
        let excess =
            i64::try_from(terminated.len()).unwrap_or(i64::MAX) - cfg.terminated_pod_threshold;
        if excess > 0 {
            terminated.sort_by(|a, b| gc_order(a, b));
            let n = usize::try_from(excess).unwrap_or(usize::MAX);
            plan.terminated = terminated
                .into_iter()
                .take(n)
                .map(|p| collect(p, Reason::Terminated, false, now))
                .collect();
        }
    }
    let by_name: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .collect();
    let mut oos: Vec<&CachedPod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.is_deleting())
        .filter(|p| {
            by_name.get(node_name(p)).is_some_and(|n| {
                !is_node_ready(n)
                    && n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT_OUT_OF_SERVICE))
            })
        })
        .collect();
    oos.sort_by(|a, b| gc_order(a, b));
    plan.out_of_service = oos
        .into_iter()
        .map(|p| collect(p, Reason::OutOfService, false, now))
        .collect();
    plan.missing_nodes = pods
        .iter()
        .map(|p| node_name(p))
        .filter(|n| !n.is_empty() && !by_name.contains_key(n))
        .map(str::to_string)
        .collect();
    plan.unscheduled = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.is_deleting() && node_name(p).is_empty())
        .map(|p| collect(p, Reason::Unscheduled, false, now))
        .collect();
    plan
}

/// Pods bound to nodes confirmed deleted, each marked `Failed` with
/// `DisruptionTarget` (reason `DeletionByPodGC`) unless the gate is off.
pub fn decide_orphans(
    pods: &[Arc<CachedPod>],
    deleted_nodes: &BTreeSet<String>,
    now: Timestamp,
    cfg: Config,
) -> Vec<Collect> {
    pods.iter()
        .map(Arc::as_ref)
        .filter(|p| deleted_nodes.contains(node_name(p)))
        .map(|p| collect(p, Reason::Orphaned, cfg.disruption_conditions, now))
        .collect()
}

#[cfg(test)]
mod tests;

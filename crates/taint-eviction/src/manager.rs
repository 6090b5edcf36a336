//! The taint manager's state and its two work items (upstream
//! `handleNodeUpdate`, `handlePodUpdate`, `processPodOnNode`): which nodes
//! carry NoExecute taints, and which pods have an eviction scheduled.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use kcm_pod::CachedPod;
use kcm_runtime::clock::Clock;
use kcm_runtime::informer::{BY_NODE_NAME, Informer, key_of};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::decide::{Decision, decide, no_execute_taints};
use crate::events::EvictionEvents;
use crate::timed_queue::{TimedQueue, WorkArgs};

/// A pod work item: the pod and the node it was on when the event came.
/// Items are sharded by node, so a pod and its node meet on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodItem {
    pub namespace: String,
    pub name: String,
    pub node_name: String,
}

/// What the manager reads: the informer caches in production, maps in tests.
pub trait Cache: Send + Sync {
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    /// The pod by `namespace/name`.
    fn pod(&self, key: &str) -> Option<Arc<CachedPod>>;
    /// Every pod bound to the node, terminal and terminating ones included.
    fn pods_on_node(&self, node: &str) -> Vec<Arc<CachedPod>>;
}

/// [`Cache`] over the shared informers (the pod informer must have the
/// [`BY_NODE_NAME`] index).
pub struct InformerCache {
    pub pods: Arc<Informer<CachedPod>>,
    pub nodes: Arc<Informer<Node>>,
}

impl Cache for InformerCache {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.store().get(name)
    }
    fn pod(&self, key: &str) -> Option<Arc<CachedPod>> {
        self.pods.store().get(key)
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<CachedPod>> {
        self.pods.store().by_index(BY_NODE_NAME, node)
    }
}

/// The NoExecute taint manager.
pub struct TaintManager {
    cache: Arc<dyn Cache>,
    /// NoExecute taints of every node that has at least one.
    tainted: Mutex<HashMap<String, Vec<Taint>>>,
    evictions: TimedQueue,
    events: Arc<dyn EvictionEvents>,
    clock: Clock,
}

fn node_of(pod: &CachedPod) -> &str {
    pod.node_name().unwrap_or("")
}

fn ns_name(pod: &CachedPod) -> (&str, &str) {
    (pod.namespace(), pod.name())
}

impl TaintManager {
    pub fn new(
        cache: Arc<dyn Cache>,
        evictions: TimedQueue,
        events: Arc<dyn EvictionEvents>,
        clock: Clock,
    ) -> Self {
        TaintManager {
            cache,
            tainted: Mutex::default(),
            evictions,
            events,
            clock,
        }
    }

    /// The scheduled evictions (for shutdown and tests).
    pub fn evictions(&self) -> &TimedQueue {
        &self.evictions
    }

    /// The NoExecute taints the manager knows for `node`.
    pub fn known_taints(&self, node: &str) -> Option<Vec<Taint>> {
        self.tainted.lock().get(node).cloned()
    }

    /// A node changed (or appeared, or went away).
    ///
    /// A deleted node is only forgotten: its pods' pending evictions still
    /// fire, as upstream. Otherwise its NoExecute taints are recorded
    /// *before* its pods are listed, so a pod event handled later sees them;
    /// with no taints left every pending eviction on it is cancelled, else
    /// each pod is decided with one shared `now`.
    pub fn handle_node(&self, name: &str) {
        let span = tracing::debug_span!("node_update", node = %name);
        let _entered = span.enter();
        let Some(node) = self.cache.node(name) else {
            tracing::debug!("noticed node deletion");
            self.tainted.lock().remove(name);
            return;
        };
        let taints = no_execute_taints(
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        );
        {
            let mut tainted = self.tainted.lock();
            if taints.is_empty() {
                tainted.remove(name);
            } else {
                tainted.insert(name.to_string(), taints.clone());
            }
        }
        let pods = self.cache.pods_on_node(name);
        if pods.is_empty() {
            return;
        }
        if taints.is_empty() {
            tracing::debug!("all NoExecute taints removed; cancelling evictions");
            for pod in &pods {
                let (ns, pod_name) = ns_name(pod);
                self.cancel_with_event(ns, pod_name);
            }
            return;
        }
        let now = self.clock.instant();
        for pod in &pods {
            self.process_pod_on_node(pod, name, &taints, now);
        }
    }

    /// A pod changed (or appeared, or went away).
    pub fn handle_pod(&self, item: &PodItem) {
        let key = key_of(&item.namespace, &item.name);
        let span = tracing::debug_span!("pod_update", pod = %key, node = %item.node_name);
        let _entered = span.enter();
        let Some(pod) = self.cache.pod(&key) else {
            tracing::debug!("noticed pod deletion");
            self.cancel_with_event(&item.namespace, &item.name);
            return;
        };
        self.drop_stale(&pod);
        let node = node_of(&pod);
        // Items are sharded by node; an item for another node is stale.
        if node != item.node_name || node.is_empty() {
            return;
        }
        // Not tainted (or gone): any cancelling was done by the node path.
        let Some(taints) = self.known_taints(node) else {
            return;
        };
        self.process_pod_on_node(&pod, node, &taints, self.clock.instant());
    }

    fn process_pod_on_node(&self, pod: &CachedPod, node: &str, taints: &[Taint], now: Instant) {
        let (ns, name) = ns_name(pod);
        let key = key_of(ns, name);
        let tolerations = pod.tolerations();
        self.drop_stale(pod);
        let scheduled = self.evictions.get(&key).is_some();
        let args = || WorkArgs {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: Some(pod.uid().to_string()).filter(|u| !u.is_empty()),
            node: node.to_string(),
        };
        match decide(taints, tolerations, scheduled, now) {
            Decision::Cancel => self.cancel_with_event(ns, name),
            Decision::EvictNow => {
                tracing::debug!(pod = %key, node, "not all taints are tolerated; evicting now");
                self.cancel_with_event(ns, name);
                self.evictions.add(args(), now);
            }
            Decision::EvictAt(at) => {
                let in_secs = at.saturating_duration_since(now).as_secs();
                tracing::debug!(pod = %key, node, in_secs, "scheduling eviction");
                self.evictions.add(args(), at);
            }
            Decision::Nothing => {}
        }
    }

    /// Cancels an eviction scheduled for an earlier pod of this name: that
    /// pod is gone (upstream keys by name only and would let it fire, deleting
    /// the namesake).
    fn drop_stale(&self, pod: &CachedPod) {
        let (ns, name) = ns_name(pod);
        if let Some(s) = self.evictions.get(&key_of(ns, name))
            && s.uid.is_some()
            && s.uid.as_deref() != Some(pod.uid()).filter(|u| !u.is_empty())
        {
            tracing::debug!(pod = %key_of(ns, name), "pod was replaced by a namesake; cancelling its eviction");
            self.cancel_with_event(ns, name);
        }
    }

    /// Cancels the pod's pending eviction, with an event when there was one.
    fn cancel_with_event(&self, namespace: &str, name: &str) {
        if self.evictions.cancel(&key_of(namespace, name)) {
            tracing::debug!(pod = %key_of(namespace, name), "cancelled eviction");
            self.events.cancelling(namespace, name);
        }
    }
}

#[cfg(test)]
mod tests;

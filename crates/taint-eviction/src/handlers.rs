//! Informer event filters (upstream `PodUpdated`, `NodeUpdated`): which
//! changes become work items.
//!
//! * Pods: adds and deletes always (a delete with the pod's last node);
//!   updates only when the tolerations or `spec.nodeName` changed. Status,
//!   label and deletionTimestamp changes alone do nothing.
//! * Nodes: adds and deletes always; updates only when the ordered list of
//!   NoExecute taints changed.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kcm_pod::{CachedPod, Toleration};
use kcm_runtime::informer::{Change, Informer};
use kcm_runtime::workqueue::WorkQueue;

use crate::decide::{no_execute_taints, same_taints};
use crate::manager::PodItem;

fn node_name(pod: &CachedPod) -> &str {
    pod.node_name().unwrap_or("")
}

/// Go's semantic equality of two toleration lists: same order, and absent
/// strings equal to empty ones.
fn same_tolerations(a: &[Toleration], b: &[Toleration]) -> bool {
    fn s(v: &Option<Box<str>>) -> &str {
        v.as_deref().unwrap_or("")
    }
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            s(&x.key) == s(&y.key)
                && s(&x.operator) == s(&y.operator)
                && s(&x.value) == s(&y.value)
                && s(&x.effect) == s(&y.effect)
                && x.toleration_seconds == y.toleration_seconds
        })
}

/// The work item for a pod as it is (or was last seen).
pub fn pod_item(pod: &CachedPod) -> PodItem {
    PodItem {
        namespace: pod.namespace().to_string(),
        name: pod.name().to_string(),
        node_name: node_name(pod).to_string(),
    }
}

/// The work item a pod change produces, if any.
pub fn pod_change(change: &Change<CachedPod>) -> Option<PodItem> {
    match change {
        Change::Added(p) | Change::Deleted(p) => Some(pod_item(p)),
        Change::Updated { old, new } => {
            let same = same_tolerations(old.tolerations(), new.tolerations())
                && node_name(old) == node_name(new);
            (!same).then(|| pod_item(new))
        }
    }
}

/// The node name a node change produces, if any.
pub fn node_change(change: &Change<Node>) -> Option<String> {
    let taints = |n: &Node| {
        no_execute_taints(
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        )
    };
    match change {
        Change::Added(n) | Change::Deleted(n) => Some(n.metadata.name.clone().unwrap_or_default()),
        Change::Updated { old, new } => (!same_taints(&taints(old), &taints(new)))
            .then(|| new.metadata.name.clone().unwrap_or_default()),
    }
}

/// Registers both handlers; they only add keys to the queues.
pub fn register(
    pods: &Informer<CachedPod>,
    nodes: &Informer<Node>,
    pod_queue: WorkQueue<PodItem>,
    node_queue: WorkQueue<String>,
) {
    pods.add_handler(Arc::new(move |c: &Change<CachedPod>| {
        if let Some(item) = pod_change(c) {
            pod_queue.add(item);
        }
    }));
    nodes.add_handler(Arc::new(move |c: &Change<Node>| {
        if let Some(name) = node_change(c) {
            node_queue.add(name);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Pod, PodSpec, PodStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(node: Option<&str>, tolerations: Option<Vec<Toleration>>) -> Arc<CachedPod> {
        Arc::new(CachedPod::from(full_pod(node, tolerations)))
    }

    fn full_pod(node: Option<&str>, tolerations: Option<Vec<Toleration>>) -> Pod {
        let tolerations = tolerations.map(|v| v.iter().map(Toleration::to_api).collect());
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                tolerations,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn node(taints: Option<Vec<Taint>>) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn tol(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            toleration_seconds: seconds,
            ..Default::default()
        }
    }

    fn upd<K>(old: Arc<K>, new: Arc<K>) -> Change<K> {
        Change::Updated { old, new }
    }

    #[test]
    fn pod_adds_and_deletes_always_count() {
        let item = pod_change(&Change::Added(pod(Some("n1"), None))).expect("add");
        assert_eq!(item.node_name, "n1");
        let item = pod_change(&Change::Deleted(pod(Some("n2"), None))).expect("delete");
        assert_eq!(item.node_name, "n2", "the last known node");
        let item = pod_change(&Change::Added(pod(None, None))).expect("unbound");
        assert_eq!(item.node_name, "");
    }

    #[test]
    fn pod_updates_count_only_for_tolerations_or_node() {
        let a = pod(Some("n1"), Some(vec![tol("k", Some(10))]));
        let mut status_only = full_pod(Some("n1"), Some(vec![tol("k", Some(10))]));
        status_only.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        status_only.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        let status_only = Arc::new(CachedPod::from(status_only));
        assert_eq!(pod_change(&upd(a.clone(), status_only)), None);

        let more = pod(Some("n1"), Some(vec![tol("k", Some(10)), tol("j", None)]));
        assert!(pod_change(&upd(a.clone(), more)).is_some());
        let seconds = pod(Some("n1"), Some(vec![tol("k", Some(20))]));
        assert!(pod_change(&upd(a.clone(), seconds)).is_some());

        let unbound = pod(None, Some(vec![tol("k", Some(10))]));
        let item = pod_change(&upd(unbound, a.clone())).expect("bound");
        assert_eq!(item.node_name, "n1");

        // nil and empty lists (and strings) are the same, as in Go.
        assert_eq!(
            pod_change(&upd(pod(Some("n1"), None), pod(Some("n1"), Some(vec![])))),
            None
        );
        let mut empty_value = tol("k", Some(10));
        empty_value.value = Some("".into());
        assert_eq!(
            pod_change(&upd(a, pod(Some("n1"), Some(vec![empty_value])))),
            None
        );
    }

    #[test]
    fn node_updates_count_only_for_no_execute_taints() {
        assert_eq!(
            node_change(&Change::Added(node(None))).as_deref(),
            Some("n1")
        );
        assert_eq!(
            node_change(&Change::Deleted(node(None))).as_deref(),
            Some("n1")
        );
        let plain = node(Some(vec![taint("a", "NoSchedule")]));
        assert_eq!(node_change(&upd(node(None), plain.clone())), None);
        let exec = node(Some(vec![
            taint("a", "NoSchedule"),
            taint("b", "NoExecute"),
        ]));
        assert_eq!(
            node_change(&upd(plain, exec.clone())).as_deref(),
            Some("n1")
        );
        assert_eq!(node_change(&upd(exec.clone(), exec.clone())), None);
        assert_eq!(node_change(&upd(exec, node(None))).as_deref(), Some("n1"));
    }
}

//! What the cache keeps of an object. Every informed object loses its
//! `managedFields`; a pod also loses the parts of its spec that none of the
//! four controllers reads: its regular containers (a k8s-openapi
//! `Container` alone is 2 KiB before any of its strings; container names
//! for pod failure policy come from the status), init containers other than
//! sidecars, volumes, affinity, security contexts. That is most of what a
//! cached pod costs. Writes never send a cached spec back: pods are
//! patched, and the one status PUT (the stale `DisruptionTarget` reset) goes
//! to the status subresource, where the API server takes the spec from the
//! stored pod. The status is kept whole, because that PUT sends it back.
//!
//! Every list the cache keeps is also shrunk to its length. serde grows a
//! list from empty, so a pod's one container status (752 B) sat in room for
//! four and five conditions in room for eight: a heap profile of W1 showed
//! those spare slots as a quarter of kcm-rs's heap.

use std::any::Any;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::Resource;

/// Trims `obj` for the cache.
pub fn trim<K: Resource + Any>(mut obj: K) -> K {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    shrink(&mut meta.owner_references);
    shrink(&mut meta.finalizers);
    if let Some(pod) = (&mut obj as &mut dyn Any).downcast_mut::<Pod>() {
        if let Some(spec) = pod.spec.as_mut() {
            trim_pod_spec(spec);
        }
        if let Some(status) = pod.status.as_mut() {
            shrink_pod_status(status);
        }
    }
    obj
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

/// Drops the spare room of the status lists; nothing in them changes.
fn shrink_pod_status(status: &mut PodStatus) {
    shrink(&mut status.conditions);
    shrink(&mut status.container_statuses);
    shrink(&mut status.init_container_statuses);
    shrink(&mut status.ephemeral_container_statuses);
    shrink(&mut status.host_ips);
    shrink(&mut status.pod_ips);
    shrink(&mut status.resource_claim_statuses);
}

/// Keeps what the controllers read: node name, tolerations, restart
/// policy, priority, scheduling gates, and the names of sidecar init
/// containers (container-level `restartPolicy: Always`).
fn trim_pod_spec(spec: &mut PodSpec) {
    spec.containers = Vec::new();
    if let Some(init) = spec.init_containers.take() {
        let sidecars: Vec<Container> = init
            .into_iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|mut c| {
                trim_container(&mut c);
                c
            })
            .collect();
        spec.init_containers = (!sidecars.is_empty()).then_some(sidecars);
        shrink(&mut spec.init_containers);
    }
    shrink(&mut spec.tolerations);
    shrink(&mut spec.readiness_gates);
    shrink(&mut spec.scheduling_gates);
    spec.ephemeral_containers = None;
    spec.volumes = None;
    spec.affinity = None;
    spec.topology_spread_constraints = None;
    spec.security_context = None;
    spec.dns_config = None;
    spec.host_aliases = None;
    spec.image_pull_secrets = None;
    spec.resource_claims = None;
    spec.resources = None;
    spec.overhead = None;
    spec.node_selector = None;
}

fn trim_container(c: &mut Container) {
    *c = Container {
        name: std::mem::take(&mut c.name),
        restart_policy: c.restart_policy.take(),
        ..Default::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    #[test]
    fn pods_keep_what_controllers_read() -> Result<(), serde_json::Error> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p", "labels": { "a": "b" }, "annotations": { "x": "y" },
                "managedFields": [{ "manager": "m" }], "finalizers": ["f"] },
            "spec": {
                "nodeName": "n1", "restartPolicy": "Never", "priority": 5,
                "tolerations": [{ "key": "k", "operator": "Exists", "effect": "NoExecute" }],
                "initContainers": [{ "name": "side", "image": "i", "restartPolicy": "Always",
                    "env": [{ "name": "A", "value": "1" }] }, { "name": "setup", "image": "i" }],
                "containers": [{ "name": "main", "image": "i", "command": ["x"],
                    "resources": { "limits": { "cpu": "1" } } }],
                "volumes": [{ "name": "v", "emptyDir": {} }],
                "affinity": { "nodeAffinity": {} }
            },
            "status": { "phase": "Running", "containerStatuses": [{ "name": "main", "image": "i",
                "imageID": "id", "ready": true, "restartCount": 0 }] }
        }))?;
        let status = pod.status.clone();
        let t = trim(pod);
        assert!(t.metadata.managed_fields.is_none());
        assert_eq!(t.metadata.finalizers, Some(vec!["f".to_string()]));
        assert_eq!(t.status, status, "status is kept whole");
        let spec = t.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.priority, Some(5));
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        assert!(spec.volumes.is_none() && spec.affinity.is_none());
        assert!(spec.containers.is_empty());
        let init = spec.init_containers.as_ref().expect("init");
        assert_eq!(init.len(), 1, "only the sidecar is kept");
        assert_eq!(
            (init[0].name.as_str(), init[0].restart_policy.as_deref()),
            ("side", Some("Always"))
        );
        assert!(init[0].env.is_none() && init[0].image.is_none());
        Ok(())
    }

    #[test]
    fn kept_lists_have_no_spare_room() -> Result<(), serde_json::Error> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p", "finalizers": ["f"],
                "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                    "uid": "u" }] },
            "spec": { "tolerations": [{ "key": "k", "operator": "Exists" }] },
            "status": { "conditions": [
                    { "type": "A", "status": "True" }, { "type": "B", "status": "True" },
                    { "type": "C", "status": "True" }, { "type": "D", "status": "True" },
                    { "type": "E", "status": "True" }],
                "containerStatuses": [{ "name": "main", "image": "i", "imageID": "",
                    "ready": false, "restartCount": 0 }] }
        }))?;
        let before = pod.status.clone();
        let t = trim(pod);
        assert_eq!(t.status, before, "shrinking changes no content");
        let status = t.status.as_ref().expect("status");
        let room = |len: usize, cap: usize| assert_eq!(cap, len);
        let conditions = status.conditions.as_ref().expect("conditions");
        room(conditions.len(), conditions.capacity());
        let containers = status.container_statuses.as_ref().expect("containers");
        room(containers.len(), containers.capacity());
        let tolerations = t.spec.as_ref().and_then(|s| s.tolerations.as_ref());
        let tolerations = tolerations.expect("tolerations");
        room(tolerations.len(), tolerations.capacity());
        let owners = t.metadata.owner_references.as_ref().expect("owners");
        room(owners.len(), owners.capacity());
        Ok(())
    }

    #[test]
    fn other_kinds_only_lose_managed_fields() -> Result<(), serde_json::Error> {
        let node: Node = serde_json::from_value(json!({
            "metadata": { "name": "n", "managedFields": [{ "manager": "m" }] },
            "spec": { "taints": [{ "key": "k", "effect": "NoExecute" }] }
        }))?;
        let t = trim(node.clone());
        assert!(t.metadata.managed_fields.is_none());
        assert_eq!(t.spec, node.spec);
        Ok(())
    }
}

use serde_json::json;

use super::*;
use crate::informer::trim::trim;

/// A pod as the API server sends it, with every part the wire decoder
/// skips or keeps.
fn full_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
            "generateName": "job-", "generation": 1, "creationTimestamp": "2026-11-30T10:00:00Z",
            "deletionTimestamp": "2026-11-30T10:01:00Z", "deletionGracePeriodSeconds": 30,
            "labels": { "a": "b" }, "annotations": { "batch.kubernetes.io/job-completion-index": "3" },
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju",
                "controller": true, "blockOwnerDeletion": true }],
            "managedFields": [{ "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": { "f:status": { "f:phase": {} } } }]
        },
        "spec": {
            "nodeName": "n1", "restartPolicy": "Never", "priority": 5, "schedulerName": "default",
            "serviceAccountName": "sa", "terminationGracePeriodSeconds": 30, "hostname": "h",
            "subdomain": "s", "activeDeadlineSeconds": 60, "priorityClassName": "pc",
            "tolerations": [{ "key": "k", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 10 }],
            "schedulingGates": [{ "name": "g" }],
            "readinessGates": [{ "conditionType": "x" }],
            "initContainers": [
                { "name": "side", "image": "i", "restartPolicy": "Always",
                  "env": [{ "name": "A", "value": "1" }] },
                { "name": "setup", "image": "i" }
            ],
            "containers": [{ "name": "main", "image": "i", "command": ["x"],
                "resources": { "limits": { "cpu": "1" } } }],
            "ephemeralContainers": [{ "name": "dbg", "image": "i" }],
            "volumes": [{ "name": "v", "emptyDir": {} }],
            "affinity": { "nodeAffinity": {} },
            "nodeSelector": { "disk": "ssd" },
            "securityContext": { "runAsUser": 1000 },
            "someFieldFromANewerServer": true
        },
        "status": {
            "phase": "Failed",
            "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "R",
                "lastTransitionTime": "2026-11-30T10:00:30Z" }],
            "containerStatuses": [{ "name": "main", "image": "i", "imageID": "id", "ready": false,
                "restartCount": 0, "state": { "terminated": { "exitCode": 42 } } }]
        }
    })
}

#[test]
fn wire_decoding_keeps_exactly_what_trim_keeps() -> Result<(), serde_json::Error> {
    let text = serde_json::to_string(&full_pod())?;
    let full: Pod = serde_json::from_str(&text)?;
    let wire: WirePod = serde_json::from_str(&text)?;
    assert_eq!(Pod::from(wire), trim(full));
    Ok(())
}

#[test]
fn wire_decoding_drops_the_skipped_parts() -> Result<(), serde_json::Error> {
    let wire: WirePod = serde_json::from_value(full_pod())?;
    let pod = wire.0;
    assert!(pod.metadata.managed_fields.is_none());
    assert_eq!(pod.metadata.labels.as_ref().map(|l| l.len()), Some(1));
    let spec = pod.spec.as_ref().expect("spec");
    assert!(spec.containers.is_empty());
    assert!(spec.volumes.is_none() && spec.affinity.is_none() && spec.node_selector.is_none());
    let init = spec.init_containers.as_ref().expect("sidecar kept");
    assert_eq!(init.len(), 1);
    assert_eq!(init[0].name, "side");
    assert!(init[0].env.is_none());
    assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert_eq!(spec.active_deadline_seconds, Some(60));
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    Ok(())
}

#[test]
fn minimal_and_null_parts_decode() -> Result<(), serde_json::Error> {
    let wire: WirePod = serde_json::from_value(json!({
        "metadata": { "name": "p", "managedFields": null },
        "spec": null,
        "status": null
    }))?;
    assert_eq!(wire.0.metadata.name.as_deref(), Some("p"));
    assert!(wire.0.spec.is_none() && wire.0.status.is_none());
    let bare: WirePod = serde_json::from_value(json!({ "spec": { "initContainers": null } }))?;
    assert!(bare.0.spec.is_some_and(|s| s.init_containers.is_none()));
    Ok(())
}

#[test]
fn malformed_pods_are_errors_not_panics() {
    for bad in [
        json!({ "spec": 5 }),
        json!({ "metadata": { "labels": ["x"] } }),
        json!({ "spec": { "tolerations": "x" } }),
        json!({ "spec": { "initContainers": [{ "image": "no-name" }] } }),
        json!([1, 2]),
    ] {
        assert!(
            serde_json::from_value::<WirePod>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn watch_events_and_lists_decode_through_the_wire_type() -> Result<(), serde_json::Error> {
    let event: kube::core::WatchEvent<WirePod> =
        serde_json::from_value(json!({ "type": "MODIFIED", "object": full_pod() }))?;
    let kube::core::WatchEvent::Modified(p) = event else {
        panic!("expected MODIFIED");
    };
    assert!(p.0.metadata.managed_fields.is_none());
    let list: kube::core::ObjectList<WirePod> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": { "resourceVersion": "9" },
        "items": [full_pod(), full_pod()]
    }))?;
    assert_eq!(list.items.len(), 2);
    Ok(())
}

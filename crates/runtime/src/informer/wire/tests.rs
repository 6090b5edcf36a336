use serde_json::json;

use super::*;

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
fn the_wire_pod_is_the_cached_pod_and_its_resource_version() -> Result<(), serde_json::Error> {
    let text = serde_json::to_string(&full_pod())?;
    let full: Pod = serde_json::from_str(&text)?;
    let wire: WirePod = serde_json::from_str(&text)?;
    assert_eq!(wire.meta.resource_version.as_deref(), Some("7"));
    assert_eq!(wire.meta.name.as_deref(), Some("p"));
    assert_eq!(CachedPod::from(wire), CachedPod::from(&full));
    Ok(())
}

#[test]
fn minimal_and_null_parts_decode() -> Result<(), serde_json::Error> {
    let wire: WirePod = serde_json::from_value(json!({
        "metadata": { "name": "p", "managedFields": null },
        "spec": null,
        "status": null
    }))?;
    assert_eq!(wire.pod.name(), "p");
    assert!(wire.meta.resource_version.is_none());
    assert!(!wire.pod.has_status() && wire.pod.node_name().is_none());
    Ok(())
}

#[test]
fn malformed_pods_are_errors_not_panics() {
    for bad in [
        json!({ "spec": 5 }),
        json!({ "metadata": { "labels": ["x"] } }),
        json!({ "spec": { "tolerations": "x" } }),
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
    assert_eq!(p.pod.phase(), "Failed");
    let list: kube::core::ObjectList<WirePod> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": { "resourceVersion": "9" },
        "items": [full_pod(), full_pod()]
    }))?;
    assert_eq!(list.items.len(), 2);
    Ok(())
}

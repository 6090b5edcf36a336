use std::mem::size_of;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;

/// A pod with every cached field set and much that is not cached.
fn full_json() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "j-0-abcde", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "generateName": "j-0-", "selfLink": "/x",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "deletionTimestamp": "2026-01-02T03:05:05Z", "deletionGracePeriodSeconds": 30,
            "labels": {"b": "2", "a": "1", "batch.kubernetes.io/job-name": "j"},
            "annotations": {
                "batch.kubernetes.io/job-completion-index": "0",
                "batch.kubernetes.io/job-index-failure-count": "x",
                "other": "skipped"
            },
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-1",
                 "controller": true, "blockOwnerDeletion": true}
            ],
            "finalizers": ["example.com/x", "batch.kubernetes.io/job-tracking"],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
        },
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "B"}]}],
            "initContainers": [
                {"name": "setup", "image": "busybox"},
                {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
            ]
        },
        "status": {
            "phase": "Failed", "reason": "Evicted", "message": "m", "observedGeneration": 2,
            "podIPs": [{"ip": "10.0.0.1"}], "qosClass": "BestEffort",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T03:04:10Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                 "message": "Taint manager: deleting due to NoExecute taint",
                 "lastTransitionTime": "2026-01-02T03:04:20Z", "observedGeneration": 2}
            ],
            "containerStatuses": [{
                "name": "main", "restartCount": 2, "ready": false, "image": "busybox", "imageID": "x",
                "state": {"terminated": {"exitCode": 137, "finishedAt": "2026-01-02T03:04:30Z",
                                          "reason": "Error"}},
                "lastState": {"terminated": {"exitCode": 1}}
            }],
            "initContainerStatuses": [{
                "name": "proxy", "restartCount": 0, "ready": true, "image": "envoy", "imageID": "y",
                "state": {"running": {"startedAt": "2026-01-02T03:04:06Z"}}
            }]
        }
    })
}

fn ts(s: &str) -> Option<jiff::Timestamp> {
    Some(s.parse().expect("timestamp"))
}

#[test]
fn decodes_every_cached_field() {
    let p: CachedPod = serde_json::from_value(full_json()).expect("decode");
    assert_eq!(
        (p.namespace(), p.name(), p.uid()),
        ("ns", "j-0-abcde", "u-1")
    );
    assert_eq!((p.resource_version(), p.generation()), ("42", Some(3)));
    assert_eq!(p.creation_timestamp(), ts("2026-01-02T03:04:05Z"));
    assert_eq!(p.deletion_timestamp(), ts("2026-01-02T03:05:05Z"));
    assert!(p.is_deleting());
    assert_eq!(p.deletion_grace_period_seconds(), Some(30));
    let labels: Vec<_> = p.labels().iter().collect();
    assert_eq!(
        labels,
        [
            ("a", "1"),
            ("b", "2"),
            ("batch.kubernetes.io/job-name", "j")
        ]
    );
    assert_eq!(p.labels().get("b"), Some("2"));
    assert_eq!(p.labels().get("c"), None);
    let a = p.job_annotations();
    assert_eq!(a.completion_index.as_deref(), Some("0"));
    assert_eq!(a.index_failure_count.as_deref(), Some("x"));
    assert_eq!(a.index_ignored_failure_count, None);
    let c = p.controller().expect("controller");
    assert_eq!(
        (
            &*c.api_version,
            &*c.kind,
            &*c.name,
            &*c.uid,
            c.block_owner_deletion
        ),
        ("batch/v1", "Job", "j", "j-1", Some(true))
    );
    assert!(p.has_tracking_finalizer());
    assert_eq!(p.node_name(), Some("n1"));
    assert_eq!(p.tolerations().len(), 2);
    assert_eq!(p.tolerations()[0].toleration_seconds, Some(300));
    assert_eq!(p.tolerations()[1].value.as_deref(), Some("v"));
    let sidecars: Vec<&str> = p.sidecar_names().iter().map(|s| &**s).collect();
    assert_eq!(sidecars, ["proxy"]);
    assert!(p.has_status());
    assert_eq!(p.phase(), "Failed");
    assert!(p.reason_is_evicted());
    assert_eq!(p.observed_generation(), Some(2));
    let types: Vec<&str> = p.conditions().iter().map(|c| &*c.type_).collect();
    assert_eq!(types, ["Ready", "DisruptionTarget"]);
    let ready = p.condition("Ready").expect("ready");
    assert_eq!(
        (&*ready.status, ready.last_transition_time),
        ("False", ts("2026-01-02T03:04:10Z"))
    );
    let dt = p.disruption_target().expect("disruption target");
    assert_eq!(dt.reason.as_deref(), Some("DeletionByTaintManager"));
    assert_eq!(dt.observed_generation, Some(2));
    let main = &p.container_statuses()[0];
    assert_eq!((&*main.name, main.restart_count), ("main", 2));
    assert_eq!(
        main.terminated,
        Some(Terminated {
            exit_code: 137,
            finished_at: ts("2026-01-02T03:04:30Z")
        })
    );
    assert_eq!(p.init_container_statuses()[0].terminated, None);
    assert_eq!(p.key(), "ns/j-0-abcde");
}

/// `From<&Pod>` and the watch decoder are two ways in: they must agree on
/// every pod the API can send (whole-second times, as its JSON has).
#[test]
fn converting_a_typed_pod_equals_decoding_its_json() {
    let sparse = json!({
        "metadata": {"name": "p", "ownerReferences": [{"apiVersion": "v1", "kind": "X",
            "name": "x", "uid": "u"}], "annotations": {"other": "1"}, "finalizers": ["f"]},
        "spec": {"containers": [], "tolerations": [], "initContainers": [{"name": "i"}]},
        "status": {"conditions": [{"type": "DisruptionTarget", "status": "False"},
                                   {"type": "DisruptionTarget", "status": "True"}]}
    });
    for v in [full_json(), sparse, json!({}), json!({"status": {}})] {
        let pod: Pod = serde_json::from_value(v.clone()).expect("pod");
        let decoded: CachedPod = serde_json::from_value(v.clone()).expect("decode");
        assert_eq!(CachedPod::from(&pod), decoded, "{v}");
    }
}

#[test]
fn an_empty_or_sparse_pod_reads_as_zero_values() {
    let p: CachedPod = serde_json::from_value(json!({})).expect("decode");
    assert_eq!((p.name(), p.namespace(), p.phase()), ("", "", ""));
    assert!(!p.has_status() && p.controller().is_none() && p.tolerations().is_empty());
    let p: CachedPod = serde_json::from_value(json!({
        "metadata": {"labels": null, "annotations": {"batch.kubernetes.io/job-completion-index": null},
                     "finalizers": null, "ownerReferences": [{"kind": "Job"}]},
        "spec": null,
        "status": {"conditions": [{"type": "Ready"}],
                   "containerStatuses": [{"name": "c", "state": {"terminated": {}}}]}
    }))
    .expect("lenient decode");
    assert!(p.labels().is_empty());
    assert_eq!(p.job_annotations().completion_index.as_deref(), Some(""));
    assert!(p.controller().is_none(), "not marked controller");
    assert_eq!(&*p.conditions()[0].status, "");
    let t = p.container_statuses()[0]
        .terminated
        .as_ref()
        .expect("terminated");
    assert_eq!((t.exit_code, t.finished_at), (0, None));
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    for bad in [
        json!([]),
        json!({"metadata": {"name": 5}}),
        json!({"metadata": {"labels": ["a"]}}),
        json!({"metadata": {"finalizers": {"a": 1}}}),
        json!({"metadata": {"creationTimestamp": "yesterday"}}),
        json!({"status": {"conditions": {}}}),
    ] {
        assert!(
            serde_json::from_value::<CachedPod>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn repeated_label_keys_keep_the_last_value() {
    let l = Labels::from_pairs([("a", "1"), ("b", "2"), ("a", "3")]);
    assert_eq!(l.iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
    let bytes = br#"{"metadata":{"labels":{"a":"1","a":"2"}}}"#;
    let p: CachedPod = serde_json::from_slice(bytes).expect("decode");
    assert_eq!(p.labels().get("a"), Some("2"));
}

#[test]
fn repeated_strings_are_shared() {
    let a: CachedPod = serde_json::from_value(full_json()).expect("a");
    let b: CachedPod = serde_json::from_value(full_json()).expect("b");
    assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
    assert!(Arc::ptr_eq(
        a.tolerations.as_ref().expect("a"),
        b.tolerations.as_ref().expect("b")
    ));
    assert!(Arc::ptr_eq(&a.conditions[0].type_, &b.conditions[0].type_));
}

#[test]
fn the_cached_pod_is_a_fraction_of_the_api_type() {
    // k8s-openapi's Pod is over 2 KiB inline before any heap; the cached
    // pod a sixth of that (320 B today).
    assert!(size_of::<Pod>() > 2000, "{}", size_of::<Pod>());
    assert!(size_of::<CachedPod>() <= 384, "{}", size_of::<CachedPod>());
}

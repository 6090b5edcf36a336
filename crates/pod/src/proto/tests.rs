//! The protobuf decoder against the JSON one on the same pod, with the
//! zero values protobuf writes where JSON omits the field. (The e2e test
//! `pod_wire` holds the same against a real API server's encodings.)

use kcm_proto::Writer;
use serde_json::json;

use crate::CachedPod;

fn time(secs: i64) -> Writer {
    Writer::new().varint(1, secs)
}

fn entry(k: &str, v: &str) -> Writer {
    Writer::new().bytes(1, k).bytes(2, v)
}

#[test]
fn decodes_what_json_decodes() {
    let t = 1_767_323_045; // 2026-01-02T03:04:05Z
    let meta = Writer::new()
        .bytes(1, "p")
        .bytes(2, "p-") // generateName: not cached
        .bytes(3, "ns")
        .bytes(5, "uid-1")
        .bytes(6, "42")
        .varint(7, 3)
        .message(8, time(t))
        .message(9, time(t + 30))
        .varint(10, 30)
        .message(11, entry("b", "2"))
        .message(11, entry("a", ""))
        .message(12, entry("batch.kubernetes.io/job-completion-index", "7"))
        .message(12, entry("other", "x"))
        .message(
            13,
            Writer::new()
                .bytes(1, "Job")
                .bytes(3, "j")
                .bytes(4, "juid")
                .bytes(5, "batch/v1")
                .varint(6, 1)
                .varint(7, 1),
        )
        .bytes(14, "batch.kubernetes.io/job-tracking")
        .message(17, Writer::new().bytes(1, "kubectl")); // managedFields
    let spec = Writer::new()
        .message(2, Writer::new().bytes(1, "main").bytes(2, "busybox")) // containers
        .bytes(10, "node-1")
        .message(20, Writer::new().bytes(1, "side").bytes(24, "Always"))
        .message(20, Writer::new().bytes(1, "init"))
        .message(
            22,
            Writer::new()
                .bytes(1, "k")
                .bytes(2, "Equal")
                .bytes(3, "")
                .bytes(4, "NoExecute")
                .varint(5, 60),
        );
    let status = Writer::new()
        .bytes(1, "Failed")
        .message(
            2,
            Writer::new()
                .bytes(1, "DisruptionTarget")
                .bytes(2, "True")
                .message(3, Writer::new()) // zero time: null in JSON
                .message(4, time(t))
                .bytes(5, "DeletionByPodGC")
                .bytes(6, "")
                .varint(7, 0),
        )
        .bytes(4, "Evicted")
        .message(
            8,
            Writer::new()
                .bytes(1, "main")
                .message(
                    2,
                    Writer::new().message(3, Writer::new().varint(1, -1).message(6, time(t))),
                )
                .varint(5, 2),
        )
        .varint(17, 0);
    let pod = Writer::new()
        .message(1, meta)
        .message(2, spec)
        .message(3, status)
        .finish();
    let from_json: CachedPod = serde_json::from_value(json!({
        "metadata": {
            "name": "p", "namespace": "ns", "uid": "uid-1", "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "deletionTimestamp": "2026-01-02T03:04:35Z",
            "deletionGracePeriodSeconds": 30,
            "labels": { "a": "", "b": "2" },
            "annotations": { "batch.kubernetes.io/job-completion-index": "7", "other": "x" },
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                  "uid": "juid", "controller": true, "blockOwnerDeletion": true }],
            "finalizers": ["batch.kubernetes.io/job-tracking"]
        },
        "spec": {
            "nodeName": "node-1",
            "initContainers": [{ "name": "side", "restartPolicy": "Always" }, { "name": "init" }],
            "tolerations": [{ "key": "k", "operator": "Equal", "effect": "NoExecute",
                              "tolerationSeconds": 60 }]
        },
        "status": {
            "phase": "Failed", "reason": "Evicted",
            "conditions": [{ "type": "DisruptionTarget", "status": "True",
                             "lastTransitionTime": "2026-01-02T03:04:05Z",
                             "reason": "DeletionByPodGC" }],
            "containerStatuses": [{ "name": "main", "restartCount": 2,
                "state": { "terminated": { "exitCode": -1,
                                           "finishedAt": "2026-01-02T03:04:05Z" } } }]
        }
    }))
    .expect("json");
    let from_proto = CachedPod::decode_proto(&pod).expect("proto");
    assert_eq!(from_proto, from_json);
    assert_eq!(from_proto.generation(), Some(3));
    assert_eq!(from_proto.sidecar_names().len(), 1);
}

#[test]
fn zero_values_read_as_absent_like_json_omitempty() {
    let pod = Writer::new()
        .message(
            1,
            Writer::new()
                .bytes(1, "p")
                .bytes(3, "")
                .varint(7, 0)
                .message(8, Writer::new()),
        )
        .message(2, Writer::new().bytes(10, ""))
        .message(3, Writer::new().bytes(1, "").bytes(4, "").varint(17, 0))
        .finish();
    let from_json: CachedPod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {}, "status": {}}))
            .expect("json");
    assert_eq!(CachedPod::decode_proto(&pod).expect("proto"), from_json);
}

#[test]
fn bad_bytes_are_an_error() {
    let truncated = [0x0a, 0x05, 0x0a];
    assert!(CachedPod::decode_proto(&truncated).is_err());
    // A string where a message belongs reads as a (bad) message.
    let wrong = Writer::new().varint(1, 5).finish();
    assert!(CachedPod::decode_proto(&wrong).is_err());
    let far = Writer::new()
        .message(
            1,
            Writer::new().message(8, Writer::new().varint(1, i64::MAX)),
        )
        .finish();
    let far = CachedPod::decode_proto(&far).expect("a time out of range is absent");
    assert_eq!(far.creation_timestamp(), None);
}

#[test]
fn nanos_are_ignored_as_go_does() {
    let pod = Writer::new()
        .message(
            1,
            Writer::new().message(8, Writer::new().varint(1, 1_767_323_045).varint(2, 5)),
        )
        .finish();
    let t = CachedPod::decode_proto(&pod)
        .expect("proto")
        .creation_timestamp();
    assert_eq!(t.map(|t| t.subsec_nanosecond()), Some(0));
}

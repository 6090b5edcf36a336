//! The pod cache's two wire decoders against the real API server: the same
//! pods listed in JSON and in protobuf decode to equal `CachedPod`s (every
//! field the controllers read, in the shapes Go's omitempty and pointer
//! rules give them), and a protobuf informer's store follows the watch
//! exactly as a JSON informer's does.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{TestNamespace, shared, wire};
use kcm_pod::CachedPod;
use kcm_runtime::informer::{
    BY_NAMESPACE, ContentType, InformerFactory, PROTOBUF, namespace_index,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const FINALIZER: &str = "example.com/keep";

/// A pod with something in every cached field.
fn full_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": "wire", "empty": "", "batch.kubernetes.io/job-name": "j" },
            "annotations": {
                "batch.kubernetes.io/job-completion-index": "3",
                "batch.kubernetes.io/job-index-failure-count": "1",
                "batch.kubernetes.io/job-index-ignored-failure-count": "",
                "example.com/other": "x"
            },
            "ownerReferences": [
                { "apiVersion": "v1", "kind": "ConfigMap", "name": "cm",
                  "uid": "11111111-1111-1111-1111-111111111111" },
                { "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                  "uid": "22222222-2222-2222-2222-222222222222",
                  "controller": true, "blockOwnerDeletion": true }
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking", FINALIZER]
        },
        "spec": {
            "nodeName": "wire-node",
            "tolerations": [
                { "key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                  "tolerationSeconds": 30 },
                { "operator": "Exists" },
                { "key": "z", "operator": "Exists", "effect": "NoSchedule" }
            ],
            "initContainers": [
                { "name": "side", "image": "busybox", "restartPolicy": "Always" },
                { "name": "init", "image": "busybox" }
            ],
            "containers": [{ "name": "main", "image": "busybox",
                             "env": [{ "name": "A", "value": "b" }] }],
            "volumes": [{ "name": "v", "emptyDir": {} }]
        }
    }))
    .expect("pod")
}

fn full_status() -> serde_json::Value {
    let t = "2026-01-02T03:04:05Z";
    json!({
        "phase": "Failed",
        "reason": "Evicted",
        "message": "not cached",
        "conditions": [
            { "type": "Ready", "status": "False", "lastTransitionTime": t },
            { "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
              "message": "evicted", "lastProbeTime": t, "lastTransitionTime": t },
            { "type": "example.com/Custom", "status": "Unknown" }
        ],
        "initContainerStatuses": [
            { "name": "side", "image": "busybox", "imageID": "", "ready": false,
              "restartCount": 4, "state": { "running": { "startedAt": t } } },
            { "name": "init", "image": "busybox", "imageID": "", "ready": false,
              "restartCount": 0,
              "state": { "terminated": { "exitCode": 0, "finishedAt": t } } }
        ],
        "containerStatuses": [
            { "name": "main", "image": "busybox", "imageID": "", "ready": false,
              "restartCount": 2,
              "state": { "terminated": { "exitCode": -1, "reason": "Error",
                                         "startedAt": t, "finishedAt": t } } }
        ]
    })
}

async fn list_json(client: &kube::Client, ns: &str) -> Vec<CachedPod> {
    let body = wire::list_pods_raw(client, ns, "application/json").await;
    wire::json_pods(&body.expect("json list")).expect("decode")
}

async fn list_protobuf(client: &kube::Client, ns: &str) -> Vec<CachedPod> {
    let body = wire::list_pods_raw(client, ns, PROTOBUF).await;
    wire::protobuf_pods(&body.expect("protobuf list")).expect("decode")
}

fn by_name(mut pods: Vec<CachedPod>) -> Vec<CachedPod> {
    pods.sort_by(|a, b| a.name().cmp(b.name()));
    pods
}

async fn release(pods: &Api<Pod>, name: &str) {
    let patch = json!({ "metadata": { "finalizers": null } });
    let _ = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

#[tokio::test]
async fn json_and_protobuf_decode_the_same_pods_equal_in_lists_and_watches() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "wire").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    // Both informers run while the pods change, so their watches see
    // every shape below as events (the lists at the end see the last).
    let stop = CancellationToken::new();
    let mut informers = Vec::new();
    for ct in [ContentType::Json, ContentType::Protobuf] {
        let factory = InformerFactory::with_content_type(client.clone(), ct);
        let inf = factory.informer::<CachedPod>();
        inf.add_index(BY_NAMESPACE, namespace_index());
        factory.start(stop.clone());
        tokio::time::timeout(Duration::from_secs(30), factory.wait_for_sync())
            .await
            .expect("synced");
        informers.push(inf);
    }

    pods.create(&PostParams::default(), &full_pod("full"))
        .await
        .expect("full");
    let mut status = json!({ "status": full_status() });
    status["metadata"] = json!({ "name": "full" });
    pods.patch_status("full", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let bare = serde_json::from_value::<Pod>(json!({
        "metadata": { "name": "bare" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("bare");
    pods.create(&PostParams::default(), &bare)
        .await
        .expect("bare");
    let mut deleting = full_pod("deleting");
    deleting.metadata.owner_references = None;
    pods.create(&PostParams::default(), &deleting)
        .await
        .expect("deleting");
    pods.delete("deleting", &DeleteParams::default().grace_period(17))
        .await
        .expect("delete with grace");
    pods.create(&PostParams::default(), &bare_named("gone"))
        .await
        .expect("gone");
    pods.delete("gone", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete gone");

    let json = by_name(list_json(&client, &ns.name).await);
    let proto = by_name(list_protobuf(&client, &ns.name).await);
    assert_eq!(json.len(), 3, "{json:?}");
    assert_eq!(json, proto, "JSON and protobuf decode differently");
    let named = |n: &str| json.iter().find(|p| p.name() == n).expect("listed");
    let full = named("full");
    // The fixture really exercises the fields (a decoder dropping one on
    // both paths would otherwise pass).
    assert_eq!(full.labels().get("empty"), Some(""));
    assert_eq!(
        full.job_annotations().completion_index.as_deref(),
        Some("3")
    );
    assert_eq!(full.controller().map(|c| &*c.kind), Some("Job"));
    assert!(full.has_tracking_finalizer());
    assert_eq!(full.tolerations().len(), 3);
    assert_eq!(full.sidecar_names().len(), 1);
    assert!(full.reason_is_evicted());
    assert!(
        full.disruption_target()
            .is_some_and(|c| c.last_probe_time.is_some())
    );
    assert_eq!(
        full.container_statuses()[0]
            .terminated
            .as_ref()
            .map(|t| t.exit_code),
        Some(-1)
    );
    assert_eq!(full.init_container_statuses()[0].restart_count, 4);
    let deleting = named("deleting");
    assert!(deleting.is_deleting());
    assert_eq!(deleting.deletion_grace_period_seconds(), Some(17));

    // The watches: both stores end equal to the lists.
    let start = Instant::now();
    loop {
        let stores: Vec<Vec<CachedPod>> = informers
            .iter()
            .map(|inf| {
                by_name(
                    inf.store()
                        .by_index(BY_NAMESPACE, &ns.name)
                        .iter()
                        .map(|p| (**p).clone())
                        .collect(),
                )
            })
            .collect();
        if stores.iter().all(|s| *s == json) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "stores never matched the list:\njson store {:?}\nprotobuf store {:?}",
            stores[0],
            stores[1]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    release(&pods, "full").await;
    release(&pods, "deleting").await;
}

fn bare_named(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("pod")
}

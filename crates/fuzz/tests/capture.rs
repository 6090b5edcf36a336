//! Regenerates the seed corpus from a real API server (ignored: run by
//! hand, `cargo test -p kcm-fuzz --test capture -- --ignored`, after
//! `make controlplane`). It writes pods, Jobs and events in the shapes the
//! controllers see them (owner references, tolerations, conditions,
//! container states, a deletion in progress), listed and watched in
//! protobuf (`Accept: application/vnd.kubernetes.protobuf`, a watch is
//! `;stream=watch` frames) and in JSON, plus an error `Status` in each
//! encoding, the server's `/version` and its admin kubeconfig (the
//! throwaway CA and key the harness generates per run). The flag seeds
//! are written by hand in `corpus/feature_gates` and `corpus/flag_values`.

use std::path::Path;
use std::time::Duration;

use http::{Request, header};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{TestNamespace, shared};
use kcm_proto::Writer;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

async fn get(client: &kube::Client, path: &str, accept: &str) -> Vec<u8> {
    let req = Request::get(path)
        .header(header::ACCEPT, accept)
        .header(header::ACCEPT_ENCODING, "identity")
        .body(kube::client::Body::empty())
        .expect("request");
    let res = client.send(req).await.expect("send");
    res.into_body()
        .collect_bytes()
        .await
        .expect("body")
        .to_vec()
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = kcm_fuzz::corpus_dir(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    std::fs::write(dir.join(name), bytes).expect("write seed");
    eprintln!("{target}/{name}: {} bytes", bytes.len());
}

fn pod(name: &str, job: Option<(&str, &str)>) -> Pod {
    let mut p = json!({
        "metadata": {
            "name": name,
            "labels": { "app": "seed", "batch.kubernetes.io/job-name": "seed" },
            "annotations": { "batch.kubernetes.io/job-completion-index": "2" },
            "finalizers": ["batch.kubernetes.io/job-tracking", "example.com/keep"]
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeName": "seed-node",
            "tolerations": [
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists",
                  "effect": "NoExecute", "tolerationSeconds": 300 },
                { "operator": "Exists" }
            ],
            "initContainers": [{ "name": "side", "image": "busybox", "restartPolicy": "Always" }],
            "containers": [{ "name": "main", "image": "busybox" }]
        }
    });
    if let Some((job, uid)) = job {
        p["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
            "name": job, "uid": uid, "controller": true, "blockOwnerDeletion": true }]);
    }
    serde_json::from_value(p).expect("pod")
}

fn failed_status() -> serde_json::Value {
    let t = "2026-01-02T03:04:05Z";
    json!({ "status": {
        "phase": "Failed",
        "reason": "Evicted",
        "conditions": [
            { "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
              "message": "evicted", "lastTransitionTime": t },
            { "type": "Ready", "status": "False", "lastTransitionTime": t }
        ],
        "initContainerStatuses": [{ "name": "side", "image": "busybox", "imageID": "",
            "ready": false, "restartCount": 3, "state": { "running": { "startedAt": t } } }],
        "containerStatuses": [{ "name": "main", "image": "busybox", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": { "terminated": { "exitCode": 42, "reason": "Error",
                                       "startedAt": t, "finishedAt": t } } }]
    }})
}

#[tokio::test]
#[ignore = "regenerates crates/fuzz/corpus from a real API server"]
async fn capture_seed_corpus() {
    let cp = shared();
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "seeds").await.expect("ns");
    let n = ns.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let pp = PostParams::default();

    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "seed" },
        "spec": {
            "completions": 3, "parallelism": 2, "completionMode": "Indexed",
            "backoffLimitPerIndex": 1, "maxFailedIndexes": 1, "suspend": true,
            "podFailurePolicy": { "rules": [
                { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } },
                { "action": "Ignore", "onPodConditions": [{ "type": "DisruptionTarget" }] }
            ]},
            "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }] } }
        }
    }))
    .expect("job");
    let job = jobs.create(&pp, &job).await.expect("create job");
    let uid = job.metadata.uid.clone().expect("uid");

    // A watch in each encoding from the namespace's start, while the pods
    // change; each ends after its timeout with everything in between.
    let base = format!("/api/v1/namespaces/{n}/pods");
    let rv = job.metadata.resource_version.clone().expect("rv");
    let watch =
        format!("{base}?watch=1&resourceVersion={rv}&timeoutSeconds=4&allowWatchBookmarks=true");
    let proto_watch = tokio::spawn({
        let (c, w) = (client.clone(), watch.clone());
        async move { get(&c, &w, PROTOBUF).await }
    });
    let json_watch = tokio::spawn({
        let (c, w) = (client.clone(), watch.clone());
        async move { get(&c, &w, "application/json").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    pods.create(&pp, &pod("owned", Some(("seed", &uid))))
        .await
        .expect("owned");
    pods.patch_status(
        "owned",
        &PatchParams::default(),
        &Patch::Merge(&failed_status()),
    )
    .await
    .expect("status");
    pods.create(&pp, &pod("orphan", None))
        .await
        .expect("orphan");
    pods.delete("orphan", &DeleteParams::default().grace_period(30))
        .await
        .expect("delete with grace");
    let bare: Pod = serde_json::from_value(json!({
        "metadata": { "name": "bare" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("bare");
    pods.create(&pp, &bare).await.expect("bare");
    pods.delete("bare", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete bare");

    write(
        "proto_watch",
        "pods-watch.bin",
        &proto_watch.await.expect("watch"),
    );
    let json_events = json_watch.await.expect("watch");
    for (i, line) in json_events
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let ev: serde_json::Value = serde_json::from_slice(line).expect("event");
        let obj = serde_json::to_vec(&ev["object"]).expect("object");
        write("pod_json", &format!("watch-event-{i}.json"), &obj);
    }
    // An ERROR event holds a Status; a fresh server compacts nothing, so
    // its 404 Status body goes into an ERROR frame (the framing is ours,
    // the enveloped Status the server's).
    let missing = format!("{base}/missing");
    let status = get(&client, &missing, PROTOBUF).await;
    let event = Writer::new()
        .bytes(1, "ERROR")
        .message(2, Writer::new().bytes(1, &status))
        .finish();
    let mut frame = u32::try_from(event.len())
        .expect("small")
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&event);
    write("proto_watch", "error-status.bin", &frame);
    let job_watch =
        format!("/apis/batch/v1/namespaces/{n}/jobs?watch=1&resourceVersion=0&timeoutSeconds=1");
    write(
        "proto_watch",
        "jobs-watch.bin",
        &get(&client, &job_watch, PROTOBUF).await,
    );

    write(
        "proto_list",
        "pods.bin",
        &get(&client, &base, PROTOBUF).await,
    );
    write(
        "proto_list",
        "pods-page.bin",
        &get(&client, &format!("{base}?limit=1"), PROTOBUF).await,
    );
    write(
        "proto_list",
        "jobs.bin",
        &get(
            &client,
            &format!("/apis/batch/v1/namespaces/{n}/jobs"),
            PROTOBUF,
        )
        .await,
    );
    write(
        "proto_list",
        "status-404.bin",
        &get(&client, &missing, PROTOBUF).await,
    );
    write(
        "pod_proto",
        "owned.bin",
        &get(&client, &format!("{base}/owned"), PROTOBUF).await,
    );
    write(
        "pod_proto",
        "orphan-deleting.bin",
        &get(&client, &format!("{base}/orphan"), PROTOBUF).await,
    );
    write(
        "pod_json",
        "owned.json",
        &get(&client, &format!("{base}/owned"), "application/json").await,
    );
    write(
        "pod_json",
        "status-404.json",
        &get(&client, &missing, "application/json").await,
    );

    // explain/lint input: the Job with its pods and the namespace's events.
    let mut list = json!({ "apiVersion": "v1", "kind": "List", "items": [] });
    let job_json: serde_json::Value = serde_json::from_slice(
        &get(
            &client,
            &format!("/apis/batch/v1/namespaces/{n}/jobs/seed"),
            "application/json",
        )
        .await,
    )
    .expect("job json");
    let pod_list: serde_json::Value =
        serde_json::from_slice(&get(&client, &base, "application/json").await).expect("pods");
    let events: serde_json::Value = serde_json::from_slice(
        &get(
            &client,
            &format!("/api/v1/namespaces/{n}/events"),
            "application/json",
        )
        .await,
    )
    .expect("events");
    list["items"] = json!([job_json]);
    for v in [&pod_list, &events] {
        for i in v["items"].as_array().into_iter().flatten() {
            list["items"].as_array_mut().expect("items").push(i.clone());
        }
    }
    write(
        "manifests",
        "job-pods-events.json",
        &serde_json::to_vec_pretty(&list).expect("json"),
    );
    write(
        "manifests",
        "jobs-list.json",
        &get(
            &client,
            &format!("/apis/batch/v1/namespaces/{n}/jobs"),
            "application/json",
        )
        .await,
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for f in [
        "manifests/examples/job.yaml",
        "manifests/examples/pod-failure-policy.yaml",
    ] {
        let name = Path::new(f)
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        write(
            "manifests",
            &name,
            &std::fs::read(root.join(f)).expect("example"),
        );
    }

    let version = get(&client, "/version", "application/json").await;
    let v: serde_json::Value = serde_json::from_slice(&version).expect("version");
    let git = v["gitVersion"].as_str().expect("gitVersion");
    write(
        "flag_values",
        "server-version.txt",
        format!("\x001.34\n{git}").as_bytes(),
    );
    write(
        "kubeconfig",
        "admin.yaml",
        &std::fs::read(cp.kubeconfig()).expect("kubeconfig"),
    );

    jobs.delete("seed", &DeleteParams::default())
        .await
        .expect("delete job");
}

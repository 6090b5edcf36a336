//! Smoke tests of the harness against the real API server: objects go in,
//! status is written the way a kubelet writes it, and both read back.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::kubelet::{self, PodStatusUpdate};
use kcm_e2e::{TestNamespace, shared};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "completions": 2,
            "parallelism": 1,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }]
            }}
        }
    }))
    .expect("valid job")
}

pub fn pod(name: &str, init: bool) -> Pod {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox" }, { "name": "side", "image": "busybox" }]
        }
    });
    if init {
        p["spec"]["initContainers"] = json!([{ "name": "setup", "image": "busybox" }]);
    }
    serde_json::from_value(p).expect("valid pod")
}

#[tokio::test]
async fn job_and_pod_round_trip_with_kubelet_status() {
    let cp = shared();
    eprintln!(
        "control plane {} started in {:?}",
        cp.server(),
        cp.started_in()
    );
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "smoke")
        .await
        .expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    jobs.create(&PostParams::default(), &job("j"))
        .await
        .expect("create job");
    let read = jobs.get("j").await.expect("read job");
    assert_eq!(read.spec.as_ref().and_then(|s| s.completions), Some(2));
    // The API server defaulted and validated it as a real server does.
    assert_eq!(read.spec.as_ref().and_then(|s| s.backoff_limit), Some(6));
    assert!(
        read.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some()
    );

    kubelet::create_node(&client, &format!("{}-node", ns.name), true, vec![])
        .await
        .expect("node");
    pods.create(&PostParams::default(), &pod("p", true))
        .await
        .expect("create pod");
    kubelet::bind_pod(&pods, "p", &format!("{}-node", ns.name))
        .await
        .expect("bind");
    kubelet::run_pod(&pods, "p", true).await.expect("running");
    let running = pods.get("p").await.expect("read");
    let status = running.status.as_ref().expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(
        running.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(format!("{}-node", ns.name).as_str())
    );

    let finished_at = Timestamp::now();
    let update = PodStatusUpdate::default()
        .phase("Failed")
        .init_containers(vec![kubelet::terminated("setup", 0, finished_at)])
        .containers(vec![
            kubelet::terminated("main", 42, finished_at),
            kubelet::terminated("side", 0, finished_at),
        ])
        .condition(kubelet::condition(
            "DisruptionTarget",
            true,
            "TerminationByKubelet",
            "evicted by the test",
        ))
        .ready(false);
    kubelet::update_pod_status(&pods, "p", &update)
        .await
        .expect("status");

    let done = pods.get("p").await.expect("read back");
    let status = done.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let codes: Vec<(String, i32)> = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| Some((c.name, c.state?.terminated?.exit_code)))
        .collect();
    assert_eq!(codes, vec![("main".into(), 42), ("side".into(), 0)]);
    let init = status.init_container_statuses.unwrap_or_default();
    assert_eq!(init.len(), 1);
    let conditions = status.conditions.unwrap_or_default();
    let dt = conditions
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget kept");
    assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"));
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, "False");
    let finished = done
        .metadata
        .name
        .as_deref()
        .map(|_| finished_at.as_second());
    assert!(finished.is_some());
}

#[tokio::test]
async fn nodes_carry_readiness_and_taints() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "nodes")
        .await
        .expect("namespace");
    let name = format!("{}-tainted", ns.name);
    kubelet::create_node(
        &client,
        &name,
        false,
        vec![kubelet::taint(
            "example.com/broken",
            Some("yes"),
            "NoExecute",
        )],
    )
    .await
    .expect("node");
    let nodes: Api<Node> = Api::all(client.clone());
    let node = kcm_e2e::wait::wait_for(
        &nodes,
        &name,
        Duration::from_secs(10),
        "node written",
        |n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some()
        },
    )
    .await
    .expect("node");
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(ready.status, "False");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    let ours = taints
        .iter()
        .find(|t| t.key == "example.com/broken")
        .expect("our taint kept");
    assert_eq!(ours.effect, "NoExecute");
    assert_eq!(ours.value.as_deref(), Some("yes"));
}

#[tokio::test]
async fn wait_timeout_reports_the_last_object() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "waits")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.create(&PostParams::default(), &pod("never", false))
        .await
        .expect("pod");
    let err = kcm_e2e::wait::wait_for(
        &pods,
        "never",
        Duration::from_millis(500),
        "pod to succeed",
        |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"),
    )
    .await
    .expect_err("must time out");
    let text = err.to_string();
    assert!(text.contains("pod to succeed"), "{text}");
    assert!(text.contains("name: never"), "{text}");
}

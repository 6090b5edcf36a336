//! The pod lifecycle simulator against the real API server: pods are bound,
//! run for the time their annotations say and end with the declared exit
//! codes or condition; deleted running pods are killed and removed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::wait::{wait_for, wait_gone};
use kcm_e2e::{TestNamespace, shared};
use kcm_sim::{self as sim, SimConfig, SimStats};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

fn pod(name: &str, ann: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "annotations": ann },
        "spec": { "restartPolicy": "Never", "containers": [
            { "name": "main", "image": "busybox" }, { "name": "side", "image": "busybox" }
        ]}
    }))
    .expect("pod")
}

fn exit_codes(p: &Pod) -> Vec<i32> {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.exit_code))
                .collect()
        })
        .unwrap_or_default()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

#[tokio::test]
async fn simulator_runs_pods_as_annotated() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "sim").await.expect("ns");
    let cfg = SimConfig {
        nodes: 2,
        node_prefix: format!("{}-n", ns.name),
        schedule: true,
    };
    let stats = Arc::new(SimStats::default());
    let task = tokio::spawn(sim::run(client.clone(), cfg, Arc::clone(&stats)));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();
    pods.create(&pp, &pod("ok", json!({"sim.kcm-rs.io/run": "300ms"})))
        .await
        .expect("ok");
    pods.create(
        &pp,
        &pod(
            "bad",
            json!({"sim.kcm-rs.io/run": "300ms", "sim.kcm-rs.io/containers": "side=100ms:3"}),
        ),
    )
    .await
    .expect("bad");
    pods.create(
        &pp,
        &pod(
            "evicted",
            json!({"sim.kcm-rs.io/run": "200ms",
            "sim.kcm-rs.io/fail-with-condition": "DisruptionTarget:TerminationByKubelet"}),
        ),
    )
    .await
    .expect("evicted");
    pods.create(&pp, &pod("forever", json!({"sim.kcm-rs.io/run": "never"})))
        .await
        .expect("forever");

    let t = Duration::from_secs(20);
    let ok = wait_for(&pods, "ok", t, "Succeeded", |p| phase(p) == "Succeeded")
        .await
        .expect("ok");
    assert_eq!(exit_codes(&ok), vec![0, 0]);
    let bad = wait_for(&pods, "bad", t, "Failed", |p| phase(p) == "Failed")
        .await
        .expect("bad");
    assert_eq!(exit_codes(&bad), vec![0, 3]);
    let ev = wait_for(&pods, "evicted", t, "Failed", |p| phase(p) == "Failed")
        .await
        .expect("ev");
    let cond = ev
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("condition");
    assert_eq!(cond.reason.as_deref(), Some("TerminationByKubelet"));
    let forever = wait_for(&pods, "forever", t, "Running", |p| phase(p) == "Running")
        .await
        .expect("run");
    assert!(
        forever
            .spec
            .and_then(|s| s.node_name)
            .is_some_and(|n| n.starts_with(&ns.name))
    );

    pods.delete("forever", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&pods, "forever", t)
        .await
        .expect("killed and removed");
    task.abort();
}

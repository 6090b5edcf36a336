//! Pod GC against bad input on the real API server (issue 14, "Bad input";
//! docs/bad-input.md): pods bound to a node name that never existed (a
//! typo) or that appears only later, and the out-of-service taint on a
//! node that is Ready. One private control plane (pod GC looks at every pod
//! in the cluster).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::history::{PodHistory, Seen, has_condition};
use kcm_e2e::in_process;
use kcm_e2e::kubelet::{self, create_bound_pod, taint};
use kcm_e2e::logs;
use kcm_e2e::wait::wait_gone;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::DeleteParams;

const T: Duration = Duration::from_secs(30);

#[tokio::test]
async fn missing_nodes_and_out_of_service_on_a_ready_node() {
    let captured = logs::capture();
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "gc-bad").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // Ready, yet tainted out-of-service (a taint left behind, or set by
    // mistake): upstream acts only on NotReady nodes.
    kubelet::create_node(
        &client,
        "ready-oos",
        true,
        vec![taint(
            "node.kubernetes.io/out-of-service",
            Some("nodeshutdown"),
            "NoExecute",
        )],
    )
    .await
    .expect("node");
    create_bound_pod(&pods, "on-ready-oos", "ready-oos", None)
        .await
        .expect("pod");
    // Graceful delete of a bound pod: terminating, no kubelet to finish it.
    pods.delete("on-ready-oos", &DeleteParams::default())
        .await
        .expect("delete");
    // A node name nobody will ever create.
    create_bound_pod(&pods, "on-typo", "nodde-1", None)
        .await
        .expect("pod");
    // A node the cache has not seen yet when pod GC first looks.
    create_bound_pod(&pods, "on-late", "late-node", None)
        .await
        .expect("pod");
    let history = PodHistory::start(&client, &ns.name).await;
    let settings = Settings::default().with(kcm_podgc::PodGcSettings {
        pod_gc_period: Duration::from_millis(500),
        pod_gc_quarantine: Duration::from_secs(5),
        ..Default::default()
    });
    let _gc = in_process::start(&cp, &[kcm_podgc::SPEC], settings, FeatureGates::default())
        .await
        .expect("pod GC");
    // The late node shows up within the quarantine.
    tokio::time::sleep(Duration::from_secs(1)).await;
    kubelet::create_node(&client, "late-node", true, vec![])
        .await
        .expect("late node");

    // The typo'd node is confirmed gone after the quarantine and a live
    // GET: the pod is marked Failed with DisruptionTarget, then deleted.
    let started = std::time::Instant::now();
    wait_gone(&pods, "on-typo", T)
        .await
        .expect("orphan removed");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "not before the quarantine: {:?}",
        started.elapsed()
    );
    let seen = history.of("on-typo");
    assert!(
        seen.iter().any(|s| matches!(s, Seen::Applied(p)
            if has_condition(p, "DisruptionTarget", "DeletionByPodGC"))),
        "{seen:#?}"
    );
    let line = captured
        .wait_for(
            &["PodGC is force deleting Pod", "on-typo", "orphaned"],
            Duration::from_secs(5),
        )
        .await;
    assert!(line.starts_with("INFO"), "{line}");

    // Well past the quarantine: the late pod and the pod on the Ready
    // out-of-service node are untouched.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let late = pods.get("on-late").await.expect("late pod kept");
    assert!(late.metadata.deletion_timestamp.is_none());
    assert!(!has_condition(&late, "DisruptionTarget", "DeletionByPodGC"));
    let oos = pods.get("on-ready-oos").await.expect("kept");
    assert_eq!(
        oos.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running"),
        "not force-deleted nor marked Failed"
    );
    assert!(captured.matching(&["on-late"]).is_empty());
    assert!(captured.matching(&["on-ready-oos"]).is_empty());

    // Pod GC still works: the node goes NotReady and the pod is collected.
    kubelet::set_node_ready(&client, "ready-oos", false)
        .await
        .expect("not ready");
    wait_gone(&pods, "on-ready-oos", T)
        .await
        .expect("collected once the node is NotReady");
}

//! Pod GC against the real API server, one private control plane per test
//! (pod GC looks at every pod in the cluster, so tests must not share one).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::history::{PodHistory, Seen, has_condition};
use kcm_e2e::in_process::{self, InProcess};
use kcm_e2e::kubelet::{self, create_bound_pod, simple_pod, taint};
use kcm_e2e::wait::{wait_for, wait_gone};
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::{Feature, FeatureGates};
use kcm_podgc::PodGcSettings;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

fn fast(threshold: i64) -> Settings {
    Settings::default().with(PodGcSettings {
        terminated_pod_gc_threshold: threshold,
        pod_gc_period: Duration::from_millis(500),
        pod_gc_quarantine: Duration::from_secs(2),
    })
}

async fn start(cp: &ControlPlane, settings: Settings, gates: FeatureGates) -> InProcess {
    in_process::start(cp, &[kcm_podgc::SPEC], settings, gates)
        .await
        .expect("pod GC started")
}

/// The condition was on the pod in some watch event before the delete.
fn condition_before_delete(h: &PodHistory, name: &str) -> bool {
    let with = h.first(name, |s| {
        matches!(s, Seen::Applied(p) if has_condition(p, "DisruptionTarget", "DeletionByPodGC")
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    });
    let gone = h.first(name, |s| matches!(s, Seen::Deleted(_)));
    matches!((with, gone), (Some(a), Some(b)) if a < b)
}

#[tokio::test]
async fn orphaned_pods_fail_with_disruption_target_then_go() {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "orphan").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    kubelet::create_node(&client, "doomed", true, vec![])
        .await
        .expect("node");
    kubelet::create_node(&client, "healthy", true, vec![])
        .await
        .expect("node");
    create_bound_pod(&pods, "running-orphan", "doomed", None)
        .await
        .expect("pod");
    create_bound_pod(&pods, "done-orphan", "doomed", Some(0))
        .await
        .expect("pod");
    create_bound_pod(&pods, "safe", "healthy", None)
        .await
        .expect("pod");
    let history = PodHistory::start(&client, &ns.name).await;
    let _gc = start(&cp, fast(12_500), FeatureGates::default()).await;
    Api::<Node>::all(client.clone())
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete node");
    let started = std::time::Instant::now();
    wait_gone(&pods, "running-orphan", T)
        .await
        .expect("orphan removed");
    wait_gone(&pods, "done-orphan", T)
        .await
        .expect("terminal orphan removed");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "quarantine respected: {took:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        condition_before_delete(&history, "running-orphan"),
        "{:#?}",
        history.of("running-orphan")
    );
    // A terminal orphan is deleted without a status change.
    assert!(
        !history.of("done-orphan").iter().any(|s| matches!(s, Seen::Applied(p) if has_condition(p, "DisruptionTarget", "DeletionByPodGC"))),
        "{:#?}",
        history.of("done-orphan")
    );
    assert!(
        pods.get_opt("safe").await.expect("get").is_some(),
        "pods on live nodes stay"
    );
}

#[tokio::test]
async fn gate_off_orphans_fail_without_the_condition() {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "gate").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    kubelet::create_node(&client, "doomed", true, vec![])
        .await
        .expect("node");
    create_bound_pod(&pods, "orphan", "doomed", None)
        .await
        .expect("pod");
    let history = PodHistory::start(&client, &ns.name).await;
    let off = FeatureGates::default().with(Feature::PodDisruptionConditions, false);
    let _gc = start(&cp, fast(12_500), off).await;
    Api::<Node>::all(client.clone())
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&pods, "orphan", T).await.expect("removed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = history.of("orphan");
    assert!(seen.iter().any(|s| matches!(s, Seen::Applied(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))), "{seen:#?}");
    assert!(!seen.iter().any(|s| matches!(s, Seen::Applied(p) if has_condition(p, "DisruptionTarget", "DeletionByPodGC"))), "{seen:#?}");
}

#[tokio::test]
async fn terminated_pods_over_threshold_oldest_first() {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "threshold")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    kubelet::create_node(&client, "n", true, vec![])
        .await
        .expect("node");
    for (i, name) in ["t0", "t1", "t2", "t3"].iter().enumerate() {
        create_bound_pod(&pods, name, "n", Some(i32::try_from(i).unwrap_or(1)))
            .await
            .expect("pod");
        // Creation timestamps have one-second resolution: space them out.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    create_bound_pod(&pods, "running", "n", None)
        .await
        .expect("pod");
    let _gc = start(&cp, fast(2), FeatureGates::default()).await;
    wait_gone(&pods, "t0", T).await.expect("oldest removed");
    wait_gone(&pods, "t1", T)
        .await
        .expect("second oldest removed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for keep in ["t2", "t3", "running"] {
        assert!(
            pods.get_opt(keep).await.expect("get").is_some(),
            "{keep} kept"
        );
    }
}

#[tokio::test]
async fn terminating_pods_on_out_of_service_nodes_and_unscheduled_ones() {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "oos").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    kubelet::create_node(
        &client,
        "down",
        false,
        vec![taint(
            "node.kubernetes.io/out-of-service",
            Some("nodeshutdown"),
            "NoExecute",
        )],
    )
    .await
    .expect("node");
    kubelet::create_node(&client, "down-untainted", false, vec![])
        .await
        .expect("node");
    create_bound_pod(&pods, "stuck", "down", None)
        .await
        .expect("pod");
    create_bound_pod(&pods, "waiting", "down-untainted", None)
        .await
        .expect("pod");
    // Graceful deletes of bound pods leave them terminating (no kubelet).
    pods.delete("stuck", &DeleteParams::default())
        .await
        .expect("delete");
    pods.delete("waiting", &DeleteParams::default())
        .await
        .expect("delete");
    // An unscheduled pod held by a finalizer stays terminating too.
    pods.create(&PostParams::default(), &simple_pod("unscheduled", true))
        .await
        .expect("create");
    pods.delete("unscheduled", &DeleteParams::default())
        .await
        .expect("delete");
    let history = PodHistory::start(&client, &ns.name).await;
    let _gc = start(&cp, fast(12_500), FeatureGates::default()).await;
    wait_gone(&pods, "stuck", T).await.expect("force deleted");
    let failed = wait_for(&pods, "unscheduled", T, "phase Failed", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await
    .expect("unscheduled marked Failed");
    assert!(!has_condition(
        &failed,
        "DisruptionTarget",
        "DeletionByPodGC"
    ));
    pods.patch(
        "unscheduled",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop finalizer");
    wait_gone(&pods, "unscheduled", T).await.expect("gone");
    let stuck = history.of("stuck");
    assert!(stuck.iter().any(|s| matches!(s, Seen::Applied(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))), "{stuck:#?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting = pods
        .get("waiting")
        .await
        .expect("still there without the taint");
    assert!(waiting.metadata.deletion_timestamp.is_some());
}

//! Pod GC against the real API server, one private control plane per test
//! (pod GC looks at every pod in the cluster, so tests must not share one).
//! The scenarios are those of the differential suite
//! (`support/scenarios.rs`), with what only kcm-rs can show quickly on
//! top: the quarantine, the condition before the delete, the gate off.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::history::{PodHistory, Seen, has_condition};
use kcm_e2e::kubelet::{self, create_bound_pod};
use kcm_e2e::wait::wait_gone;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::{Feature, FeatureGates};
use kube::Api;
use kube::api::DeleteParams;

use support::scenarios;
use support::{fast, start_ours};

const T: Duration = Duration::from_secs(30);

/// The condition was on the failed pod in some watch event before the delete.
fn condition_before_delete(h: &PodHistory, name: &str) -> bool {
    let with = h.first(name, |s| {
        matches!(s, Seen::Applied(p) if has_condition(p, "DisruptionTarget", "DeletionByPodGC")
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    });
    let gone = h.first(name, |s| matches!(s, Seen::Deleted(_)));
    matches!((with, gone), (Some(a), Some(b)) if a < b)
}

#[tokio::test]
async fn orphans_and_terminating_pods() {
    let setup = |c: kube::Client, ns: String| async move {
        scenarios::orphans_and_terminating(&c, &ns).await
    };
    let run = support::run(false, 12_500, setup).await;
    scenarios::expect_orphans_and_terminating(&run.outcomes);
    assert!(
        run.took >= Duration::from_secs(2),
        "quarantine respected: {:?}",
        run.took
    );
    assert!(
        condition_before_delete(&run.history, "orphan-running"),
        "{:#?}",
        run.history.of("orphan-running")
    );
}

#[tokio::test]
async fn terminated_pods_over_threshold_oldest_first() {
    let setup = |c: kube::Client, ns: String| async move { scenarios::threshold(&c, &ns).await };
    scenarios::expect_threshold(&support::run(false, 2, setup).await.outcomes);
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
    let _gc = start_ours(&cp, fast(12_500), off).await;
    Api::<Node>::all(client.clone())
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&pods, "orphan", T).await.expect("removed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = scenarios::outcome(&history, "orphan");
    assert!(
        out.seen_failed && out.disruption_target.is_none(),
        "{out:?}"
    );
}

//! Our taint-eviction controller, in-process, against a real API server:
//! the scenarios of `support::scenarios` with their expected outcomes, plus
//! what only ours can show (feature gate off, a recreated namesake, metrics).

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kcm_e2e::ControlPlane;
use kcm_e2e::in_process::Detached;
use kcm_features::{Feature, FeatureGates};
use kube::api::DeleteParams;

use support::scenarios::{self, *};
use support::*;

/// The shared control plane with our controller (default gates) watching it.
fn plane() -> &'static ControlPlane {
    ours();
    kcm_e2e::shared()
}

/// Our controller, started once for the binary.
fn ours() -> &'static Detached {
    static OURS: OnceLock<Detached> = OnceLock::new();
    OURS.get_or_init(|| start_ours(kcm_e2e::shared(), FeatureGates::default()))
}

async fn client() -> kube::Client {
    plane().client().await.expect("client")
}

#[tokio::test]
async fn untolerated_taint_evicts_at_once_with_condition_first() {
    let run = scenarios::untolerated(&client().await).await;
    expect_untolerated(&run);
}

#[tokio::test]
async fn toleration_seconds_delay_the_eviction() {
    let run = toleration_seconds(&client().await).await;
    expect_toleration_seconds(&run);
}

#[tokio::test]
async fn tolerations_without_seconds_keep_pods() {
    let run = tolerated_forever(&client().await).await;
    expect_tolerated_forever(&run);
}

#[tokio::test]
async fn removing_the_taint_cancels_the_eviction() {
    let run = taint_removed(&client().await).await;
    expect_taint_removed(&run);
}

#[tokio::test]
async fn deleting_the_pod_cancels_its_eviction() {
    let run = pod_deleted_then_namesake(&client().await).await;
    expect_pod_deleted_then_namesake(&run);
}

#[tokio::test]
async fn deleting_the_node_does_not_cancel() {
    let run = node_deleted(&client().await).await;
    expect_node_deleted(&run);
}

#[tokio::test]
async fn an_untolerated_taint_replaces_a_pending_eviction() {
    let run = untolerated_taint_added(&client().await).await;
    expect_untolerated_taint_added(&run);
}

#[tokio::test]
async fn the_countdown_is_anchored_at_first_schedule() {
    let run = anchored_countdown(&client().await).await;
    expect_anchored_countdown(&run);
}

#[tokio::test]
async fn mixed_tolerations_on_one_node() {
    let run = mixed_tolerations(&client().await).await;
    expect_mixed_tolerations(&run);
}

#[tokio::test]
async fn terminal_pods_are_evicted_too() {
    let run = terminal_pod(&client().await).await;
    expect_terminal_pod(&run);
}

/// Deleted and at once recreated under the same name on the same tainted
/// node: the new pod gets a countdown of its own (upstream, keyed by name,
/// may let the old pod's timer delete it early).
#[tokio::test]
async fn a_recreated_namesake_gets_a_fresh_countdown() {
    let client = client().await;
    let Watched { ns, pods, history } = watched_namespace(&client, "te-namesake").await;
    let node = format!("{ns}-n1");
    create_node(&client, &node, &["dedicated"]).await;
    pods.create(
        &Default::default(),
        &pod("p", &node, &[("dedicated", Some(5))]),
    )
    .await
    .expect("create pod");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pods.delete("p", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let second = pods
        .create(
            &Default::default(),
            &pod("p", &node, &[("dedicated", Some(5))]),
        )
        .await
        .expect("recreate");
    let recreated = Instant::now();
    let uid = second.metadata.uid.clone();
    assert!(
        history
            .wait_deleting("p", uid.as_deref(), Duration::from_secs(12))
            .await,
        "the namesake is still evicted when its own toleration runs out"
    );
    let o = observe(
        &client,
        &ns,
        &history,
        "p",
        uid.as_deref(),
        recreated,
        &[marking(&ns, "p")],
    )
    .await;
    assert!(
        o.timing.about(5),
        "fresh 5 s countdown, not the old one: {o:#?}"
    );
    assert_eq!(o.condition, expected_condition());
    assert_eq!(o.condition_first, Some(true));
}

/// `PodDisruptionConditions=false`: the pod is deleted without the
/// condition (on a control plane of its own, with a controller of its own).
#[tokio::test]
async fn gate_off_deletes_without_condition() {
    let cp = ControlPlane::start().expect("control plane");
    let _ours = start_ours(
        &cp,
        FeatureGates::default().with(Feature::PodDisruptionConditions, false),
    );
    let client = cp.client().await.expect("client");
    let run = scenarios::untolerated(&client).await;
    for pod in ["before", "after"] {
        let o = run.pod(pod);
        assert_eq!(o.timing, Timing::Immediate, "{run:#?}");
        assert_eq!(o.condition, None, "{run:#?}");
        assert_eq!(o.condition_first, Some(false), "{run:#?}");
        assert!(o.events.contains(&marking(&run.ns, pod)), "{run:#?}");
    }
}

fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// After evictions, the upstream metrics count them and the latency is in
/// seconds (upstream's is scaled by 1e9), and the work queues carry
/// upstream's names.
#[tokio::test]
async fn metrics_count_deletions_in_seconds() {
    let run = scenarios::untolerated(&client().await).await;
    expect_untolerated(&run);
    let text = ours().metrics.render();
    let deletions =
        sample(&text, "taint_eviction_controller_pod_deletions_total ").expect("deletions counter");
    assert!(deletions >= 2.0, "{deletions}");
    let count = sample(
        &text,
        "taint_eviction_controller_pod_deletion_duration_seconds_count ",
    )
    .expect("histogram count");
    let sum = sample(
        &text,
        "taint_eviction_controller_pod_deletion_duration_seconds_sum ",
    )
    .expect("histogram sum");
    assert!(count >= 2.0);
    assert!(
        sum / count < 5.0,
        "mean delay past the due time is seconds, not 1e9-scaled: {sum}/{count}"
    );
    for queue in ["noexec_taint_node", "noexec_taint_pod"] {
        assert!(
            text.contains(&format!("workqueue_adds_total{{name=\"{queue}\"}}")),
            "{queue} in:\n{text}"
        );
    }
}

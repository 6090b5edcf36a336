//! The pod GC scenarios of `support/scenarios.rs` against upstream
//! kube-controller-manager's pod-garbage-collector-controller and against
//! kcm-rs, each on its own control plane; the observable outcomes must be
//! identical, and as each scenario expects. Upstream's 20 s period and 40 s
//! quarantine are constants, so this takes about a minute.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use kcm_e2e::history::PodHistory;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kcm_features::FeatureGates;

use support::scenarios::{self, Outcome, Scenario};
use support::{fast, start_ours};

async fn run_one<F, Fut>(upstream: bool, threshold: i64, setup: F) -> BTreeMap<String, Outcome>
where
    F: FnOnce(kube::Client, String) -> Fut,
    Fut: Future<Output = Scenario>,
{
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "diff").await.expect("ns");
    let history = PodHistory::start(&client, &ns.name).await;
    let scenario = setup(client.clone(), ns.name.clone()).await;
    let _upstream = upstream.then(|| {
        UpstreamKcm::start(
            &cp,
            &["pod-garbage-collector-controller"],
            &[&format!("--terminated-pod-gc-threshold={threshold}")],
        )
        .expect("upstream KCM")
    });
    let _ours = if upstream {
        None
    } else {
        Some(start_ours(&cp, fast(threshold), FeatureGates::default()).await)
    };
    // Give either side time to do anything more it would do: a period.
    let settle = Duration::from_secs(if upstream { 22 } else { 3 });
    scenarios::observe(&client, &ns.name, &history, &scenario, settle).await
}

#[tokio::test]
async fn orphans_out_of_service_and_unscheduled_match_upstream() {
    let setup = |c: kube::Client, ns: String| async move {
        scenarios::orphans_and_terminating(&c, &ns).await
    };
    let (theirs, ours) = tokio::join!(run_one(true, 0, setup), run_one(false, 0, setup));
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    scenarios::expect_orphans_and_terminating(&theirs);
}

#[tokio::test]
async fn terminated_threshold_matches_upstream() {
    let setup = |c: kube::Client, ns: String| async move { scenarios::threshold(&c, &ns).await };
    let (theirs, ours) = tokio::join!(run_one(true, 2, setup), run_one(false, 2, setup));
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    scenarios::expect_threshold(&theirs);
}

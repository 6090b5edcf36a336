//! The pod GC scenarios of `support/scenarios.rs` against upstream
//! kube-controller-manager's pod-garbage-collector-controller and against
//! kcm-rs, each on its own control plane; the observable outcomes must be
//! identical, and as each scenario expects. Upstream's 20 s period and 40 s
//! quarantine are constants, so this takes about a minute.

mod support;

use support::scenarios;

#[tokio::test]
async fn orphans_out_of_service_and_unscheduled_match_upstream() {
    let setup = |c: kube::Client, ns: String| async move {
        scenarios::orphans_and_terminating(&c, &ns).await
    };
    let (theirs, ours) = tokio::join!(support::run(true, 0, setup), support::run(false, 0, setup));
    let (theirs, ours) = (theirs.outcomes, ours.outcomes);
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    scenarios::expect_orphans_and_terminating(&theirs);
}

#[tokio::test]
async fn terminated_threshold_matches_upstream() {
    let setup = |c: kube::Client, ns: String| async move { scenarios::threshold(&c, &ns).await };
    let (theirs, ours) = tokio::join!(support::run(true, 2, setup), support::run(false, 2, setup));
    let (theirs, ours) = (theirs.outcomes, ours.outcomes);
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    scenarios::expect_threshold(&theirs);
}

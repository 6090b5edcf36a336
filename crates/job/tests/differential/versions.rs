//! Scenarios whose upstream result depends on the minor, run on whichever
//! `KCM_E2E_K8S_VERSION` the suite runs against (`make test-versions` runs
//! each minor): kcm-rs must match upstream where docs/deviations.md lists no
//! deviation, and keep its listed behaviour where it does.

use serde_json::json;

use crate::support::script::*;

/// Two pods run and are ready; one fails, and the replacement waits for
/// the 10 s failure back-off. Upstream before 1.36 computes `active` 0
/// while creation waits, so its status write (active 0, ready 1) is
/// refused by the API server ("cannot set more ready pods than active")
/// until the back-off ends: the failure is not counted meanwhile. 1.36
/// keeps the real count. kcm-rs keeps it on every minor (a listed
/// deviation). After the back-off both agree again.
async fn failure_during_back_off(s: Scn) {
    s.create(json!({"completions": 2, "parallelism": 2, "backoffLimit": 6}))
        .await;
    s.wait_pods(J, "2 pods", |ps| active(ps) == 2).await;
    s.run_pending(J).await;
    s.wait_job("j", "2 ready", |j| {
        j.status.as_ref().and_then(|s| s.ready) == Some(2)
    })
    .await;
    s.snap("running and ready", "j", J).await;
    let first = s.list(J).await[0].metadata.name.clone().expect("name");
    kcm_e2e::kubelet::finish_pod(&s.pods, &first, 1)
        .await
        .expect("fail pod");
    // Within the 10 s back-off (the snapshot settles 2.5 s).
    s.snap("one failed, in back-off", "j", J).await;
    s.wait_pods(J, "the replacement", |ps| active(ps) == 2)
        .await;
    s.run_pending(J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

#[tokio::test]
async fn d30_failure_counted_while_creation_waits_for_back_off() {
    let (theirs, ours) = play_both(|s| Box::pin(failure_during_back_off(s))).await;
    let at = |snaps: &Snaps, i: usize| snaps[i].1.clone();
    let minor = kcm_e2e::binaries::k8s_minor();
    eprintln!(
        "1.{minor} in back-off: upstream {:?}, kcm-rs {:?}",
        at(&theirs, 1).job,
        at(&ours, 1).job
    );
    assert_eq!(at(&ours, 0), at(&theirs, 0), "running: kcm-rs vs upstream");
    let (o, t) = (at(&ours, 1).job, at(&theirs, 1).job);
    assert_eq!((o.active, o.failed), (1, 1), "kcm-rs in back-off: {o:?}");
    if minor >= 36 {
        assert_eq!(o, t, "1.{minor} in back-off: kcm-rs vs upstream");
    } else {
        // The refused writes leave the status as it was before the failure.
        assert_eq!(
            (t.active, t.ready, t.failed),
            (2, 2, 0),
            "upstream 1.{minor}: {t:?}"
        );
    }
    assert_eq!(
        at(&ours, 2).job,
        at(&theirs, 2).job,
        "complete: kcm-rs vs upstream"
    );
}

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_runtime::workqueue::{RetryRateLimit, WorkQueue};

use super::*;
use kcm_runtime::clock::Clock;

const TIMEOUT: Duration = Duration::from_secs(120);

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(2_000_000 + s).expect("valid")
}

fn pod(status: &str, reason: &str, since: Option<i64>, phase: &str) -> CachedPod {
    full(status, reason, since, phase).into()
}

fn full(status: &str, reason: &str, since: Option<i64>, phase: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("p".into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.generation = Some(1);
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        conditions: Some(vec![PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some("m".into()),
            last_transition_time: since.map(|s| Time(at(s))),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p
}

#[test]
fn candidates_and_wait_time() {
    let p = pod("True", "EvictionByEvictionAPI", Some(0), "Running");
    assert_eq!(
        stale_wait(&p, at(30), TIMEOUT),
        Some(Duration::from_secs(90))
    );
    assert_eq!(stale_wait(&p, at(500), TIMEOUT), Some(Duration::ZERO));
    assert_eq!(
        stale_wait(&pod("True", "X", None, "Running"), at(0), TIMEOUT),
        Some(Duration::ZERO)
    );
    // Not candidates: kubelet's reason, False, terminal, being deleted.
    assert_eq!(
        stale_wait(
            &pod("True", REASON_TERMINATION_BY_KUBELET, Some(0), "Running"),
            at(500),
            TIMEOUT
        ),
        None
    );
    assert_eq!(
        stale_wait(&pod("False", "X", Some(0), "Running"), at(500), TIMEOUT),
        None
    );
    assert_eq!(
        stale_wait(&pod("True", "X", Some(0), "Failed"), at(500), TIMEOUT),
        None
    );
    assert_eq!(
        stale_wait(&pod("True", "X", Some(0), "Succeeded"), at(500), TIMEOUT),
        None
    );
    let mut deleting = full("True", "EvictionByEvictionAPI", Some(0), "Running");
    deleting.metadata.deletion_timestamp = Some(Time(at(1)));
    assert_eq!(stale_wait(&deleting.into(), at(500), TIMEOUT), None);
    assert_eq!(stale_wait(&CachedPod::default(), at(0), TIMEOUT), None);
}

#[test]
fn reset_sets_false_with_empty_reason_and_message() {
    let p = pod("True", "DeletionByTaintManager", Some(0), "Running");
    assert_eq!(decide(&p, at(120), TIMEOUT), StaleAction::Reset);
    let mut full = full("True", "DeletionByTaintManager", Some(0), "Running");
    full.metadata.uid = Some("u1".into());
    full.metadata.resource_version = Some("42".into());
    let patch = reset_patch(&CachedPod::from(&full), at(120));
    assert_eq!(
        patch["metadata"],
        json!({"uid": "u1", "resourceVersion": "42"})
    );
    assert_eq!(
        patch["status"]["$setElementOrder/conditions"],
        json!([{"type": "DisruptionTarget"}])
    );
    let c = &patch["status"]["conditions"][0];
    assert_eq!(
        (&c["type"], &c["status"]),
        (&json!(DISRUPTION_TARGET), &json!("False"))
    );
    // Nulls remove what a merge would keep: the result is upstream's
    // wholesale replacement.
    for gone in ["reason", "message", "lastProbeTime"] {
        assert_eq!(c.get(gone), Some(&Value::Null), "{gone}");
    }
    assert_eq!(c["lastTransitionTime"], json!(Time(at(120))));
    assert_eq!(c["observedGeneration"], json!(1));
    assert_eq!(
        decide(&p, at(100), TIMEOUT),
        StaleAction::RequeueAfter(Duration::from_secs(20))
    );
}

/// The handler schedules at the exact remaining time and the worker's
/// recheck fires then, on tokio's paused clock.
#[tokio::test(start_paused = true)]
async fn requeued_at_the_exact_remaining_time() {
    let clock = Clock::following_tokio(at(0));
    let queue: WorkQueue<String> = WorkQueue::new(
        "stale_test",
        RetryRateLimit::controller_default(),
        &Default::default(),
    );
    // The condition was set 45 s before the controller saw the pod.
    let p = pod("True", "PreemptionByScheduler", Some(-45), "Running");
    let wait = stale_wait(&p, clock.now(), TIMEOUT).expect("candidate");
    assert_eq!(wait, Duration::from_secs(75));
    queue.add_after("ns/p".into(), wait);

    let start = tokio::time::Instant::now();
    let key = queue.get().await.expect("key");
    assert_eq!(start.elapsed(), Duration::from_secs(75));
    assert!(matches!(
        decide(&p, clock.now(), TIMEOUT),
        StaleAction::Reset
    ));
    queue.done(&key);

    // Had it been popped 1 s early, the worker would requeue for exactly 1 s.
    let early = Clock::following_tokio(at(74));
    assert_eq!(
        decide(&p, early.now(), TIMEOUT),
        StaleAction::RequeueAfter(Duration::from_secs(1))
    );
    queue.shutdown();
}

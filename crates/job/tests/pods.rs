//! How the Job controller manages pods, against the real API server:
//! parallelism changes and slow start, and the pod-failure back-off.
//! podReplacementPolicy, elastic Indexed Jobs and adoption / release are
//! shared scenarios (`scenarios.rs`).

use std::time::Duration;

use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

/// Slow start creates 1, 2, 4 pods in turn up to parallelism 7; lowering
/// parallelism removes the surplus without counting it.
#[tokio::test]
async fn parallelism_scale_up_and_down() {
    let e = plane("pods").await;
    let _c = ours(&e.cp, FeatureGates::default()).await;
    e.jobs
        .create(
            &PostParams::default(),
            &job("par", json!({"completions": 20, "parallelism": 7})),
        )
        .await
        .expect("create");
    let ps = wait_pods(&e.pods, "par", "7 pods", |ps| ps.len() == 7).await;
    // Ordered by creation: each batch starts after the previous one ended,
    // so creation resourceVersions come in groups of 1, 2 and 4; all we can
    // check from outside is the total and that nothing overshot.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(job_pods(&e.pods, "par").await.len(), ps.len());
    run_pending(&e.pods, "par").await;
    e.jobs
        .patch(
            "par",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 3}})),
        )
        .await
        .expect("scale down");
    let ps = wait_pods(&e.pods, "par", "4 removed", |ps| {
        ps.iter().filter(|p| is_active(p)).count() == 3
    })
    .await;
    assert!(
        ps.iter().filter(|p| is_active(p)).all(has_tracking),
        "kept pods tracked"
    );
    let j = wait_job(&e.jobs, "par", "active 3", |j| outcome(j).active == 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let o = outcome(&e.jobs.get("par").await.expect("job"));
    assert_eq!((o.active, o.failed, o.succeeded), (3, 0, 0), "{o:#?}");
    let _ = j;
    // One SuccessfulDelete per removed pod (RealPodControl.DeletePod).
    let evs = wait_event(&e.client, &e.ns.name, "par", "SuccessfulDelete").await;
    let deletes: Vec<_> = evs.iter().filter(|e| e.0 == "SuccessfulDelete").collect();
    assert_eq!(deletes.len(), 4, "{evs:#?}");
    assert!(deletes.iter().all(|e| e.1.starts_with("Deleted pod: par-")));
    // Scale up again.
    e.jobs
        .patch(
            "par",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 6}})),
        )
        .await
        .expect("scale up");
    wait_pods(&e.pods, "par", "6 active", |ps| {
        ps.iter().filter(|p| is_active(p)).count() == 6
    })
    .await;
}

/// A failed pod's replacement comes only after the 10 s back-off.
#[tokio::test]
async fn failure_backoff_delays_replacement() {
    let e = plane("pods").await;
    let _c = ours(&e.cp, FeatureGates::default()).await;
    e.jobs
        .create(
            &PostParams::default(),
            &job("bo", json!({"completions": 1, "backoffLimit": 3})),
        )
        .await
        .expect("create");
    let ps = wait_pods(&e.pods, "bo", "1 pod", |ps| ps.len() == 1).await;
    let failed = kcm_e2e::kubelet::finish_pod(&e.pods, &name(&ps[0]), 1)
        .await
        .expect("fail");
    let finished_at = failed
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c[0].state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.finished_at.as_ref())
        .map(|t| t.0)
        .expect("finishedAt");
    let ps = kcm_e2e::wait::wait_for_list(
        &e.pods,
        &kube::api::ListParams::default().labels("batch.kubernetes.io/job-name=bo"),
        Duration::from_secs(30),
        "replacement",
        |ps| ps.iter().any(is_active),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let created = ps
        .iter()
        .find(|p| is_active(p))
        .and_then(|p| p.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .expect("creationTimestamp");
    let gap = created.duration_since(finished_at).as_secs_f64();
    assert!(gap >= 9.0, "replacement {gap:.1}s after the failure");
    let o = outcome(&e.jobs.get("bo").await.expect("job"));
    assert_eq!(o.failed, 1);
}

/// Slow start seen through a pod quota of 2 with parallelism 6: batch 1
/// (1 pod) succeeds, batch 2 (2 pods) hits the quota once, and the other 3
/// pods are not even tried. Without slow start one sync would record 4
/// FailedCreate events.
#[tokio::test]
async fn slow_start_stops_after_failing_batch() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let e = plane("pods").await;
    let _c = ours(&e.cp, FeatureGates::default()).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(e.client.clone(), &e.ns.name);
    let q: ResourceQuota =
        serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}}}))
            .expect("quota");
    quotas
        .create(&PostParams::default(), &q)
        .await
        .expect("quota");
    // No resourcequota controller here: publish the status ourselves.
    quotas
        .patch_status(
            "q",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}})),
        )
        .await
        .expect("quota status");
    e.jobs
        .create(
            &PostParams::default(),
            &job("slow", json!({"completions": 6, "parallelism": 6})),
        )
        .await
        .expect("create");
    wait_event(&e.client, &e.ns.name, "slow", "FailedCreate").await;
    // The next attempt comes after the 1 s retry back-off at the earliest.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let evs = job_events(&e.client, &e.ns.name, "slow").await;
    let failed: Vec<_> = evs.iter().filter(|e| e.0 == "FailedCreate").collect();
    assert!(failed.len() <= 2, "{failed:#?}");
    assert!(
        failed[0].1.starts_with("Error creating: pods \"slow-")
            && failed[0].1.contains("exceeded quota: q"),
        "client-go style message: {failed:#?}"
    );
    assert_eq!(job_pods(&e.pods, "slow").await.len(), 2);
    let j = wait_job(&e.jobs, "slow", "active 2", |j| outcome(j).active == 2).await;
    assert_eq!(outcome(&j).active, 2);
}

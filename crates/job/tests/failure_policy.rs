//! Pod failure policy end to end: crash safety of the interim FailureTarget
//! condition, and a DisruptionTarget condition written by a real Eviction
//! API call matched by an Ignore rule.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::kubelet;
use kcm_e2e::wait::wait_for;
use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

const T: Duration = Duration::from_secs(60);

fn has_condition(j: &Job, t: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
}

async fn wait_pods(pods: &Api<Pod>, job: &str, n: usize) -> Vec<Pod> {
    let start = std::time::Instant::now();
    loop {
        let ps = job_pods(pods, job).await;
        if ps.len() >= n {
            return ps;
        }
        assert!(start.elapsed() < T, "only {} pods", ps.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// FailureTarget is persisted before anything else happens; a restart after
/// it, with the failed pod's finalizer gone and the pods deleted (as pod GC
/// would do), still ends Failed with the original reason and message.
#[tokio::test]
async fn failure_target_survives_a_restart_and_lost_pods() {
    let e = plane("crash").await;
    let first = start(&e.cp, false, FeatureGates::default()).await;
    let spec = json!({"completions": 2, "parallelism": 2,
        "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}});
    e.jobs
        .create(&PostParams::default(), &job("j", spec))
        .await
        .expect("create");
    let ps = wait_pods(&e.pods, "j", 2).await;
    let failed_name = ps[0].metadata.name.clone().unwrap_or_default();
    let running_name = ps[1].metadata.name.clone().unwrap_or_default();
    // Bound pods are deleted gracefully and stay terminating (no kubelet).
    kubelet::create_node(&e.client, "n", true, vec![])
        .await
        .expect("node");
    for name in [&failed_name, &running_name] {
        kubelet::bind_pod(&e.pods, name, "n").await.expect("bind");
    }
    kubelet::run_pod(&e.pods, &running_name, true)
        .await
        .expect("run");
    kubelet::finish_pod(&e.pods, &failed_name, 42)
        .await
        .expect("fail");
    let with_target = wait_for(&e.jobs, "j", T, "FailureTarget", |j| {
        has_condition(j, "FailureTarget")
    })
    .await
    .expect("FailureTarget");
    assert!(
        !has_condition(&with_target, "Failed"),
        "Failed must wait for the terminating pod"
    );
    let target = with_target
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "FailureTarget")
        .expect("condition");
    let message = target.message.clone().unwrap_or_default();
    assert_eq!(target.reason.as_deref(), Some("PodFailurePolicy"));
    assert_eq!(
        message,
        format!(
            "Container main for pod {}/{failed_name} failed with exit code 42 matching FailJob rule at index 0",
            e.ns.name
        )
    );
    // kcm-rs goes away; the kubelet finishes the deleted pod; pod GC removes
    // finalizers and deletes both pods.
    drop(first);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kubelet::finish_pod(&e.pods, &running_name, 137)
        .await
        .expect("kubelet stops it");
    for name in [&failed_name, &running_name] {
        e.pods
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("drop finalizers");
        let _ = e
            .pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
    }
    let _second = start(&e.cp, false, FeatureGates::default()).await;
    let done = wait_for(&e.jobs, "j", T, "Failed", |j| has_condition(j, "Failed"))
        .await
        .expect("Failed");
    let failed = done
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Failed").cloned())
        .expect("Failed condition");
    assert_eq!(failed.reason.as_deref(), Some("PodFailurePolicy"));
    assert_eq!(failed.message.as_deref(), Some(message.as_str()));
    let o = outcome(&done);
    assert!(o.uncounted_empty, "{o:#?}");
    assert_eq!(o.active, 0);
}

/// The API server's eviction subresource adds DisruptionTarget (reason
/// EvictionByEvictionAPI); an Ignore rule on that condition keeps the
/// failure out of status.failed and the pod is replaced.
#[tokio::test]
async fn eviction_api_disruption_is_ignored() {
    let Plane {
        cp,
        client,
        jobs,
        pods,
        ..
    } = plane("evict").await;
    let _c = start(&cp, false, FeatureGates::default()).await;
    kubelet::create_node(&client, "n", true, vec![])
        .await
        .expect("node");
    let spec = json!({"completions": 1, "backoffLimit": 0,
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
    jobs.create(&PostParams::default(), &job("j", spec))
        .await
        .expect("create");
    let ps = wait_pods(&pods, "j", 1).await;
    let victim = ps[0].metadata.name.clone().unwrap_or_default();
    kubelet::bind_pod(&pods, &victim, "n").await.expect("bind");
    kubelet::run_pod(&pods, &victim, true).await.expect("run");
    pods.evict(&victim, &EvictParams::default())
        .await
        .expect("evict");
    let evicted = pods.get(&victim).await.expect("still terminating");
    let dt = evicted
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget").cloned())
        .expect("DisruptionTarget from the API server");
    assert_eq!(dt.reason.as_deref(), Some("EvictionByEvictionAPI"));
    // The kubelet stops it.
    kubelet::finish_pod(&pods, &victim, 137)
        .await
        .expect("stopped");
    // The replacement succeeds; the Job completes with no failure counted.
    let done = drive(&jobs, &pods, "j", T, |p, _| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_none_or(|cs| !cs.iter().any(|c| c.type_ == "DisruptionTarget"))
            .then_some(0)
    })
    .await;
    let o = outcome(&done);
    assert_eq!(o.failed, 0, "{o:#?}");
    assert_eq!(o.succeeded, 1);
    assert_eq!(o.conditions.last().map(|c| c.0.as_str()), Some("Complete"));
}

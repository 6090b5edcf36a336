//! The same Job scenarios against upstream kube-controller-manager's
//! job-controller and against kcm-rs, each on its own control plane, with
//! the test playing the kubelet identically; the final Job status (counts,
//! conditions' type/status/reason/message, indexes) and the number of pods
//! created must be identical.

// Scripted scenarios (d12-d32): checkpoints along the way must match too;
// d12-d24 are the shared scenarios the e2e suite also plays (scenarios.rs).
mod cleanup;
mod gates;
mod scenarios;
mod versions;
mod workload;
mod workload_v136;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use support::script::index;
use support::*;

type Kubelet = fn(&Pod, usize) -> Option<i32>;

/// What one run leaves behind: the Job outcome, pods left, Job events and
/// pod shapes (all normalized).
type Result_ = (
    Outcome,
    usize,
    Vec<(String, String, String, i32)>,
    Vec<String>,
);

/// `--emulated-version` and `--feature-gates` given to both controllers.
#[derive(Clone, Copy, Default)]
struct Gated {
    emulated: Option<u32>,
    gates: &'static str,
    /// The API server runs with the same `--emulated-version` and gates, as
    /// upstream's integration tests set them for both in one process (its
    /// status validation depends on `JobManagedBy`).
    apiserver: bool,
}

async fn run_gated(
    upstream: bool,
    gated: Gated,
    spec: serde_json::Value,
    kubelet: Kubelet,
) -> Result_ {
    let cp = if gated.apiserver {
        let mut args = format!("--feature-gates={}", gated.gates);
        if let Some(minor) = gated.emulated {
            args.push_str(&format!(" --emulated-version=1.{minor}"));
        }
        ControlPlane::start_version_with_args(&kcm_e2e::binaries::k8s_version(), &args).expect("cp")
    } else {
        ControlPlane::start().expect("cp")
    };
    let mut flags = vec![format!("--feature-gates={}", gated.gates)];
    let mut gates = FeatureGates::parse(gated.gates).expect("gates");
    if let Some(minor) = gated.emulated {
        flags.push(format!("--emulated-version=1.{minor}"));
        gates = gates.emulating(minor);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // Beside KCM needs JobManagedBy; with it off, kcm-rs replaces KCM.
    let side = match Side::of(upstream) {
        Side::Beside if !gates.enabled(kcm_features::Feature::JobManagedBy) => {
            eprintln!("JobManagedBy off: kcm-rs replaces KCM in this run");
            Side::Ours
        }
        side => side,
    };
    let _c = start_side(&cp, side, gates, &flags).await;
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "diff").await.expect("ns");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    jobs.create(&PostParams::default(), &job_on(side, "j", spec))
        .await
        .expect("create");
    drive(&jobs, &pods, "j", Duration::from_secs(90), kubelet).await;
    // Let trailing writes (finalizer removals, counters, events) land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let done = jobs.get("j").await.expect("job");
    let left = job_pods(&pods, "j").await;
    (
        normalize(outcome(&done), &ns.name),
        left.len(),
        event_summary(&client, &ns.name, "j").await,
        pod_shapes(&left),
    )
}

async fn compare(spec: serde_json::Value, kubelet: Kubelet) -> Outcome {
    compare_gated(Gated::default(), spec, kubelet).await
}

async fn compare_gated(gated: Gated, spec: serde_json::Value, kubelet: Kubelet) -> Outcome {
    let (theirs, ours) = tokio::join!(
        run_gated(true, gated, spec.clone(), kubelet),
        run_gated(false, gated, spec, kubelet)
    );
    assert_eq!(ours.0, theirs.0, "kcm-rs (left) vs upstream (right)");
    assert_eq!(
        ours.1, theirs.1,
        "pods left: kcm-rs {} vs upstream {}",
        ours.1, theirs.1
    );
    assert_eq!(
        ours.2, theirs.2,
        "events: kcm-rs (left) vs upstream (right)"
    );
    assert_eq!(
        ours.3, theirs.3,
        "pod shapes: kcm-rs (left) vs upstream (right)"
    );
    ours.0
}

#[tokio::test]
async fn d01_nonindexed_all_succeed() {
    let o = compare(json!({"completions": 3, "parallelism": 2}), |_, _| Some(0)).await;
    assert_eq!(o.succeeded, 3);
}

#[tokio::test]
async fn d02_backoff_limit_zero() {
    let o = compare(json!({"completions": 2, "backoffLimit": 0}), |_, _| Some(1)).await;
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("BackoffLimitExceeded")
    );
}

#[tokio::test]
async fn d03_work_queue_mode() {
    let o = compare(json!({"parallelism": 3}), |_, _| Some(0)).await;
    assert_eq!(o.succeeded, 3);
}

#[tokio::test]
async fn d04_indexed_all_succeed() {
    let o = compare(
        json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed"}),
        |_, _| Some(0),
    )
    .await;
    assert_eq!(o.completed_indexes, "0-3");
}

#[tokio::test]
async fn d05_indexed_failed_index_with_backoff_limit_per_index() {
    let o = compare(
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "backoffLimitPerIndex": 0}),
        |p, _| Some(if index(p) == 1 { 3 } else { 0 }),
    )
    .await;
    assert_eq!(o.failed_indexes.as_deref(), Some("1"));
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("FailedIndexes")
    );
}

#[tokio::test]
async fn d06_fail_job_rule_with_running_sibling() {
    let o = compare(
        json!({"completions": 2, "parallelism": 2, "backoffLimit": 6,
               "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}}),
        |_, n| if n == 0 { Some(42) } else { None },
    )
    .await;
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("PodFailurePolicy")
    );
}

#[tokio::test]
async fn d07_ignore_rule_does_not_count() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 0,
               "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}}),
        |_, n| Some(if n == 0 { 7 } else { 0 }),
    )
    .await;
    assert_eq!(o.failed, 0);
    assert_eq!(o.succeeded, 1);
}

#[tokio::test]
async fn d08_count_rule_counts() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 0,
               "podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}}),
        |_, _| Some(5),
    )
    .await;
    assert_eq!(o.failed, 1);
}

#[tokio::test]
async fn d09_success_policy() {
    let o = compare(
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
               "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
        |p, _| if index(p) == 0 { Some(0) } else { None },
    )
    .await;
    assert_eq!(
        o.conditions.first().map(|c| c.2.as_str()),
        Some("SuccessPolicy")
    );
}

#[tokio::test]
async fn d10_active_deadline() {
    let o = compare(
        json!({"completions": 2, "parallelism": 2, "activeDeadlineSeconds": 3}),
        |_, _| None,
    )
    .await;
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("DeadlineExceeded")
    );
}

#[tokio::test]
async fn d11_fail_index_rule() {
    let o = compare(
        json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 3,
               "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [9]}}]}}),
        |p, _| Some(if index(p) == 0 { 9 } else { 0 }),
    )
    .await;
    assert_eq!(o.failed_indexes.as_deref(), Some("0"));
}

#[tokio::test]
async fn d25_ignore_rule_on_disruption_target_condition() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 0,
               "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}),
        |_, n| Some(if n == 0 { FAIL_DISRUPTED } else { 0 }),
    )
    .await;
    assert_eq!((o.failed, o.succeeded), (0, 1));
}

#[tokio::test]
async fn d26_fail_job_rule_on_pod_condition() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 6,
               "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}}),
        |_, _| Some(FAIL_DISRUPTED),
    )
    .await;
    let last = o.conditions.last().cloned().unwrap_or_default();
    assert_eq!(last.2, "PodFailurePolicy");
    assert!(
        last.3
            .contains("has condition DisruptionTarget matching FailJob rule at index 0"),
        "{}",
        last.3
    );
}

#[tokio::test]
async fn d27_max_failed_indexes_exceeded() {
    let o = compare(
        json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed",
               "backoffLimitPerIndex": 0, "maxFailedIndexes": 1}),
        |p, _| {
            if index(p) == 1 || index(p) == 2 {
                Some(3)
            } else {
                None
            }
        },
    )
    .await;
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("MaxFailedIndexesExceeded")
    );
}

#[tokio::test]
async fn d28_first_matching_rule_wins_with_not_in() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 6,
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [3]}}
        ]}}),
        |_, _| Some(5),
    )
    .await;
    let last = o.conditions.last().cloned().unwrap_or_default();
    assert!(
        last.3
            .ends_with("failed with exit code 5 matching FailJob rule at index 1"),
        "{}",
        last.3
    );
}

#[tokio::test]
async fn d29_count_rule_reaches_backoff_limit_after_backoff() {
    let o = compare(
        json!({"completions": 1, "backoffLimit": 1,
               "podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [4]}}]}}),
        |_, _| Some(4),
    )
    .await;
    assert_eq!(o.failed, 2);
    assert_eq!(
        o.conditions.last().map(|c| c.2.as_str()),
        Some("BackoffLimitExceeded")
    );
}

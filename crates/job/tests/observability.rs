//! What users observe besides the Job status: events and metrics, and the
//! `JobPodFailurePolicy` gate turned off.

use std::time::Duration;

use kcm_features::{Feature, FeatureGates};
use kcm_job_testing as support;
use kube::api::PostParams;
use serde_json::json;

use support::*;

/// SuccessfulCreate per pod and Completed, from `job-controller`; the sync
/// and finished-jobs counters move.
#[tokio::test]
async fn events_and_metrics() {
    let e = plane("obs").await;
    let c = ours(&e.cp, FeatureGates::default()).await;
    let syncs = |mode: &str| {
        metric(
            &c.metrics,
            "job_controller_job_syncs_total",
            &[("completion_mode", mode), ("result", "success")],
        )
    };
    let finished_total = || {
        metric(
            &c.metrics,
            "job_controller_jobs_finished_total",
            &[
                ("completion_mode", "NonIndexed"),
                ("result", "succeeded"),
                ("reason", "CompletionsReached"),
            ],
        )
    };
    let (syncs0, finished0) = (syncs("NonIndexed"), finished_total());
    e.jobs
        .create(
            &PostParams::default(),
            &job("ev", json!({"completions": 2, "parallelism": 2})),
        )
        .await
        .expect("create");
    drive(&e.jobs, &e.pods, "ev", Duration::from_secs(30), |_, _| {
        Some(0)
    })
    .await;
    let evs = wait_event(&e.client, &e.ns.name, "ev", "Completed").await;
    let names: Vec<String> = job_pods(&e.pods, "ev").await.iter().map(name).collect();
    assert_eq!(names.len(), 2);
    for n in &names {
        assert!(
            evs.iter().any(|e| e.0 == "SuccessfulCreate"
                && e.1 == format!("Created pod: {n}")
                && e.2 == "job-controller"),
            "SuccessfulCreate for {n}: {evs:#?}"
        );
    }
    assert!(
        evs.iter()
            .any(|e| e.0 == "Completed" && e.1 == "Job completed" && e.2 == "job-controller"),
        "{evs:#?}"
    );
    assert!(syncs("NonIndexed") > syncs0, "job_syncs_total increased");
    assert!(
        finished_total() >= finished0 + 1.0,
        "jobs_finished_total{{reason=CompletionsReached}} increased"
    );
    assert!(
        metric(
            &c.metrics,
            "job_controller_job_pods_finished_total",
            &[("completion_mode", "NonIndexed"), ("result", "succeeded")]
        ) >= 2.0
    );
    assert!(
        metric(
            &c.metrics,
            "job_controller_job_sync_duration_seconds_count",
            &[("completion_mode", "NonIndexed")]
        ) > 0.0
    );
}

/// With the gate off a FailJob rule is ignored: the failure is counted
/// like any other and the Job goes on to complete.
#[tokio::test]
async fn pod_failure_policy_gate_off() {
    let Plane { cp, jobs, pods, .. } = plane("gate").await;
    let gates = FeatureGates::default().with(Feature::JobPodFailurePolicy, false);
    let _c = ours(&cp, gates).await;
    jobs.create(
        &PostParams::default(),
        &job(
            "pfp",
            json!({"completions": 1, "backoffLimit": 2,
                   "podFailurePolicy": {"rules": [{"action": "FailJob",
                       "onExitCodes": {"operator": "In", "values": [42]}}]}}),
        ),
    )
    .await
    .expect("create");
    let done = drive(&jobs, &pods, "pfp", Duration::from_secs(40), |_, n| {
        Some(if n == 0 { 42 } else { 0 })
    })
    .await;
    let o = outcome(&done);
    assert_eq!((o.failed, o.succeeded), (1, 1), "{o:#?}");
    let types: Vec<&str> = o.conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"], "{o:#?}");
}

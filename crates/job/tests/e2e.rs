//! The Job controller against the real API server.

use std::time::Duration;

use kcm_e2e::wait::wait_for_list;
use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use support::*;

#[tokio::test]
async fn nonindexed_job_completes_and_releases_finalizers() {
    let Plane { cp, jobs, pods, .. } = plane("job").await;
    let _c = start(&cp, false, FeatureGates::default()).await;
    jobs.create(
        &PostParams::default(),
        &job("pi", json!({"completions": 3, "parallelism": 2})),
    )
    .await
    .expect("create");
    let done = drive(&jobs, &pods, "pi", Duration::from_secs(60), |_, _| Some(0)).await;
    let o = outcome(&done);
    assert_eq!(o.succeeded, 3, "{o:#?}");
    assert_eq!(o.failed, 0);
    assert_eq!(o.active, 0);
    assert!(o.completion_time_set && o.uncounted_empty);
    let types: Vec<&str> = o.conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"]);
    assert_eq!(o.conditions[1].2, "CompletionsReached");
    wait_for_list(
        &pods,
        &ListParams::default(),
        Duration::from_secs(20),
        "finalizers gone",
        |ps| {
            ps.iter()
                .all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()))
        },
    )
    .await
    .expect("finalizers");
}

#[tokio::test]
async fn backoff_limit_fails_the_job() {
    let Plane { cp, jobs, pods, .. } = plane("job").await;
    let _c = start(&cp, false, FeatureGates::default()).await;
    jobs.create(
        &PostParams::default(),
        &job("flaky", json!({"completions": 1, "backoffLimit": 0})),
    )
    .await
    .expect("create");
    let done = drive(&jobs, &pods, "flaky", Duration::from_secs(60), |_, _| {
        Some(1)
    })
    .await;
    let o = outcome(&done);
    assert_eq!(o.failed, 1, "{o:#?}");
    let types: Vec<&str> = o.conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(types, vec!["FailureTarget", "Failed"]);
    assert_eq!(o.conditions[1].2, "BackoffLimitExceeded");
    assert_eq!(
        o.conditions[1].3,
        "Job has reached the specified backoff limit"
    );
}

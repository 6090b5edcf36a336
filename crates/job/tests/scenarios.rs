//! The Job controller's shared scenarios (`kcm_job_testing::scenarios`, the
//! same the differential suite compares with upstream) against kcm-rs
//! alone on the real API server: each scenario's expectations must hold.

use kcm_job_testing as support;
use support::scenarios::{alone, lifecycle, pods};

#[tokio::test]
async fn suspend_resume() {
    alone(&lifecycle::SUSPEND_RESUME).await;
}

#[tokio::test]
async fn pod_replacement_policy_failed() {
    alone(&pods::REPLACE_FAILED).await;
}

#[tokio::test]
async fn pod_replacement_policy_terminating_or_failed() {
    alone(&pods::REPLACE_TERMINATING_OR_FAILED).await;
}

#[tokio::test]
async fn elastic_indexed_scale_down() {
    alone(&pods::ELASTIC).await;
}

#[tokio::test]
async fn orphan_adoption_and_release() {
    alone(&pods::ADOPT_RELEASE).await;
}

#[tokio::test]
async fn parallelism_scale_down() {
    alone(&pods::SCALE_DOWN).await;
}

#[tokio::test]
async fn deleted_job_releases_finalizers() {
    alone(&lifecycle::DELETE_RUNNING).await;
}

#[tokio::test]
async fn managed_by_other_controller() {
    alone(&lifecycle::MANAGED_ELSEWHERE).await;
}

#[tokio::test]
async fn restart_mid_job() {
    alone(&lifecycle::RESTART).await;
}

#[tokio::test]
async fn orphan_pods_with_finalizer() {
    alone(&lifecycle::ORPHANS).await;
}

#[tokio::test]
async fn quota_exceeded_creations() {
    alone(&pods::QUOTA).await;
}

#[tokio::test]
async fn foreground_deletion() {
    alone(&lifecycle::FOREGROUND).await;
}

#[tokio::test]
async fn invalid_completion_index() {
    alone(&pods::BAD_INDEX).await;
}

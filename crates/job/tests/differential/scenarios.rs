//! The shared scenarios (`kcm_job_testing::scenarios`) against upstream and
//! kcm-rs: every checkpoint must match, then each scenario's expectations
//! must hold.

use crate::support::scenarios::{differ, lifecycle, pods};

#[tokio::test]
async fn d12_suspend_resume() {
    differ(&lifecycle::SUSPEND_RESUME).await;
}

#[tokio::test]
async fn d13_pod_replacement_policy_failed() {
    differ(&pods::REPLACE_FAILED).await;
}

#[tokio::test]
async fn d14_pod_replacement_policy_terminating_or_failed() {
    differ(&pods::REPLACE_TERMINATING_OR_FAILED).await;
}

#[tokio::test]
async fn d15_elastic_indexed_scale_down() {
    differ(&pods::ELASTIC).await;
}

#[tokio::test]
async fn d16_orphan_adoption_and_release() {
    differ(&pods::ADOPT_RELEASE).await;
}

#[tokio::test]
async fn d17_parallelism_scale_down() {
    differ(&pods::SCALE_DOWN).await;
}

#[tokio::test]
async fn d18_deleted_job_releases_finalizers() {
    differ(&lifecycle::DELETE_RUNNING).await;
}

#[tokio::test]
async fn d19_managed_by_other_controller() {
    differ(&lifecycle::MANAGED_ELSEWHERE).await;
}

#[tokio::test]
async fn d20_restart_mid_job() {
    differ(&lifecycle::RESTART).await;
}

#[tokio::test]
async fn d21_orphan_pods_with_finalizer() {
    differ(&lifecycle::ORPHANS).await;
}

#[tokio::test]
async fn d22_quota_exceeded_creations() {
    differ(&pods::QUOTA).await;
}

#[tokio::test]
async fn d23_foreground_deletion() {
    differ(&lifecycle::FOREGROUND).await;
}

#[tokio::test]
async fn d24_invalid_completion_index() {
    differ(&pods::BAD_INDEX).await;
}

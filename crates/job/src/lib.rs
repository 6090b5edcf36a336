//! The Job controller of kcm-rs (KCM's `job-controller`).

pub mod active_pods;
pub mod backoff;
pub mod indexes;
pub mod metrics;
pub mod pod_failure_policy;
pub mod pods;
pub mod success_policy;

//! Benchmarks of kcm-rs against upstream kube-controller-manager on the same
//! local control plane: result types, the report (Markdown table, PNG chart,
//! JSON) and the workloads.

pub mod common;
pub mod eviction;
pub mod jobs;
pub mod latency;
pub mod memory;
pub mod report;
pub mod results;
pub mod scaling;

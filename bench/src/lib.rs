//! Benchmarks of kcm-rs against upstream kube-controller-manager on the same
//! local control plane (`make bench`: `kcm-bench`): the workloads W1-W6
//! ([`jobs`], [`latency`], [`memory`], [`eviction`], [`scaling`]) over the
//! shared process and request measurements of [`common`], W7 ([`fair`]: fair
//! share between namespaces), the result types
//! ([`results`]) and the report ([`report`]: Markdown table, PNG charts,
//! JSON); and the chaos driver ([`chaos`], `make chaos`: `kcm-chaos`).
//! Results are committed under `bench/results/`. W8 ([`apiserver`]): what
//! each manager costs the API server at start-up and in a relist storm.

pub mod apiserver;
pub mod chaos;
pub mod common;
pub mod eviction;
pub mod fair;
pub mod jobs;
pub mod latency;
pub mod memory;
pub mod report;
pub mod results;
pub mod rounds;
pub mod scaling;

//! The test harness of kcm-rs: a real kube-apiserver over embedded etcd
//! (built from the pinned `k8s.io/kubernetes` Go module of each supported
//! minor in `e2e/harness`), upstream kube-controller-manager as the oracle,
//! kcm-rs controllers in process through the binary's wiring
//! ([`in_process`]), helpers that play the kubelet, waits, watch histories,
//! the fault-injecting proxy ([`faults`]), HTTPS and Prometheus helpers,
//! the controllers' log lines captured in a test ([`logs`]), kcm-rs
//! as installed from `manifests/` or the chart ([`manifests`]), and the
//! scenario tests' side of a real-node session ([`realnode`]).
//! The pod lifecycle simulator is the `kcm-sim` crate (`sim/`); benchmarks
//! and the chaos driver are `kcm-bench` (`bench/`).

pub mod apply;
pub mod binaries;
pub mod control_plane;
pub mod error;
pub mod events;
pub mod faults;
pub mod history;
pub mod https;
pub mod in_process;
pub mod kubelet;
pub mod logs;
pub mod manifests;
pub mod namespace;
pub mod procstat;
pub mod prometheus;
pub mod realnode;
pub mod thread;
pub mod upstream;
pub mod wait;
pub mod wire;

pub use control_plane::{ControlPlane, shared};
pub use error::HarnessError;
/// The one mock API server, for request-shape tests only.
pub use kcm_mock_api as mock;
pub use namespace::TestNamespace;
pub use upstream::UpstreamKcm;

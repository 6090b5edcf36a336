//! End-to-end support for kcm-rs: a real kube-apiserver over embedded etcd
//! (built from the pinned `k8s.io/kubernetes` Go module in `e2e/harness`),
//! upstream kube-controller-manager as a reference, helpers that play the
//! kubelet, waiting helpers, and a pod lifecycle simulator.

pub mod apply;
pub mod bench;
pub mod binaries;
pub mod chaos;
pub mod control_plane;
pub mod error;
pub mod events;
pub mod faults;
pub mod history;
pub mod https;
pub mod in_process;
pub mod kubelet;
pub mod namespace;
pub mod procstat;
pub mod prometheus;
pub mod sim;
pub mod upstream;
pub mod wait;

pub use control_plane::{ControlPlane, shared};
pub use error::HarnessError;
pub use namespace::TestNamespace;
pub use upstream::UpstreamKcm;

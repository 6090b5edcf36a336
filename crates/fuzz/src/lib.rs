//! kcm-fuzz: one entry function per parser of untrusted bytes in kcm-rs,
//! called by the cargo-fuzz targets (`fuzz/`, nightly, `make fuzz`) and by
//! the stable smoke test (`tests/smoke.rs`, in `make test`), so both run
//! the same code. An entry never fails: it feeds the bytes to the real
//! parser and drops the result; a panic, an unbounded allocation or a
//! hang is the finding.
//!
//! Layout:
//! - `wire.rs`: what the API server sends: protobuf list bodies and watch
//!   streams (`kcm_proto` and `CachedPod::decode_proto`), a bare protobuf
//!   pod, and the JSON pod decoder;
//! - `text.rs`: what the operator or a file gives: kubeconfigs (kube's
//!   parser, as `cmd/kcm-rs/src/kubeconfig.rs` calls it), `--feature-gates`,
//!   the other flag values, and the manifests of `kcm-rs explain`/`lint`;
//! - `mutate.rs`: the seed corpus (`corpus/<target>/`, real API-server
//!   bytes, see `tests/capture.rs`) and the small deterministic mutator
//!   the smoke test uses where libFuzzer is not available.

mod mutate;
mod text;
mod wire;

pub use mutate::{Mutator, corpus_dir, seeds};
pub use text::{feature_gates, flag_values, kubeconfig, manifests};
pub use wire::{pod_json, pod_proto, proto_list, proto_watch};

/// An entry: bytes in, nothing out.
pub type Entry = fn(&[u8]);

/// Every target by name (the cargo-fuzz target and corpus folder names).
pub const TARGETS: &[(&str, Entry)] = &[
    ("proto_list", proto_list),
    ("proto_watch", proto_watch),
    ("pod_proto", pod_proto),
    ("pod_json", pod_json),
    ("kubeconfig", kubeconfig),
    ("feature_gates", feature_gates),
    ("flag_values", flag_values),
    ("manifests", manifests),
];

//! `pod_gc_collector_*` metrics with upstream names and labels.

use prometheus::{IntCounterVec, Opts, Registry};

pub struct Metrics {
    /// `pod_gc_collector_force_delete_pods_total{namespace,reason}`.
    pub deleting: IntCounterVec,
    /// `pod_gc_collector_force_delete_pod_errors_total{namespace,reason}`.
    pub errors: IntCounterVec,
}

impl Metrics {
    /// The families, registered on `r`.
    pub fn new(r: &Registry) -> Self {
        let counter = |name: &str, help: &str| {
            kcm_runtime::metrics::register(
                r,
                IntCounterVec::new(Opts::new(name, help), &["namespace", "reason"])
                    .expect("constant metric definition is valid"),
            )
        };
        Metrics {
            deleting: counter(
                "pod_gc_collector_force_delete_pods_total",
                "Pods force-deleted by pod GC, by namespace and reason.",
            ),
            errors: counter(
                "pod_gc_collector_force_delete_pod_errors_total",
                "Errors while force-deleting pods in pod GC, by namespace and reason.",
            ),
        }
    }
}

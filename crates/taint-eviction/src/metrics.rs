//! `taint_eviction_controller_*` metrics under upstream's names, help texts
//! and buckets (pkg/controller/tainteviction/metrics/metrics.go, ALPHA).
//!
//! One deliberate difference: upstream observes
//! `float64(time.Since(fireAt) * time.Second)`, i.e. nanoseconds times 1e9,
//! so every sample lands in `+Inf` (and overflows past ~9 s). We observe
//! real seconds, which is what the name and help text promise.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, Opts, Registry};

const SUBSYSTEM: &str = "taint_eviction_controller";

/// Upstream's buckets: 5 ms to 4 min.
pub const DELETION_DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
];

/// The controller's metrics on one registry; clones share the series.
#[derive(Clone)]
pub struct Metrics {
    /// `taint_eviction_controller_pod_deletions_total`.
    pub pod_deletions: IntCounter,
    /// `taint_eviction_controller_pod_deletion_duration_seconds`.
    pub pod_deletion_duration: Histogram,
}

impl Metrics {
    /// Counts one successful deletion that was due `late` ago.
    pub fn deleted(&self, late: Duration) {
        self.pod_deletions.inc();
        self.pod_deletion_duration.observe(late.as_secs_f64());
    }
}

impl Metrics {
    /// The families, registered on `r`.
    pub fn new(r: &Registry) -> Self {
        let pod_deletions = IntCounter::with_opts(
            Opts::new(
                "pod_deletions_total",
                "Total number of Pods deleted by TaintEvictionController since its start.",
            )
            .subsystem(SUBSYSTEM),
        )
        .expect("static metric definition is valid");
        let pod_deletion_duration = Histogram::with_opts(
            HistogramOpts::new(
                "pod_deletion_duration_seconds",
                "Latency, in seconds, between the time when a taint effect has been activated \
                 for the Pod and its deletion via TaintEvictionController.",
            )
            .subsystem(SUBSYSTEM)
            .buckets(DELETION_DURATION_BUCKETS.to_vec()),
        )
        .expect("static metric definition is valid");
        Metrics {
            pod_deletions: kcm_runtime::metrics::register(r, pod_deletions),
            pod_deletion_duration: kcm_runtime::metrics::register(r, pod_deletion_duration),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_buckets_and_seconds() {
        let r = Registry::new();
        let m = Metrics::new(&r);
        m.deleted(Duration::from_millis(1500));
        assert_eq!(m.pod_deletions.get(), 1);
        assert_eq!(m.pod_deletion_duration.get_sample_count(), 1);
        assert!((m.pod_deletion_duration.get_sample_sum() - 1.5).abs() < 1e-9);
        let text = kcm_runtime::metrics::render_of(&r);
        assert!(text.contains("taint_eviction_controller_pod_deletions_total"));
        assert!(text.contains(
            "taint_eviction_controller_pod_deletion_duration_seconds_bucket{le=\"2.5\"}"
        ));
        assert!(text.contains(
            "taint_eviction_controller_pod_deletion_duration_seconds_bucket{le=\"240\"}"
        ));
    }
}

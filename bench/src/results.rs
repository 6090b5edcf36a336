//! What one `make bench` run measured, as written to
//! `bench/results/<date>.json`.

use serde::{Deserialize, Serialize};

/// One run of the benchmark suite.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    /// RFC 3339 time the run started.
    pub started: String,
    /// Free text: CPU count, memory, kernel, Kubernetes version.
    pub machine: String,
    /// Size factor applied to every workload (1.0 = the sizes of issue #8).
    pub scale: f64,
    pub workloads: Vec<Workload>,
}

/// One workload (W1 at one QPS setting, W2, ...), run against both.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Workload {
    /// Short id shown in tables and charts, e.g. "W1 qps 20/30".
    pub id: String,
    /// What ran, with its actual sizes.
    pub description: String,
    pub metrics: Vec<Metric>,
    /// Free-form notes (e.g. the simulator's own CPU).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One figure measured on both implementations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Metric {
    /// e.g. "wall time", "controller CPU", "peak RSS", "requests/pod".
    pub name: String,
    /// e.g. "s", "CPU-s", "MiB", "req/pod", "pods/s".
    pub unit: String,
    pub upstream: f64,
    pub kcm_rs: f64,
    /// True when a smaller value is better (time, CPU, memory, requests);
    /// false for throughput.
    pub lower_is_better: bool,
    /// The project's target for kcm-rs / upstream, if any: "at most" this
    /// ratio when `lower_is_better`, else "at least".
    pub target_ratio: Option<f64>,
}

impl Metric {
    /// kcm-rs / upstream; NaN when upstream is zero.
    pub fn ratio(&self) -> f64 {
        if self.upstream == 0.0 {
            f64::NAN
        } else {
            self.kcm_rs / self.upstream
        }
    }

    /// Whether the target is met; None without a target or a ratio.
    pub fn meets_target(&self) -> Option<bool> {
        let t = self.target_ratio?;
        let r = self.ratio();
        if r.is_nan() {
            return None;
        }
        Some(if self.lower_is_better { r <= t } else { r >= t })
    }
}

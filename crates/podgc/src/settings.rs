//! The pod garbage collector's settings and their flags (flattened into
//! the binary's; KCM's names and defaults, and two of upstream's constants
//! as hidden flags so tests run fast).

use std::time::Duration;

use kcm_runtime::flag_values::parse_go_duration;

#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PodGcSettings {
    /// Number of terminated pods that can exist before the terminated pod
    /// garbage collector deletes them; 0 disables that part of pod GC.
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: i64,

    /// Pod GC loop period (upstream: a 20 s constant). For tests.
    #[arg(long, default_value = "20s", value_parser = parse_go_duration, hide = true)]
    pub pod_gc_period: Duration,

    /// Pod GC quarantine before an orphaned pod is removed (upstream: a 40 s
    /// constant). For tests.
    #[arg(long, default_value = "40s", value_parser = parse_go_duration, hide = true)]
    pub pod_gc_quarantine: Duration,
}

impl Default for PodGcSettings {
    fn default() -> Self {
        PodGcSettings {
            terminated_pod_gc_threshold: 12_500,
            pod_gc_period: Duration::from_secs(20),
            pod_gc_quarantine: Duration::from_secs(40),
        }
    }
}

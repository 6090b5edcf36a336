//! The disruption controller's settings and their flags (flattened into
//! the binary's; KCM's names and defaults, and one of upstream's constants
//! as a hidden flag so tests run fast).

use std::time::Duration;

use kcm_runtime::flag_values::parse_go_duration;

#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DisruptionSettings {
    /// Number of PodDisruptionBudgets synced concurrently (KCM 1.37's flag;
    /// accepted on every minor). 0 is refused: upstream accepts it and then
    /// never syncs a PDB.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrent_disruption_syncs: u32,

    /// How long a DisruptionTarget condition may stay on a pod that is not
    /// being deleted (upstream: a 2 min constant). For tests.
    #[arg(long, default_value = "2m", value_parser = parse_go_duration, hide = true)]
    pub stale_pod_disruption_timeout: Duration,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        DisruptionSettings {
            concurrent_disruption_syncs: 1,
            stale_pod_disruption_timeout: Duration::from_secs(120),
        }
    }
}

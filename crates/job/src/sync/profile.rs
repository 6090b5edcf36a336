//! The version profile: everything in which the Job controllers of KCM
//! 1.34 to 1.37 differ, decided once from the minor kcm-rs behaves as and
//! its feature gates, and read by the stages and the executor. Nowhere else
//! does the Job controller look at the version.
//!
//! | difference | from | gate |
//! |---|---|---|
//! | suspending clears `status.startTime` | 1.35 (off), 1.36 (on) | `MutableSchedulingDirectivesForSuspendedJobs` |
//! | read-your-writes check before a sync (`controller::consistency`) | 1.36 | `StaleControllerConsistencyJob` |
//!
//! What kcm-rs does the newer way on every minor (listed deviations in the
//! README): `status.active` while creation waits for back-off (1.36), the
//! per-pod retry of a failed finalizer removal in the sweep and the
//! expectations cleared on Job delete (1.37). Gate removals (1.37) change
//! nothing at the defaults.

use kcm_features::{Feature, FeatureGates};

/// Options that change decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `JobPodFailurePolicy`: off means `spec.podFailurePolicy` is ignored.
    pub pod_failure_policy: bool,
    /// Suspending a Job (JobSuspended newly True) clears `status.startTime`.
    pub clear_start_time_on_suspend: bool,
    /// Skip a sync until the informers have seen the controller's own last
    /// writes for the Job (job_controller_stale_sync_skips_total).
    pub read_your_writes: bool,
}

impl Config {
    /// The profile of `gates`' minor with those gates.
    pub fn new(gates: &FeatureGates) -> Config {
        Config {
            pod_failure_policy: gates.enabled(Feature::JobPodFailurePolicy),
            clear_start_time_on_suspend: gates
                .enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs),
            read_your_writes: gates.enabled(Feature::StaleControllerConsistencyJob),
        }
    }
}

impl Default for Config {
    /// The oldest supported minor at its defaults.
    fn default() -> Self {
        Config::new(&FeatureGates::default())
    }
}

#[cfg(test)]
mod tests {
    use kcm_features::KubeVersion;

    use super::*;

    #[test]
    fn each_minor_has_its_profile() {
        let at = |m| Config::new(&FeatureGates::defaults(KubeVersion::new(m).expect("v")));
        let rows: Vec<(bool, bool)> = [34, 35, 36, 37]
            .map(at)
            .iter()
            .map(|c| (c.clear_start_time_on_suspend, c.read_your_writes))
            .collect();
        assert_eq!(
            rows,
            [(false, false), (false, false), (true, true), (true, true)]
        );
        let on35 = FeatureGates::parse_for(
            KubeVersion::new(35).expect("v"),
            "MutableSchedulingDirectivesForSuspendedJobs=true",
        )
        .expect("gates");
        assert!(Config::new(&on35).clear_start_time_on_suspend);
        assert!(Config::default().pod_failure_policy);
    }
}

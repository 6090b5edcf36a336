//! The gates kcm-rs's controllers read: its own two, and the upstream gates
//! the four KCM controllers read in some supported minor.

use std::fmt;

use crate::table::Table;
use crate::{Emulation, KubeVersion};

/// A feature gate kcm-rs reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// kcm-rs's own: Job `spec.podFailurePolicy` (KEP-3329) is applied.
    /// (Upstream's gate went GA in 1.31 and is gone from 1.34's KCM.)
    JobPodFailurePolicy,
    /// kcm-rs's own: the `DisruptionTarget` condition before deletes, and
    /// the disruption controller's stale-condition reset.
    PodDisruptionConditions,
    /// Jobs with `spec.managedBy` set to another controller are skipped.
    JobManagedBy,
    JobBackoffLimitPerIndex,
    JobPodReplacementPolicy,
    JobSuccessPolicy,
    SidecarContainers,
    /// The Job controller labels pods with their completion index (GA and
    /// locked from 1.32; settable only when emulating 1.31).
    PodIndexLabel,
    /// `observedGeneration` on the conditions pod GC and taint eviction add.
    PodObservedGenerationTracking,
    /// 1.35+: suspending a Job clears `status.startTime`.
    MutableSchedulingDirectivesForSuspendedJobs,
    /// 1.36+: the Job sync is skipped until the informers saw the
    /// controller's own last writes.
    StaleControllerConsistencyJob,
    /// 1.35+ (alpha): `Lt`/`Gt` toleration operators.
    TaintTolerationComparisonOperators,
    /// 1.36+ (alpha): Jobs create scheduling Workloads and PodGroups
    /// (`scheduling.k8s.io/v1alpha2` on 1.36, `v1beta1` on 1.37).
    WorkloadWithJob,
}

/// What kcm-rs does with a gate's non-default value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Both values are implemented.
    Both,
    /// Only the default of each minor; the other value is refused (a
    /// listed deviation) rather than silently ignored.
    DefaultOnly,
}

impl Feature {
    /// Every gate kcm-rs reads, in name order.
    pub const ALL: [Feature; 13] = [
        Feature::JobBackoffLimitPerIndex,
        Feature::JobManagedBy,
        Feature::JobPodFailurePolicy,
        Feature::JobPodReplacementPolicy,
        Feature::JobSuccessPolicy,
        Feature::MutableSchedulingDirectivesForSuspendedJobs,
        Feature::PodDisruptionConditions,
        Feature::PodIndexLabel,
        Feature::PodObservedGenerationTracking,
        Feature::SidecarContainers,
        Feature::StaleControllerConsistencyJob,
        Feature::TaintTolerationComparisonOperators,
        Feature::WorkloadWithJob,
    ];

    /// The gate's name as written on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::JobPodFailurePolicy => "JobPodFailurePolicy",
            Feature::PodDisruptionConditions => "PodDisruptionConditions",
            Feature::JobManagedBy => "JobManagedBy",
            Feature::JobBackoffLimitPerIndex => "JobBackoffLimitPerIndex",
            Feature::JobPodReplacementPolicy => "JobPodReplacementPolicy",
            Feature::JobSuccessPolicy => "JobSuccessPolicy",
            Feature::SidecarContainers => "SidecarContainers",
            Feature::PodIndexLabel => "PodIndexLabel",
            Feature::PodObservedGenerationTracking => "PodObservedGenerationTracking",
            Feature::MutableSchedulingDirectivesForSuspendedJobs => {
                "MutableSchedulingDirectivesForSuspendedJobs"
            }
            Feature::StaleControllerConsistencyJob => "StaleControllerConsistencyJob",
            Feature::TaintTolerationComparisonOperators => "TaintTolerationComparisonOperators",
            Feature::WorkloadWithJob => "WorkloadWithJob",
        }
    }

    /// kcm-rs's own gates, which no upstream KCM has (a listed deviation:
    /// upstream rejects them as unrecognized).
    pub const fn is_own(self) -> bool {
        matches!(
            self,
            Feature::JobPodFailurePolicy | Feature::PodDisruptionConditions
        )
    }

    /// What kcm-rs implements of the gate in `version`'s KCM.
    pub fn support(self, version: KubeVersion) -> Support {
        match self {
            // Both minors that have it (1.36: v1alpha2, 1.37: v1beta1).
            Feature::WorkloadWithJob if version.at_least(36) => Support::Both,
            Feature::JobPodFailurePolicy
            | Feature::PodDisruptionConditions
            | Feature::MutableSchedulingDirectivesForSuspendedJobs
            | Feature::StaleControllerConsistencyJob
            | Feature::JobManagedBy
            | Feature::JobBackoffLimitPerIndex
            | Feature::JobPodReplacementPolicy
            | Feature::JobSuccessPolicy => Support::Both,
            _ => Support::DefaultOnly,
        }
    }

    /// Why a gate implemented on some minor is not on `version`.
    /// None today: every gate implemented on one supported minor is on all
    /// minors that have it (`WorkloadWithJob` was 1.37-only until 1.36's
    /// v1alpha2 objects were implemented).
    pub fn unsupported_why(self, version: KubeVersion) -> Option<&'static str> {
        let _ = (self, version);
        None
    }

    /// The value at `version` when not set and not emulating.
    pub fn default_at(self, version: KubeVersion) -> bool {
        self.default_in(Emulation::of(version))
    }

    /// The value at an emulation version when not set: the table's
    /// default; kcm-rs's own gates are on; a gate the binary registers that
    /// is PRE-ALPHA there is off; a gate the binary does not have is on if
    /// it was removed after going GA, off if it does not exist yet.
    pub fn default_in(self, emulation: Emulation) -> bool {
        if self.is_own() {
            return true;
        }
        let table = Table::at(emulation);
        match table.get(self.name()) {
            Some(g) => g.default,
            None if table.is_known(self.name()) => false,
            None => matches!(
                self,
                Feature::JobBackoffLimitPerIndex
                    | Feature::JobPodReplacementPolicy
                    | Feature::JobSuccessPolicy
                    | Feature::SidecarContainers
                    | Feature::PodIndexLabel
            ),
        }
    }

    /// Whether `--feature-gates` of `version` knows the gate.
    pub fn exists_at(self, version: KubeVersion) -> bool {
        self.exists_in(Emulation::of(version))
    }

    /// Whether `--feature-gates` takes the gate at an emulation version
    /// (PRE-ALPHA gates are refused there).
    pub fn exists_in(self, emulation: Emulation) -> bool {
        self.is_own() || Table::at(emulation).get(self.name()).is_some()
    }

    /// Looks a gate up by its exact (case-sensitive) name.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

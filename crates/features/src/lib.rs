//! Feature gates of kcm-rs, as kube-controller-manager of the cluster's
//! minor (1.34 to 1.37) takes them with `--feature-gates`, at the version
//! `--emulated-version` names (that minor's own, or older down to its
//! floor: binary - 3, never below 1.31).
//!
//! Layout: [`version`] (the minor kcm-rs behaves as and the one it
//! emulates), [`table`] (every gate each minor's KCM registers, from
//! `gates/*.txt`, and as an older minor had it), [`feature`] (the gates
//! kcm-rs's controllers read, and which values kcm-rs implements),
//! [`gates`] (parsing and upstream's checks).
//!
//! Every gate name the minor's KCM accepts is accepted; the ones no kcm-rs
//! controller reads are ignored ([`FeatureGates::ignored`]). Locked gates,
//! unknown (and removed) names and, from 1.35, unmet dependencies are
//! refused with component-base's messages. kcm-rs adds its own two gates,
//! `JobPodFailurePolicy` and `PodDisruptionConditions` (on by default), and
//! refuses a value of a gate it reads that it does not implement.
//!
//! ```
//! use kcm_features::{Feature, FeatureGates, KubeVersion};
//!
//! let v = KubeVersion::new(36).unwrap();
//! let gates = FeatureGates::parse_for(v, "JobPodFailurePolicy=false,StaleControllerConsistencyJob=false").unwrap();
//! assert!(!gates.enabled(Feature::JobPodFailurePolicy));
//! assert!(gates.enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
//! assert!(FeatureGates::parse_for(v, "JobManagedBy=false").is_err()); // locked in 1.36
//! ```

pub mod feature;
pub mod gates;
pub mod table;
pub mod version;

pub use feature::{Feature, Support};
pub use gates::{FeatureGateError, FeatureGates};
pub use version::{ChooseError, Chosen, Emulation, KubeVersion, VersionError};

#[cfg(test)]
mod emulation_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KubeVersion {
        KubeVersion::new(minor).unwrap()
    }

    fn err(minor: u32, value: &str) -> String {
        FeatureGates::parse_for(v(minor), value)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn defaults_follow_the_minor() {
        let g = FeatureGates::default();
        assert!(g.enabled(Feature::JobPodFailurePolicy));
        assert!(g.enabled(Feature::PodDisruptionConditions));
        assert!(!g.enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
        assert_eq!(FeatureGates::parse("").unwrap(), g);
        let at = |m| FeatureGates::defaults(v(m));
        assert!(!at(35).enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
        assert!(at(36).enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
        assert!(!at(35).enabled(Feature::StaleControllerConsistencyJob));
        assert!(at(36).enabled(Feature::StaleControllerConsistencyJob));
        // Removed after GA: always on.
        assert!(at(37).enabled(Feature::JobBackoffLimitPerIndex));
        assert!(at(37).enabled(Feature::SidecarContainers));
        assert!(!at(37).enabled(Feature::WorkloadWithJob));
    }

    #[test]
    fn parses_pairs_and_keeps_unset_defaults() {
        let g = FeatureGates::parse("JobPodFailurePolicy=false").unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(g.enabled(Feature::PodDisruptionConditions));
        let g = FeatureGates::parse_for(
            v(34),
            "JobPodFailurePolicy=false,PodDisruptionConditions=false",
        )
        .unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(!g.enabled(Feature::PodDisruptionConditions));
    }

    #[test]
    fn tolerates_whitespace_empty_items_and_the_kube_prefix() {
        let g = FeatureGates::parse_for(
            v(34),
            "  JobPodFailurePolicy = false , ,PodDisruptionConditions=\tF ,",
        )
        .unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(!g.enabled(Feature::PodDisruptionConditions));
        let g = FeatureGates::parse_for(v(36), "kube:StaleControllerConsistencyJob=false").unwrap();
        assert!(!g.enabled(Feature::StaleControllerConsistencyJob));
        assert_eq!(
            err(36, "kube:AtomicFIFO=true,JobManagedBy=true"),
            "set kube feature gates with default empty prefix or kube: prefix consistently, do not mix use"
        );
        assert_eq!(
            err(36, "wardle:Foo=true"),
            "component not registered: wardle"
        );
    }

    #[test]
    fn last_value_wins() {
        let g = FeatureGates::parse("JobPodFailurePolicy=false,JobPodFailurePolicy=true").unwrap();
        assert!(g.enabled(Feature::JobPodFailurePolicy));
    }

    #[test]
    fn accepts_every_go_bool_spelling_and_no_other() {
        for s in ["1", "t", "T", "TRUE", "true", "True"] {
            let g = FeatureGates::parse(&format!(
                "PodDisruptionConditions=false,PodDisruptionConditions={s}"
            ));
            assert!(g.unwrap().enabled(Feature::PodDisruptionConditions), "{s}");
        }
        for s in ["0", "f", "F", "FALSE", "false", "False"] {
            let g = FeatureGates::parse(&format!("PodDisruptionConditions={s}"));
            assert!(!g.unwrap().enabled(Feature::PodDisruptionConditions), "{s}");
        }
        for s in ["yes", "on", "tRUE", "2", "", "truee", "-1"] {
            let e = FeatureGates::parse(&format!("JobPodFailurePolicy={s}")).unwrap_err();
            assert_eq!(
                e,
                FeatureGateError::InvalidValue {
                    name: "JobPodFailurePolicy".into(),
                    value: s.into()
                }
            );
        }
    }

    #[test]
    fn every_gate_of_the_minor_is_accepted_and_unknown_or_removed_ones_are_not() {
        // Gates no kcm-rs controller reads: accepted, ignored.
        let g = FeatureGates::parse_for(v(34), "PodIndexLabel=true,APIResponseCompression=false");
        assert_eq!(g.unwrap().ignored(), ["APIResponseCompression"]);
        // Removed in 1.35: unrecognized, as upstream.
        assert_eq!(
            err(35, "PodIndexLabel=true"),
            "unrecognized feature gate: PodIndexLabel"
        );
        assert_eq!(
            err(37, "JobSuccessPolicy=true"),
            "unrecognized feature gate: JobSuccessPolicy"
        );
        assert_eq!(
            err(34, "NoSuchGate=true"),
            "unrecognized feature gate: NoSuchGate"
        );
        assert_eq!(
            err(34, "jobmanagedby=true"),
            "unrecognized feature gate: jobmanagedby"
        );
    }

    #[test]
    fn locked_gates_take_only_their_value() {
        assert!(FeatureGates::parse_for(v(35), "JobManagedBy=true").is_ok());
        assert_eq!(
            err(35, "JobManagedBy=false"),
            "cannot set feature gate JobManagedBy to false, feature is locked to true"
        );
        assert_eq!(
            err(34, "SidecarContainers=false,PodIndexLabel=false"),
            "[cannot set feature gate PodIndexLabel to false, feature is locked to true, \
             cannot set feature gate SidecarContainers to false, feature is locked to true]"
        );
    }

    #[test]
    fn dependencies_hold_from_1_35() {
        assert_eq!(
            err(36, "AtomicFIFO=false"),
            "[StaleControllerConsistencyDaemonSet is enabled, but depends on features that are disabled: [AtomicFIFO], \
             StaleControllerConsistencyJob is enabled, but depends on features that are disabled: [AtomicFIFO], \
             StaleControllerConsistencyReplicaSet is enabled, but depends on features that are disabled: [AtomicFIFO], \
             StaleControllerConsistencyStatefulSet is enabled, but depends on features that are disabled: [AtomicFIFO]]"
        );
        let off = "AtomicFIFO=false,StaleControllerConsistencyDaemonSet=false,StaleControllerConsistencyJob=false,\
                   StaleControllerConsistencyReplicaSet=false,StaleControllerConsistencyStatefulSet=false";
        let g = FeatureGates::parse_for(v(36), off).unwrap();
        assert!(!g.enabled(Feature::StaleControllerConsistencyJob));
    }

    #[test]
    fn values_kcm_rs_does_not_implement_are_refused() {
        let e = err(34, "PodObservedGenerationTracking=false");
        assert_eq!(
            e,
            "kcm-rs implements PodObservedGenerationTracking only as true, not false (a gate of kube-controller-manager 1.34 that kcm-rs reads)"
        );
        assert!(err(35, "TaintTolerationComparisonOperators=true").contains("only as false"));
        // Through AllAlpha: kept at the default, not refused.
        let g = FeatureGates::parse_for(v(35), "AllAlpha=true").unwrap();
        assert!(!g.enabled(Feature::TaintTolerationComparisonOperators));
        assert!(g.enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
        let g = FeatureGates::parse_for(v(36), "AllBeta=false").unwrap();
        assert!(!g.enabled(Feature::StaleControllerConsistencyJob));
        assert!(g.enabled(Feature::JobPodFailurePolicy));
    }

    #[test]
    fn workload_with_job_is_implemented_on_1_36_and_1_37() {
        let both = "WorkloadWithJob=true,GenericWorkload=true";
        let g = FeatureGates::parse_for(v(37), both).unwrap();
        assert!(g.enabled(Feature::WorkloadWithJob));
        assert!(g.ignored().contains(&"GenericWorkload"));
        assert!(
            !FeatureGates::parse_for(v(37), "WorkloadWithJob=false")
                .unwrap()
                .enabled(Feature::WorkloadWithJob)
        );
        // As upstream: the dependency is checked (GenericWorkload is off by
        // default).
        assert_eq!(
            err(37, "WorkloadWithJob=true"),
            "WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]"
        );
        // 1.36 (scheduling.k8s.io/v1alpha2) takes it too, with the same
        // dependency.
        let g = FeatureGates::parse_for(v(36), both).unwrap();
        assert!(g.enabled(Feature::WorkloadWithJob));
        assert!(!FeatureGates::defaults(v(36)).enabled(Feature::WorkloadWithJob));
        assert_eq!(
            err(36, "WorkloadWithJob=true"),
            "WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]"
        );
        // Not there before 1.36, as upstream.
        assert!(FeatureGates::parse_for(v(35), both).is_err());
        // AllAlpha reaches it on 1.37 as upstream's.
        let g = FeatureGates::parse_for(v(37), "AllAlpha=true,AllBeta=true").unwrap();
        assert!(g.enabled(Feature::WorkloadWithJob));
    }

    #[test]
    fn malformed_pairs_are_clear_errors() {
        assert_eq!(
            FeatureGates::parse("JobPodFailurePolicy")
                .unwrap_err()
                .to_string(),
            "missing bool value for JobPodFailurePolicy"
        );
        assert!(matches!(
            FeatureGates::parse(" =true").unwrap_err(),
            FeatureGateError::MissingName { .. }
        ));
        assert!(matches!(
            FeatureGates::parse("JobPodFailurePolicy=true=false").unwrap_err(),
            FeatureGateError::InvalidValue { .. }
        ));
    }

    #[test]
    fn apply_is_all_or_nothing() {
        let mut g = FeatureGates::default();
        assert!(g.apply("JobPodFailurePolicy=false,Nope=maybe").is_err());
        assert_eq!(g, FeatureGates::default());
        g.apply("JobPodFailurePolicy=false").unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
    }

    #[test]
    fn display_lists_the_read_gates_of_the_minor_and_round_trips() {
        let g = FeatureGates::defaults(v(37)).with(Feature::PodDisruptionConditions, false);
        let shown = g.to_string();
        assert!(shown.contains("PodDisruptionConditions=false"), "{shown}");
        assert!(
            shown.contains("StaleControllerConsistencyJob=true"),
            "{shown}"
        );
        assert!(
            !shown.contains("SidecarContainers"),
            "removed in 1.37: {shown}"
        );
        let back = FeatureGates::parse_for(v(37), &shown).unwrap();
        for f in Feature::ALL {
            assert_eq!(back.enabled(f), g.enabled(f), "{f}");
        }
        let old = FeatureGates::defaults(v(34)).to_string();
        assert!(
            old.contains("SidecarContainers=true") && !old.contains("Stale"),
            "{old}"
        );
        assert!(FeatureGates::parse_for(v(34), &old).is_ok());
    }

    #[test]
    fn feature_names_round_trip() {
        for f in Feature::ALL {
            assert_eq!(Feature::from_name(f.name()), Some(f));
            assert_eq!(f.to_string(), f.name());
        }
        assert_eq!(Feature::from_name("Bogus"), None);
        let mut sorted = Feature::ALL.map(Feature::name);
        sorted.sort_unstable();
        assert_eq!(sorted, Feature::ALL.map(Feature::name));
    }
}

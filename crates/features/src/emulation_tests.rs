//! `--emulated-version` and the gates at an emulation version, against
//! component-base's rules and messages (facts in docs/upstream-versions.md
//! §1.2, §1.4 and §3.1).

use crate::{ChooseError, Emulation, Feature, FeatureGates, KubeVersion, Support};

fn kv(minor: u32) -> KubeVersion {
    KubeVersion::new(minor).expect("supported")
}

fn at(binary: u32, minor: u32) -> Emulation {
    Emulation::new(kv(binary), minor).expect("valid emulation")
}

fn err(e: Emulation, gates: &str) -> String {
    FeatureGates::parse_at(e, gates)
        .expect_err("refused")
        .to_string()
}

#[test]
fn the_floor_is_binary_minus_three_never_below_1_31() {
    let floors = KubeVersion::ALL.map(KubeVersion::emulation_floor);
    assert_eq!(floors, [31, 32, 33, 34]);
    let pairs: Vec<String> = Emulation::all()
        .map(|e| format!("{}@{e}", e.binary()))
        .collect();
    assert_eq!(pairs.len(), 16);
    assert_eq!(pairs[0], "1.34@1.31");
    assert!(at(34, 34) == Emulation::of(kv(34)) && !at(34, 34).is_emulating());
    assert_eq!(at(34, 32).min_compatibility(), 31);
    assert_eq!(at(34, 31).min_compatibility(), 31);
}

#[test]
fn out_of_range_emulation_is_refused_with_validates_messages() {
    let e = |b, m| Emulation::new(kv(b), m).expect_err("refused").to_string();
    // Both checks of EffectiveVersion.Validate, aggregated, as KCM 1.37
    // prints them for 1.33 (docs/upstream-versions.md §3.1).
    assert_eq!(
        e(37, 33),
        "[emulation version 1.33 is not between [1.34, 1.37.0], \
         minCompatibilityVersion version 1.34 is not between [1.34, 1.33]]"
    );
    assert_eq!(
        e(34, 30),
        "[emulation version 1.30 is not between [1.31, 1.34.0], \
         minCompatibilityVersion version 1.31 is not between [1.31, 1.30]]"
    );
    assert_eq!(
        e(34, 35),
        "emulation version 1.35 is not between [1.31, 1.34.0]"
    );
}

#[test]
fn the_server_is_the_binary_and_the_flag_may_emulate_older() {
    let choose = |flag, server| Emulation::choose(flag, server);
    let ok = |flag, server| {
        let c = choose(flag, server).expect("chosen");
        (
            c.emulation.binary().minor(),
            c.emulation.minor(),
            c.warning.is_some(),
        )
    };
    assert_eq!(ok(None, "v1.34.4"), (34, 34, false));
    assert_eq!(ok(Some("1.32"), "v1.34.4"), (34, 32, false));
    assert_eq!(ok(Some("kube=1.31"), "v1.34.4"), (34, 31, false));
    assert_eq!(ok(Some("1.32.0"), "v1.34.4"), (34, 32, false));
    assert_eq!(ok(Some("1.35"), "v1.37.0"), (37, 35, false));
    // kcm-rs's override: a supported minor newer than the server, or any
    // supported minor when the server's is not, names the binary.
    assert_eq!(ok(Some("1.36"), "v1.34.4"), (36, 36, true));
    assert_eq!(ok(Some("1.35"), "v1.39.0"), (35, 35, true));
    assert_eq!(ok(Some("1.34"), "garbage"), (34, 34, true));

    let no = |flag, server| choose(flag, server).expect_err("refused").to_string();
    assert_eq!(
        no(Some("1.33"), "v1.37.1"),
        "--emulated-version=1.33: [emulation version 1.33 is not between [1.34, 1.37.0], \
         minCompatibilityVersion version 1.34 is not between [1.34, 1.33]]"
    );
    assert_eq!(
        no(Some("1.40"), "v1.34.4"),
        "--emulated-version=1.40: Kubernetes 1.40 is not supported: kcm-rs behaves as \
         kube-controller-manager 1.34 to 1.37"
    );
    assert_eq!(
        no(Some("1.32"), "v1.39.0"),
        "--emulated-version=1.32: Kubernetes 1.32 is not supported: kcm-rs behaves as \
         kube-controller-manager 1.34 to 1.37"
    );
    assert_eq!(
        no(Some("1.34.1"), "v1.34.4"),
        "--emulated-version=1.34.1: patch version not allowed, got: kube=1.34.1"
    );
    assert_eq!(
        no(Some("wardle=1.2"), "v1.34.4"),
        "--emulated-version=wardle=1.2: component not registered: wardle"
    );
    assert!(no(Some("soon"), "v1.34.4").contains("cannot read a Kubernetes version"));
    assert!(matches!(
        choose(None, "v1.33.2"),
        Err(ChooseError::Server { .. })
    ));
}

#[test]
fn a_server_one_minor_newer_than_the_newest_is_kcms_skew() {
    let newest = KubeVersion::NEWEST.minor();
    let next = format!("v1.{}.0", newest + 1);
    let c = Emulation::choose(None, &next).expect("one minor newer is accepted");
    assert_eq!(c.emulation, Emulation::of(KubeVersion::NEWEST));
    assert_eq!(c.newer_server, Some(newest + 1));
    let w = c.warning.expect("a warning");
    assert!(
        w.contains("one minor newer") && w.contains("upgrade kcm-rs"),
        "{w}"
    );
    // A flag emulates below the newest as on a server of that minor.
    let c = Emulation::choose(Some("1.36"), &format!("v1.{}.2-gke.1", newest + 1)).expect("ok");
    assert_eq!(
        (c.emulation.binary(), c.emulation.minor()),
        (KubeVersion::NEWEST, 36)
    );
    assert_eq!(c.newer_server, Some(newest + 1));
    // Two minors newer, or an unreadable patch, is refused as before.
    for server in [format!("v1.{}.0", newest + 2), format!("v1.{}", newest + 1)] {
        assert!(
            matches!(
                Emulation::choose(None, &server),
                Err(ChooseError::Server { .. })
            ),
            "{server}"
        );
    }
    // A supported server is no skew.
    assert_eq!(
        Emulation::choose(None, "v1.37.1").expect("ok").newer_server,
        None
    );
}

#[test]
fn gates_default_and_lock_as_the_emulated_minor_had_them() {
    let e32 = at(34, 32);
    let d = FeatureGates::defaults_at(e32);
    for f in [
        Feature::JobSuccessPolicy,
        Feature::JobBackoffLimitPerIndex,
        Feature::JobPodReplacementPolicy,
        Feature::JobManagedBy,
    ] {
        assert!(d.enabled(f), "{f} beta and on in 1.32");
    }
    let g = FeatureGates::parse_at(
        e32,
        "JobSuccessPolicy=false,JobBackoffLimitPerIndex=false,JobManagedBy=false",
    )
    .expect("all beta in 1.32");
    assert!(!g.enabled(Feature::JobSuccessPolicy) && !g.enabled(Feature::JobManagedBy));
    assert_eq!(g.version(), kv(34));
    assert_eq!(g.emulation(), e32);
    // JobManagedBy was alpha (off) in 1.31; AllAlpha reaches it there.
    assert!(!FeatureGates::defaults_at(at(34, 31)).enabled(Feature::JobManagedBy));
    let all = FeatureGates::parse_at(at(34, 31), "AllAlpha=true").expect("accepted");
    assert!(all.enabled(Feature::JobManagedBy));
    // Not emulating, 1.34 has them GA and locked (JobManagedBy beta).
    assert_eq!(
        err(at(34, 34), "JobSuccessPolicy=false"),
        "cannot set feature gate JobSuccessPolicy to false, feature is locked to true"
    );
    assert!(FeatureGates::parse_at(at(34, 34), "JobManagedBy=false").is_ok());
    assert!(FeatureGates::parse_at(at(34, 33), "JobPodReplacementPolicy=false").is_ok());
    assert_eq!(
        err(at(34, 33), "JobBackoffLimitPerIndex=false"),
        "cannot set feature gate JobBackoffLimitPerIndex to false, feature is locked to true"
    );
    // Both off: Jobs finish without the interim conditions, as upstream's.
    let both = FeatureGates::parse_at(e32, "JobManagedBy=false,JobPodReplacementPolicy=false")
        .expect("accepted");
    assert!(
        !both.enabled(Feature::JobManagedBy) && !both.enabled(Feature::JobPodReplacementPolicy)
    );
    // 1.31 (JobManagedBy alpha, off) with JobPodReplacementPolicy off: both
    // off, as KCM 1.34 emulating 1.31 takes it.
    assert!(FeatureGates::parse_at(at(34, 31), "JobPodReplacementPolicy=false").is_ok());
    // 1.35 emulating 1.34: JobManagedBy beta again, so it may be turned off.
    assert!(FeatureGates::parse_at(at(35, 34), "JobManagedBy=false").is_ok());
    assert!(FeatureGates::parse_at(at(35, 35), "JobManagedBy=false").is_err());
}

#[test]
fn pre_alpha_and_removed_gates_are_refused() {
    assert_eq!(
        err(at(34, 32), "PodObservedGenerationTracking=true"),
        "cannot set feature gate PodObservedGenerationTracking to true, feature is PreAlpha at emulated version 1.32"
    );
    assert_eq!(
        err(at(37, 34), "WorkloadWithJob=false"),
        "cannot set feature gate WorkloadWithJob to false, feature is PreAlpha at emulated version 1.34, \
         min compatibility version 1.34"
    );
    // Gone from the binary: unknown whatever the emulation.
    assert_eq!(
        err(at(37, 34), "JobSuccessPolicy=false"),
        "unrecognized feature gate: JobSuccessPolicy"
    );
    // PRE-ALPHA gates are off, even ones kcm-rs honours both ways.
    let g = FeatureGates::defaults_at(at(37, 35));
    assert!(!g.enabled(Feature::StaleControllerConsistencyJob));
    assert!(!g.enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs));
    assert!(FeatureGates::defaults_at(at(37, 36)).enabled(Feature::StaleControllerConsistencyJob));
    // The dependency StaleControllerConsistencyJob -> AtomicFIFO holds
    // only where both exist.
    assert!(FeatureGates::parse_at(at(37, 35), "AtomicFIFO=false").is_err());
    assert!(FeatureGates::parse_at(at(36, 36), "AtomicFIFO=false").is_err());
}

#[test]
fn default_only_gates_run_as_the_binarys_default_and_say_so() {
    let g = FeatureGates::defaults_at(at(34, 32));
    assert_eq!(
        Feature::PodObservedGenerationTracking.support(KubeVersion::NEWEST),
        Support::DefaultOnly
    );
    assert!(!Feature::PodObservedGenerationTracking.default_in(at(34, 32)));
    assert!(g.enabled(Feature::PodObservedGenerationTracking));
    assert_eq!(
        g.emulation_deviations(),
        [(Feature::PodObservedGenerationTracking, true)]
    );
    assert!(
        FeatureGates::defaults(kv(34))
            .emulation_deviations()
            .is_empty()
    );
    // Alpha in 1.33, so settable there; kcm-rs takes only its own value.
    assert!(FeatureGates::parse_at(at(34, 33), "PodObservedGenerationTracking=true").is_ok());
    assert!(
        err(at(34, 33), "PodObservedGenerationTracking=false")
            .starts_with("kcm-rs implements PodObservedGenerationTracking only as true")
    );
    // Beta (not locked) in 1.31: the Job controller labels pods with it.
    assert!(err(at(34, 31), "PodIndexLabel=false").starts_with("kcm-rs implements PodIndexLabel"));
    assert!(err(at(34, 32), "PodIndexLabel=false").contains("locked to true"));
}

#[test]
fn display_round_trips_at_an_emulation_version() {
    let e = at(34, 32);
    let g = FeatureGates::defaults_at(e).with(Feature::JobSuccessPolicy, false);
    let shown = g.to_string();
    assert!(shown.contains("JobSuccessPolicy=false"), "{shown}");
    assert!(
        !shown.contains("PodObservedGenerationTracking"),
        "PRE-ALPHA: {shown}"
    );
    let back = FeatureGates::parse_at(e, &shown).expect("round trip");
    for f in Feature::ALL {
        assert_eq!(back.enabled(f), g.enabled(f), "{f}");
    }
}

#[test]
fn at_version_applies_a_requested_emulation() {
    let g = FeatureGates::default()
        .emulating(32)
        .with(Feature::JobSuccessPolicy, false);
    assert_eq!(g.emulation(), at(34, 32));
    let on37 = g.clone().at_version(kv(37));
    assert_eq!(
        on37.emulation(),
        Emulation::of(kv(37)),
        "37 cannot emulate 1.32"
    );
    let on35 = g.at_version(kv(35));
    assert_eq!(on35.emulation(), at(35, 32));
    assert!(!on35.enabled(Feature::JobSuccessPolicy));
}

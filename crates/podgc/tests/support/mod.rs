//! Shared pieces of pod GC's end-to-end and differential tests: starting
//! ours (fast period and quarantine) and the scenarios both run.

#![allow(dead_code)]

pub mod scenarios;

use std::time::Duration;

use kcm_e2e::ControlPlane;
use kcm_e2e::in_process::{self, InProcess};
use kcm_features::FeatureGates;
use kcm_podgc::PodGcSettings;
use kcm_runtime::controller::Settings;

/// Ours with upstream's threshold semantics but a 500 ms period and a 2 s
/// quarantine (upstream's are 20 s and 40 s constants).
pub fn fast(threshold: i64) -> Settings {
    Settings::default().with(PodGcSettings {
        terminated_pod_gc_threshold: threshold,
        pod_gc_period: Duration::from_millis(500),
        pod_gc_quarantine: Duration::from_secs(2),
    })
}

pub async fn start_ours(cp: &ControlPlane, settings: Settings, gates: FeatureGates) -> InProcess {
    in_process::start(cp, &[kcm_podgc::SPEC], settings, gates)
        .await
        .expect("pod GC started")
}

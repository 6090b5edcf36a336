//! Shared pieces of pod GC's end-to-end and differential tests: starting
//! ours (fast period and quarantine) and the scenarios both run.

#![allow(dead_code)]

pub mod scenarios;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use kcm_e2e::history::PodHistory;
use kcm_e2e::in_process::{self, InProcess};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
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

/// What one run of a scenario showed.
pub struct Run {
    pub outcomes: BTreeMap<String, scenarios::Outcome>,
    pub history: PodHistory,
    /// From the controller's start until the pods that must go were gone.
    pub took: Duration,
}

/// Sets a scenario up on a control plane of its own, starts upstream's pod
/// GC (`--terminated-pod-gc-threshold`) or ours (the same threshold,
/// [`fast`]) and observes the outcome.
pub async fn run<F, Fut>(upstream: bool, threshold: i64, setup: F) -> Run
where
    F: FnOnce(kube::Client, String) -> Fut,
    Fut: Future<Output = scenarios::Scenario>,
{
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "podgc").await.expect("ns");
    let history = PodHistory::start(&client, &ns.name).await;
    let scenario = setup(client.clone(), ns.name.clone()).await;
    let started = Instant::now();
    let _upstream = upstream.then(|| {
        UpstreamKcm::start(
            &cp,
            &["pod-garbage-collector-controller"],
            &[&format!("--terminated-pod-gc-threshold={threshold}")],
        )
        .expect("upstream KCM")
    });
    let _ours = if upstream {
        None
    } else {
        Some(start_ours(&cp, fast(threshold), FeatureGates::default()).await)
    };
    // Give either side time to do anything more it would do: a period.
    let settle = Duration::from_secs(if upstream { 22 } else { 3 });
    let outcomes = scenarios::observe(&client, &ns.name, &history, &scenario, settle).await;
    Run {
        outcomes,
        took: started.elapsed(),
        history,
    }
}

//! The disruption controller against the real API server, one private
//! control plane per test (the controller watches every namespace): the
//! scenarios of the differential suite (`support/scenarios.rs`) against
//! ours, then what only a step-by-step test shows (status as pods come and
//! go, evictions, the stale-condition reset).

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::in_process::{self, InProcess};
use kcm_e2e::kubelet::{add_pod_condition, condition, run_pod};
use kcm_e2e::wait::wait_for;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::{Feature, FeatureGates};
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::EvictParams;
use serde_json::json;

use support::scenarios;
use support::*;

async fn ours(cp: &ControlPlane, settings: Settings, gates: FeatureGates) -> InProcess {
    in_process::init_tracing();
    in_process::start(cp, &[kcm_disruption::SPEC], settings, gates)
        .await
        .expect("disruption controller started")
}

/// A control plane with our controller, a namespace named after `prefix`,
/// and in it the ReplicaSet `web` of 3 Ready pods under the PDB `web`
/// (minAvailable 2).
struct Web {
    cp: ControlPlane,
    ctl: InProcess,
    c: kube::Client,
    ns: String,
    rs: ReplicaSet,
}

async fn web(prefix: &str) -> Web {
    let cp = ControlPlane::start().expect("control plane");
    let c = cp.client().await.expect("client");
    let ns = TestNamespace::create(&c, prefix).await.expect("ns").name;
    let ctl = ours(&cp, Settings::default(), FeatureGates::default()).await;
    let rs = replica_set(&c, &ns, "web", "web", 3).await;
    ready_pods(&c, &ns, "web", 3, &rs).await;
    pdb(
        &c,
        &ns,
        "web",
        json!({ "minAvailable": 2, "selector": sel("web") }),
    )
    .await;
    Web { cp, ctl, c, ns, rs }
}

#[tokio::test]
async fn the_shared_scenarios_settle_as_expected() {
    let cp = ControlPlane::start().expect("control plane");
    let c = cp.client().await.expect("client");
    let _ctl = ours(&cp, Settings::default(), FeatureGates::default()).await;
    let runs = scenarios::SCENARIOS.iter().map(|s| {
        let c = c.clone();
        async move { (s, scenarios::run(&c, s).await) }
    });
    for (s, (o, _)) in futures::future::join_all(runs).await {
        scenarios::expect(s, &o);
    }
}

#[tokio::test]
async fn pdb_status_over_replicaset_and_deployment_pods() {
    // A ReplicaSet of 3 with its 3 pods Ready; integer minAvailable.
    let Web {
        cp: _cp,
        ctl: _ctl,
        c,
        ns,
        ..
    } = web("pdb-status").await;
    let p = wait_pdb(&c, &ns, "web", "3 healthy, 1 allowed", |p| {
        counts(p) == (3, 2, 3, 1)
    })
    .await;
    assert_eq!(reason(&p).as_deref(), Some("SufficientPods"));
    assert_eq!(
        p.status.as_ref().and_then(|s| s.observed_generation),
        Some(1)
    );

    // A Deployment of 4 whose ReplicaSet has 3 pods so far; 25% unavailable.
    let (_d, drs) = deployment(&c, &ns, "api", "api", 4, 4).await;
    ready_pods(&c, &ns, "api", 3, &drs).await;
    pdb(
        &c,
        &ns,
        "api",
        json!({ "maxUnavailable": "25%", "selector": { "matchLabels": { "app": "api" } } }),
    )
    .await;
    let p = wait_pdb(&c, &ns, "api", "expected 4 from the Deployment", |p| {
        counts(p) == (3, 3, 4, 0)
    })
    .await;
    assert_eq!(reason(&p).as_deref(), Some("InsufficientPods"));
    // The fourth pod comes up: one disruption allowed.
    pod(&c, &ns, "api-3", "api", Some(owner_ref(&drs)), true).await;
    wait_pdb(&c, &ns, "api", "4 healthy", |p| {
        counts(p) == (4, 3, 4, 1) && reason(p).as_deref() == Some("SufficientPods")
    })
    .await;
    // One becomes unready.
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    run_pod(&pods, "api-0", false).await.expect("unready");
    wait_pdb(&c, &ns, "api", "3 healthy again", |p| {
        counts(p) == (3, 3, 4, 0)
    })
    .await;
}

#[tokio::test]
async fn evictions_follow_disruptions_allowed() {
    let Web {
        cp,
        ctl: _ctl,
        c,
        ns,
        rs,
    } = web("pdb-evict").await;
    wait_pdb(&c, &ns, "web", "1 allowed", |p| counts(p).3 == 1).await;

    let pods: Api<Pod> = Api::namespaced(cp.client().await.expect("client"), &ns);
    pods.evict("web-0", &EvictParams::default())
        .await
        .expect("first eviction allowed");
    let refused = pods.evict("web-1", &EvictParams::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 429),
        "second eviction must be refused with 429: {refused:?}"
    );
    // The controller settles on 2 healthy, none allowed, the evicted pod
    // gone from disruptedPods.
    let p = wait_pdb(&c, &ns, "web", "2 healthy", |p| {
        counts(p) == (2, 2, 2, 0)
            && p.status
                .as_ref()
                .is_some_and(|s| s.disrupted_pods.as_ref().is_none_or(|m| m.is_empty()))
    })
    .await;
    assert_eq!(reason(&p).as_deref(), Some("InsufficientPods"));
    // A replacement pod comes up: evictions are allowed again.
    pod(&c, &ns, "web-3", "web", Some(owner_ref(&rs)), true).await;
    wait_pdb(&c, &ns, "web", "1 allowed again", |p| {
        counts(p) == (3, 2, 3, 1)
    })
    .await;
    pods.evict("web-1", &EvictParams::default())
        .await
        .expect("allowed again");
}

async fn stale_scenario(gates: FeatureGates) -> (Pod, Pod) {
    let cp = ControlPlane::start().expect("control plane");
    let c = cp.client().await.expect("client");
    let ns = TestNamespace::create(&c, "stale").await.expect("ns").name;
    let settings = Settings::default().with(kcm_disruption::DisruptionSettings {
        stale_pod_disruption_timeout: Duration::from_secs(3),
        ..Default::default()
    });
    let _ctl = ours(&cp, settings, gates).await;
    pod(&c, &ns, "target", "x", None, true).await;
    pod(&c, &ns, "kubelet", "x", None, true).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    add_pod_condition(
        &pods,
        "target",
        condition(
            "DisruptionTarget",
            true,
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        ),
    )
    .await
    .expect("condition");
    add_pod_condition(
        &pods,
        "kubelet",
        condition(
            "DisruptionTarget",
            true,
            "TerminationByKubelet",
            "node pressure",
        ),
    )
    .await
    .expect("condition");
    let reset = |p: &Pod| {
        kcm_e2e::history::condition(p, "DisruptionTarget").is_some_and(|c| c.status == "False")
    };
    let target = wait_for(&pods, "target", Duration::from_secs(8), "reset", reset).await;
    let target = match target {
        Ok(p) => p,
        Err(_) => pods.get("target").await.expect("pod"),
    };
    (target, pods.get("kubelet").await.expect("pod"))
}

#[tokio::test]
async fn stale_disruption_target_is_reset_after_the_timeout() {
    let started = std::time::Instant::now();
    let (target, kubelet) = stale_scenario(FeatureGates::default()).await;
    let c = kcm_e2e::history::condition(&target, "DisruptionTarget").expect("condition");
    assert_eq!(c.status, "False", "{target:?}");
    assert_eq!(c.reason.as_deref().unwrap_or(""), "");
    assert_eq!(c.message.as_deref().unwrap_or(""), "");
    assert!(started.elapsed() >= Duration::from_secs(3));
    // The reset PUTs the whole status (the cache holds only part of it): the
    // rest of what the kubelet wrote survives.
    let st = target.status.as_ref().expect("status");
    assert!(st.start_time.is_some(), "startTime kept: {st:?}");
    let cs = st.container_statuses.as_deref().unwrap_or_default();
    assert!(
        cs.len() == 1 && cs[0].state.as_ref().is_some_and(|s| s.running.is_some()),
        "containerStatuses kept: {st:?}"
    );
    assert_eq!(
        kcm_e2e::history::condition(&target, "Ready").map(|c| c.status.clone()),
        Some("True".into())
    );
    let k = kcm_e2e::history::condition(&kubelet, "DisruptionTarget").expect("condition");
    assert_eq!(k.status, "True", "TerminationByKubelet is never stale");
}

#[tokio::test]
async fn gate_off_leaves_disruption_target_alone() {
    let mut gates = FeatureGates::default();
    gates.set(Feature::PodDisruptionConditions, false);
    let (target, _) = stale_scenario(gates).await;
    let c = kcm_e2e::history::condition(&target, "DisruptionTarget").expect("condition");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("EvictionByEvictionAPI"));
}

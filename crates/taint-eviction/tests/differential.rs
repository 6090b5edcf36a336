//! Differential tests: every scenario runs at the same time against
//! upstream kube-controller-manager's `taint-eviction-controller` (a
//! separate process on a control plane of its own) and against ours (on
//! another control plane), and both must show the same outcome per pod:
//! deleted or not and how soon, the `DisruptionTarget` condition (status,
//! reason, message, observedGeneration) and whether it came before the
//! delete, and the `TaintManagerEviction` events.

#[path = "differential/shutdown.rs"]
mod shutdown;
mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::in_process::Detached;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kcm_features::FeatureGates;
use kube::Api;

use support::scenarios::{self, Run};
use support::*;

struct Planes {
    upstream: ControlPlane,
    kcm: UpstreamKcm,
    ours: ControlPlane,
    _ours: Detached,
}

/// Evicts a canary pod, so scenarios start only once the controller acts.
pub(crate) fn warm_up(cp: &ControlPlane, who: &str) {
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let who = who.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let client = kcm_e2e::control_plane::client_from_kubeconfig(&kubeconfig)
                .await
                .expect("client");
            let ns = TestNamespace::create(&client, "warm-up")
                .await
                .expect("ns")
                .name;
            let node = format!("{ns}-canary");
            create_node(&client, &node, &["canary"]).await;
            let history = watch_pods(&client, &ns).await;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            pods.create(&Default::default(), &pod("canary", &node, &[]))
                .await
                .expect("create pod");
            assert!(
                history
                    .wait_deleting("canary", None, Duration::from_secs(90))
                    .await,
                "{who}'s controller never evicted the canary"
            );
        });
    })
    .join()
    .expect("warm-up");
}

fn planes() -> &'static Planes {
    static PLANES: OnceLock<Planes> = OnceLock::new();
    PLANES.get_or_init(|| {
        let other = std::thread::spawn(ControlPlane::start);
        let ours = ControlPlane::start().expect("control plane for ours");
        let upstream = other
            .join()
            .expect("control plane thread")
            .expect("control plane for upstream");
        // Upstream's taint-eviction-controller lists a node's pods through a
        // `spec.nodeName` pod index it does not add itself: in KCM the
        // daemonset and node-lifecycle controllers add it (both are on by
        // default). Alone it fails every node update ("Index with name
        // spec.nodeName does not exist"). The daemonset controller brings the
        // index and, with no DaemonSets, does nothing else.
        let kcm = UpstreamKcm::start(
            &upstream,
            &["taint-eviction-controller", "daemonset-controller"],
            &[],
        )
        .expect("upstream kube-controller-manager");
        let ours_controller = start_ours(&ours, FeatureGates::default());
        warm_up(&upstream, "upstream");
        warm_up(&ours, "our");
        Planes {
            upstream,
            kcm,
            ours,
            _ours: ours_controller,
        }
    })
}

/// The run with its namespace replaced by `NS` in event messages, so runs
/// in different namespaces compare.
fn normalized(run: &Run) -> Vec<(String, Observed)> {
    run.pods
        .iter()
        .map(|(name, o)| {
            let mut o = o.clone();
            o.events = o.events.iter().map(|e| e.replace(&run.ns, "NS")).collect();
            (name.clone(), o)
        })
        .collect()
}

fn compare(scenario: &str, upstream: &Run, ours: &Run) {
    let (up, us) = (normalized(upstream), normalized(ours));
    for ((name, u), (_, o)) in up.iter().zip(&us) {
        eprintln!(
            "| {scenario} | {name} | {:?} / {:?} | {} / {} | {:?} / {:?} | {} / {} |",
            o.timing,
            u.timing,
            o.condition.as_ref().map_or("-", |c| c.1.as_str()),
            u.condition.as_ref().map_or("-", |c| c.1.as_str()),
            o.condition_first,
            u.condition_first,
            o.events.len(),
            u.events.len(),
        );
    }
    let names = |r: &[(String, Observed)]| r.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&up), names(&us), "same pods observed");
    for ((name, u), (_, o)) in up.iter().zip(&us) {
        assert!(
            o.matches(u),
            "{scenario}/{name}: ours and upstream differ\nours: {o:#?}\nupstream: {u:#?}\n\
             upstream KCM log tail:\n{}",
            kcm_e2e::control_plane::tail(planes().kcm.log(), 20)
        );
    }
}

macro_rules! differential {
    ($test:ident, $scenario:ident, $expect:ident) => {
        #[tokio::test]
        async fn $test() {
            let p = planes();
            let up_client = p.upstream.client().await.expect("client");
            let our_client = p.ours.client().await.expect("client");
            let (upstream, ours) = tokio::join!(
                scenarios::$scenario(&up_client),
                scenarios::$scenario(&our_client)
            );
            compare(stringify!($scenario), &upstream, &ours);
            scenarios::$expect(&upstream);
            scenarios::$expect(&ours);
        }
    };
}

differential!(untolerated_taint, untolerated, expect_untolerated);
differential!(
    toleration_seconds,
    toleration_seconds,
    expect_toleration_seconds
);
differential!(
    tolerated_forever,
    tolerated_forever,
    expect_tolerated_forever
);
differential!(taint_removed, taint_removed, expect_taint_removed);
differential!(
    pod_deleted_then_namesake,
    pod_deleted_then_namesake,
    expect_pod_deleted_then_namesake
);
differential!(node_deleted, node_deleted, expect_node_deleted);
differential!(
    untolerated_taint_added,
    untolerated_taint_added,
    expect_untolerated_taint_added
);
differential!(
    anchored_countdown,
    anchored_countdown,
    expect_anchored_countdown
);
differential!(
    mixed_tolerations,
    mixed_tolerations,
    expect_mixed_tolerations
);
differential!(terminal_pod, terminal_pod, expect_terminal_pod);

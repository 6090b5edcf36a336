//! Differential tests: every scenario runs at the same time against
//! upstream kube-controller-manager's `taint-eviction-controller` (a
//! separate process on a control plane of its own) and against ours (on
//! another control plane), and both must show the same outcome per pod:
//! deleted or not and how soon, the `DisruptionTarget` condition (status,
//! reason, message, observedGeneration) and whether it came before the
//! delete, and the `TaintManagerEviction` events.

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
    kcm_e2e::thread::spawn_with_runtime(move || async move {
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

mod shutdown {
    //! Shutdown with an eviction pending, on the minor of `KCM_E2E_K8S_VERSION`
    //! (each side on a control plane of its own, as the controller is stopped):
    //! a pod tolerates the node's NoExecute taint for 8 s and the controller
    //! gets SIGTERM 2 s into the wait (kcm-rs: its shutdown path, as on
    //! SIGTERM). What the API shows is the same on every minor: the pending
    //! eviction never runs.
    //!
    //! The 1.35 change (the taint-eviction controller cancels its timers and
    //! waits for running evictions when its context ends, and KCM waits up to
    //! `--controller-shutdown-timeout` for its controllers) cannot be seen from
    //! a KCM process at its defaults: KCM 1.34-1.37 run on a context no signal
    //! cancels, so SIGTERM ends the process at once. From 1.36 the alpha gate
    //! `ControllerManagerReleaseLeaderElectionLockOnExit` gives KCM a signal
    //! context; with it on, SIGTERM runs that shutdown and KCM logs "All
    //! controllers terminated". The test runs upstream with the gate on where
    //! it exists and checks both: an immediate exit before 1.36, the awaited
    //! shutdown from 1.36.

    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::Pod;
    use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
    use kcm_features::FeatureGates;
    use kube::Api;

    use crate::support::*;
    use crate::warm_up;

    const TOLERATED: Duration = Duration::from_secs(8);

    struct Outcome {
        evicted: bool,
        /// How long upstream KCM took to exit after SIGTERM, and its log.
        upstream: Option<(Option<Duration>, String)>,
    }

    fn pending_eviction_at_shutdown(upstream: bool) -> Outcome {
        let cp = ControlPlane::start().expect("control plane");
        let mut kcm = upstream.then(|| {
            let minor = kcm_e2e::binaries::k8s_minor();
            let gate = "--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true";
            let extra: &[&str] = if minor >= 36 { &[gate] } else { &[] };
            UpstreamKcm::start(
                &cp,
                &["taint-eviction-controller", "daemonset-controller"],
                extra,
            )
            .expect("upstream KCM")
        });
        let mut ours = (!upstream).then(|| start_ours(&cp, FeatureGates::default()));
        let who = if upstream { "upstream" } else { "kcm-rs" };
        warm_up(&cp, who);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = cp.client().await.expect("client");
            let ns = TestNamespace::create(&client, "shutdown")
                .await
                .expect("ns")
                .name;
            let node = format!("{ns}-node");
            create_node(&client, &node, &[]).await;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let secs = TOLERATED.as_secs() as i64;
            pods.create(
                &Default::default(),
                &pod("pending", &node, &[("t", Some(secs))]),
            )
            .await
            .expect("create pod");
            set_no_execute(&client, &node, &["t"]).await;
            let tainted = Instant::now();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let exited = kcm.as_mut().map(|k| k.terminate(Duration::from_secs(15)));
            drop(ours.take());
            tokio::time::sleep(
                (TOLERATED + Duration::from_secs(4)).saturating_sub(tainted.elapsed()),
            )
            .await;
            let pod = pods.get_opt("pending").await.expect("get pod");
            let evicted = pod.is_none_or(|p| {
                p.metadata.deletion_timestamp.is_some() || disruption_target(&p).is_some()
            });
            let log = kcm
                .as_ref()
                .map(|k| std::fs::read_to_string(k.log()).unwrap_or_default());
            Outcome {
                evicted,
                upstream: exited.zip(log),
            }
        })
    }

    #[test]
    fn pending_eviction_is_dropped_at_shutdown() {
        let theirs = std::thread::spawn(|| pending_eviction_at_shutdown(true));
        let ours = pending_eviction_at_shutdown(false);
        let theirs = theirs.join().expect("upstream side");
        let minor = kcm_e2e::binaries::k8s_minor();
        let (exited, log) = theirs.upstream.expect("upstream's log");
        let awaited = log.contains("All controllers terminated");
        eprintln!(
            "1.{minor}: upstream evicted {}, exited {exited:?} after SIGTERM, awaited its \
             controllers {awaited}; kcm-rs evicted {}",
            theirs.evicted, ours.evicted
        );
        assert!(!ours.evicted, "kcm-rs evicted after its shutdown");
        assert!(!theirs.evicted, "upstream 1.{minor} evicted after SIGTERM");
        assert!(
            exited.is_some(),
            "upstream 1.{minor} did not exit on SIGTERM"
        );
        assert_eq!(
            awaited,
            minor >= 36,
            "upstream 1.{minor}: awaited its controllers at shutdown\n{}",
            log.lines().rev().take(15).collect::<Vec<_>>().join("\n")
        );
    }
}

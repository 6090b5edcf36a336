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
        tokio::time::sleep((TOLERATED + Duration::from_secs(4)).saturating_sub(tainted.elapsed()))
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

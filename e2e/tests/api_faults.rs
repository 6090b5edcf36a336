//! Scripted API faults on paths the chaos workload rarely reaches, through
//! the fault proxy (`kcm_e2e::faults`) with the real kcm-rs binary:
//! the start-up version probe answered with 500 and 503, and pod GC's live
//! node lookup answered with 500 while a pod's node is missing. In both the
//! process carries on, and pod GC removes nothing on a lookup it could not
//! make.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings, Record, Script, When};
use kcm_e2e::manifests as support;
use kcm_e2e::wait::wait_gone;
use kube::Api;
use kube::api::PostParams;

const GHOST: &str = "ghost-node";
const LOOKUP_FAULTS: usize = 3;

fn script(path: &str, fault: Fault, times: usize) -> Script {
    Script {
        method: "GET".into(),
        path_contains: path.into(),
        fault,
        when: When::Before,
        times,
    }
}

/// Pod GC alone, fast periods, through `proxy`.
fn podgc_via(proxy: &FaultProxy, log: &std::path::Path) -> std::process::Child {
    let args = [
        "--controllers=pod-garbage-collector-controller",
        "--leader-elect=false",
        "--secure-port=0",
        "--pod-gc-period=1s",
        "--pod-gc-quarantine=1s",
    ];
    support::spawn_kcm_rs(proxy.kubeconfig(), &args, log)
}

fn is_lookup(r: &Record) -> bool {
    r.method == "GET" && r.path.starts_with(&format!("/api/v1/nodes/{GHOST}"))
}

#[tokio::test]
async fn start_and_pod_gc_ride_out_server_errors() {
    let cp = kcm_e2e::ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = kcm_e2e::TestNamespace::create(&client, "api-faults")
        .await
        .expect("namespace");
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    proxy.script(script("/version", Fault::InternalError, 1));
    proxy.script(script("/version", Fault::ServiceUnavailable, 1));
    proxy.script(script(
        &format!("/api/v1/nodes/{GHOST}"),
        Fault::InternalError,
        LOOKUP_FAULTS,
    ));
    let log = cp.dir().join("kcm-rs.log");
    let mut kcm = podgc_via(&proxy, &log);

    // A pod bound to a node that never existed: an orphan once the
    // quarantine is over and a live GET says the node is gone.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "orphan"},
        "spec": {"nodeName": GHOST, "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let gone = wait_gone(&pods, "orphan", Duration::from_secs(90)).await;
    let exited = kcm.try_wait().expect("try_wait");
    let _ = kcm.kill();
    let _ = kcm.wait();
    let records = proxy.records();
    let text = kcm_e2e::control_plane::tail(&log, 40);
    assert!(exited.is_none(), "kcm-rs exited: {exited:?}\n{text}");
    gone.unwrap_or_else(|e| panic!("the orphan was not collected: {e}\n{text}"));

    // Start-up: two failed probes, then the third answered.
    let probes: Vec<Option<u16>> = records
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/version"))
        .map(|r| r.sent)
        .collect();
    assert_eq!(
        probes.first().copied(),
        Some(Some(500)),
        "probes {probes:?}"
    );
    assert_eq!(probes.get(1).copied(), Some(Some(503)), "probes {probes:?}");
    assert_eq!(probes.get(2).copied(), Some(Some(200)), "probes {probes:?}");
    let full = std::fs::read_to_string(&log).unwrap_or_default();
    // kube's client retries a 503 itself; the 500 is ours to retry.
    assert!(
        full.contains("transient failure at start, retrying"),
        "{text}"
    );

    // Pod GC: the lookups that failed decided nothing; the pod's first
    // write came after a lookup the API server answered 404.
    let lookups: Vec<&Record> = records.iter().filter(|r| is_lookup(r)).collect();
    let failed = lookups.iter().filter(|r| r.sent == Some(500)).count();
    assert_eq!(failed, LOOKUP_FAULTS, "node lookups: {lookups:#?}");
    let first_write = records
        .iter()
        .find(|r| r.is_write() && r.path.contains("/pods/orphan"))
        .expect("a write to the orphan");
    let confirmed = lookups
        .iter()
        .find(|r| r.sent == Some(404))
        .expect("a lookup answered 404");
    assert!(
        lookups
            .iter()
            .filter(|r| r.sent == Some(500))
            .all(|r| r.id < confirmed.id),
        "the faults came first: {lookups:#?}"
    );
    assert!(
        confirmed.id < first_write.id,
        "pod written (#{} {} {}) before the node was confirmed gone (#{})",
        first_write.id,
        first_write.method,
        first_write.path,
        confirmed.id
    );
    eprintln!(
        "version probes {probes:?}; {} node lookups ({failed} answered 500), \
         first pod write #{} after the 404 #{}; faults {}",
        lookups.len(),
        first_write.id,
        confirmed.id,
        kcm_e2e::faults::summary(&records)
    );
}

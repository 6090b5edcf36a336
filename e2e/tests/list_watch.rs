//! The informer's list+watch and the client's connection against the real
//! API server: streaming lists (cut in their initial events, 410 on the
//! resumed watch), client-go's LIST+WATCH fallback on a server with the
//! `WatchList` gate off, and one HTTP/2 connection for every client and
//! watch of a process.

use kcm_runtime::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings, Record, Script, When};
use kcm_e2e::{ControlPlane, TestNamespace, shared};
use kcm_pod::CachedPod;
use kcm_runtime::client::{ClientOptions, build_client};
use kcm_runtime::informer::{Informer, InformerFactory};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("pod")
}

/// A kcm-rs client (the controllers' stack and transport) from a kubeconfig.
/// (The connection count of a whole kcm-rs process, by `/proc`, is the
/// benchmark's: test processes share their API server with other tests.)
async fn kcm_client(kubeconfig: &std::path::Path, metrics: &Metrics) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    build_client(
        config,
        &ClientOptions::for_component("list-watch-test", metrics),
    )
    .expect("client")
}

/// A kcm-rs pod informer through `kubeconfig`, started and synced.
async fn synced_pod_informer(
    kubeconfig: &std::path::Path,
) -> (Arc<Informer<CachedPod>>, CancellationToken) {
    let factory = InformerFactory::new(kcm_client(kubeconfig, &Metrics::detached()).await);
    let inf = factory.informer::<CachedPod>();
    let stop = CancellationToken::new();
    factory.start(stop.clone());
    tokio::time::timeout(Duration::from_secs(30), factory.wait_for_sync())
        .await
        .expect("synced");
    (inf, stop)
}

async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names_in(inf: &Informer<CachedPod>, ns: &str) -> Vec<String> {
    let mut v: Vec<String> = inf
        .store()
        .list()
        .iter()
        .filter(|p| p.namespace() == ns)
        .map(|p| p.name().to_string())
        .collect();
    v.sort();
    v
}

fn pod_watches(records: &[Record]) -> Vec<&Record> {
    records
        .iter()
        .filter(|r| r.watch && r.path.starts_with("/api/v1/pods?"))
        .collect()
}

fn script(path_contains: &str, fault: Fault) -> Script {
    Script {
        method: "GET".into(),
        path_contains: path_contains.into(),
        fault,
        when: When::Before,
        times: 1,
    }
}

#[tokio::test]
async fn streaming_list_rides_out_a_cut_in_its_initial_events_and_410_on_its_resumed_watch() {
    let cp = shared();
    let admin = cp.client().await.expect("client");
    let ns = TestNamespace::create(&admin, "list-watch")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .expect("pod");
    }
    let proxy = FaultProxy::start(cp, FaultSettings::none())
        .await
        .expect("proxy");
    proxy.script(script("/api/v1/pods?", Fault::WatchCutInitial));
    let (inf, stop) = synced_pod_informer(proxy.kubeconfig()).await;
    assert_eq!(names_in(&inf, &ns.name), ["a", "b"]);
    let records = proxy.records();
    let watches = pod_watches(&records);
    // No LIST: the cut streaming list was asked for again and synced.
    assert!(
        records
            .iter()
            .all(|r| r.watch || !r.path.starts_with("/api/v1/pods?")),
        "{records:#?}"
    );
    assert!(watches.len() >= 2, "{watches:#?}");
    assert_eq!(watches[0].fault, Some(Fault::WatchCutInitial));
    assert!(!watches[0].completed, "cut");
    for w in &watches[..2] {
        assert!(w.path.contains("sendInitialEvents=true"), "{}", w.path);
        assert!(
            w.path.contains("resourceVersionMatch=NotOlderThan"),
            "{}",
            w.path
        );
    }

    // The next resumed watch (no initial events) gets 410: a delete made
    // meanwhile shows up after the relist, which streams again, at least
    // as new as the last version seen.
    proxy.script(script(
        "allowWatchBookmarks=true&resourceVersion=",
        Fault::WatchGone,
    ));
    proxy.cut(true);
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    pods.create(&PostParams::default(), &pod("c"))
        .await
        .expect("pod c");
    proxy.cut(false);
    eventually("the relist shows a gone and c there", || {
        names_in(&inf, &ns.name) == ["b", "c"]
    })
    .await;
    let records = proxy.records();
    let watches = pod_watches(&records);
    let gone = watches
        .iter()
        .position(|r| r.fault == Some(Fault::WatchGone))
        .expect("a 410");
    assert!(
        !watches[gone].path.contains("sendInitialEvents"),
        "{}",
        watches[gone].path
    );
    let relist = watches.get(gone + 1).expect("a relist after 410");
    assert!(
        relist.path.contains("sendInitialEvents=true"),
        "{}",
        relist.path
    );
    let at = relist
        .path
        .split('&')
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .unwrap_or_default();
    assert!(
        !at.is_empty(),
        "at least as new as a version: {}",
        relist.path
    );
    stop.cancel();
}

#[tokio::test]
async fn without_the_watch_list_gate_the_informer_lists_then_watches() {
    let cp = ControlPlane::start_version_with_args("1.34", "--feature-gates=WatchList=false")
        .expect("control plane");
    let admin = cp.client().await.expect("client");
    let ns = TestNamespace::create(&admin, "no-watch-list")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .expect("pod");
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    let (inf, stop) = synced_pod_informer(proxy.kubeconfig()).await;
    assert_eq!(names_in(&inf, &ns.name), ["a"]);
    pods.create(&PostParams::default(), &pod("b"))
        .await
        .expect("pod b");
    eventually("b seen by the watch", || {
        names_in(&inf, &ns.name) == ["a", "b"]
    })
    .await;
    let records = proxy.records();
    let reqs: Vec<&Record> = records
        .iter()
        .filter(|r| r.path.starts_with("/api/v1/pods?"))
        .collect();
    // The streaming list refused (422 Invalid), then client-go's order.
    assert!(
        reqs[0].watch && reqs[0].path.contains("sendInitialEvents=true"),
        "{reqs:#?}"
    );
    assert_eq!(reqs[0].status, Some(422), "{reqs:#?}");
    assert!(
        !reqs[1].watch && reqs[1].path.contains("resourceVersion=0"),
        "{reqs:#?}"
    );
    assert_eq!(reqs[1].status, Some(200));
    assert!(
        reqs[2].watch && !reqs[2].path.contains("sendInitialEvents"),
        "{reqs:#?}"
    );
    stop.cancel();
}

#[tokio::test]
async fn every_client_and_watch_share_one_http2_connection() {
    let cp = shared();
    let admin = cp.client().await.expect("client");
    let ns = TestNamespace::create(&admin, "h2").await.expect("ns");
    // Two controllers' clients, four watches, requests in parallel.
    let metrics = Metrics::detached();
    let a = kcm_client(cp.kubeconfig(), &metrics).await;
    let b = kcm_client(cp.kubeconfig(), &metrics).await;
    let factory = InformerFactory::new(a.clone());
    let pods = factory.informer::<CachedPod>();
    factory.informer::<k8s_openapi::api::batch::v1::Job>();
    factory.informer::<k8s_openapi::api::core::v1::Node>();
    factory.informer::<k8s_openapi::api::core::v1::Namespace>();
    let stop = CancellationToken::new();
    factory.start(stop.clone());
    tokio::time::timeout(Duration::from_secs(30), factory.wait_for_sync())
        .await
        .expect("synced");
    let api: Api<Pod> = Api::namespaced(b.clone(), &ns.name);
    let creates = (0..20).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &pod(&format!("p{i}")))
                .await
        }
    });
    for r in futures::future::join_all(creates).await {
        r.expect("create");
    }
    let ns_name = ns.name.clone();
    eventually("20 pods seen", || names_in(&pods, &ns_name).len() == 20).await;
    let host = kcm_runtime::client::host_label(&cp.server().parse().expect("url"));
    let gauge = |p: &str| metrics.connections().with_label_values(&[&host, p]).get();
    assert_eq!(gauge("HTTP/2"), 1, "one HTTP/2 connection");
    assert_eq!(gauge("HTTP/1.1"), 0);
    stop.cancel();
}

//! kcm-runtime's shared informer against the real API server: it sees adds,
//! updates (with the old object) and deletes, and deletes that happened
//! while its watch was down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{TestNamespace, kubelet, shared};
use kcm_pod::CachedPod;
use kcm_runtime::informer::{
    BY_NAMESPACE, BY_NODE_NAME, Change, InformerFactory, WirePod, namespace_index, pod_node_index,
};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("pod")
}

async fn wait_seen(seen: &Mutex<Vec<String>>, what: &str) {
    let start = Instant::now();
    while !seen.lock().iter().any(|s| s == what) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never saw {what:?}; saw {:?}",
            seen.lock()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn informer_sees_add_update_delete_and_deletes_missed_while_down() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "informer")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.create(&PostParams::default(), &pod("before"))
        .await
        .expect("before");

    let factory = InformerFactory::new(client.clone());
    let informer = factory.informer::<CachedPod>();
    informer.add_index(BY_NODE_NAME, pod_node_index());
    informer.add_index(BY_NAMESPACE, namespace_index());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ns_name = ns.name.clone();
    let s = Arc::clone(&seen);
    informer.add_handler(Arc::new(move |c: &Change<CachedPod>| {
        if c.object().namespace() != ns_name {
            return;
        }
        let node = |p: &CachedPod| p.node_name().unwrap_or_default().to_string();
        s.lock().push(match c {
            Change::Added(p) => format!("add {}", p.name()),
            Change::Updated { old, new } => {
                format!(
                    "update {} node {:?}->{:?}",
                    new.name(),
                    node(old),
                    node(new)
                )
            }
            Change::Deleted(p) => format!("delete {}", p.name()),
        });
    }));
    let stop = CancellationToken::new();
    factory.start(stop.clone());
    tokio::time::timeout(Duration::from_secs(20), factory.wait_for_sync())
        .await
        .expect("synced");
    assert!(factory.has_synced());
    wait_seen(&seen, "add before").await;

    pods.create(&PostParams::default(), &pod("live"))
        .await
        .expect("live");
    wait_seen(&seen, "add live").await;
    let node = format!("{}-node", ns.name);
    kubelet::create_node(&client, &node, true, vec![])
        .await
        .expect("node");
    kubelet::bind_pod(&pods, "live", &node).await.expect("bind");
    wait_seen(&seen, &format!("update live node \"\"->{node:?}")).await;
    let cached = informer.store().by_index(BY_NODE_NAME, &node);
    assert_eq!(cached.len(), 1);
    // Decoded straight into the cached pod: the node, the uid and the
    // status the controllers read (nothing else is there to read).
    assert!(!cached[0].uid().is_empty());
    assert_eq!(cached[0].node_name(), Some(node.as_str()));
    assert!(cached[0].has_status() && cached[0].phase() == "Pending");
    pods.delete("live", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    wait_seen(&seen, "delete live").await;
    assert!(informer.store().by_index(BY_NODE_NAME, &node).is_empty());

    // Take the watch down, delete a pod, bring a new watch up (a streaming
    // list this time): the relist
    // must report the delete it never saw as an event.
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    pods.delete("before", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete while down");
    kcm_e2e::wait::wait_gone(&pods, "before", Duration::from_secs(10))
        .await
        .expect("gone");
    let restart = CancellationToken::new();
    tokio::spawn(Arc::clone(&informer).run(
        Api::<WirePod>::all(client.clone()),
        watcher::Config::default().streaming_lists(),
        restart.clone(),
    ));
    wait_seen(&seen, "delete before").await;
    assert!(informer.store().by_index(BY_NAMESPACE, &ns.name).is_empty());
    assert!(
        informer
            .store()
            .get(&format!("{}/before", ns.name))
            .is_none()
    );
    restart.cancel();
}

//! The whole controller on its host under paused tokio time: fed informers
//! stand for the API server's watch, a mock API answers its writes, and the
//! runtime's one clock (following tokio's) is the only time it reads, so a
//! 30-second toleration takes no real time and the condition it writes
//! carries the paused wall time.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kcm_mock_api::{MockApi, Reply};
use kcm_runtime::host::HostSettings;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl EvictionEvents for Events {
    fn marking(&self, namespace: &str, name: &str) {
        self.0.lock().push(events::marking_message(namespace, name));
    }
    fn cancelling(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .push(events::cancelling_message(namespace, name));
    }
}

fn node(taints: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "resourceVersion": "1"},
        "spec": {"taints": taints}
    }))
    .expect("node")
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "2"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "busybox"}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 30}]
        },
        "status": {"phase": "Running"}
    })
}

struct Running {
    mock: MockApi,
    events: Arc<Events>,
    pods: Arc<Informer<CachedPod>>,
    nodes: Arc<Informer<Node>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The controller started on fed informers, with its clock at `start`.
async fn controller(wall: Timestamp) -> Running {
    let mock = MockApi::new()
        .on("GET", [Reply::json(200, pod())])
        .on("PATCH", [Reply::json(200, pod())])
        .on("DELETE", [Reply::json(200, pod())]);
    let events = Arc::new(Events::default());
    let pods = Arc::new(Informer::<CachedPod>::fed());
    pods.add_index(BY_NODE_NAME, pod_node_index());
    let nodes = Arc::new(Informer::<Node>::fed());
    let clock = Clock::following_tokio(wall);
    let parts = Parts {
        client: mock.client(),
        events: Arc::clone(&events) as Arc<dyn EvictionEvents>,
        pods: Arc::clone(&pods),
        nodes: Arc::clone(&nodes),
        conditions: true,
        host: Host::new(
            NAME,
            HostSettings::default(),
            clock.clone(),
            &Default::default(),
        ),
        clock,
        metrics: Default::default(),
    };
    let stop = CancellationToken::new();
    let started = super::start(parts, stop.clone());
    let task = tokio::spawn(started.run);
    settle().await;
    Running {
        mock,
        events,
        pods,
        nodes,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the controller ends on stop");
    }
}

fn pod_of(v: Value) -> CachedPod {
    let pod: Pod = serde_json::from_value(v).expect("pod");
    CachedPod::from(&pod)
}

/// The controller at `start`, with node `n1` tainted `k:NoExecute` and
/// the pod tolerating it for 30 s on it.
async fn tolerating_pod_on_tainted_node(start: Timestamp) -> Running {
    let c = controller(start).await;
    c.nodes
        .feed_apply(node(json!([{"key": "k", "effect": "NoExecute"}])));
    c.pods.feed_apply(pod_of(pod()));
    settle().await;
    c
}

#[tokio::test(start_paused = true)]
async fn a_tolerated_taint_evicts_at_the_toleration_end_on_the_paused_clock() {
    let start = Timestamp::from_second(1_700_000_000).expect("valid");
    let c = tolerating_pod_on_tainted_node(start).await;

    tokio::time::sleep(Duration::from_secs(29)).await;
    settle().await;
    assert!(c.mock.verbs().is_empty(), "{:?}", c.mock.verbs());
    assert!(c.events.0.lock().is_empty());

    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(c.mock.verbs(), ["GET", "PATCH status", "DELETE"]);
    assert_eq!(*c.events.0.lock(), ["Marking for deletion Pod ns/p"]);
    // The condition's time is the paused wall clock at the toleration's end.
    let patch = c.mock.seen()[1].body.clone();
    let conditions = patch["status"]["conditions"]
        .as_array()
        .expect("conditions");
    let target = conditions
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .expect("DisruptionTarget");
    let at = start + jiff::SignedDuration::from_secs(30);
    assert_eq!(target["lastTransitionTime"], json!(at.to_string()));
    assert_eq!(target["reason"], "DeletionByTaintManager");
    c.stop().await;
}

#[tokio::test(start_paused = true)]
async fn removing_the_taint_before_the_end_cancels_the_eviction() {
    let start = Timestamp::from_second(1_700_000_000).expect("valid");
    let c = tolerating_pod_on_tainted_node(start).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    c.nodes.feed_apply(node(json!([])));
    settle().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle().await;
    assert!(c.mock.verbs().is_empty(), "{:?}", c.mock.verbs());
    assert_eq!(*c.events.0.lock(), ["Cancelling deletion of Pod ns/p"]);
    c.stop().await;
}

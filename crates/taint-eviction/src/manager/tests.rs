//! The manager over in-memory caches with paused time: what gets scheduled,
//! fired and cancelled, and which events are emitted.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSpec, Pod, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::timed_queue::WorkFn;

#[derive(Default)]
struct FakeCache {
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    pods: Mutex<HashMap<String, Arc<CachedPod>>>,
}

impl Cache for FakeCache {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.lock().get(name).cloned()
    }
    fn pod(&self, key: &str) -> Option<Arc<CachedPod>> {
        self.pods.lock().get(key).cloned()
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<CachedPod>> {
        let mut pods: Vec<_> = self
            .pods
            .lock()
            .values()
            .filter(|p| node_of(p) == node)
            .cloned()
            .collect();
        pods.sort_by_key(|p| p.name().to_string());
        pods
    }
}

#[derive(Default)]
struct FakeEvents(Mutex<Vec<String>>);

impl EvictionEvents for FakeEvents {
    fn marking(&self, namespace: &str, name: &str) {
        self.0.lock().push(format!("mark {namespace}/{name}"));
    }
    fn cancelling(&self, namespace: &str, name: &str) {
        self.0.lock().push(format!("cancel {namespace}/{name}"));
    }
}

/// (key, uid, due, ran at)
type Fired = Arc<Mutex<Vec<(String, Option<String>, Instant, Instant)>>>;

struct Fixture {
    cache: Arc<FakeCache>,
    events: Arc<FakeEvents>,
    fired: Fired,
    manager: TaintManager,
    t0: Instant,
}

impl Fixture {
    fn new() -> Self {
        let cache = Arc::new(FakeCache::default());
        let events = Arc::new(FakeEvents::default());
        let fired: Fired = Arc::default();
        let sink = Arc::clone(&fired);
        let work: WorkFn = Arc::new(move |args, due| {
            sink.lock()
                .push((args.key(), args.uid.clone(), due, Instant::now()));
            Box::pin(async {})
        });
        let manager = TaintManager::new(
            Arc::clone(&cache) as Arc<dyn Cache>,
            TimedQueue::new(work, Clock::system()),
            Arc::clone(&events) as Arc<dyn EvictionEvents>,
            Clock::system(),
        );
        Fixture {
            cache,
            events,
            fired,
            manager,
            t0: Instant::now(),
        }
    }

    fn node(&self, name: &str, no_execute: &[&str]) {
        let taints = no_execute
            .iter()
            .map(|k| Taint {
                key: (*k).into(),
                effect: "NoExecute".into(),
                ..Default::default()
            })
            .chain(std::iter::once(Taint {
                key: "node.kubernetes.io/not-ready".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }))
            .collect();
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.cache.nodes.lock().insert(name.into(), Arc::new(node));
        self.manager.handle_node(name);
    }

    fn delete_node(&self, name: &str) {
        self.cache.nodes.lock().remove(name);
        self.manager.handle_node(name);
    }

    /// Puts a pod in the cache (without handling it).
    fn put_pod(&self, name: &str, uid: &str, node: &str, tolerations: &[(&str, Option<i64>)]) {
        let pod = Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                tolerations: Some(
                    tolerations
                        .iter()
                        .map(|(k, s)| Toleration {
                            key: Some((*k).into()),
                            operator: Some("Exists".into()),
                            effect: Some("NoExecute".into()),
                            toleration_seconds: *s,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.cache
            .pods
            .lock()
            .insert(format!("ns/{name}"), Arc::new(CachedPod::from(pod)));
    }

    fn pod(&self, name: &str, uid: &str, node: &str, tolerations: &[(&str, Option<i64>)]) {
        self.put_pod(name, uid, node, tolerations);
        self.handle_pod(name, node);
    }

    fn handle_pod(&self, name: &str, node: &str) {
        self.manager.handle_pod(&PodItem {
            namespace: "ns".into(),
            name: name.into(),
            node_name: node.into(),
        });
    }

    fn delete_pod(&self, name: &str) {
        let old = self.cache.pods.lock().remove(&format!("ns/{name}"));
        let node = old.as_deref().map(node_of).unwrap_or("").to_string();
        self.handle_pod(name, &node);
    }

    fn events(&self) -> Vec<String> {
        self.events.0.lock().clone()
    }

    /// Fired evictions as (key, seconds after t0 they were due).
    fn fired(&self) -> Vec<(String, u64)> {
        self.fired
            .lock()
            .iter()
            .map(|(k, _, due, _)| (k.clone(), due.duration_since(self.t0).as_secs()))
            .collect()
    }

    async fn advance(&self, secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn untolerated_taint_evicts_at_once() {
    let f = Fixture::new();
    f.put_pod("p", "u1", "n1", &[]);
    f.put_pod("other", "u2", "n2", &[]);
    f.node("n1", &["dedicated"]);
    f.advance(0).await;
    assert_eq!(f.fired(), [("ns/p".to_string(), 0)]);
    assert!(
        f.events().is_empty(),
        "no cancel events; marking is the executor's"
    );
    assert!(f.manager.known_taints("n1").is_some());
}

#[tokio::test(start_paused = true)]
async fn no_execute_taints_only() {
    let f = Fixture::new();
    f.put_pod("p", "u1", "n1", &[]);
    f.node("n1", &[]);
    f.advance(60).await;
    assert!(f.fired().is_empty(), "NoSchedule taints are ignored");
    assert!(f.manager.known_taints("n1").is_none());
}

#[tokio::test(start_paused = true)]
async fn finite_toleration_fires_when_it_runs_out() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(29).await;
    assert!(f.fired().is_empty());
    f.advance(2).await;
    assert_eq!(f.fired(), [("ns/p".to_string(), 30)]);
}

#[tokio::test(start_paused = true)]
async fn forever_toleration_never_fires() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", None)]);
    f.pod("q", "u2", "n1", &[("a", Some(i64::MAX))]);
    f.advance(3600).await;
    assert!(f.fired().is_empty());
    assert!(f.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn taint_removed_before_expiry_cancels_with_event() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(10).await;
    f.node("n1", &[]);
    assert_eq!(f.events(), ["cancel ns/p"]);
    f.advance(60).await;
    assert!(f.fired().is_empty());
    // Tainting again starts a new countdown from now.
    f.node("n1", &["a"]);
    f.advance(29).await;
    assert!(f.fired().is_empty());
    f.advance(2).await;
    assert_eq!(f.fired(), [("ns/p".to_string(), 100)]);
}

#[tokio::test(start_paused = true)]
async fn later_finite_changes_keep_the_first_schedule() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30)), ("b", Some(5))]);
    f.advance(10).await;
    // A second taint tolerated for only 5 s does not bring the eviction forward.
    f.node("n1", &["a", "b"]);
    f.advance(15).await;
    assert!(f.fired().is_empty());
    f.advance(6).await;
    assert_eq!(f.fired(), [("ns/p".to_string(), 30)]);
    assert!(f.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn new_untolerated_taint_replaces_a_pending_eviction() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(10).await;
    f.node("n1", &["a", "b"]);
    f.advance(0).await;
    assert_eq!(f.events(), ["cancel ns/p"]);
    assert_eq!(f.fired(), [("ns/p".to_string(), 10)]);
    f.advance(60).await;
    assert_eq!(f.fired().len(), 1, "the 30 s timer is gone");
}

#[tokio::test(start_paused = true)]
async fn pod_deleted_cancels_with_event_only_when_pending() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.pod("q", "u2", "n1", &[("a", None)]);
    f.delete_pod("p");
    f.delete_pod("q");
    assert_eq!(f.events(), ["cancel ns/p"]);
    f.advance(60).await;
    assert!(f.fired().is_empty());
}

#[tokio::test(start_paused = true)]
async fn node_deletion_does_not_cancel() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(5).await;
    f.delete_node("n1");
    assert!(f.manager.known_taints("n1").is_none());
    // A pod event after the node is gone does not cancel either.
    f.handle_pod("p", "n1");
    f.advance(30).await;
    assert_eq!(f.fired(), [("ns/p".to_string(), 30)]);
    assert!(f.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn pods_on_untainted_or_other_nodes_are_left_alone() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.node("n2", &[]);
    f.pod("p", "u1", "n2", &[]);
    // A stale item naming the tainted node for a pod that is on n2.
    f.handle_pod("p", "n1");
    f.advance(60).await;
    assert!(f.fired().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_namesake_gets_a_fresh_countdown() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(20).await;
    // Deleted and recreated before the delete was handled: one item (the
    // queue folds both), the cache already holds the new pod.
    f.put_pod("p", "u2", "n1", &[("a", Some(30))]);
    f.handle_pod("p", "n1");
    assert_eq!(f.events(), ["cancel ns/p"]);
    f.advance(15).await;
    assert!(f.fired().is_empty(), "the old pod's timer did not fire");
    f.advance(20).await;
    let fired = f.fired.lock().clone();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].1.as_deref(), Some("u2"));
    assert_eq!(fired[0].2.duration_since(f.t0).as_secs(), 50);
}

#[tokio::test(start_paused = true)]
async fn namesake_on_another_node_cancels_the_stale_timer() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.node("n2", &[]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    // The delete item (old node) is handled after the namesake on n2 exists.
    f.put_pod("p", "u2", "n2", &[]);
    f.handle_pod("p", "n1");
    f.handle_pod("p", "n2");
    f.advance(60).await;
    assert!(f.fired().is_empty());
    assert_eq!(f.events(), ["cancel ns/p"]);
}

#[tokio::test(start_paused = true)]
async fn zero_seconds_evicts_at_once() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(0))]);
    f.pod("q", "u2", "n1", &[("a", Some(-7))]);
    f.advance(0).await;
    let mut fired = f.fired();
    fired.sort();
    assert_eq!(fired, [("ns/p".to_string(), 0), ("ns/q".to_string(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_namesake_seen_through_its_node_gets_a_fresh_countdown() {
    let f = Fixture::new();
    f.node("n1", &["a"]);
    f.pod("p", "u1", "n1", &[("a", Some(30))]);
    f.advance(20).await;
    // The namesake is found by a node update before its own item is handled.
    f.put_pod("p", "u2", "n1", &[("a", Some(30)), ("c", None)]);
    f.node("n1", &["a", "c"]);
    assert_eq!(f.events(), ["cancel ns/p"]);
    f.advance(15).await;
    assert!(f.fired().is_empty(), "the old pod's timer did not fire");
    f.advance(20).await;
    let fired = f.fired.lock().clone();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].1.as_deref(), Some("u2"));
}

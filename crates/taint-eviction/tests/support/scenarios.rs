//! Scenarios run against whichever taint-eviction controller watches the
//! cluster of `client` (ours or upstream's), each in a fresh namespace with
//! nodes of its own, returning what could be observed about each pod; and
//! the outcome each scenario must have.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::history::PodHistory;
use kcm_e2e::{TestNamespace, kubelet};
use kube::Api;
use kube::api::DeleteParams;

use super::*;

/// What one scenario showed, per pod name.
#[derive(Debug)]
pub struct Run {
    pub ns: String,
    pub pods: BTreeMap<String, Observed>,
}

impl Run {
    pub fn pod(&self, name: &str) -> &Observed {
        self.pods
            .get(name)
            .unwrap_or_else(|| panic!("no observation of {name}: {self:#?}"))
    }
}

struct Scene {
    client: kube::Client,
    ns: String,
    pods: Api<Pod>,
    history: PodHistory,
}

impl Scene {
    async fn new(client: &kube::Client, prefix: &str) -> Scene {
        let ns = TestNamespace::create(client, prefix)
            .await
            .expect("namespace")
            .name;
        let history = watch_pods(client, &ns).await;
        Scene {
            client: client.clone(),
            pods: Api::namespaced(client.clone(), &ns),
            ns,
            history,
        }
    }

    fn node(&self, n: u32) -> String {
        format!("{}-n{n}", self.ns)
    }

    /// Creates the pod and returns when the API server accepted it.
    async fn create(&self, pod: Pod) -> (Instant, Option<String>) {
        let created = self
            .pods
            .create(&Default::default(), &pod)
            .await
            .expect("create pod");
        (Instant::now(), created.metadata.uid)
    }

    /// Waits until every listed pod is seen deleted or `deadline` passes.
    async fn wait_deleted(&self, pods: &[(&str, Option<&str>)], deadline: Instant) {
        for (name, uid) in pods {
            let left = deadline.saturating_duration_since(Instant::now());
            self.history.wait_deleting(name, *uid, left).await;
        }
    }

    async fn observe(
        &self,
        name: &str,
        uid: Option<&str>,
        trigger: Instant,
        want: &[String],
    ) -> Observed {
        observe(
            &self.client,
            &self.ns,
            &self.history,
            name,
            uid,
            trigger,
            want,
        )
        .await
    }

    fn marking(&self, pod: &str) -> String {
        marking(&self.ns, pod)
    }

    fn cancelling(&self, pod: &str) -> String {
        cancelling(&self.ns, pod)
    }

    fn done(self, pods: Vec<(&str, Observed)>) -> Run {
        Run {
            ns: self.ns.clone(),
            pods: pods.into_iter().map(|(n, o)| (n.to_string(), o)).collect(),
        }
    }
}

fn evicted_with_condition(run: &Run, pod: &str) {
    let o = run.pod(pod);
    assert_eq!(o.condition, expected_condition(), "{pod}: {o:#?}");
    assert_eq!(
        o.condition_first,
        Some(true),
        "{pod}: condition before delete"
    );
    assert!(
        o.events.contains(&marking(&run.ns, pod)),
        "{pod}: marking event: {o:#?}"
    );
}

fn untouched(run: &Run, pod: &str) {
    let o = run.pod(pod);
    assert_eq!(o.timing, Timing::Never, "{pod}: {o:#?}");
    assert_eq!(o.condition, None, "{pod}: {o:#?}");
}

/// A pod bound before its node got an untolerated NoExecute taint (node
/// path), and one created on the tainted node (pod path): both go at once,
/// with `DisruptionTarget` written first.
pub async fn untolerated(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-untolerated").await;
    let node = s.node(1);
    create_node(client, &node, &[]).await;
    s.create(pod("before", &node, &[])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_no_execute(client, &node, &["dedicated"]).await;
    let tainted = Instant::now();
    let (created, _) = s.create(pod("after", &node, &[])).await;
    s.wait_deleted(
        &[("before", None), ("after", None)],
        tainted + Duration::from_secs(10),
    )
    .await;
    let before = s
        .observe("before", None, tainted, &[s.marking("before")])
        .await;
    let after = s
        .observe("after", None, created, &[s.marking("after")])
        .await;
    s.done(vec![("before", before), ("after", after)])
}

pub fn expect_untolerated(run: &Run) {
    for pod in ["before", "after"] {
        assert_eq!(run.pod(pod).timing, Timing::Immediate, "{run:#?}");
        evicted_with_condition(run, pod);
    }
}

/// A toleration with `tolerationSeconds: 4`: deleted about 4 s after it
/// was created on the tainted node.
pub async fn toleration_seconds(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-seconds").await;
    let node = s.node(1);
    create_node(client, &node, &["dedicated"]).await;
    let (created, _) = s.create(pod("p", &node, &[("dedicated", Some(4))])).await;
    s.wait_deleted(&[("p", None)], created + Duration::from_secs(12))
        .await;
    let p = s.observe("p", None, created, &[s.marking("p")]).await;
    s.done(vec![("p", p)])
}

pub fn expect_toleration_seconds(run: &Run) {
    assert!(run.pod("p").timing.about(4), "{run:#?}");
    evicted_with_condition(run, "p");
}

/// Tolerations without seconds (by key, and a wildcard) keep pods forever.
pub async fn tolerated_forever(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-forever").await;
    let node = s.node(1);
    create_node(client, &node, &["dedicated"]).await;
    let (created, _) = s.create(pod("by-key", &node, &[("dedicated", None)])).await;
    s.create(pod("wildcard", &node, &[("", None)])).await;
    tokio::time::sleep_until((created + Duration::from_secs(6)).into()).await;
    let a = s.observe("by-key", None, created, &[]).await;
    let b = s.observe("wildcard", None, created, &[]).await;
    s.done(vec![("by-key", a), ("wildcard", b)])
}

pub fn expect_tolerated_forever(run: &Run) {
    for pod in ["by-key", "wildcard"] {
        untouched(run, pod);
        assert!(run.pod(pod).events.is_empty(), "{run:#?}");
    }
}

/// The taint is removed before the 5 s toleration runs out: cancelled, with
/// a "Cancelling deletion" event, and never deleted.
pub async fn taint_removed(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-removed").await;
    let node = s.node(1);
    create_node(client, &node, &["dedicated"]).await;
    let (created, _) = s.create(pod("p", &node, &[("dedicated", Some(5))])).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    set_no_execute(client, &node, &[]).await;
    tokio::time::sleep_until((created + Duration::from_secs(8)).into()).await;
    let p = s.observe("p", None, created, &[s.cancelling("p")]).await;
    s.done(vec![("p", p)])
}

pub fn expect_taint_removed(run: &Run) {
    untouched(run, "p");
    let want = [cancelling(&run.ns, "p")].into_iter().collect();
    assert_eq!(run.pod("p").events, want, "{run:#?}");
}

/// The pod is deleted while its eviction is pending (cancel event), then a
/// pod of the same name is created on an untainted node: it is left alone.
pub async fn pod_deleted_then_namesake(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-pod-deleted").await;
    let (n1, n2) = (s.node(1), s.node(2));
    create_node(client, &n1, &["dedicated"]).await;
    create_node(client, &n2, &[]).await;
    let (created, _) = s.create(pod("p", &n1, &[("dedicated", Some(4))])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.pods
        .delete("p", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    wait_events(
        client,
        &s.ns,
        "p",
        &[s.cancelling("p")],
        Duration::from_secs(10),
    )
    .await;
    let (_, uid) = s.create(pod("p", &n2, &[])).await;
    tokio::time::sleep_until((created + Duration::from_secs(7)).into()).await;
    let p = s.observe("p", uid.as_deref(), created, &[]).await;
    s.done(vec![("p", p)])
}

pub fn expect_pod_deleted_then_namesake(run: &Run) {
    untouched(run, "p");
    let want = [cancelling(&run.ns, "p")].into_iter().collect();
    assert_eq!(run.pod("p").events, want, "{run:#?}");
}

/// The node is deleted while an eviction is pending: nothing is cancelled
/// and the pod still goes when its 4 s toleration runs out.
pub async fn node_deleted(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-node-deleted").await;
    let node = s.node(1);
    create_node(client, &node, &["dedicated"]).await;
    let (created, _) = s.create(pod("p", &node, &[("dedicated", Some(4))])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await
        .expect("delete node");
    s.wait_deleted(&[("p", None)], created + Duration::from_secs(12))
        .await;
    let p = s.observe("p", None, created, &[s.marking("p")]).await;
    s.done(vec![("p", p)])
}

pub fn expect_node_deleted(run: &Run) {
    assert!(run.pod("p").timing.about(4), "{run:#?}");
    evicted_with_condition(run, "p");
}

/// A second, untolerated taint arrives while a 20 s eviction is pending:
/// the pending one is cancelled (event) and the pod goes at once.
pub async fn untolerated_taint_added(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-added").await;
    let node = s.node(1);
    create_node(client, &node, &["a"]).await;
    s.create(pod("p", &node, &[("a", Some(20))])).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    set_no_execute(client, &node, &["a", "b"]).await;
    let tainted = Instant::now();
    s.wait_deleted(&[("p", None)], tainted + Duration::from_secs(10))
        .await;
    let p = s
        .observe("p", None, tainted, &[s.cancelling("p"), s.marking("p")])
        .await;
    s.done(vec![("p", p)])
}

pub fn expect_untolerated_taint_added(run: &Run) {
    assert_eq!(run.pod("p").timing, Timing::Immediate, "{run:#?}");
    evicted_with_condition(run, "p");
    assert!(
        run.pod("p").events.contains(&cancelling(&run.ns, "p")),
        "{run:#?}"
    );
}

/// The countdown is anchored at the first schedule: a later taint tolerated
/// for only 1 s does not bring the 6 s eviction forward.
pub async fn anchored_countdown(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-anchored").await;
    let node = s.node(1);
    create_node(client, &node, &["a"]).await;
    let (created, _) = s
        .create(pod("p", &node, &[("a", Some(6)), ("b", Some(1))]))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_no_execute(client, &node, &["a", "b"]).await;
    s.wait_deleted(&[("p", None)], created + Duration::from_secs(14))
        .await;
    let p = s.observe("p", None, created, &[s.marking("p")]).await;
    s.done(vec![("p", p)])
}

pub fn expect_anchored_countdown(run: &Run) {
    assert!(run.pod("p").timing.about(6), "{run:#?}");
    evicted_with_condition(run, "p");
}

/// Several pods on one tainted node: no toleration, zero and negative
/// seconds, a toleration for another key (all at once), and forever (stays).
pub async fn mixed_tolerations(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-mixed").await;
    let node = s.node(1);
    create_node(client, &node, &[]).await;
    s.create(pod("none", &node, &[])).await;
    s.create(pod("zero", &node, &[("dedicated", Some(0))]))
        .await;
    s.create(pod("negative", &node, &[("dedicated", Some(-5))]))
        .await;
    s.create(pod("other-key", &node, &[("other", None)])).await;
    s.create(pod("forever", &node, &[("dedicated", None)]))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_no_execute(client, &node, &["dedicated"]).await;
    let tainted = Instant::now();
    let gone = ["none", "zero", "negative", "other-key"];
    let wait: Vec<_> = gone.iter().map(|n| (*n, None)).collect();
    s.wait_deleted(&wait, tainted + Duration::from_secs(10))
        .await;
    tokio::time::sleep_until((tainted + Duration::from_secs(4)).into()).await;
    let mut out = Vec::new();
    for name in gone {
        out.push((
            name,
            s.observe(name, None, tainted, &[s.marking(name)]).await,
        ));
    }
    out.push(("forever", s.observe("forever", None, tainted, &[]).await));
    s.done(out)
}

pub fn expect_mixed_tolerations(run: &Run) {
    for pod in ["none", "zero", "negative", "other-key"] {
        assert_eq!(run.pod(pod).timing, Timing::Immediate, "{pod}: {run:#?}");
        evicted_with_condition(run, pod);
    }
    untouched(run, "forever");
}

/// A pod that already Succeeded is evicted like any other: condition, then
/// delete.
pub async fn terminal_pod(client: &kube::Client) -> Run {
    let s = Scene::new(client, "te-terminal").await;
    let node = s.node(1);
    create_node(client, &node, &[]).await;
    s.create(pod("done", &node, &[])).await;
    kubelet::finish_pod(&s.pods, "done", 0)
        .await
        .expect("finish pod");
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_no_execute(client, &node, &["dedicated"]).await;
    let tainted = Instant::now();
    s.wait_deleted(&[("done", None)], tainted + Duration::from_secs(10))
        .await;
    let p = s.observe("done", None, tainted, &[s.marking("done")]).await;
    s.done(vec![("done", p)])
}

pub fn expect_terminal_pod(run: &Run) {
    assert_eq!(run.pod("done").timing, Timing::Immediate, "{run:#?}");
    evicted_with_condition(run, "done");
}

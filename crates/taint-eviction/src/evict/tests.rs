//! The executor against a mocked API server: the requests it sends, in
//! order, and how it treats failures.

use kcm_mock_api::{MockApi as Mock, Reply, status};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

/// Queued `(status, body)` answers per method, as the tests write them.
trait Replies {
    fn reply(self, method: &str, replies: Vec<(u16, Value)>) -> Self;
}

impl Replies for Mock {
    fn reply(self, method: &str, replies: Vec<(u16, Value)>) -> Self {
        self.on(method, replies.into_iter().map(|(c, b)| Reply::json(c, b)))
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl EvictionEvents for Events {
    fn marking(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .push(crate::events::marking_message(namespace, name));
    }
    fn cancelling(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .push(crate::events::cancelling_message(namespace, name));
    }
}

fn pod_json(uid: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "generation": 3},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "n1"},
        "status": {"phase": "Running", "conditions": conditions}
    })
}

fn ready() -> Value {
    json!([{"type": "Ready", "status": "True"}])
}

fn args() -> WorkArgs {
    WorkArgs {
        namespace: "ns".into(),
        name: "p".into(),
        uid: Some("u1".into()),
        node: "n1".into(),
    }
}

async fn run(mock: &Mock, conditions: bool) -> (Result<Outcome, EvictError>, Vec<String>) {
    let events = Arc::new(Events::default());
    let evictor = Evictor::new(
        mock.client(),
        Arc::clone(&events) as Arc<dyn EvictionEvents>,
        conditions,
        kcm_runtime::clock::Clock::system(),
        crate::metrics::Metrics::new(&Default::default()),
    );
    let result = evictor.evict(args(), Instant::now()).await;
    let ev = events.0.lock().clone();
    (result, ev)
}

#[tokio::test]
async fn get_patch_condition_then_delete() {
    let pod = pod_json("u1", ready());
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply("PATCH", vec![(200, pod.clone())])
        .reply("DELETE", vec![(200, pod)]);
    let (result, events) = run(&mock, true).await;
    assert_eq!(result.expect("evicted"), Outcome::Deleted);
    assert_eq!(events, ["Marking for deletion Pod ns/p"]);
    assert_eq!(mock.verbs(), ["GET", "PATCH status", "DELETE"]);

    let seen = mock.seen();
    assert_eq!(seen[0].path, "/api/v1/namespaces/ns/pods/p");
    let patch = &seen[1];
    assert_eq!(patch.path, "/api/v1/namespaces/ns/pods/p/status");
    assert_eq!(patch.content_type, "application/strategic-merge-patch+json");
    assert_eq!(patch.body["metadata"]["uid"], "u1", "UID precondition");
    let conds = patch.body["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert_eq!(conds.len(), 1, "only the new condition: {}", patch.body);
    assert_eq!(conds[0]["type"], "DisruptionTarget");
    assert_eq!(conds[0]["status"], "True");
    assert_eq!(conds[0]["reason"], "DeletionByTaintManager");
    assert_eq!(
        conds[0]["message"],
        "Taint manager: deleting due to NoExecute taint"
    );
    assert_eq!(conds[0]["observedGeneration"], 3);
    assert!(conds[0]["lastTransitionTime"].is_string());
    assert_eq!(
        patch.body["status"]["$setElementOrder/conditions"],
        json!([{"type": "Ready"}, {"type": "DisruptionTarget"}])
    );
    let delete = &seen[2];
    assert_eq!(delete.path, "/api/v1/namespaces/ns/pods/p");
    for field in ["gracePeriodSeconds", "preconditions", "propagationPolicy"] {
        assert!(
            delete.body.get(field).is_none(),
            "empty delete options: {}",
            delete.body
        );
    }
}

#[tokio::test]
async fn gate_off_deletes_without_condition() {
    let pod = pod_json("u1", ready());
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply("DELETE", vec![(200, pod)]);
    let (result, _) = run(&mock, false).await;
    assert_eq!(result.expect("evicted"), Outcome::Deleted);
    assert_eq!(mock.verbs(), ["GET", "DELETE"]);
}

#[tokio::test]
async fn an_existing_identical_condition_is_not_patched_again() {
    let pod = pod_json(
        "u1",
        json!([{"type": "DisruptionTarget", "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]),
    );
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply("DELETE", vec![(200, pod)]);
    let (result, _) = run(&mock, true).await;
    assert_eq!(result.expect("evicted"), Outcome::Deleted);
    assert_eq!(mock.verbs(), ["GET", "DELETE"]);
}

#[tokio::test]
async fn a_different_disruption_target_is_replaced() {
    let pod = pod_json(
        "u1",
        json!([{"type": "DisruptionTarget", "status": "False",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]),
    );
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply("PATCH", vec![(200, pod.clone())])
        .reply("DELETE", vec![(200, pod)]);
    let (result, _) = run(&mock, true).await;
    assert_eq!(result.expect("evicted"), Outcome::Deleted);
    assert_eq!(mock.verbs(), ["GET", "PATCH status", "DELETE"]);
    let body = &mock.seen()[1].body;
    assert_eq!(body["status"]["conditions"][0]["status"], "True");
}

#[tokio::test(start_paused = true)]
async fn not_found_fails_five_times_then_gives_up() {
    let mock = Mock::default().reply("GET", vec![(404, status(404, "NotFound"))]);
    let (result, events) = run(&mock, true).await;
    assert!(matches!(result, Err(EvictError::Get { .. })), "{result:?}");
    assert_eq!(mock.verbs(), ["GET"; 5]);
    assert_eq!(events.len(), 1, "one marking event, even on failure");
}

#[tokio::test(start_paused = true)]
async fn conflicts_are_retried_from_a_fresh_get() {
    let pod = pod_json("u1", ready());
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply(
            "PATCH",
            vec![
                (409, status(409, "Conflict")),
                (409, status(409, "Conflict")),
                (200, pod.clone()),
            ],
        )
        .reply("DELETE", vec![(200, pod)]);
    let (result, _) = run(&mock, true).await;
    assert_eq!(result.expect("evicted"), Outcome::Deleted);
    assert_eq!(
        mock.verbs(),
        [
            "GET",
            "PATCH status",
            "GET",
            "PATCH status",
            "GET",
            "PATCH status",
            "DELETE"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn delete_failures_exhaust_the_attempts() {
    let pod = pod_json("u1", ready());
    let mock = Mock::default()
        .reply("GET", vec![(200, pod.clone())])
        .reply("PATCH", vec![(200, pod)])
        .reply("DELETE", vec![(500, status(500, "InternalError"))]);
    let (result, _) = run(&mock, true).await;
    assert!(
        matches!(result, Err(EvictError::Delete { .. })),
        "{result:?}"
    );
    let verbs = mock.verbs();
    assert_eq!(verbs.iter().filter(|v| *v == "DELETE").count(), 5);
    assert_eq!(verbs.iter().filter(|v| *v == "GET").count(), 5);
}

#[tokio::test]
async fn a_namesake_is_not_deleted() {
    let mock = Mock::default().reply("GET", vec![(200, pod_json("u2", ready()))]);
    let (result, events) = run(&mock, true).await;
    assert_eq!(result.expect("no error"), Outcome::Replaced);
    assert_eq!(mock.verbs(), ["GET"]);
    assert_eq!(events.len(), 1);
}

#[test]
fn condition_patch_without_generation_omits_observed_generation() {
    let mut pod: Pod = serde_json::from_value(pod_json("u1", ready())).expect("pod");
    pod.metadata.generation = None;
    let body = condition_patch(&pod, Timestamp::UNIX_EPOCH).expect("patch");
    assert!(
        body["status"]["conditions"][0]
            .get("observedGeneration")
            .is_none()
    );
}

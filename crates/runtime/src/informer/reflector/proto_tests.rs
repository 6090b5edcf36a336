//! Request shapes of the protobuf list+watch against the mock API server,
//! streaming lists off (the list+watch fallback): pages, resume from the
//! last resourceVersion (bookmarks included), relist after 410 Gone, and
//! the store each answer leaves.

use std::sync::Arc;
use std::time::Duration;

use kcm_mock_api::{MockApi, Reply};
use kcm_pod::CachedPod;
use kcm_proto::{Writer, watch_frame};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::tests::{has, names};
use crate::informer::{Change, Informer, ListWatch, PROTOBUF};

fn pod(name: &str, rv: &str) -> Writer {
    Writer::new().message(1, Writer::new().bytes(1, name).bytes(3, "ns").bytes(6, rv))
}

fn list(rv: &str, cont: &str, pods: &[Writer]) -> Reply {
    let mut w = Writer::new().message(1, Writer::new().bytes(2, rv).bytes(3, cont));
    for p in pods {
        w = w.message(2, p.clone());
    }
    Reply::raw(200, PROTOBUF, w.enveloped())
}

fn frames(events: &[(&str, Writer)]) -> Reply {
    let body = events
        .iter()
        .flat_map(|(t, o)| watch_frame(t, o.clone()))
        .collect();
    Reply::raw(200, PROTOBUF, body)
}

/// Starts a protobuf informer on `mock` and waits for its `n`th request;
/// returns the informer, its stop token, its task and every request's query.
async fn run_until(
    mock: &MockApi,
    inf: &Arc<Informer<CachedPod>>,
    n: usize,
) -> (CancellationToken, tokio::task::JoinHandle<()>, Vec<String>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn(Arc::clone(inf).run_proto(
        mock.client(),
        CachedPod::decode_proto,
        ListWatch {
            no_streaming: true,
            ..ListWatch::default()
        },
        stop.clone(),
    ));
    while mock.seen().len() < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queries = mock
        .seen()
        .iter()
        .map(|r| r.query.clone().unwrap_or_default())
        .collect();
    (stop, task, queries)
}

#[tokio::test(start_paused = true)]
async fn pages_then_watches_resumes_from_bookmarks_and_relists_after_gone() {
    let gone = Writer::new()
        .bytes(2, "Failure")
        .bytes(4, "Expired")
        .varint(6, 410);
    let bookmark = Writer::new().message(1, Writer::new().bytes(6, "15"));
    let mock = MockApi::new().on(
        "GET",
        [
            list("", "tok", &[pod("a", "9")]),
            list("10", "", &[pod("a2", "10")]),
            frames(&[("ADDED", pod("b", "11")), ("BOOKMARK", bookmark)]),
            frames(&[("MODIFIED", pod("b", "16")), ("ERROR", gone.clone())]),
            Reply::raw(410, PROTOBUF, gone.enveloped()),
            list("20", "", &[pod("c", "20")]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    inf.add_handler(Arc::new(move |c: &Change<CachedPod>| {
        let what = match c {
            Change::Added(_) => "add",
            Change::Updated { .. } => "update",
            Change::Deleted(_) => "delete",
        };
        s.lock().push(format!("{what} {}", c.name()));
    }));
    let (stop, task, q) = run_until(&mock, &inf, 7).await;
    let reqs = mock.seen();
    let list0 = [
        "resourceVersion=0",
        "resourceVersionMatch=NotOlderThan",
        "limit=500",
    ];
    assert!(has(&q[0], &list0), "{}", q[0]);
    assert!(has(&q[1], &["continue=tok", "limit=500"]), "{}", q[1]);
    assert!(!q[1].contains("resourceVersion="), "{}", q[1]);
    let watch = [
        "watch=true",
        "allowWatchBookmarks=true",
        "timeoutSeconds=290",
    ];
    assert!(
        has(&q[2], &watch) && has(&q[2], &["resourceVersion=10"]),
        "{}",
        q[2]
    );
    // The watch ended cleanly: resume from the bookmark's version.
    assert!(
        has(&q[3], &watch) && has(&q[3], &["resourceVersion=15"]),
        "{}",
        q[3]
    );
    // 410 Gone: a list at least as new as the last version seen; that
    // one gone too, a consistent read; then a watch from its version.
    let at16 = [
        "resourceVersion=16",
        "resourceVersionMatch=NotOlderThan",
        "limit=500",
    ];
    assert!(has(&q[4], &at16), "{}", q[4]);
    assert!(
        has(&q[5], &["limit=500"]) && !q[5].contains("resourceVersion"),
        "{}",
        q[5]
    );
    assert!(has(&q[6], &["resourceVersion=20"]), "{}", q[6]);
    assert!(reqs.iter().all(|r| r.accept == PROTOBUF));
    assert!(reqs.iter().all(|r| r.path == "/api/v1/pods"));

    let names: Vec<String> = inf
        .store()
        .list()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(names, ["c"]);
    assert_eq!(inf.last_resource_version(), Some(20));
    let mut events = seen.lock().clone();
    // The relist's changes come in store order; sort that tail.
    events[4..].sort();
    assert_eq!(
        events,
        [
            "add a",
            "add a2",
            "add b",
            "update b",
            "add c",
            "delete a",
            "delete a2",
            "delete b"
        ]
    );
    assert!(inf.has_synced());
    stop.cancel();
    task.await.expect("task");
    assert!(!inf.watch_ended(), "stopped, not ended");
}

#[tokio::test(start_paused = true)]
async fn an_answer_in_json_or_an_error_status_is_retried_with_backoff() {
    let status = Writer::new()
        .bytes(4, "Forbidden")
        .bytes(3, "no")
        .varint(6, 403);
    let mock = MockApi::new().on(
        "GET",
        [
            Reply::json(200, serde_json::json!({"kind": "PodList", "items": []})),
            Reply::raw(403, PROTOBUF, status.enveloped()),
            list("5", "", &[]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let (stop, _task, _) = run_until(&mock, &inf, 4).await;
    let at: Vec<_> = mock.seen().iter().map(|s| s.at).collect();
    // Back-off doubles from 0.8 s.
    assert!(at[1] - at[0] >= Duration::from_millis(800));
    assert!(at[2] - at[1] >= Duration::from_millis(1600));
    assert!(inf.has_synced());
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_watch_ending_at_once_backs_off_and_a_bad_event_relists_from_the_last_version() {
    let mut bad = watch_frame("ADDED", pod("x", "6"));
    // An object whose metadata is a number: it cannot be decoded, and
    // skipping it would lose it.
    bad.extend(watch_frame("MODIFIED", Writer::new().varint(1, 5)));
    let mock = MockApi::new().on(
        "GET",
        [
            list("5", "", &[pod("a", "5")]),
            Reply::raw(200, PROTOBUF, Vec::new()),
            Reply::raw(200, PROTOBUF, bad),
            list("7", "", &[pod("a", "5"), pod("x", "7")]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let (stop, _task, q) = run_until(&mock, &inf, 5).await;
    let reqs = mock.seen();
    assert!(has(&q[1], &["watch=true", "resourceVersion=5"]), "{}", q[1]);
    // The empty watch is an error: the next one waits out the back-off.
    assert!(has(&q[2], &["watch=true", "resourceVersion=5"]), "{}", q[2]);
    assert!(reqs[2].at - reqs[1].at >= Duration::from_millis(800));
    let at6 = [
        "resourceVersion=6",
        "resourceVersionMatch=NotOlderThan",
        "limit=500",
    ];
    assert!(has(&q[3], &at6), "{}", q[3]);
    assert!(has(&q[4], &["watch=true", "resourceVersion=7"]), "{}", q[4]);
    assert_eq!(names(&inf), ["a", "x"]);
    assert_eq!(
        inf.store()
            .get("ns/x")
            .map(|p| p.resource_version().to_string())
            .as_deref(),
        Some("7")
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_frame_longer_than_16_mib_is_refused() {
    let mut huge = (17u32 << 20).to_be_bytes().to_vec();
    huge.extend([0u8; 16]);
    let mock = MockApi::new().on(
        "GET",
        [
            list("5", "", &[]),
            Reply::raw(200, PROTOBUF, huge),
            list("5", "", &[]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let (stop, _task, q) = run_until(&mock, &inf, 4).await;
    let relist = ["resourceVersion=5", "resourceVersionMatch=NotOlderThan"];
    assert!(has(&q[2], &relist), "{}", q[2]);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_empty_or_versionless_list_is_an_error_and_keeps_the_cache() {
    // An unknown event type ends the watch (as in client-go); the relists
    // that answer a bare magic, then a list with no resourceVersion, must
    // not replace the cache with nothing.
    let mock = MockApi::new().on(
        "GET",
        [
            list("5", "", &[pod("a", "5")]),
            frames(&[("ADDED", pod("x", "6")), ("WHAT", pod("y", "7"))]),
            Reply::raw(200, PROTOBUF, kcm_proto::MAGIC.to_vec()),
            list("", "", &[]),
            list("8", "", &[pod("a", "5")]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let (stop, _task, q) = run_until(&mock, &inf, 4).await;
    // Both bad answers were read; the next list waits out the back-off.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mock.seen().len(), 4);
    assert_eq!(names(&inf), ["a", "x"]);
    let at6 = ["resourceVersion=6", "resourceVersionMatch=NotOlderThan"];
    for q in &q[2..4] {
        assert!(has(q, &at6), "{q}");
    }
    while mock.seen().len() < 6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(names(&inf), ["a"]);
    stop.cancel();
}

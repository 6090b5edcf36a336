//! Request shapes of the JSON list+watch against the mock API server:
//! streaming lists (initial events, the initial-events-end bookmark, the
//! same stream as the watch), client-go's fallback when the server refuses
//! them, relists after 410 by the same path, cuts during the initial
//! events, and the bound on a watch line.

use std::sync::Arc;
use std::time::Duration;

use kcm_mock_api::{MockApi, Reply};
use kcm_pod::CachedPod;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::informer::encoding::{Encoding, MAX_FRAME};
use crate::informer::{Change, INITIAL_EVENTS_END, Informer, ListWatch};

fn pod(name: &str, rv: &str) -> Value {
    json!({"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}})
}

fn event(type_: &str, object: Value) -> Value {
    json!({"type": type_, "object": object})
}

fn bookmark(rv: &str, end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv});
    if end {
        meta["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
    }
    event(
        "BOOKMARK",
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta}),
    )
}

fn gone() -> Value {
    event(
        "ERROR",
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": "Expired", "code": 410, "message": "too old resource version"}),
    )
}

/// A watch answer: one JSON line per event.
fn lines(events: &[Value]) -> Reply {
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    Reply::raw(200, "application/json", body.into_bytes())
}

fn list(rv: &str, pods: &[Value]) -> Reply {
    Reply::json(
        200,
        json!({"kind": "PodList", "apiVersion": "v1",
               "metadata": {"resourceVersion": rv}, "items": pods}),
    )
}

/// Runs a JSON informer (streaming lists on) until the mock has seen `n`
/// requests; returns the stop token and every request's query.
async fn run_until(
    mock: &MockApi,
    inf: &Arc<Informer<CachedPod>>,
    n: usize,
) -> (CancellationToken, Vec<String>) {
    let stop = CancellationToken::new();
    tokio::spawn(Arc::clone(inf).run_with(mock.client(), ListWatch::default(), stop.clone()));
    while mock.seen().len() < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let q = mock
        .seen()
        .iter()
        .map(|r| r.query.clone().unwrap_or_default())
        .collect();
    (stop, q)
}

fn recorder(inf: &Informer<CachedPod>) -> Arc<Mutex<Vec<String>>> {
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
    seen
}

/// The cached pods' names, sorted.
pub(super) fn names(inf: &Informer<CachedPod>) -> Vec<String> {
    let mut n: Vec<String> = inf
        .store()
        .list()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    n.sort();
    n
}

/// Whether query `q` holds every `key=value` of `want`.
pub(super) fn has(q: &str, want: &[&str]) -> bool {
    let pairs: Vec<&str> = q.split('&').collect();
    want.iter().all(|w| pairs.contains(w))
}

const STREAM: [&str; 4] = [
    "watch=true",
    "sendInitialEvents=true",
    "resourceVersionMatch=NotOlderThan",
    "allowWatchBookmarks=true",
];

#[tokio::test(start_paused = true)]
async fn a_streaming_list_syncs_at_its_bookmark_and_goes_on_as_the_watch() {
    let mock = MockApi::new().on(
        "GET",
        [
            lines(&[
                event("ADDED", pod("a", "5")),
                bookmark("8", false),
                event("ADDED", pod("b", "6")),
                bookmark("10", true),
                event("MODIFIED", pod("b", "11")),
                bookmark("12", false),
            ]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let seen = recorder(&inf);
    let (stop, q) = run_until(&mock, &inf, 2).await;
    // The latest state (no version), as client-go's first streaming list.
    assert!(
        has(&q[0], &STREAM) && has(&q[0], &["resourceVersion="]),
        "{}",
        q[0]
    );
    // The stream ended (server timeout): a plain watch from the last
    // bookmark, no initial events.
    assert!(
        has(&q[1], &["watch=true", "resourceVersion=12"]),
        "{}",
        q[1]
    );
    assert!(!q[1].contains("sendInitialEvents"), "{}", q[1]);
    assert!(mock.seen().iter().all(|r| r.path == "/api/v1/pods"));
    assert!(mock.seen().iter().all(|r| r.accept == "application/json"));
    assert!(inf.has_synced());
    assert_eq!(names(&inf), ["a", "b"]);
    let mut events = seen.lock().clone();
    events[..2].sort();
    assert_eq!(events, ["add a", "add b", "update b"]);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn no_sync_before_the_bookmark_a_cut_stream_is_asked_for_again_then_listed() {
    let mock = MockApi::new().on(
        "GET",
        [
            // Cut during the initial events: they are dropped.
            lines(&[event("ADDED", pod("a", "5")), event("ADDED", pod("x", "6"))]),
            // A transport error opening it: client-go's fallback, a list.
            Reply::Reset,
            list("9", &[pod("a", "5")]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let seen = recorder(&inf);
    let stop = CancellationToken::new();
    tokio::spawn(Arc::clone(&inf).run_with(mock.client(), ListWatch::default(), stop.clone()));
    while mock.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!inf.has_synced(), "no initial-events-end bookmark yet");
    assert!(inf.store().list().is_empty());
    while mock.seen().len() < 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let q: Vec<String> = mock
        .seen()
        .iter()
        .map(|r| r.query.clone().unwrap_or_default())
        .collect();
    // Cut after events: the streaming list again (client-go's); that one
    // failing to open: a list, then a watch from its version.
    assert!(has(&q[1], &STREAM), "{}", q[1]);
    assert!(has(&q[2], &["resourceVersion=0", "limit=500"]), "{}", q[2]);
    assert!(has(&q[3], &["watch=true", "resourceVersion=9"]), "{}", q[3]);
    assert!(!q[3].contains("sendInitialEvents"), "{}", q[3]);
    assert!(inf.has_synced());
    assert_eq!(names(&inf), ["a"]);
    assert_eq!(seen.lock().clone(), ["add a"]);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_refused_streaming_list_falls_back_and_relists_after_410_by_streaming() {
    let invalid = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "Invalid", "code": 422,
        "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                    sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"});
    let mock = MockApi::new().on(
        "GET",
        [
            Reply::json(422, invalid),
            list("7", &[pod("a", "7")]),
            lines(&[event("ADDED", pod("b", "8")), gone()]),
            // The relist streams, at least as new as the last version; an
            // ERROR 410 among initial events: the latest state instead.
            lines(&[gone()]),
            lines(&[event("ADDED", pod("c", "20")), bookmark("21", true)]),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let seen = recorder(&inf);
    let (stop, q) = run_until(&mock, &inf, 6).await;
    assert!(has(&q[0], &STREAM), "{}", q[0]);
    let list0 = [
        "resourceVersion=0",
        "resourceVersionMatch=NotOlderThan",
        "limit=500",
    ];
    assert!(has(&q[1], &list0) && !q[1].contains("watch"), "{}", q[1]);
    assert!(has(&q[2], &["watch=true", "resourceVersion=7"]), "{}", q[2]);
    assert!(!q[2].contains("sendInitialEvents"), "{}", q[2]);
    assert!(
        has(&q[3], &STREAM) && has(&q[3], &["resourceVersion=8"]),
        "{}",
        q[3]
    );
    assert!(
        has(&q[4], &STREAM) && has(&q[4], &["resourceVersion="]),
        "{}",
        q[4]
    );
    assert!(
        has(&q[5], &["watch=true", "resourceVersion=21"]),
        "{}",
        q[5]
    );
    assert_eq!(names(&inf), ["c"]);
    let mut events = seen.lock().clone();
    events[2..].sort();
    assert_eq!(events, ["add a", "add b", "add c", "delete a", "delete b"]);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_watch_line_over_the_bound_is_refused_before_it_is_buffered() {
    let mut huge = br#"{"type":"ADDED","object":{"metadata":{"name":""#.to_vec();
    huge.resize(MAX_FRAME + 2, b'x');
    let mock = MockApi::new().on(
        "GET",
        [
            lines(&[event("ADDED", pod("a", "5")), bookmark("6", true)]),
            Reply::raw(200, "application/json", huge),
            Reply::Stall,
        ],
    );
    let inf = Arc::new(Informer::<CachedPod>::new());
    let (stop, q) = run_until(&mock, &inf, 3).await;
    // The line cannot be skipped: a relist, streaming, from the last
    // version seen.
    assert!(
        has(&q[2], &STREAM) && has(&q[2], &["resourceVersion=6"]),
        "{}",
        q[2]
    );
    assert_eq!(names(&inf), ["a"]);
    stop.cancel();
}

#[test]
fn json_frames_split_at_newlines_within_the_bound() {
    let enc = Encoding::<CachedPod>::Json;
    let mut scanned = 0;
    let buf = b"{\"a\":1}\n{\"b\"";
    let (frame, used) = enc
        .next_frame(buf, &mut scanned)
        .expect("ok")
        .expect("a line");
    assert_eq!((frame, used), (&b"{\"a\":1}"[..], 8));
    assert_eq!(
        enc.next_frame(&buf[used..], &mut scanned).expect("ok"),
        None
    );
    // The partial line was searched once; the rest is searched from there.
    assert_eq!(scanned, 4);
    let mut long = vec![b'x'; MAX_FRAME];
    scanned = 0;
    assert_eq!(enc.next_frame(&long, &mut scanned).expect("ok"), None);
    long.push(b'x');
    assert!(
        enc.next_frame(&long, &mut scanned).is_err(),
        "over the bound, no newline"
    );
    scanned = 0;
    long.push(b'\n');
    assert!(
        enc.next_frame(&long, &mut scanned).is_err(),
        "over the bound, newline"
    );
    // A blank line is no event.
    assert!(enc.event(b"  ").expect("ok").is_none());
}

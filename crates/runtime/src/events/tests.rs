//! The writer over a mocked API server (request shapes only; end-to-end
//! tests against a real API server live in the e2e crate).

use http::Method;
use kcm_mock_api::{MockApi, Reply};

use super::*;
use crate::metrics::Metrics;

/// Answers POST with 201 and PATCH with `patch_status`, echoing the body
/// (a PATCH's `count` comes back on an Event).
fn mock_client(patch_status: u16) -> (kube::Client, MockApi) {
    let patch = if patch_status == 404 {
        Reply::status(404, "NotFound")
    } else {
        Reply::with(|seen| {
            let mut ev = serde_json::json!({"apiVersion":"v1","kind":"Event","metadata":{"name":"x"},"involvedObject":{}});
            ev["count"] = seen.body["count"].clone();
            (200, ev)
        })
    };
    let mock = MockApi::new()
        .on("PATCH", [patch])
        .replies([Reply::Echo(201)]);
    (mock.client(), mock)
}

fn job_ref() -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        namespace: Some("ns1".into()),
        name: Some("pi".into()),
        uid: Some("u1".into()),
        ..ObjectReference::default()
    }
}

#[tokio::test]
async fn creates_then_patches_identical_events() {
    let (client, seen) = mock_client(200);
    let rec = Recorder::with_options(client, "job-controller", "node-a", 10, &Metrics::detached());
    rec.event(
        &job_ref(),
        EventType::Normal,
        "SuccessfulCreate",
        "Created pod: pi-abc",
    );
    rec.event(
        &job_ref(),
        EventType::Normal,
        "SuccessfulCreate",
        "Created pod: pi-abc",
    );
    rec.event(
        &job_ref(),
        EventType::Normal,
        "SuccessfulCreate",
        "Created pod: pi-abc",
    );
    rec.eventf(
        &job_ref(),
        EventType::Warning,
        "BackoffLimitExceeded",
        format_args!("Job has reached the specified backoff limit"),
    );
    rec.flush().await;

    let seen = seen.seen();
    assert_eq!(seen.len(), 4, "{seen:#?}");
    let create = &seen[0];
    assert_eq!(create.method, Method::POST);
    assert_eq!(create.path, "/api/v1/namespaces/ns1/events");
    let b = &create.body;
    let name = b["metadata"]["name"].as_str().expect("name");
    assert!(
        name.starts_with("pi.") && name.len() == "pi.".len() + 16,
        "{name}"
    );
    assert_eq!(b["metadata"]["namespace"], "ns1");
    assert_eq!(b["involvedObject"]["kind"], "Job");
    assert_eq!(b["involvedObject"]["uid"], "u1");
    assert_eq!(b["type"], "Normal");
    assert_eq!(b["reason"], "SuccessfulCreate");
    assert_eq!(b["message"], "Created pod: pi-abc");
    assert_eq!(b["count"], 1);
    assert_eq!(b["source"]["component"], "job-controller");
    assert_eq!(b["reportingComponent"], "job-controller");
    assert_eq!(b["reportingInstance"], "node-a");
    assert_eq!(b["firstTimestamp"], b["lastTimestamp"]);

    for (i, want) in [(1, 2), (2, 3)] {
        assert_eq!(seen[i].method, Method::PATCH);
        assert_eq!(
            seen[i].path,
            format!("/api/v1/namespaces/ns1/events/{name}")
        );
        assert_eq!(seen[i].body["count"], want);
        assert!(seen[i].body["lastTimestamp"].is_string());
    }
    assert_eq!(seen[3].method, Method::POST);
    assert_eq!(seen[3].body["type"], "Warning");
    assert_ne!(seen[3].body["metadata"]["name"], name);
}

#[tokio::test]
async fn patch_of_expired_event_recreates_it_with_the_count() {
    let (client, seen) = mock_client(404);
    let rec = Recorder::with_options(
        client,
        "disruption-controller",
        "i",
        10,
        &Metrics::detached(),
    );
    let node = ObjectReference {
        kind: Some("Node".into()),
        name: Some("n1".into()),
        ..ObjectReference::default()
    };
    rec.event(&node, EventType::Normal, "R", "m");
    rec.event(&node, EventType::Normal, "R", "m");
    rec.flush().await;
    let seen = seen.seen();
    let methods: Vec<_> = seen.iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, [Method::POST, Method::PATCH, Method::POST]);
    assert_eq!(
        seen[0].path, "/api/v1/namespaces/default/events",
        "cluster-scoped -> default"
    );
    assert_eq!(seen[2].body["count"], 2);
    assert_eq!(
        seen[2].body["metadata"]["name"],
        seen[0].body["metadata"]["name"]
    );
}

#[tokio::test]
async fn annotated_recorder_marks_created_events_and_leaves_the_rest_as_upstream() {
    let (client, seen) = mock_client(404);
    let marks = BTreeMap::from([("kcm-rs.dev/mode".to_string(), "beside-kcm".to_string())]);
    let rec = Recorder::annotated(client, "job-controller", marks, &Metrics::detached());
    rec.event(&job_ref(), EventType::Normal, "Completed", "Job completed");
    // The count patch finds the event gone: it is created again, marked.
    rec.event(&job_ref(), EventType::Normal, "Completed", "Job completed");
    rec.flush().await;
    let seen = seen.seen();
    let methods: Vec<_> = seen.iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, [Method::POST, Method::PATCH, Method::POST]);
    for create in [&seen[0], &seen[2]] {
        let b = &create.body;
        assert_eq!(
            b["metadata"]["annotations"]["kcm-rs.dev/mode"],
            "beside-kcm"
        );
        assert_eq!(b["source"]["component"], "job-controller");
        assert_eq!(b["reportingComponent"], "job-controller");
    }
    assert!(seen[1].body.get("metadata").is_none(), "count patch only");

    let (client, seen) = mock_client(200);
    let plain = Recorder::with_options(client, "job-controller", "i", 10, &Metrics::detached());
    plain.event(&job_ref(), EventType::Normal, "Completed", "Job completed");
    plain.flush().await;
    assert!(seen.seen()[0].body["metadata"].get("annotations").is_none());
}

#[tokio::test]
async fn full_queue_drops_instead_of_blocking() {
    let component = "drop-test-controller";
    let metrics = Metrics::detached();
    let (client, seen) = mock_client(200);
    let rec = Recorder::with_options(client, component, "i", 1, &metrics);
    // The current-thread runtime does not run the writer until we yield, so
    // the first event fills the queue and the next two are dropped.
    rec.event(&job_ref(), EventType::Normal, "A", "1");
    rec.event(&job_ref(), EventType::Normal, "B", "2");
    rec.event(&job_ref(), EventType::Normal, "C", "3");
    rec.flush().await;
    assert_eq!(seen.seen().len(), 1);
    let text = metrics.render();
    assert!(
        text.contains(
            "kcm_event_recorder_dropped_events_total{component=\"drop-test-controller\"} 2"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn suffixes_are_unique_within_a_nanosecond() {
    let (client, _) = mock_client(200);
    let mut w = Writer {
        client,
        component: "c",
        instance: "i".into(),
        annotations: BTreeMap::new(),
        correlator: EventCorrelator::default(),
        last_suffix: 0,
        filtered: 0,
        spam_filtered: Metrics::detached()
            .events
            .spam_filtered
            .with_label_values(&["c"]),
    };
    let at = Timestamp::from_second(1_700_000_000).expect("ts");
    let a = w.next_suffix(at);
    let b = w.next_suffix(at);
    assert_eq!(a, unix_nanos(at));
    assert_eq!(b, a + 1);
}

#[tokio::test]
async fn similar_events_are_combined_into_one_patched_event() {
    let (client, seen) = mock_client(200);
    let rec = Recorder::with_options(client, "job-controller", "i", 100, &Metrics::detached());
    for i in 1..=12 {
        rec.event(
            &job_ref(),
            EventType::Normal,
            "SuccessfulCreate",
            format!("Created pod: pi-{i}"),
        );
    }
    rec.flush().await;
    let seen = seen.seen();
    let methods: Vec<_> = seen.iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods[..10], [Method::POST; 10]);
    assert_eq!(methods[10..], [Method::PATCH, Method::PATCH]);
    assert_eq!(seen[8].body["message"], "Created pod: pi-9");
    let combined = &seen[9].body;
    assert_eq!(
        combined["message"],
        "(combined from similar events): Created pod: pi-10"
    );
    assert_eq!(combined["reason"], "SuccessfulCreate");
    assert_eq!(combined["count"], 1);
    let name = combined["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("pi."), "{name}");
    for (i, count) in [(10, 2), (11, 3)] {
        assert_eq!(
            seen[i].path,
            format!("/api/v1/namespaces/ns1/events/{name}")
        );
        assert_eq!(seen[i].body["count"], count);
    }
    assert_eq!(
        seen[11].body["message"],
        "(combined from similar events): Created pod: pi-12"
    );
}

#[tokio::test]
async fn spam_filter_drops_and_counts_events_beyond_the_burst() {
    let component = "spam-test-controller";
    let metrics = Metrics::detached();
    let (client, seen) = mock_client(200);
    let rec = Recorder::with_options(client, component, "i", 100, &metrics);
    // Distinct reasons, so neither folding nor aggregation applies.
    for i in 1..=27 {
        rec.event(&job_ref(), EventType::Normal, &format!("R{i}"), "m");
    }
    let mut other = job_ref();
    other.name = Some("other".into());
    rec.event(&other, EventType::Normal, "R1", "m");
    rec.flush().await;
    let seen = seen.seen();
    assert_eq!(seen.len(), 26, "25 about pi, 1 about other");
    assert!(seen.iter().all(|s| s.method == Method::POST));
    assert_eq!(seen[24].body["reason"], "R25");
    assert_eq!(seen[25].body["involvedObject"]["name"], "other");
    let text = metrics.render();
    assert!(
        text.contains(
            "kcm_event_recorder_spam_filtered_events_total{component=\"spam-test-controller\"} 2"
        ),
        "{text}"
    );
}

#[test]
fn transient_errors() {
    let status = |code| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    };
    assert!(is_transient(&status(429)));
    assert!(is_transient(&status(503)));
    assert!(!is_transient(&status(403)));
    assert!(!is_transient(&status(422)));
}

use super::*;

fn pod_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("ns1".into()),
        name: Some(name.into()),
        uid: Some("uid-1".into()),
        ..ObjectReference::default()
    }
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("timestamp")
}

fn entry(name: &str, count: i32, first: i64, last: i64) -> CacheEntry {
    CacheEntry {
        name: name.into(),
        namespace: "ns1".into(),
        count,
        first: ts(first),
        last: ts(last),
    }
}

#[test]
fn names_are_involved_name_dot_16_hex() {
    assert_eq!(
        event_name("job-1", 0x17b8_e6f1_a2c3_d4e5),
        "job-1.17b8e6f1a2c3d4e5"
    );
    assert_eq!(event_name("job-1", 0xff), "job-1.00000000000000ff");
    let n = event_name("job-1", unix_nanos(ts(0)));
    let suffix = n.strip_prefix("job-1.").expect("prefix");
    assert_eq!(suffix.len(), 16);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn long_names_are_shortened_to_253() {
    let long = "a".repeat(300);
    let n = event_name(&long, 1);
    assert_eq!(n.len(), 253);
    assert!(n.ends_with(".0000000000000001"));
}

#[test]
fn cluster_scoped_objects_get_default_namespace() {
    let node = ObjectReference {
        kind: Some("Node".into()),
        name: Some("n1".into()),
        ..ObjectReference::default()
    };
    assert_eq!(event_namespace(&node), "default");
    let empty_ns = ObjectReference {
        namespace: Some(String::new()),
        ..node
    };
    assert_eq!(event_namespace(&empty_ns), "default");
    assert_eq!(event_namespace(&pod_ref("p")), "ns1");
}

#[test]
fn event_object_has_client_go_fields() {
    let obj = pod_ref("p");
    let data = EventData {
        involved: &obj,
        type_: EventType::Warning,
        reason: "TaintManagerEviction",
        message: "Marking for deletion Pod ns1/p",
        component: "taint-eviction-controller",
        instance: "host-1",
    };
    let e = build_event(&data, "p.0000000000000001".into(), 1, ts(0), ts(0));
    assert_eq!(e.metadata.name.as_deref(), Some("p.0000000000000001"));
    assert_eq!(e.metadata.namespace.as_deref(), Some("ns1"));
    assert_eq!(e.involved_object, obj);
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.reason.as_deref(), Some("TaintManagerEviction"));
    assert_eq!(e.count, Some(1));
    assert_eq!(
        e.source.and_then(|s| s.component).as_deref(),
        Some("taint-eviction-controller")
    );
    assert_eq!(
        e.reporting_component.as_deref(),
        Some("taint-eviction-controller")
    );
    assert_eq!(e.reporting_instance.as_deref(), Some("host-1"));
    assert_eq!(e.first_timestamp, Some(Time(ts(0))));
    assert_eq!(e.last_timestamp, Some(Time(ts(0))));
    assert!(e.event_time.is_none(), "legacy events carry no eventTime");
}

#[test]
fn patch_carries_count_last_timestamp_and_message() {
    let p = count_patch(3, ts(0), "m");
    assert_eq!(
        p,
        serde_json::json!({"count": 3, "lastTimestamp": "2023-11-14T22:13:20Z", "message": "m"})
    );
}

#[test]
fn first_event_creates_repeats_patch_within_window() {
    let mut c = Correlator::default();
    let key = EventKey::new(&pod_ref("p"), EventType::Normal, "SuccessfulCreate", "m");
    assert_eq!(c.decide(&key, ts(0)), Decision::Create);
    c.record(key.clone(), entry("p.1", 1, 0, 0));

    let d = c.decide(&key, ts(599));
    assert_eq!(d, Decision::Patch(entry("p.1", 2, 0, 599)));
    if let Decision::Patch(e) = d {
        c.record(key.clone(), e);
    }
    // The window slides from the last occurrence.
    assert_eq!(
        c.decide(&key, ts(599 + 600)),
        Decision::Patch(entry("p.1", 3, 0, 1199))
    );
    assert_eq!(c.decide(&key, ts(599 + 601)), Decision::Create);
}

#[test]
fn decide_does_not_mutate() {
    let mut c = Correlator::default();
    let key = EventKey::new(&pod_ref("p"), EventType::Normal, "R", "m");
    c.record(key.clone(), entry("p.1", 1, 0, 0));
    let _ = c.decide(&key, ts(1));
    let _ = c.decide(&key, ts(2));
    assert_eq!(
        c.decide(&key, ts(3)),
        Decision::Patch(entry("p.1", 2, 0, 3))
    );
}

#[test]
fn any_differing_field_is_a_different_event() {
    let mut c = Correlator::default();
    let base = EventKey::new(&pod_ref("p"), EventType::Normal, "R", "m");
    c.record(base.clone(), entry("p.1", 1, 0, 0));
    let mut other_uid = pod_ref("p");
    other_uid.uid = Some("uid-2".into());
    for key in [
        EventKey::new(&pod_ref("q"), EventType::Normal, "R", "m"),
        EventKey::new(&other_uid, EventType::Normal, "R", "m"),
        EventKey::new(&pod_ref("p"), EventType::Warning, "R", "m"),
        EventKey::new(&pod_ref("p"), EventType::Normal, "R2", "m"),
        EventKey::new(&pod_ref("p"), EventType::Normal, "R", "m2"),
    ] {
        assert_eq!(c.decide(&key, ts(1)), Decision::Create, "{key:?}");
    }
    assert!(matches!(c.decide(&base, ts(1)), Decision::Patch(_)));
}

#[test]
fn cache_is_bounded_evicting_expired_then_oldest() {
    let mut c = Correlator::new(2, CORRELATION_WINDOW);
    let k = |r: &str| EventKey::new(&pod_ref("p"), EventType::Normal, r, "m");
    c.record(k("a"), entry("a", 1, 0, 0));
    c.record(k("b"), entry("b", 1, 0, 10));
    c.record(k("c"), entry("c", 1, 0, 20));
    assert_eq!(c.len(), 2);
    assert_eq!(
        c.decide(&k("a"), ts(21)),
        Decision::Create,
        "oldest evicted"
    );
    assert!(matches!(c.decide(&k("b"), ts(21)), Decision::Patch(_)));
    // Both expired at t=1000: recording a new key clears them.
    c.record(k("d"), entry("d", 1, 1000, 1000));
    assert_eq!(c.len(), 1);
    c.forget(&k("d"));
    assert!(c.is_empty());
}

/// What the writer sent for one recorded event.
#[derive(Debug, PartialEq, Eq)]
enum Sent {
    Post {
        name: String,
        message: String,
    },
    Patch {
        name: String,
        count: i32,
        message: String,
    },
    Dropped,
}

/// Plays the writer against an API server accepting every write.
#[derive(Default)]
struct Sim {
    c: EventCorrelator,
    created: u32,
}

impl Sim {
    fn emit(&mut self, obj: &ObjectReference, reason: &str, message: &str, at: i64) -> Sent {
        let at = ts(at);
        match self
            .c
            .correlate(obj, EventType::Normal, reason, message, at)
        {
            None => Sent::Dropped,
            Some(Planned {
                key,
                message,
                decision: Decision::Create,
            }) => {
                self.created += 1;
                let name = format!("e{}", self.created);
                self.c.record(key, entry(&name, 1, 0, 0));
                Sent::Post { name, message }
            }
            Some(Planned {
                key,
                message,
                decision: Decision::Patch(e),
            }) => {
                let sent = Sent::Patch {
                    name: e.name.clone(),
                    count: e.count,
                    message,
                };
                self.c.record(key, CacheEntry { last: at, ..e });
                sent
            }
        }
    }
}

fn post(name: &str, message: &str) -> Sent {
    Sent::Post {
        name: name.into(),
        message: message.into(),
    }
}

fn patch(name: &str, count: i32, message: &str) -> Sent {
    Sent::Patch {
        name: name.into(),
        count,
        message: message.into(),
    }
}

#[test]
fn similar_events_become_one_combined_event_patched_with_growing_count() {
    let mut sim = Sim::default();
    let job = pod_ref("pi");
    for i in 1..=9 {
        let m = format!("Created pod: pi-{i}");
        assert_eq!(
            sim.emit(&job, "SuccessfulCreate", &m, i),
            post(&format!("e{i}"), &m)
        );
    }
    // The 10th similar event within the window is the first combined
    // one (defaultAggregateMaxEvents = 10)…
    assert_eq!(
        sim.emit(&job, "SuccessfulCreate", "Created pod: pi-10", 10),
        post("e10", "(combined from similar events): Created pod: pi-10")
    );
    // …and the 11th and later patch it with a growing count and the
    // latest message.
    for i in 11..=20 {
        assert_eq!(
            sim.emit(&job, "SuccessfulCreate", &format!("Created pod: pi-{i}"), i),
            patch(
                "e10",
                i32::try_from(i - 9).expect("small"),
                &format!("(combined from similar events): Created pod: pi-{i}")
            )
        );
    }
    // A different reason is a different group.
    assert_eq!(
        sim.emit(&job, "Completed", "Job completed", 21),
        post("e11", "Job completed")
    );
}

#[test]
fn identical_events_still_fold_by_count() {
    let mut sim = Sim::default();
    let p = pod_ref("p");
    assert_eq!(sim.emit(&p, "R", "m", 0), post("e1", "m"));
    for n in 2..=20 {
        assert_eq!(sim.emit(&p, "R", "m", i64::from(n)), patch("e1", n, "m"));
    }
    assert_eq!(sim.emit(&p, "R", "other", 21), post("e2", "other"));
    assert_eq!(sim.emit(&p, "R", "m", 22), patch("e1", 21, "m"));
}

#[test]
fn spam_filter_allows_a_burst_of_25_per_object_then_refills() {
    let mut sim = Sim::default();
    let p = pod_ref("p");
    for i in 1..=25 {
        let reason = format!("R{i}");
        assert_eq!(
            sim.emit(&p, &reason, "m", 0),
            post(&format!("e{i}"), "m"),
            "{i}"
        );
    }
    assert_eq!(sim.emit(&p, "R26", "m", 0), Sent::Dropped);
    assert_eq!(sim.emit(&p, "R27", "m", 299), Sent::Dropped);
    // One token per 300 s (defaultSpamQPS = 1/300).
    assert_eq!(sim.emit(&p, "R28", "m", 300), post("e26", "m"));
    assert_eq!(sim.emit(&p, "R29", "m", 300), Sent::Dropped);
    assert_eq!(sim.emit(&p, "R30", "m", 600), post("e27", "m"));
}

#[test]
fn objects_have_separate_spam_buckets() {
    let mut sim = Sim::default();
    let (p, q) = (pod_ref("p"), pod_ref("q"));
    for i in 1..=25 {
        assert!(matches!(
            sim.emit(&p, &format!("R{i}"), "m", 0),
            Sent::Post { .. }
        ));
    }
    assert_eq!(sim.emit(&p, "R26", "m", 0), Sent::Dropped);
    for i in 1..=25 {
        assert!(matches!(
            sim.emit(&q, &format!("R{i}"), "m", 0),
            Sent::Post { .. }
        ));
    }
    assert_eq!(sim.emit(&q, "R26", "m", 0), Sent::Dropped);
}

#[test]
fn count_patches_draw_tokens_and_drops_are_not_counted() {
    let mut sim = Sim::default();
    let p = pod_ref("p");
    assert_eq!(sim.emit(&p, "R", "m", 0), post("e1", "m"));
    for n in 2..=25 {
        assert_eq!(sim.emit(&p, "R", "m", 1), patch("e1", n, "m"));
    }
    assert_eq!(sim.emit(&p, "R", "m", 2), Sent::Dropped);
    assert_eq!(sim.emit(&p, "R", "m", 300), patch("e1", 26, "m"));
}

#[test]
fn hundred_pod_job_writes_10_posts_and_15_patches() {
    let mut sim = Sim::default();
    let job = pod_ref("pi");
    let sent: Vec<Sent> = (0..100)
        .map(|i| sim.emit(&job, "SuccessfulCreate", &format!("Created pod: pi-{i}"), 0))
        .collect();
    let posts = sent
        .iter()
        .filter(|s| matches!(s, Sent::Post { .. }))
        .count();
    let patches = sent
        .iter()
        .filter(|s| matches!(s, Sent::Patch { .. }))
        .count();
    assert_eq!((posts, patches, 100 - posts - patches), (10, 15, 75));
    assert_eq!(
        sent[24],
        patch(
            "e10",
            16,
            "(combined from similar events): Created pod: pi-24"
        )
    );
}

use super::*;
use serde_json::json;

fn job(rv: &str, active: i32, fields: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": "j", "namespace": "ns", "resourceVersion": rv,
                      "managedFields": fields },
        "status": { "active": active },
    }))
    .expect("job")
}

fn entry(manager: &str, sub: Option<&str>, time: &str) -> serde_json::Value {
    let mut e = json!({ "manager": manager, "operation": "Update",
        "apiVersion": "batch/v1", "time": time, "fieldsType": "FieldsV1", "fieldsV1": {} });
    if let Some(s) = sub {
        e["subresource"] = json!(s);
    }
    e
}

fn change(rv: u64, writer: Option<&str>) -> Change {
    Change {
        rv,
        writer: writer.map(str::to_string),
        print: rv,
    }
}

const KEY: &str = "ns/j";

#[test]
fn only_a_status_change_is_a_change_and_the_moved_entry_names_its_writer() {
    let t0 = "2025-01-01T00:00:00Z";
    let t1 = "2025-01-01T00:00:05Z";
    // The author's planted entry (a controller manager, far in the future)
    // is in both versions: it names nobody.
    let forged = entry(
        "kube-controller-manager",
        Some("status"),
        "2099-01-01T00:00:00Z",
    );
    let old = job(
        "10",
        1,
        json!([forged, entry("kcm-rs", Some("status"), t0)]),
    );
    let same_status = job("11", 1, json!([forged, entry("kubectl", None, t1)]));
    assert_eq!(
        status_change(&old, &same_status),
        None,
        "spec/metadata only"
    );
    let new = job(
        "12",
        2,
        json!([
            forged,
            entry("kcm-rs", Some("status"), t0),
            entry("x-ctl", Some("status"), t1)
        ]),
    );
    let c = status_change(&old, &new).expect("a status change");
    assert_eq!((c.rv, c.writer.as_deref()), (12, Some("x-ctl")));
    // Within the same second and fields, nothing moves: unknown writer.
    let again = job("13", 3, json!(new.metadata.managed_fields.clone()));
    let c = status_change(&new, &again).expect("change");
    assert_eq!(c.writer, None);
}

#[test]
fn our_writes_are_ours_whether_the_watch_or_the_answer_comes_first() {
    let l = Ledger::new(OnConflict::Stop);
    let now = Instant::now();
    // Answer first, then the watch.
    l.begin(KEY);
    assert!(l.end(KEY, Outcome::Written(5), now).is_empty());
    assert_eq!(l.observe(KEY, change(5, Some(OWN_MANAGER)), now), None);
    // Watch first (the write still in flight), then the answer.
    l.begin(KEY);
    assert_eq!(l.observe(KEY, change(7, None), now), None);
    assert!(l.end(KEY, Outcome::Written(7), now).is_empty());
    assert!(!l.blocks(KEY, now));
    assert!(l.by_writer(now).is_empty());
    assert!(l.jobs.lock().is_empty(), "nothing kept for a quiet Job");
}

#[test]
fn a_change_at_a_version_we_did_not_write_is_foreign_and_stops_only_that_job() {
    let l = Ledger::new(OnConflict::Stop);
    let now = Instant::now();
    let f = l
        .observe(KEY, change(9, Some("kube-controller-manager")), now)
        .expect("foreign");
    assert_eq!((f.writer.as_str(), f.count), ("kube-controller-manager", 1));
    assert!(
        !l.blocks(KEY, now),
        "a one-off edit is reported, not stopped"
    );
    let f = l
        .observe(KEY, change(10, Some("kube-controller-manager")), now)
        .expect("foreign");
    assert_eq!(f.count, 2);
    assert!(
        l.blocks(KEY, now),
        "a writer that keeps writing stops the Job"
    );
    assert!(!l.blocks("ns/other", now), "one Job only");
    assert_eq!(
        l.by_writer(now),
        BTreeMap::from([("kube-controller-manager".to_string(), 1)])
    );
    // Seen while our own write was in flight: judged when it ends.
    l.begin("ns/b");
    assert_eq!(l.observe("ns/b", change(20, None), now), None);
    let found = l.end("ns/b", Outcome::Written(21), now);
    assert_eq!(
        found,
        vec![Foreign {
            writer: UNKNOWN_WRITER.into(),
            rv: 20,
            count: 1,
        }]
    );
    // The contest expires two minutes after the last foreign change.
    let later = now + WINDOW;
    assert!(!l.blocks(KEY, later));
    assert!(l.by_writer(later).is_empty());
    let c = Ledger::new(OnConflict::Continue);
    assert!(c.observe(KEY, change(3, None), now).is_some());
    assert!(c.observe(KEY, change(4, None), now).is_some());
    assert!(c.contested(KEY, now).is_some() && !c.blocks(KEY, now));
    c.forget(KEY);
    assert!(c.contested(KEY, now).is_none());
}

#[test]
fn a_write_without_an_answer_is_recognised_by_what_it_said() {
    let l = Ledger::new(OnConflict::Stop);
    let now = Instant::now();
    l.begin(KEY);
    let sent = 77;
    assert!(l.end(KEY, Outcome::Unknown { print: sent }, now).is_empty());
    let mut c = change(30, None);
    c.print = sent;
    assert_eq!(l.observe(KEY, c, now), None, "it was written after all");
    assert!(
        l.observe(KEY, change(31, None), now).is_some(),
        "but not twice"
    );
    l.begin("ns/r");
    assert!(l.end("ns/r", Outcome::Refused, now).is_empty());
    assert!(l.observe("ns/r", change(40, None), now).is_some());
}

#[test]
fn fingerprints_ignore_how_empty_parts_are_spelled() {
    let a: JobStatus = serde_json::from_value(json!({ "active": 1,
        "uncountedTerminatedPods": { "succeeded": [], "failed": [] }, "conditions": [] }))
    .expect("status");
    let b: JobStatus = serde_json::from_value(json!({ "active": 1 })).expect("status");
    let c: JobStatus = serde_json::from_value(json!({ "active": 2 })).expect("status");
    assert_eq!(fingerprint(Some(&a)), fingerprint(Some(&b)));
    assert_ne!(fingerprint(Some(&b)), fingerprint(Some(&c)));
}

#[test]
fn writer_names_on_the_gauge_are_bounded() {
    let l = Ledger::new(OnConflict::Continue);
    let now = Instant::now();
    for i in 0..(MAX_WRITERS + 5) {
        let w = format!("writer-{i}");
        l.observe(&format!("ns/j{i}"), change(i as u64 + 1, Some(&w)), now);
    }
    let by = l.by_writer(now);
    assert_eq!(by.len(), MAX_WRITERS + 1);
    assert_eq!(by.get(OTHER_WRITER), Some(&5));
    assert_eq!(by.values().sum::<i64>(), (MAX_WRITERS + 5) as i64);
}

//! The pure half of the recorder: event names, the `Event` objects and
//! patches written, the de-duplication cache deciding between creating a
//! new event and bumping the count of an existing one (client-go's
//! `eventLogger`), and [`EventCorrelator`] chaining similar-event
//! aggregation, de-duplication and the spam filter the way client-go's
//! `EventCorrelator` does. Time is always passed in, never read here.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::EventType;
use super::aggregate::{Aggregator, SimilarKey, combined_message};
use super::spam::{SpamFilter, SpamKey};

/// Identical events closer together than this are folded into one object
/// (client-go aggregates within `defaultAggregateIntervalInSeconds`, 600 s).
pub const CORRELATION_WINDOW: Duration = Duration::from_secs(600);
/// Events remembered for correlation (client-go's `maxLruCacheEntries`).
pub const MAX_CACHE_ENTRIES: usize = 4096;
/// Longest object name the API server accepts (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;
/// `.` plus 16 hex digits.
const SUFFIX_LEN: usize = 17;

/// What makes two events "the same": client-go's `getEventKey` fields minus
/// the source, which is fixed per recorder. A combined event (see
/// [`super::aggregate`]) has its own key per group of similar events,
/// independent of the message, so that it is patched whatever its latest
/// member said.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    combined: bool,
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
    field_path: String,
    type_: EventType,
    reason: String,
    message: String,
}

impl EventKey {
    /// The key of an event about `obj`.
    pub fn new(obj: &ObjectReference, type_: EventType, reason: &str, message: &str) -> Self {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        EventKey {
            combined: false,
            api_version: s(&obj.api_version),
            kind: s(&obj.kind),
            namespace: s(&obj.namespace),
            name: s(&obj.name),
            uid: s(&obj.uid),
            field_path: s(&obj.field_path),
            type_,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The key of the combined event for events of `type_` and `reason`
    /// about `obj`; the field path and message do not take part.
    pub fn combined(obj: &ObjectReference, type_: EventType, reason: &str) -> Self {
        let mut obj = obj.clone();
        obj.field_path = None;
        EventKey {
            combined: true,
            ..EventKey::new(&obj, type_, reason, "")
        }
    }
}

/// The namespace an event about `obj` is written to: the object's own, or
/// `default` for cluster-scoped objects (nodes), as client-go's `makeEvent`.
pub fn event_namespace(obj: &ObjectReference) -> String {
    match obj.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_owned(),
        _ => "default".to_owned(),
    }
}

/// `<involved name>.<suffix as 16 hex digits>`, client-go's
/// `fmt.Sprintf("%v.%x", ref.Name, t.UnixNano())`. The involved name is
/// shortened if the result would exceed 253 characters.
pub fn event_name(involved_name: &str, suffix: u64) -> String {
    let mut end = involved_name.len().min(MAX_NAME_LEN - SUFFIX_LEN);
    while !involved_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{suffix:016x}", &involved_name[..end])
}

/// Nanoseconds since the Unix epoch (0 before it), the name suffix source.
pub fn unix_nanos(at: Timestamp) -> u64 {
    u64::try_from(at.as_nanosecond()).unwrap_or(0)
}

/// The fields of an event that do not depend on correlation.
#[derive(Clone, Debug)]
pub struct EventData<'a> {
    /// The object the event is about.
    pub involved: &'a ObjectReference,
    /// Normal or Warning.
    pub type_: EventType,
    /// Upstream reason, e.g. `SuccessfulCreate`.
    pub reason: &'a str,
    /// Human-readable message.
    pub message: &'a str,
    /// `source.component` and `reportingComponent`.
    pub component: &'a str,
    /// `reportingInstance`.
    pub instance: &'a str,
}

/// A core/v1 `Event` as client-go's recorder writes it.
pub fn build_event(
    data: &EventData<'_>,
    name: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(event_namespace(data.involved)),
            ..ObjectMeta::default()
        },
        involved_object: data.involved.clone(),
        type_: Some(data.type_.as_str().to_owned()),
        reason: Some(data.reason.to_owned()),
        message: Some(data.message.to_owned()),
        first_timestamp: Some(Time(first)),
        last_timestamp: Some(Time(last)),
        count: Some(count),
        source: Some(EventSource {
            component: Some(data.component.to_owned()),
            host: None,
        }),
        reporting_component: Some(data.component.to_owned()),
        reporting_instance: Some(data.instance.to_owned()),
        ..Event::default()
    }
}

/// The merge patch bumping an existing event, the fields client-go's
/// `eventLogger` patches.
pub fn count_patch(count: i32, last: Timestamp, message: &str) -> serde_json::Value {
    serde_json::json!({
        "count": count,
        "lastTimestamp": Time(last),
        "message": message,
    })
}

/// A remembered event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// Event object name.
    pub name: String,
    /// Event object namespace.
    pub namespace: String,
    /// Count last written.
    pub count: i32,
    /// `firstTimestamp` written at creation.
    pub first: Timestamp,
    /// `lastTimestamp` last written.
    pub last: Timestamp,
}

/// What to write for one recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create a new object, count 1.
    Create,
    /// Patch the remembered object to this count (previous + 1).
    Patch(CacheEntry),
}

/// Remembers recently written events by [`EventKey`].
#[derive(Debug)]
pub struct Correlator {
    entries: HashMap<EventKey, CacheEntry>,
    capacity: usize,
    window: Duration,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator::new(MAX_CACHE_ENTRIES, CORRELATION_WINDOW)
    }
}

impl Correlator {
    /// A cache of at most `capacity` entries folding repeats within `window`.
    pub fn new(capacity: usize, window: Duration) -> Self {
        Correlator {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            window,
        }
    }

    /// Decides how an event with `key` observed at `at` is written. Does not
    /// change the cache: call [`Correlator::record`] once the write succeeded.
    pub fn decide(&self, key: &EventKey, at: Timestamp) -> Decision {
        match self.entries.get(key) {
            Some(e) if within(e.last, at, self.window) => Decision::Patch(CacheEntry {
                count: e.count.saturating_add(1),
                last: at.max(e.last),
                ..e.clone()
            }),
            _ => Decision::Create,
        }
    }

    /// Remembers what was written for `key`, evicting expired entries and
    /// then the least recently seen one when full.
    pub fn record(&mut self, key: EventKey, entry: CacheEntry) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let (now, window) = (entry.last, self.window);
            self.entries.retain(|_, e| within(e.last, now, window));
            if self.entries.len() >= self.capacity
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.last)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, entry);
    }

    /// Forgets `key` (its object turned out to be gone).
    pub fn forget(&mut self, key: &EventKey) {
        self.entries.remove(key);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Whether `at` is no more than `window` after `last` (a clock stepping
/// backwards counts as within).
pub(super) fn within(last: Timestamp, at: Timestamp, window: Duration) -> bool {
    let elapsed = at.as_nanosecond().saturating_sub(last.as_nanosecond());
    elapsed <= i128::try_from(window.as_nanos()).unwrap_or(i128::MAX)
}

/// How to write one recorded event that passed the spam filter. Once the
/// write succeeded, pass `key` and the entry written to
/// [`EventCorrelator::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// De-duplication key (of the combined event when combined).
    pub key: EventKey,
    /// The message to write: the event's own, or the combined one.
    pub message: String,
    /// Create a new object or patch a remembered one.
    pub decision: Decision,
}

/// Similar-event aggregation, de-duplication and spam filtering for one
/// recorder, in client-go's order: the event is first matched against its
/// group of similar events (possibly becoming the group's combined event),
/// then against the events already written (create or count patch), and
/// finally it must get a token from its object's spam bucket.
#[derive(Debug, Default)]
pub struct EventCorrelator {
    aggregator: Aggregator,
    written: Correlator,
    spam: SpamFilter,
}

impl EventCorrelator {
    /// Correlates from the given parts (for tests with small limits).
    pub fn with_parts(aggregator: Aggregator, written: Correlator, spam: SpamFilter) -> Self {
        EventCorrelator {
            aggregator,
            written,
            spam,
        }
    }

    /// Plans the write of an event recorded at `at`, or returns `None` when
    /// the spam filter drops it. Updates the
    /// aggregation and spam state (every recorded event counts there, as
    /// upstream), but not the de-duplication cache: see
    /// [`EventCorrelator::record`].
    pub fn correlate(
        &mut self,
        obj: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
        at: Timestamp,
    ) -> Option<Planned> {
        let combine = self
            .aggregator
            .observe(SimilarKey::new(obj, type_, reason), message, at);
        let (key, message) = if combine {
            (
                EventKey::combined(obj, type_, reason),
                combined_message(message),
            )
        } else {
            (
                EventKey::new(obj, type_, reason, message),
                message.to_owned(),
            )
        };
        // Upstream checks the spam bucket after correlation, so count
        // patches draw tokens too.
        if !self.spam.allow(SpamKey::new(obj, type_), at) {
            return None;
        }
        let decision = self.written.decide(&key, at);
        Some(Planned {
            key,
            message,
            decision,
        })
    }

    /// Remembers what was written for `key`. Dropped and failed writes are
    /// not recorded, so counts reflect events that reached the API server
    /// (upstream also counts spam-dropped repeats).
    pub fn record(&mut self, key: EventKey, entry: CacheEntry) {
        self.written.record(key, entry);
    }

    /// Forgets `key` (its object turned out to be gone).
    pub fn forget(&mut self, key: &EventKey) {
        self.written.forget(key);
    }
}

#[cfg(test)]
mod tests {
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
}

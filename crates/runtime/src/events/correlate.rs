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

use super::aggregate::{Aggregator, SimilarKey, combined_message};
use super::cache::{EventType, Involved, MAX_CACHE_ENTRIES, within};
use super::spam::{SpamFilter, SpamKey};

/// Identical events closer together than this are folded into one object
/// (client-go aggregates within `defaultAggregateIntervalInSeconds`, 600 s).
pub const CORRELATION_WINDOW: Duration = Duration::from_secs(600);
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
    object: Involved,
    field_path: String,
    type_: EventType,
    reason: String,
    message: String,
}

impl EventKey {
    /// The key of an event about `obj`.
    pub fn new(obj: &ObjectReference, type_: EventType, reason: &str, message: &str) -> Self {
        EventKey {
            combined: false,
            object: Involved::of(obj),
            field_path: obj.field_path.clone().unwrap_or_default(),
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
mod tests;

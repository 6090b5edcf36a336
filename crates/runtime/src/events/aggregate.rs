//! Folding of *similar* events: events about one object with the same type
//! and reason but different messages (client-go's `EventAggregator`).
//!
//! Each group of similar events remembers the distinct messages seen while
//! the group is active. Once the group holds [`AGGREGATE_MAX_EVENTS`]
//! distinct messages, that event and every later one with a message not
//! currently remembered is written as a single "combined" event whose
//! message is [`COMBINED_PREFIX`] followed by the latest message; repeats of
//! the combined event are then count-patched like identical events. A group
//! that sees nothing for longer than [`AGGREGATE_WINDOW`] starts over.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

use super::cache::{EventType, Involved, MAX_CACHE_ENTRIES, drop_oldest_if_full, within};

/// Distinct messages within one group before events are combined. Matches
/// client-go's `defaultAggregateMaxEvents` (10): the 10th distinct message
/// is the first one written as the combined event.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// A group idle for longer than this is forgotten. Matches client-go's
/// `defaultAggregateIntervalInSeconds` (600).
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Prefix of a combined event's message; the text is what
/// `kubectl describe` users know from upstream, so it must match exactly.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// The message written for a combined event whose latest member said
/// `latest`.
pub fn combined_message(latest: &str) -> String {
    format!("{COMBINED_PREFIX}{latest}")
}

/// What makes events "similar": the involved object (without its field
/// path), type and reason. Upstream also keys on the source and reporting
/// component/instance; those are fixed per recorder here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimilarKey {
    object: Involved,
    type_: EventType,
    reason: String,
}

impl SimilarKey {
    /// The group an event about `obj` belongs to.
    pub fn new(obj: &ObjectReference, type_: EventType, reason: &str) -> Self {
        SimilarKey {
            object: Involved::of(obj),
            type_,
            reason: reason.to_owned(),
        }
    }
}

#[derive(Debug)]
struct Group {
    /// Distinct messages, oldest first; never more than `max_events - 1`
    /// between calls.
    messages: VecDeque<String>,
    /// Latest event in the group.
    last: Timestamp,
}

/// Tracks groups of similar events and says when to combine.
#[derive(Debug)]
pub struct Aggregator {
    groups: HashMap<SimilarKey, Group>,
    capacity: usize,
    max_events: usize,
    window: Duration,
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator::new(MAX_CACHE_ENTRIES, AGGREGATE_MAX_EVENTS, AGGREGATE_WINDOW)
    }
}

impl Aggregator {
    /// At most `capacity` groups, combining from the `max_events`-th
    /// distinct message, groups expiring after `window` of silence.
    pub fn new(capacity: usize, max_events: usize, window: Duration) -> Self {
        Aggregator {
            groups: HashMap::new(),
            capacity: capacity.max(1),
            max_events: max_events.max(1),
            window,
        }
    }

    /// Notes an event of group `key` saying `message` at `at`, and returns
    /// whether it must be written as the group's combined event.
    ///
    /// Every recorded event counts, whether or not it is written later:
    /// upstream updates this state before its spam filter runs.
    pub fn observe(&mut self, key: SimilarKey, message: &str, at: Timestamp) -> bool {
        if !self.groups.contains_key(&key) && self.groups.len() >= self.capacity {
            self.evict(at);
        }
        let window = self.window;
        let group = self.groups.entry(key).or_insert_with(|| Group {
            messages: VecDeque::new(),
            last: at,
        });
        if !within(group.last, at, window) {
            group.messages.clear();
        }
        group.last = group.last.max(at);
        if !group.messages.iter().any(|m| m == message) {
            group.messages.push_back(message.to_owned());
        }
        if group.messages.len() < self.max_events {
            return false;
        }
        // Keep the set below the threshold so that every further new
        // message is combined too. Upstream drops an arbitrary member; the
        // oldest is dropped here so the outcome is deterministic.
        group.messages.pop_front();
        true
    }

    /// Makes room: drops expired groups, then the least recently active.
    fn evict(&mut self, now: Timestamp) {
        let window = self.window;
        self.groups.retain(|_, g| within(g.last, now, window));
        drop_oldest_if_full(&mut self.groups, self.capacity, |g| g.last);
    }

    /// Groups held.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group is held.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("batch/v1".into()),
            kind: Some("Job".into()),
            namespace: Some("ns1".into()),
            name: Some(name.into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        }
    }

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("timestamp")
    }

    fn key(name: &str, reason: &str) -> SimilarKey {
        SimilarKey::new(&obj(name), EventType::Normal, reason)
    }

    #[test]
    fn tenth_distinct_message_and_later_are_combined() {
        let mut a = Aggregator::default();
        for i in 1..=9 {
            assert!(!a.observe(key("j", "R"), &format!("m{i}"), ts(i)), "{i}");
        }
        for i in 10..=30 {
            assert!(a.observe(key("j", "R"), &format!("m{i}"), ts(i)), "{i}");
        }
    }

    #[test]
    fn identical_messages_do_not_grow_the_group() {
        let mut a = Aggregator::default();
        for i in 0..50 {
            assert!(!a.observe(key("j", "R"), "same", ts(i)));
        }
        for i in 1..=8 {
            assert!(!a.observe(key("j", "R"), &format!("m{i}"), ts(60)));
        }
        assert!(a.observe(key("j", "R"), "m9", ts(61)), "10th distinct");
        // A message still remembered is not new: it is written on its own
        // (and folded into its own earlier event by count).
        assert!(!a.observe(key("j", "R"), "m8", ts(62)));
    }

    #[test]
    fn groups_are_per_object_type_and_reason_not_field_path() {
        let mut a = Aggregator::default();
        for i in 1..=9 {
            a.observe(key("j", "R"), &format!("m{i}"), ts(0));
        }
        assert!(!a.observe(key("j", "R2"), "x", ts(0)));
        assert!(!a.observe(key("k", "R"), "x", ts(0)));
        assert!(!a.observe(
            SimilarKey::new(&obj("j"), EventType::Warning, "R"),
            "x",
            ts(0)
        ));
        let mut with_path = obj("j");
        with_path.field_path = Some("spec.containers{main}".into());
        assert!(a.observe(
            SimilarKey::new(&with_path, EventType::Normal, "R"),
            "x",
            ts(0)
        ));
    }

    #[test]
    fn idle_group_starts_over() {
        let mut a = Aggregator::default();
        for i in 1..=9 {
            a.observe(key("j", "R"), &format!("m{i}"), ts(i));
        }
        // 600 s after the last one is still within the window…
        let mut b = Aggregator::default();
        for i in 1..=9 {
            b.observe(key("j", "R"), &format!("m{i}"), ts(i));
        }
        assert!(b.observe(key("j", "R"), "m10", ts(9 + 600)));
        // …601 s is not.
        assert!(!a.observe(key("j", "R"), "m10", ts(9 + 601)));
    }

    #[test]
    fn bounded_evicting_expired_then_oldest() {
        let mut a = Aggregator::new(2, AGGREGATE_MAX_EVENTS, AGGREGATE_WINDOW);
        a.observe(key("a", "R"), "m", ts(0));
        a.observe(key("b", "R"), "m", ts(10));
        a.observe(key("c", "R"), "m", ts(20));
        assert_eq!(a.len(), 2);
        a.observe(key("d", "R"), "m", ts(2000));
        assert_eq!(a.len(), 1, "expired groups dropped first");
        assert!(!a.is_empty());
    }

    #[test]
    fn combined_message_has_the_upstream_prefix() {
        assert_eq!(
            combined_message("Created pod: pi-x"),
            "(combined from similar events): Created pod: pi-x"
        );
    }
}

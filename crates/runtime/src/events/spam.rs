//! The per-object spam filter (client-go's `EventSourceObjectSpamFilter`):
//! a token bucket per involved object and event type lets a recorder write
//! a burst of [`SPAM_BURST`] events about one object, then one more per
//! [`SPAM_REFILL_PERIOD`]. Events finding the bucket empty are dropped.
//! Every write counts, count patches of repeated events included.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

use super::cache::{EventType, Involved, MAX_CACHE_ENTRIES, drop_oldest_if_full};

/// Bucket size: events written about one object before throttling starts.
/// Matches client-go's `defaultSpamBurst` (25).
pub const SPAM_BURST: u32 = 25;
/// Time to earn one more token. client-go's `defaultSpamQPS` is 1/300
/// events per second, i.e. one event per five minutes.
pub const SPAM_REFILL_PERIOD: Duration = Duration::from_secs(300);

/// Which bucket an event draws from: the involved object (without field
/// path) and the event type. Upstream also keys on the source component and
/// host, which are fixed per recorder here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpamKey {
    object: Involved,
    type_: EventType,
}

impl SpamKey {
    /// The bucket of an event of `type_` about `obj`.
    pub fn new(obj: &ObjectReference, type_: EventType) -> Self {
        SpamKey {
            object: Involved::of(obj),
            type_,
        }
    }
}

/// A token bucket measured in nanoseconds of credit (one token is one
/// refill period), so refills are exact integer arithmetic.
#[derive(Debug)]
struct Bucket {
    credit: i128,
    at: Timestamp,
}

/// Token buckets by [`SpamKey`].
#[derive(Debug)]
pub struct SpamFilter {
    buckets: HashMap<SpamKey, Bucket>,
    capacity: usize,
    /// Nanoseconds per token.
    token: i128,
    /// Credit of a full bucket.
    full: i128,
}

impl Default for SpamFilter {
    fn default() -> Self {
        SpamFilter::new(MAX_CACHE_ENTRIES, SPAM_BURST, SPAM_REFILL_PERIOD)
    }
}

impl SpamFilter {
    /// At most `capacity` buckets of `burst` tokens (at least 1), each
    /// earning a token per `period`.
    pub fn new(capacity: usize, burst: u32, period: Duration) -> Self {
        let token = i128::try_from(period.as_nanos())
            .unwrap_or(i128::MAX)
            .max(1);
        SpamFilter {
            buckets: HashMap::new(),
            capacity: capacity.max(1),
            token,
            full: token.saturating_mul(i128::from(burst.max(1))),
        }
    }

    /// Takes a token for an event with `key` at `at`; `false` means the
    /// event must be dropped. New objects start with a full bucket.
    pub fn allow(&mut self, key: SpamKey, at: Timestamp) -> bool {
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.capacity {
            self.evict(at);
        }
        let full = self.full;
        let bucket = self
            .buckets
            .entry(key)
            .or_insert(Bucket { credit: full, at });
        bucket.credit = level(bucket, at, full);
        bucket.at = bucket.at.max(at);
        if bucket.credit >= self.token {
            bucket.credit -= self.token;
            true
        } else {
            false
        }
    }

    /// Makes room: a bucket that has refilled completely behaves exactly
    /// like a new one, so those go first; then the least recently used.
    fn evict(&mut self, now: Timestamp) {
        let full = self.full;
        let refilled: Vec<SpamKey> = self
            .buckets
            .iter()
            .filter(|(_, b)| level(b, now, full) >= full)
            .map(|(k, _)| k.clone())
            .collect();
        for k in refilled {
            self.buckets.remove(&k);
        }
        drop_oldest_if_full(&mut self.buckets, self.capacity, |b| b.at);
    }

    /// Buckets held.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// Credit of `bucket` at `now`, at most `full`. A clock stepping backwards
/// earns nothing.
fn level(bucket: &Bucket, now: Timestamp, full: i128) -> i128 {
    let elapsed = (now.as_nanosecond() - bucket.at.as_nanosecond()).max(0);
    bucket.credit.saturating_add(elapsed).min(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("ns1".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("timestamp")
    }

    fn key(name: &str) -> SpamKey {
        SpamKey::new(&obj(name), EventType::Normal)
    }

    #[test]
    fn burst_then_one_per_refill_period() {
        let mut f = SpamFilter::default();
        for i in 0..25 {
            assert!(f.allow(key("p"), ts(0)), "{i}");
        }
        assert!(!f.allow(key("p"), ts(0)));
        assert!(!f.allow(key("p"), ts(299)));
        assert!(f.allow(key("p"), ts(300)));
        assert!(!f.allow(key("p"), ts(300)));
        // Dropped events cost nothing: the next token is due at 600 s.
        assert!(!f.allow(key("p"), ts(599)));
        assert!(f.allow(key("p"), ts(600)));
    }

    #[test]
    fn refill_is_capped_at_the_burst() {
        let mut f = SpamFilter::default();
        for _ in 0..25 {
            f.allow(key("p"), ts(0));
        }
        let later = 1_000_000;
        for i in 0..25 {
            assert!(f.allow(key("p"), ts(later)), "{i}");
        }
        assert!(!f.allow(key("p"), ts(later)));
    }

    #[test]
    fn buckets_are_per_object_and_type() {
        let mut f = SpamFilter::default();
        for _ in 0..25 {
            assert!(f.allow(key("p"), ts(0)));
        }
        assert!(!f.allow(key("p"), ts(0)));
        assert!(f.allow(key("q"), ts(0)), "other name");
        let mut other_uid = obj("p");
        other_uid.uid = Some("recreated".into());
        assert!(f.allow(SpamKey::new(&other_uid, EventType::Normal), ts(0)));
        assert!(f.allow(SpamKey::new(&obj("p"), EventType::Warning), ts(0)));
        // The field path does not matter.
        let mut with_path = obj("p");
        with_path.field_path = Some("spec.containers{main}".into());
        assert!(!f.allow(SpamKey::new(&with_path, EventType::Normal), ts(0)));
    }

    #[test]
    fn clock_stepping_back_earns_nothing() {
        let mut f = SpamFilter::new(10, 1, SPAM_REFILL_PERIOD);
        assert!(f.allow(key("p"), ts(1000)));
        assert!(!f.allow(key("p"), ts(0)));
        assert!(!f.allow(key("p"), ts(1299)));
        assert!(f.allow(key("p"), ts(1300)));
    }

    #[test]
    fn bounded_evicting_refilled_then_oldest() {
        let mut f = SpamFilter::new(2, 2, SPAM_REFILL_PERIOD);
        assert!(f.allow(key("a"), ts(0)));
        assert!(f.allow(key("a"), ts(0)));
        assert!(f.allow(key("b"), ts(10)));
        // Full: "a" is empty and "b" not yet refilled, so the least
        // recently used ("a") goes and comes back with a fresh bucket.
        assert!(f.allow(key("c"), ts(20)));
        assert_eq!(f.len(), 2);
        assert!(f.allow(key("a"), ts(30)));
        // Much later everything has refilled: all evicted to make room.
        assert!(f.allow(key("d"), ts(10_000)));
        assert_eq!(f.len(), 1);
        assert!(!f.is_empty());
    }
}

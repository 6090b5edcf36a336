//! The leaf of the recorder's modules: the event type, the involved object
//! their keys share and the bounded-cache helpers that the correlator, the
//! aggregator and the spam filter share (so none of them imports another
//! for these).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

/// Events remembered for correlation (client-go's `maxLruCacheEntries`).
pub const MAX_CACHE_ENTRIES: usize = 4096;

/// The object an event is about, as the correlator's, aggregator's and
/// spam filter's keys hold it: its reference without the field path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Involved {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
}

impl Involved {
    pub fn of(obj: &ObjectReference) -> Self {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        Involved {
            api_version: s(&obj.api_version),
            kind: s(&obj.kind),
            namespace: s(&obj.namespace),
            name: s(&obj.name),
            uid: s(&obj.uid),
        }
    }
}

/// The `type` of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Routine progress (`SuccessfulCreate`, `Completed`, …).
    Normal,
    /// Something the user should look at (`BackoffLimitExceeded`, …).
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`, as written to the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Whether `at` is no more than `window` after `last` (a clock stepping
/// backwards counts as within).
pub fn within(last: Timestamp, at: Timestamp, window: Duration) -> bool {
    let elapsed = at.as_nanosecond().saturating_sub(last.as_nanosecond());
    elapsed <= i128::try_from(window.as_nanos()).unwrap_or(i128::MAX)
}

/// When `map` holds `capacity` entries or more, drops the one whose `at`
/// is oldest (the bounded caches of the aggregator and the spam filter).
pub fn drop_oldest_if_full<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut std::collections::HashMap<K, V>,
    capacity: usize,
    at: impl Fn(&V) -> Timestamp,
) {
    if map.len() >= capacity
        && let Some(oldest) = map
            .iter()
            .min_by_key(|(_, v)| at(v))
            .map(|(k, _)| k.clone())
    {
        map.remove(&oldest);
    }
}

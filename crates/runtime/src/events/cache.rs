//! The leaf of the recorder's modules: the event type and the bounded-cache
//! helpers that the correlator, the aggregator and the spam filter share
//! (so none of them imports another for these).

use std::time::Duration;

use jiff::Timestamp;

/// Events remembered for correlation (client-go's `maxLruCacheEntries`).
pub const MAX_CACHE_ENTRIES: usize = 4096;

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

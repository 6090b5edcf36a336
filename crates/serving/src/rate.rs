//! Rates as a generic cell rate algorithm (GCRA), on tokio's clock (so the
//! tests run on paused time):
//!
//! * [`Rate`]: one start per interval, a burst at once; a caller *books*
//!   its start ahead and sleeps until it, or is told its turn would come
//!   after its deadline (nothing booked then). Waiters never race each
//!   other: each holds its own turn.
//! * [`KeyedRate`]: the same per key, without waiting (a caller over its
//!   key's rate is refused at once), holding at most a bounded number of
//!   keys (keys whose turn has passed are forgotten first; when every key
//!   is still owed time, new keys are refused: a flood of distinct keys
//!   cannot grow memory or reset the others' counts).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The interval between starts and the tolerance a burst allows.
fn cell(per_second: u32, burst: u32) -> (Duration, Duration) {
    let interval = Duration::from_secs(1) / per_second.max(1);
    (interval, interval * burst.max(1).saturating_sub(1))
}

/// One start per `1/per_second`, `burst` at once.
pub struct Rate {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next start.
    tat: Mutex<Option<Instant>>,
}

impl Rate {
    pub fn new(per_second: u32, burst: u32) -> Self {
        let (interval, tolerance) = cell(per_second, burst);
        Rate {
            interval,
            tolerance,
            tat: Mutex::new(None),
        }
    }

    /// When the caller may start, booked now; `None` (nothing booked) when
    /// that is after `deadline`.
    pub fn book(&self, deadline: Instant) -> Option<Instant> {
        let now = Instant::now();
        let mut tat = self.tat.lock();
        let t = tat.map_or(now, |t| t.max(now));
        let start = t.checked_sub(self.tolerance).map_or(now, |s| s.max(now));
        if start > deadline {
            return None;
        }
        *tat = Some(t + self.interval);
        Some(start)
    }

    /// Waits for a booked turn; `false` (at once) when it would come after
    /// `deadline`.
    pub async fn turn(&self, deadline: Instant) -> bool {
        match self.book(deadline) {
            Some(start) => {
                tokio::time::sleep_until(start).await;
                true
            }
            None => false,
        }
    }
}

/// [`Rate`] per key, refusing instead of waiting.
pub struct KeyedRate<K> {
    interval: Duration,
    tolerance: Duration,
    max_keys: usize,
    tats: Mutex<HashMap<K, Instant>>,
}

impl<K: Hash + Eq> KeyedRate<K> {
    pub fn new(per_second: u32, burst: u32, max_keys: usize) -> Self {
        let (interval, tolerance) = cell(per_second, burst);
        KeyedRate {
            interval,
            tolerance,
            max_keys: max_keys.max(1),
            tats: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one start for `key` now; `false` when `key` is over its rate
    /// (or no room is left for a new key).
    pub fn allow(&self, key: K) -> bool {
        let now = Instant::now();
        let mut tats = self.tats.lock();
        if !tats.contains_key(&key) && tats.len() >= self.max_keys {
            // A key whose turn has passed owes nothing: forgetting it
            // changes no answer.
            tats.retain(|_, t| *t > now);
            if tats.len() >= self.max_keys {
                return false;
            }
        }
        let t = tats.get(&key).map_or(now, |t| (*t).max(now));
        if t.checked_sub(self.tolerance).is_some_and(|s| s > now) {
            return false;
        }
        tats.insert(key, t + self.interval);
        true
    }

    /// Keys held (tests).
    pub fn keys(&self) -> usize {
        self.tats.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_rate_books_turns_and_refuses_past_the_deadline() {
        let r = Rate::new(10, 5);
        let began = Instant::now();
        let deadline = began + Duration::from_secs(1);
        // The burst at once, then one every 100 ms until the deadline.
        let starts: Vec<_> = (0..20).map_while(|_| r.book(deadline)).collect();
        assert_eq!(starts.len(), 5 + 10);
        assert!(starts[..5].iter().all(|s| *s == began));
        assert_eq!(starts[14], began + Duration::from_secs(1));
        assert!(r.book(deadline).is_none(), "past the deadline");
        assert!(r.turn(deadline + Duration::from_millis(100)).await);
        assert_eq!(began.elapsed(), Duration::from_millis(1100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_keyed_rate_bounds_each_key_apart() {
        let r = KeyedRate::new(2, 3, 100);
        for _ in 0..3 {
            assert!(r.allow("a"));
        }
        assert!(!r.allow("a"), "a's burst is spent");
        assert!(r.allow("b"), "b is not a");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(r.allow("a"), "one more per 500 ms");
        assert!(!r.allow("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_keyed_rate_holds_a_bounded_number_of_keys() {
        let r = KeyedRate::new(1, 1, 4);
        for k in 0..4 {
            assert!(r.allow(k));
        }
        assert!(!r.allow(99), "every key is still owed time");
        assert!(!r.allow(0), "and a full map does not reset the others");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(r.allow(99), "paid keys are forgotten to make room");
        assert_eq!(r.keys(), 1);
    }
}

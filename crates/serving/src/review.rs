//! Bounds on the delegated reviews, so that a flood of requests with
//! distinct bogus tokens (or paths) costs a bounded number of concurrent
//! TokenReviews and SubjectAccessReviews and bounded memory:
//!
//! * [`Gate`]: at most [`MAX_REVIEWS`] reviews in flight; a request waits at
//!   most [`REVIEW_WAIT`] for one, and at most [`MAX_WAITING`] wait (the
//!   rest, and those that waited too long, get 429 at once). [`RESERVED`]
//!   more are kept for tokens and decisions that passed before, so a
//!   scraper is not queued behind a flood of unknown tokens;
//! * [`Flights`]: concurrent requests needing the same review (same token,
//!   same user and path) share one call (single-flight, as k8s.io/apiserver's
//!   cached token authenticator). A request that goes away mid-review hands
//!   the call over to the next waiter; nothing is left behind.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};

/// Reviews in flight at most (TokenReviews and SubjectAccessReviews).
pub const MAX_REVIEWS: usize = 32;
/// Extra slots only for reviews of what passed before.
pub const RESERVED: usize = 4;
/// Requests waiting for a review slot at most.
pub const MAX_WAITING: usize = 1024;
/// How long a request waits for a review slot.
pub const REVIEW_WAIT: Duration = Duration::from_secs(2);

pub struct Gate {
    permits: Semaphore,
    reserved: Semaphore,
    waiting: AtomicUsize,
}

/// Counts one waiter while alive (a cancelled wait is uncounted too).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            permits: Semaphore::new(MAX_REVIEWS),
            reserved: Semaphore::new(RESERVED),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl Gate {
    /// A review slot, or `None` when too many are waiting or the wait
    /// passed [`REVIEW_WAIT`]. `known`: what is reviewed passed before, and
    /// may take a reserved slot.
    pub async fn enter(&self, known: bool) -> Option<SemaphorePermit<'_>> {
        if let Ok(p) = self.permits.try_acquire() {
            return Some(p);
        }
        if known && let Ok(p) = self.reserved.try_acquire() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let _w = Waiting(&self.waiting);
        tokio::time::timeout(REVIEW_WAIT, self.permits.acquire())
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// In-flight reviews by key.
pub struct Flights<V> {
    inflight: Mutex<HashMap<String, Arc<OnceCell<V>>>>,
}

impl<V> Default for Flights<V> {
    fn default() -> Self {
        Flights {
            inflight: Mutex::new(HashMap::new()),
        }
    }
}

/// Removes a flight's entry when its last caller is done or gone.
struct Leave<'a, V> {
    flights: &'a Flights<V>,
    key: &'a str,
    cell: Arc<OnceCell<V>>,
}

impl<V> Drop for Leave<'_, V> {
    fn drop(&mut self) {
        let mut m = self.flights.inflight.lock();
        let ours = m.get(self.key).is_some_and(|c| Arc::ptr_eq(c, &self.cell));
        // Done, or nobody else (the map and us) is waiting on it.
        if ours && (self.cell.initialized() || Arc::strong_count(&self.cell) <= 2) {
            m.remove(self.key);
        }
    }
}

impl<V: Clone> Flights<V> {
    /// `f`'s answer, computed once for concurrent callers with `key`.
    pub async fn run<F, Fut>(&self, key: &str, f: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        // One reference per caller (in `leave`), so the count tells whether
        // anyone else still waits.
        let cell = Arc::clone(self.inflight.lock().entry(key.to_string()).or_default());
        let leave = Leave {
            flights: self,
            key,
            cell,
        };
        let v = leave.cell.get_or_init(f).await.clone();
        drop(leave);
        v
    }

    /// Keys in flight (tests).
    pub fn len(&self) -> usize {
        self.inflight.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test]
    async fn concurrent_callers_share_one_call_and_leave_nothing() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let calls = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (f, c) = (Arc::clone(&flights), Arc::clone(&calls));
            tasks.push(tokio::spawn(async move {
                f.run("k", || async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    c.fetch_add(1, Ordering::SeqCst) + 7
                })
                .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.expect("task"), 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(flights.is_empty());
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_hands_over_and_leaves_nothing() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let f = Arc::clone(&flights);
        let first = tokio::spawn(async move { f.run("k", std::future::pending::<u32>).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(flights.len(), 1);
        first.abort();
        let _ = first.await;
        assert!(flights.is_empty(), "an abandoned flight is removed");
        assert_eq!(flights.run("k", || async { 3 }).await, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_bounds_reviews_and_waiters() {
        let gate = Gate::default();
        let mut held = Vec::new();
        for _ in 0..MAX_REVIEWS {
            held.push(gate.enter(false).await.expect("free slot"));
        }
        // Full: a waiter gives up after REVIEW_WAIT.
        assert!(gate.enter(false).await.is_none());
        assert_eq!(gate.waiting.load(Ordering::Relaxed), 0);
        // What passed before still has the reserved slots.
        for _ in 0..RESERVED {
            held.push(gate.enter(true).await.expect("reserved slot"));
        }
        assert!(gate.enter(true).await.is_none());
        held.clear();
        assert!(gate.enter(false).await.is_some());
    }
}

//! Bounds on the delegated reviews, so that a flood of requests with
//! distinct bogus tokens (or paths) costs a bounded number of concurrent
//! TokenReviews and SubjectAccessReviews, a bounded share of the review
//! clients' budget and bounded memory:
//!
//! * [`Gate`]: two lanes. The known lane (tokens and decisions that were
//!   authorized before, or any request on a connection that was) has
//!   [`MAX_KNOWN`] reviews of its own and queues only behind its own kind.
//!   The unknown lane has [`MAX_UNKNOWN`] reviews, at most [`UNKNOWN_QPS`]
//!   started per second (half the review clients' 200 QPS, so the clients'
//!   token bucket never empties under a flood and a known review never waits
//!   in it), at most [`MAX_WAITING`] waiting and at most
//!   [`MAX_WAITING_PER_SOURCE`] of them from one source address (an IPv6
//!   /64 counts as one), so one client cannot fill the queue ahead of
//!   another. A request waits at most [`REVIEW_WAIT`]; else 429. (The
//!   server sends every 429 [`REVIEW_WAIT`] after the request began, holding
//!   nothing of it meanwhile: a hostile connection then sends one request
//!   per [`REVIEW_WAIT`], not as many as the CPU can answer, which would
//!   crowd the scrapers out of the CPU);
//! * [`Flights`]: concurrent requests needing the same review (same token,
//!   same user and path) share one call (single-flight, as k8s.io/apiserver's
//!   cached token authenticator). A request that goes away mid-review hands
//!   the call over to the next waiter; nothing is left behind.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// Reviews in flight at most for what was not authorized before.
pub const MAX_UNKNOWN: usize = 32;
/// Reviews in flight at most for what was (the scrapers' lane).
pub const MAX_KNOWN: usize = 8;
/// Unknown reviews started per second at most, and their burst.
pub const UNKNOWN_QPS: u32 = 100;
pub const UNKNOWN_BURST: u32 = 100;
/// Requests waiting for an unknown review at most, all sources together
/// and per source.
pub const MAX_WAITING: usize = 1024;
pub const MAX_WAITING_PER_SOURCE: usize = 64;
/// How long a request waits for a review slot.
pub const REVIEW_WAIT: Duration = Duration::from_secs(2);

/// Who is asking for a review, as far as the gate cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Authorized before: never queued behind [`Lane::Unknown`].
    Known,
    /// Anything else, from this source (if known).
    Unknown(Option<IpAddr>),
}

/// The unit one source is bounded by: an IPv4 address, an IPv6 /64 (one
/// host usually holds a whole /64), an IPv4-mapped IPv6 address as IPv4.
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// A generic cell rate limiter (GCRA): one start per `interval`, `burst`
/// at once; a start is booked ahead, never beyond a deadline.
struct Rate {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next start.
    tat: Mutex<Option<Instant>>,
}

impl Rate {
    fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Rate {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            tat: Mutex::new(None),
        }
    }

    /// When the caller may start, booked now; `None` (nothing booked) when
    /// that is after `deadline`.
    fn book(&self, deadline: Instant) -> Option<Instant> {
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
}

pub struct Gate {
    unknown: Semaphore,
    known: Semaphore,
    rate: Rate,
    waiting: AtomicUsize,
    per_source: Mutex<HashMap<IpAddr, usize>>,
}

/// Counts one waiter while alive (a cancelled wait is uncounted too).
struct Waiting<'a> {
    gate: &'a Gate,
    source: Option<IpAddr>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.gate.waiting.fetch_sub(1, Ordering::Relaxed);
        if let Some(src) = self.source {
            let mut m = self.gate.per_source.lock();
            if let Some(n) = m.get_mut(&src) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&src);
                }
            }
        }
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            unknown: Semaphore::new(MAX_UNKNOWN),
            known: Semaphore::new(MAX_KNOWN),
            rate: Rate::new(UNKNOWN_QPS, UNKNOWN_BURST),
            waiting: AtomicUsize::new(0),
            per_source: Mutex::new(HashMap::new()),
        }
    }
}

impl Gate {
    /// A review slot in `lane`, or `None` (429) when too many wait, from
    /// all sources or from this one, or none came within [`REVIEW_WAIT`].
    pub async fn enter(&self, lane: Lane) -> Option<SemaphorePermit<'_>> {
        let deadline = Instant::now() + REVIEW_WAIT;
        let source = match lane {
            Lane::Known => {
                return tokio::time::timeout_at(deadline, self.known.acquire())
                    .await
                    .ok()
                    .and_then(Result::ok);
            }
            Lane::Unknown(source) => source.map(source_of),
        };
        let _w = self.wait(source)?;
        let permit = tokio::time::timeout_at(deadline, self.unknown.acquire())
            .await
            .ok()?
            .ok()?;
        let start = self.rate.book(deadline)?;
        tokio::time::sleep_until(start).await;
        Some(permit)
    }

    /// Counts a waiter, unless the total or the source's share is full.
    fn wait(&self, source: Option<IpAddr>) -> Option<Waiting<'_>> {
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let mut w = Waiting {
            gate: self,
            source: None,
        };
        if let Some(src) = source {
            let mut m = self.per_source.lock();
            let n = m.entry(src).or_default();
            if *n >= MAX_WAITING_PER_SOURCE {
                return None;
            }
            *n += 1;
            w.source = Some(src);
        }
        Some(w)
    }

    /// Requests waiting for an unknown review (tests, metrics).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
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
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.enter(Lane::Unknown(None)).await.expect("free slot"));
        }
        // Full: a waiter gives up after REVIEW_WAIT.
        let began = Instant::now();
        assert!(gate.enter(Lane::Unknown(None)).await.is_none());
        assert_eq!(began.elapsed(), REVIEW_WAIT);
        assert_eq!(gate.waiting(), 0);
        held.clear();
        assert!(gate.enter(Lane::Unknown(None)).await.is_some());
    }

    /// Lets the parked tasks run until `n` wait.
    async fn settle(gate: &Gate, n: usize) {
        for _ in 0..10_000 {
            if gate.waiting() == n {
                return;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.waiting(), n);
    }

    /// Waiters that never get a slot (every unknown slot is held).
    fn park(gate: &Arc<Gate>, lane: Lane, n: usize) -> Vec<tokio::task::JoinHandle<bool>> {
        (0..n)
            .map(|_| {
                let g = Arc::clone(gate);
                tokio::spawn(async move {
                    let got = g.enter(lane).await;
                    // A slot won is kept, as a review in flight would.
                    got.map(SemaphorePermit::forget).is_some()
                })
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_known_lane_never_queues_behind_unknown_reviews() {
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.unknown.try_acquire().expect("slot"));
        }
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let parked = park(&gate, Lane::Unknown(Some(a)), 10);
        settle(&gate, 10).await;
        let began = Instant::now();
        let mut known = Vec::new();
        for _ in 0..MAX_KNOWN {
            known.push(gate.enter(Lane::Known).await.expect("known slot"));
        }
        assert_eq!(began.elapsed(), Duration::ZERO, "no known review waited");
        // Known reviews wait only for each other.
        let next = tokio::spawn({
            let g = Arc::clone(&gate);
            async move { g.enter(Lane::Known).await.map(drop).is_some() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        known.pop();
        assert!(next.await.expect("task"));
        for p in parked {
            assert!(!p.await.expect("task"), "no unknown slot was free");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_source_cannot_fill_the_queue() {
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.unknown.try_acquire().expect("slot"));
        }
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let parked = park(&gate, Lane::Unknown(Some(a)), MAX_WAITING_PER_SOURCE);
        settle(&gate, MAX_WAITING_PER_SOURCE).await;
        // A's next is refused at once; B still queues.
        let began = Instant::now();
        assert!(gate.enter(Lane::Unknown(Some(a))).await.is_none());
        assert_eq!(began.elapsed(), Duration::ZERO);
        let from_b = park(&gate, Lane::Unknown(Some(b)), 1);
        settle(&gate, MAX_WAITING_PER_SOURCE + 1).await;
        // One slot frees: the oldest waiter (A's) takes it; the rest time out
        // and leave no count behind.
        held.pop();
        let mut got = 0;
        for p in parked.into_iter().chain(from_b) {
            got += usize::from(p.await.expect("task"));
        }
        assert_eq!(got, 1);
        assert_eq!(gate.waiting(), 0);
        assert!(gate.per_source.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_total_is_bounded_across_sources() {
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.unknown.try_acquire().expect("slot"));
        }
        let mut parked = Vec::new();
        for i in 0..MAX_WAITING / MAX_WAITING_PER_SOURCE {
            let ip = IpAddr::from([10, 0, 1, u8::try_from(i).expect("small")]);
            parked.extend(park(&gate, Lane::Unknown(Some(ip)), MAX_WAITING_PER_SOURCE));
        }
        settle(&gate, MAX_WAITING).await;
        let began = Instant::now();
        assert!(gate.enter(Lane::Known).await.is_some(), "known: own lane");
        assert_eq!(began.elapsed(), Duration::ZERO);
        let other: IpAddr = "10.9.9.9".parse().expect("ip");
        assert!(gate.enter(Lane::Unknown(Some(other))).await.is_none());
        assert_eq!(began.elapsed(), Duration::ZERO);
        for p in parked {
            assert!(!p.await.expect("task"));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_reviews_start_at_a_bounded_rate() {
        let gate = Gate::default();
        let began = Instant::now();
        for _ in 0..UNKNOWN_BURST {
            drop(gate.enter(Lane::Unknown(None)).await.expect("burst"));
        }
        assert_eq!(began.elapsed(), Duration::ZERO);
        let n = 50u32;
        for _ in 0..n {
            drop(gate.enter(Lane::Unknown(None)).await.expect("paced"));
        }
        assert_eq!(began.elapsed(), Duration::from_secs(1) / UNKNOWN_QPS * n);
        // Known reviews are not paced.
        let t = Instant::now();
        for _ in 0..200 {
            drop(gate.enter(Lane::Known).await.expect("known"));
        }
        assert_eq!(t.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_source_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
        assert_eq!(source_of(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(source_of(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(source_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            source_of(ip("2001:db8:1:2:ffff::9")),
            source_of(ip("2001:db8:1:2::7"))
        );
    }
}

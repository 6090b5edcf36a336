//! Bounds on the delegated reviews, so that a flood of requests with
//! distinct bogus tokens (or any token and any path) costs a bounded number
//! of concurrent TokenReviews and SubjectAccessReviews, a bounded rate of
//! them per user, per source and for the whole server, and bounded memory:
//!
//! * [`Gate`]: two lanes. The known lane (tokens and decisions that were
//!   authorized for a scrape before, or any request on a connection that
//!   was) has [`MAX_KNOWN`] reviews of its own and queues only behind its
//!   own kind. The unknown lane: at most [`USER_REVIEWS_PER_SECOND`]
//!   started per user (SubjectAccessReviews: the user is known by then)
//!   and [`SOURCE_REVIEWS_PER_SECOND`] per source address (an IPv6 /64
//!   counts as one), refused at once beyond (so one source has at most
//!   a burst and [`REVIEW_WAIT`]'s worth waiting, and cannot fill the queue
//!   ahead of another); then at most [`MAX_UNKNOWN`] in flight,
//!   [`UNKNOWN_QPS`] started per second and [`MAX_WAITING`] waiting for the
//!   whole server (half the review clients' 200 QPS, so the clients' token
//!   bucket never empties under a flood and a known review never waits in
//!   it).
//!   A request waits at most [`REVIEW_WAIT`]; else 429. (The server sends
//!   every 429 [`REVIEW_WAIT`] after the request began, holding nothing of
//!   it meanwhile: a hostile connection then sends one request per
//!   [`REVIEW_WAIT`], not as many as the CPU can answer);

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::rate::{KeyedRate, Rate};

/// Reviews in flight at most for what was not authorized before.
pub const MAX_UNKNOWN: usize = 32;
/// Reviews in flight at most for what was (the scrapers' lane).
pub const MAX_KNOWN: usize = 8;
/// Unknown reviews started per second at most, and their burst.
pub const UNKNOWN_QPS: u32 = 100;
pub const UNKNOWN_BURST: u32 = 100;
/// SubjectAccessReviews of unknown decisions one user may cause per
/// second, and their burst. Only served paths are reviewed, each answer
/// cached 10 s, so one user needs a handful per 10 s.
pub const USER_REVIEWS_PER_SECOND: u32 = 2;
pub const USER_REVIEWS_BURST: u32 = 10;
/// Unknown reviews (of either kind) one source address may cause per
/// second, and their burst.
pub const SOURCE_REVIEWS_PER_SECOND: u32 = 10;
pub const SOURCE_REVIEWS_BURST: u32 = 20;
/// Users and sources whose rates are remembered at most.
pub const RATE_KEYS: usize = 4096;
/// Requests waiting for an unknown review at most, all sources together.
pub const MAX_WAITING: usize = 1024;
/// How long a request waits for a review slot.
pub const REVIEW_WAIT: Duration = Duration::from_secs(2);

/// Who is asking for a review, as far as the gate cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane<'a> {
    /// Authorized before: never queued behind [`Lane::Unknown`].
    Known,
    /// Anything else: from this source, for this user (a
    /// SubjectAccessReview; a TokenReview has no user yet), if known.
    Unknown {
        source: Option<IpAddr>,
        user: Option<&'a str>,
    },
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

pub struct Gate {
    unknown: Semaphore,
    known: Semaphore,
    rate: Rate,
    per_user: KeyedRate<String>,
    per_source: KeyedRate<IpAddr>,
    waiting: AtomicUsize,
}

/// Which bound refused a review (`kcm_rs_secure_serving_reviews_limited_total{bound}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The user's reviews per second ([`USER_REVIEWS_PER_SECOND`]).
    User,
    /// The source's reviews per second or waiting share.
    Source,
    /// The whole server's: slots, rate, waiting total or [`REVIEW_WAIT`].
    Server,
}

impl Limit {
    pub fn label(self) -> &'static str {
        match self {
            Limit::User => "user",
            Limit::Source => "source",
            Limit::Server => "server",
        }
    }
}

/// Counts one waiter while alive (a cancelled wait is uncounted too).
struct Waiting<'a>(&'a Gate);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            unknown: Semaphore::new(MAX_UNKNOWN),
            known: Semaphore::new(MAX_KNOWN),
            rate: Rate::new(UNKNOWN_QPS, UNKNOWN_BURST),
            per_user: KeyedRate::new(USER_REVIEWS_PER_SECOND, USER_REVIEWS_BURST, RATE_KEYS),
            per_source: KeyedRate::new(SOURCE_REVIEWS_PER_SECOND, SOURCE_REVIEWS_BURST, RATE_KEYS),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl Gate {
    /// A review slot in `lane`, or the bound that refused it (429): the
    /// user's or the source's rate, too many waiting (from all sources or
    /// from this one), or no slot within [`REVIEW_WAIT`].
    pub async fn enter(&self, lane: Lane<'_>) -> Result<SemaphorePermit<'_>, Limit> {
        let deadline = Instant::now() + REVIEW_WAIT;
        let (source, user) = match lane {
            Lane::Known => {
                return match tokio::time::timeout_at(deadline, self.known.acquire()).await {
                    Ok(Ok(p)) => Ok(p),
                    _ => Err(Limit::Server),
                };
            }
            Lane::Unknown { source, user } => (source.map(source_of), user),
        };
        if let Some(u) = user
            && !self.per_user.allow(u.to_string())
        {
            return Err(Limit::User);
        }
        if let Some(src) = source
            && !self.per_source.allow(src)
        {
            return Err(Limit::Source);
        }
        let _w = self.wait()?;
        let permit = match tokio::time::timeout_at(deadline, self.unknown.acquire()).await {
            Ok(Ok(p)) => p,
            _ => return Err(Limit::Server),
        };
        if !self.rate.turn(deadline).await {
            return Err(Limit::Server);
        }
        Ok(permit)
    }

    /// Counts a waiter, unless [`MAX_WAITING`] already wait.
    fn wait(&self) -> Result<Waiting<'_>, Limit> {
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Limit::Server);
        }
        Ok(Waiting(self))
    }

    /// Requests waiting for an unknown review (tests, metrics).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const ANY: Lane<'static> = Lane::Unknown {
        source: None,
        user: None,
    };

    fn from(ip: &str) -> Lane<'static> {
        Lane::Unknown {
            source: Some(ip.parse().expect("ip")),
            user: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_bounds_reviews_and_waiters() {
        let gate = Gate::default();
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.enter(ANY).await.expect("free slot"));
        }
        // Full: a waiter gives up after REVIEW_WAIT.
        let began = Instant::now();
        assert_eq!(gate.enter(ANY).await.err(), Some(Limit::Server));
        assert_eq!(began.elapsed(), REVIEW_WAIT);
        assert_eq!(gate.waiting(), 0);
        held.clear();
        assert!(gate.enter(ANY).await.is_ok());
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
    fn park(gate: &Arc<Gate>, lane: Lane<'static>, n: usize) -> Vec<tokio::task::JoinHandle<bool>> {
        (0..n)
            .map(|_| {
                let g = Arc::clone(gate);
                tokio::spawn(async move {
                    let got = g.enter(lane).await;
                    // A slot won is kept, as a review in flight would.
                    got.map(SemaphorePermit::forget).is_ok()
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
        let parked = park(&gate, from("10.0.0.1"), 10);
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
            async move { g.enter(Lane::Known).await.map(drop).is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        known.pop();
        assert!(next.await.expect("task"));
        for p in parked {
            assert!(!p.await.expect("task"), "no unknown slot was free");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_source_and_one_user_are_bounded_by_their_rates() {
        let gate = Gate::default();
        let began = Instant::now();
        for _ in 0..SOURCE_REVIEWS_BURST {
            drop(gate.enter(from("10.0.0.1")).await.expect("burst"));
        }
        // The source's next is refused at once; another source still enters.
        assert_eq!(
            gate.enter(from("10.0.0.1")).await.err(),
            Some(Limit::Source)
        );
        assert!(gate.enter(from("10.0.0.2")).await.is_ok());
        assert_eq!(began.elapsed(), Duration::ZERO);
        let user = |u: &'static str, ip: &'static str| Lane::Unknown {
            source: Some(ip.parse().expect("ip")),
            user: Some(u),
        };
        for i in 0..USER_REVIEWS_BURST {
            let ip: &'static str = Box::leak(format!("10.1.0.{i}").into_boxed_str());
            drop(gate.enter(user("mallory", ip)).await.expect("user burst"));
        }
        // From any source: the user is over its rate; another user is not.
        assert_eq!(
            gate.enter(user("mallory", "10.2.0.1")).await.err(),
            Some(Limit::User)
        );
        assert!(gate.enter(user("alice", "10.2.0.1")).await.is_ok());
        tokio::time::advance(Duration::from_secs(1) / USER_REVIEWS_PER_SECOND).await;
        assert!(gate.enter(user("mallory", "10.2.0.2")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_total_is_bounded_across_sources() {
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN {
            held.push(gate.unknown.try_acquire().expect("slot"));
        }
        let per = usize::try_from(SOURCE_REVIEWS_BURST).expect("small");
        let mut parked = Vec::new();
        for i in 0..MAX_WAITING.div_ceil(per) {
            let ip: &'static str =
                Box::leak(format!("10.0.{}.{}", i / 256, i % 256).into_boxed_str());
            parked.extend(park(&gate, from(ip), per.min(MAX_WAITING - i * per)));
        }
        settle(&gate, MAX_WAITING).await;
        let began = Instant::now();
        assert!(gate.enter(Lane::Known).await.is_ok(), "known: own lane");
        assert_eq!(began.elapsed(), Duration::ZERO);
        assert_eq!(
            gate.enter(from("10.9.9.9")).await.err(),
            Some(Limit::Server)
        );
        assert_eq!(began.elapsed(), Duration::ZERO);
        for p in parked {
            assert!(!p.await.expect("task"));
        }
        assert_eq!(gate.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_reviews_start_at_a_bounded_rate() {
        let gate = Gate::default();
        let began = Instant::now();
        for _ in 0..UNKNOWN_BURST {
            drop(gate.enter(ANY).await.expect("burst"));
        }
        assert_eq!(began.elapsed(), Duration::ZERO);
        let n = 50u32;
        for _ in 0..n {
            drop(gate.enter(ANY).await.expect("paced"));
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

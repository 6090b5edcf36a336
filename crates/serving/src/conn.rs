//! Connection bounds: how many are open, and how long one may sit without
//! doing anything useful.
//!
//! Timeouts, as KCM's secure serving (k8s.io/apiserver `secure_serving.go`:
//! `ReadHeaderTimeout` 32 s, `IdleTimeout` 90 s), measured as Go's net/http
//! does: an HTTP/1 request's headers must arrive within 32 s of the
//! handshake (first request) or of its first byte (later ones); a
//! connection with no request in flight is closed after 90 s. The TLS
//! handshake has 10 s (Go: the header timeout, 32 s; stricter on purpose).
//!
//! At most [`MAX_CONNECTIONS`] are open, at most
//! [`MAX_CONNECTIONS_PER_SOURCE`] from one source address (beyond, a new
//! connection closes one of its source's own, by the order below). When full, a new
//! connection closes another: one never authorized for a scrape before one
//! that was; among them, one of the source that holds the most connections
//! (so a scraper on another address than the flood's is never the one);
//! then the first of these kinds that has one, oldest first:
//! 1. half-open: read, and it had sent nothing [`HALF_OPEN_AFTER`] after
//!    it was accepted;
//! 2. every request in flight waits for its turn (`pace.rs`) or for a
//!    review of a credential never authorized (a random token: `auth.rs`),
//!    on a connection never authorized for a scrape;
//! 3. between requests, after a refusal (401, 403, 404, 429, 413...),
//!    never authorized for a scrape;
//! 4. lingering: answered and closing, its input being discarded;
//! 5. nothing received yet, younger than [`HALF_OPEN_AFTER`] or not read
//!    yet (a client's first bytes trail its connect, and a task starved
//!    under load reads them late: a scraper connecting amid a flood of
//!    reviews must not be taken for half-open; and amid a burst of new
//!    connections, those that said nothing go before a scraper that spoke);
//! 6. handshaking, sending headers or idle, never authorized for a scrape;
//! 7. between requests, once authorized for a scrape (a scraper's
//!    keep-alive), or once a request showed a credential that was.
//!
//! Only a scrape earns trust (`auth::TRUST_PATHS`): `/version` or
//! `/healthz`, which any authenticated user may be allowed, earn nothing.
//!
//! A connection inside any other request (answered, or waiting on a review
//! of what was authorized before) is never closed, so a crowd of
//! connections sending random tokens (which wait on reviews) cannot keep an
//! authorized scraper out; only when every one is inside such a request is
//! the new one refused.
//!
//! An HTTP/1 connection of the second kind is *released* rather than cut:
//! it leaves the count at once, its request is answered when due (a 429
//! [`crate::review::REVIEW_WAIT`] after it began, or the review's answer)
//! with `Connection: close`, then it closes ([`RELEASE_GRACE`] at most; at
//! most [`MAX_CONNECTIONS`] released at once, else cut). A client cut
//! reconnects at once, and each reconnection costs a TLS handshake: more
//! hostile connections than the cap would otherwise keep the server busy
//! with handshakes, away from the scrapers; released, each comes back at
//! most once per [`crate::review::REVIEW_WAIT`].

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Open connections at most.
pub const MAX_CONNECTIONS: usize = 1024;
/// Open connections at most from one source address (an IPv6 /64 counts
/// as one): a client on one address (a tenant's pod) cannot fill the
/// server; its next connection closes one of its own, or is refused.
pub const MAX_CONNECTIONS_PER_SOURCE: usize = MAX_CONNECTIONS / 4;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a released connection may take to answer and close.
pub const RELEASE_GRACE: Duration = Duration::from_secs(3);
/// A connection silent this long after its accept is half-open.
pub const HALF_OPEN_AFTER: Duration = Duration::from_secs(1);

/// The rank of a trusted connection between requests: closed last.
const TRUSTED_IDLE: u8 = 7;

const HANDSHAKE: u8 = 0;
const IDLE: u8 = 1;
const HEADERS: u8 = 2;
const BUSY: u8 = 3;
const LINGER: u8 = 4;

/// One connection's phase, shared by its reader, its service and its
/// watchdog.
pub struct ConnState {
    phase: AtomicU8,
    /// When the phase began, in ms since `epoch`.
    since_ms: AtomicU64,
    in_flight: AtomicUsize,
    /// Requests in flight that wait for their turn or for a review of an
    /// unknown credential.
    unknown: AtomicUsize,
    /// A request on it was authorized for a scrape, or showed a credential
    /// that was.
    trusted: AtomicBool,
    /// A request on it was refused (and none authorized).
    refused: AtomicBool,
    h2: AtomicBool,
    /// Any byte arrived (a half-open connection has sent none).
    received: AtomicBool,
    /// The socket was read at all: only then does "nothing received" mean
    /// half-open (a task not yet run under load has simply not looked).
    polled: AtomicBool,
    epoch: Instant,
    /// The source address (`review::source_of`), if known.
    source: Option<IpAddr>,
    /// Cancelled when the connection is evicted.
    pub evicted: CancellationToken,
    /// Cancelled when it is released (module note).
    pub released: CancellationToken,
}

impl ConnState {
    fn new(source: Option<IpAddr>) -> Self {
        ConnState {
            source,
            phase: AtomicU8::new(HANDSHAKE),
            since_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            unknown: AtomicUsize::new(0),
            trusted: false.into(),
            refused: false.into(),
            h2: false.into(),
            received: false.into(),
            polled: false.into(),
            epoch: Instant::now(),
            evicted: CancellationToken::new(),
            released: CancellationToken::new(),
        }
    }

    fn set(&self, phase: u8) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.since_ms.store(ms, Ordering::Relaxed);
        self.phase.store(phase, Ordering::Relaxed);
    }

    /// The handshake is done: HTTP/1 waits for its first request's
    /// headers, HTTP/2 is idle until a stream opens.
    pub fn handshaken(&self, h2: bool) {
        self.h2.store(h2, Ordering::Relaxed);
        self.set(if h2 { IDLE } else { HEADERS });
    }

    /// Bytes arrived: on an idle HTTP/1 connection a request has begun.
    fn on_read(&self) {
        self.received.store(true, Ordering::Relaxed);
        if !self.h2.load(Ordering::Relaxed) && self.phase.load(Ordering::Relaxed) == IDLE {
            self.set(HEADERS);
        }
    }

    /// A request is being handled until the guard drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.set(BUSY);
        Busy(Arc::clone(self))
    }

    /// The request that called this waits for its turn or for a review of
    /// a credential never authorized, until the guard drops.
    pub fn waiting_unknown(self: &Arc<Self>) -> UnknownWait {
        self.unknown.fetch_add(1, Ordering::Relaxed);
        UnknownWait(Arc::clone(self))
    }

    /// A request on this connection was authorized for a scrape, or showed
    /// a credential that was.
    pub fn trust(&self) {
        self.trusted.store(true, Ordering::Relaxed);
    }

    pub fn trusted(&self) -> bool {
        self.trusted.load(Ordering::Relaxed)
    }

    /// A request on this connection was refused.
    pub fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Answered: the input is being discarded before the close.
    pub fn linger(&self) {
        self.set(LINGER);
    }

    /// Which kind of connection is closed first when full (lower first;
    /// `None`: never), as the module note lists them.
    fn rank(&self) -> Option<u8> {
        let phase = self.phase.load(Ordering::Relaxed);
        let trusted = self.trusted.load(Ordering::Relaxed);
        match phase {
            LINGER => Some(4),
            // Read `unknown` first: a request that begins waiting counts
            // itself in `in_flight` before `unknown`, and stops in the other
            // order, so a race reads "not evictable".
            BUSY => {
                let unknown = self.unknown.load(Ordering::Relaxed);
                let in_flight = self.in_flight.load(Ordering::Relaxed);
                (!trusted && unknown > 0 && unknown >= in_flight).then_some(2)
            }
            _ if !self.received.load(Ordering::Relaxed) => {
                let looked = self.polled.load(Ordering::Relaxed);
                Some(if looked && self.epoch.elapsed() >= HALF_OPEN_AFTER {
                    1
                } else {
                    5
                })
            }
            _ if trusted => Some(TRUSTED_IDLE),
            _ if self.refused.load(Ordering::Relaxed) => Some(3),
            _ => Some(6),
        }
    }

    /// When the current phase times out (`None`: inside a request, or
    /// lingering, which bounds itself).
    pub fn deadline(&self) -> Option<Instant> {
        let limit = match self.phase.load(Ordering::Relaxed) {
            HANDSHAKE => HANDSHAKE_TIMEOUT,
            IDLE => IDLE_TIMEOUT,
            HEADERS => READ_HEADER_TIMEOUT,
            _ => return None,
        };
        let since = Duration::from_millis(self.since_ms.load(Ordering::Relaxed));
        Some(self.epoch + since + limit)
    }
}

/// Marks a request waiting on an unknown credential's review.
pub struct UnknownWait(Arc<ConnState>);

impl Drop for UnknownWait {
    fn drop(&mut self) {
        self.0.unknown.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Marks a request in flight; the connection is idle once the last ends.
pub struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.set(IDLE);
        }
    }
}

/// `kcm_rs_secure_serving_connections` (open now) and
/// `kcm_rs_secure_serving_connections_closed_total{reason}` (evicted,
/// refused, and the timeouts).
#[derive(Clone)]
pub struct ConnMetrics {
    pub open: prometheus::IntGauge,
    pub closed: prometheus::IntCounterVec,
}

impl ConnMetrics {
    pub fn register(registry: &prometheus::Registry) -> Self {
        let open = prometheus::IntGauge::new(
            "kcm_rs_secure_serving_connections",
            "Connections open on the secure port.",
        )
        .expect("constant metric options are valid");
        let closed = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "kcm_rs_secure_serving_connections_closed_total",
                "Connections the secure port closed, by reason: evicted (full, oldest \
                 outside a request), refused (full, all inside requests), or a timeout.",
            ),
            &["reason"],
        )
        .expect("constant metric options are valid");
        ConnMetrics {
            open: kcm_runtime::metrics::register(registry, open),
            closed: kcm_runtime::metrics::register(registry, closed),
        }
    }
}

/// The open connections, oldest first.
pub struct Tracker {
    max: usize,
    /// Released connections still open.
    released: AtomicUsize,
    metrics: ConnMetrics,
    next: AtomicU64,
    conns: Mutex<Open>,
}

/// The open connections, oldest first, and how many each source holds.
#[derive(Default)]
struct Open {
    by_id: BTreeMap<u64, Arc<ConnState>>,
    per_source: HashMap<IpAddr, usize>,
}

impl Open {
    fn held_by(&self, source: Option<IpAddr>) -> usize {
        source.map_or(0, |s| self.per_source.get(&s).copied().unwrap_or(0))
    }

    fn remove(&mut self, id: u64) -> Option<Arc<ConnState>> {
        let s = self.by_id.remove(&id)?;
        if let Some(src) = s.source
            && let Some(n) = self.per_source.get_mut(&src)
        {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&src);
            }
        }
        Some(s)
    }

    /// The connection to close for a newcomer (of source `of` only, if
    /// given), as the module note orders them, with its rank; `None` when
    /// none may be closed.
    fn victim(&self, of: Option<IpAddr>) -> Option<(u8, u64)> {
        // Lower first: trusted last, then the heaviest source, then the
        // rank; `min_by_key` keeps the first (oldest) of equal keys.
        self.by_id
            .iter()
            .filter(|(_, s)| of.is_none() || s.source == of)
            .filter_map(|(id, s)| Some((s.rank()?, *id, s.source)))
            .min_by_key(|(rank, _, source)| {
                (
                    *rank == TRUSTED_IDLE,
                    std::cmp::Reverse(self.held_by(*source)),
                    *rank,
                )
            })
            .map(|(rank, id, _)| (rank, id))
    }
}

/// A connection's place in the [`Tracker`], freed on drop.
pub struct ConnSlot {
    tracker: Arc<Tracker>,
    id: u64,
    pub state: Arc<ConnState>,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        if self.state.released.is_cancelled() {
            self.tracker.released.fetch_sub(1, Ordering::Relaxed);
        }
        let mut conns = self.tracker.conns.lock();
        conns.remove(self.id);
        let open = i64::try_from(conns.by_id.len()).unwrap_or(i64::MAX);
        self.tracker.metrics.open.set(open);
    }
}

impl Tracker {
    pub fn new(max: usize, metrics: ConnMetrics) -> Arc<Self> {
        Arc::new(Tracker {
            max: max.max(1),
            released: AtomicUsize::new(0),
            metrics,
            next: AtomicU64::new(0),
            conns: Mutex::new(Open::default()),
        })
    }

    /// A slot for a new connection (source unknown).
    pub fn admit(self: &Arc<Self>) -> Option<ConnSlot> {
        self.admit_from(None)
    }

    /// A slot for a new connection from `source`, closing another when
    /// full (the module note's order); `None` when its source holds its
    /// share already, or when none may be closed.
    pub fn admit_from(self: &Arc<Self>, source: Option<IpAddr>) -> Option<ConnSlot> {
        let source = source.map(crate::review::source_of);
        let mut conns = self.conns.lock();
        // At its share, a source makes room among its own connections only.
        let at_share = conns.held_by(source) >= MAX_CONNECTIONS_PER_SOURCE;
        if at_share || conns.by_id.len() >= self.max {
            let Some((rank, victim)) = conns.victim(at_share.then_some(source).flatten()) else {
                let why = if at_share {
                    "refused: source full"
                } else {
                    "refused"
                };
                self.metrics.closed.with_label_values(&[why]).inc();
                return None;
            };
            if let Some(s) = conns.remove(victim) {
                let release = rank == 2
                    && !s.h2.load(Ordering::Relaxed)
                    && self.released.fetch_add(1, Ordering::Relaxed) < self.max;
                if release {
                    s.released.cancel();
                } else {
                    if rank == 2 && !s.h2.load(Ordering::Relaxed) {
                        self.released.fetch_sub(1, Ordering::Relaxed);
                    }
                    s.evicted.cancel();
                }
                self.metrics.closed.with_label_values(&["evicted"]).inc();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new(source));
        state.set(HANDSHAKE);
        conns.by_id.insert(id, Arc::clone(&state));
        if let Some(src) = source {
            *conns.per_source.entry(src).or_default() += 1;
        }
        self.metrics
            .open
            .set(i64::try_from(conns.by_id.len()).unwrap_or(i64::MAX));
        Some(ConnSlot {
            tracker: Arc::clone(self),
            id,
            state,
        })
    }

    pub fn open(&self) -> usize {
        self.conns.lock().by_id.len()
    }

    /// Released connections not closed yet.
    pub fn released(&self) -> usize {
        self.released.load(Ordering::Relaxed)
    }
}

/// The TLS stream, telling the connection's state when bytes arrive.
pub struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T> Watched<T> {
    pub fn new(inner: T, state: Arc<ConnState>) -> Self {
        Watched { inner, state }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        self.state.polled.store(true, Ordering::Relaxed);
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.on_read();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Runs `conn` until it ends, its phase times out or it is evicted; the
/// reason it was cut, if it was.
pub async fn supervise<F: std::future::Future>(conn: F, state: &ConnState) -> Option<&'static str> {
    tokio::pin!(conn);
    let mut release_by: Option<Instant> = None;
    loop {
        // Inside a request: look again later (requests here are short).
        let wake = state
            .deadline()
            .unwrap_or_else(|| Instant::now() + READ_HEADER_TIMEOUT);
        let wake = release_by.map_or(wake, |r| r.min(wake));
        tokio::select! {
            _ = &mut conn => return None,
            () = state.evicted.cancelled() => return Some("evicted: too many connections"),
            () = state.released.cancelled(), if release_by.is_none() => {
                release_by = Some(Instant::now() + RELEASE_GRACE);
            }
            () = tokio::time::sleep_until(wake) => {
                if release_by.is_some_and(|r| r <= Instant::now()) {
                    return Some("released: not closed in time");
                }
                if state.deadline().is_some_and(|d| d <= Instant::now()) {
                    return Some(match state.phase.load(Ordering::Relaxed) {
                        IDLE => "idle timeout",
                        HEADERS => "header read timeout",
                        _ => "handshake timeout",
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_tracker_evicts_the_oldest_idle_and_refuses_when_all_are_busy() {
        let t = Tracker::new(2, ConnMetrics::register(&prometheus::Registry::new()));
        let a = t.admit().expect("a");
        let b = t.admit().expect("b");
        a.state.on_read();
        b.state.on_read();
        let _busy = b.state.begin();
        let c = t.admit().expect("c evicts a");
        assert!(a.state.evicted.is_cancelled());
        assert!(!b.state.evicted.is_cancelled());
        let _busy_c = c.state.begin();
        assert!(t.admit().is_none(), "every connection is inside a request");
        drop(a);
        assert_eq!(t.open(), 2, "an evicted slot's drop frees nothing twice");
        assert_eq!(t.metrics.closed.with_label_values(&["refused"]).get(), 1);
    }

    #[tokio::test]
    async fn one_source_holds_its_share_and_goes_first_when_full() {
        let ip = |s: &str| -> Option<IpAddr> { Some(s.parse().expect("ip")) };
        let t = Tracker::new(4, ConnMetrics::register(&prometheus::Registry::new()));
        // The oldest is the scraper's, on an address of its own.
        let scraper = t.admit_from(ip("10.0.0.9")).expect("scraper");
        scraper.state.handshaken(false);
        let flood: Vec<_> = (0..3)
            .map(|_| t.admit_from(ip("10.0.0.1")).expect("flood"))
            .collect();
        for f in &flood {
            f.state.handshaken(false);
        }
        let _newcomer = t.admit_from(ip("10.0.0.2")).expect("room is made");
        assert!(
            flood[0].state.evicted.is_cancelled(),
            "the heaviest source's oldest"
        );
        assert!(
            !scraper.state.evicted.is_cancelled(),
            "though the scraper's is older"
        );
        // At its share, a source makes room among its own connections only.
        let t = Tracker::new(
            MAX_CONNECTIONS,
            ConnMetrics::register(&prometheus::Registry::new()),
        );
        let held: Vec<_> = (0..MAX_CONNECTIONS_PER_SOURCE)
            .map(|_| t.admit_from(ip("2001:db8:1:2::1")).expect("share"))
            .collect();
        let other = t.admit_from(ip("10.0.0.3")).expect("another source");
        let more = t
            .admit_from(ip("2001:db8:1:2::ffff"))
            .expect("the same /64: its own room");
        assert!(held[0].state.evicted.is_cancelled(), "its own oldest");
        assert!(!other.state.evicted.is_cancelled());
        assert_eq!(t.open(), MAX_CONNECTIONS_PER_SOURCE + 1);
        // When none of its own may go: refused.
        for h in held.iter().skip(1).chain([&more]) {
            std::mem::forget(h.state.begin());
        }
        assert!(t.admit_from(ip("2001:db8:1:2::1")).is_none());
        assert_eq!(
            t.metrics
                .closed
                .with_label_values(&["refused: source full"])
                .get(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn silent_connections_are_half_open_once_silent_for_a_while() {
        let t = Tracker::new(3, ConnMetrics::register(&prometheus::Registry::new()));
        let talking = t.admit().expect("talking");
        talking.state.on_read();
        let waiting = t.admit().expect("waiting");
        waiting.state.handshaken(false);
        waiting.state.on_read();
        let _busy = waiting.state.begin();
        let _wait = waiting.state.waiting_unknown();
        // Just accepted, read once, nothing yet: a client about to speak.
        let silent = t.admit().expect("silent");
        silent.state.polled.store(true, Ordering::Relaxed);
        let a = t.admit().expect("a");
        assert!(
            waiting.state.released.is_cancelled(),
            "the unknown wait first"
        );
        a.state.on_read();
        let b = t.admit().expect("b");
        assert!(silent.state.evicted.is_cancelled(), "then the young silent");
        assert!(!talking.state.evicted.is_cancelled());
        b.state.polled.store(true, Ordering::Relaxed);
        tokio::time::advance(HALF_OPEN_AFTER).await;
        let _c = t.admit().expect("c");
        assert!(
            b.state.evicted.is_cancelled(),
            "half-open now, though newest"
        );
        assert!(!talking.state.evicted.is_cancelled() && !a.state.evicted.is_cancelled());
    }

    /// A connection that sent its first request (headers being read).
    fn talking(t: &Arc<Tracker>) -> ConnSlot {
        let s = t.admit().expect("slot");
        s.state.handshaken(false);
        s.state.on_read();
        s
    }

    #[tokio::test]
    async fn connections_waiting_on_unknown_credentials_go_before_the_rest() {
        let t = Tracker::new(7, ConnMetrics::register(&prometheus::Registry::new()));
        // Oldest first: a trusted idle keep-alive, a fresh one, a lingering
        // one, one refused before, a young silent one, and one waiting on an
        // unknown token.
        let trusted = talking(&t);
        trusted.state.trust();
        let fresh = talking(&t);
        let lingering = talking(&t);
        lingering.state.linger();
        let refused = talking(&t);
        refused.state.refuse();
        let young = t.admit().expect("young");
        young.state.polled.store(true, Ordering::Relaxed);
        let unknown = talking(&t);
        let _busy = unknown.state.begin();
        let _wait = unknown.state.waiting_unknown();
        // Inside a request on known credentials: never closed.
        let known = talking(&t);
        let _known_busy = known.state.begin();
        let order = [&unknown, &refused, &lingering, &young, &fresh, &trusted];
        for (i, victim) in order.iter().enumerate() {
            let newcomer = t.admit().expect("room is made");
            let gone =
                |s: &ConnSlot| s.state.evicted.is_cancelled() || s.state.released.is_cancelled();
            assert!(gone(victim), "victim {i}");
            for later in &order[i + 1..] {
                assert!(!gone(later), "{i}: too early");
            }
            // Newcomers are inside a request on known credentials.
            let busy = newcomer.state.begin();
            std::mem::forget(busy);
            std::mem::forget(newcomer);
        }
        assert!(!known.state.evicted.is_cancelled());
        assert!(
            t.admit().is_none(),
            "only requests on known credentials left"
        );
    }

    #[tokio::test]
    async fn http1_connections_waiting_on_unknown_credentials_are_released() {
        let t = Tracker::new(1, ConnMetrics::register(&prometheus::Registry::new()));
        let waiting = |t: &Arc<Tracker>, h2: bool| {
            let c = t.admit().expect("slot");
            c.state.handshaken(h2);
            c.state.on_read();
            let busy = c.state.begin();
            let wait = c.state.waiting_unknown();
            (c, busy, wait)
        };
        let (a, _a_busy, _a_wait) = waiting(&t, false);
        let (b, _b_busy, _b_wait) = waiting(&t, false);
        assert!(a.state.released.is_cancelled() && !a.state.evicted.is_cancelled());
        assert_eq!((t.open(), t.released()), (1, 1));
        // At most `max` released at once: then cut.
        let (c, _c_busy, _c_wait) = waiting(&t, true);
        assert!(b.state.evicted.is_cancelled(), "no room to release");
        assert_eq!(t.released(), 1);
        drop(a);
        assert_eq!(t.released(), 0);
        // HTTP/2 (many streams): cut.
        let _d = t.admit().expect("d");
        assert!(c.state.evicted.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_connection_has_a_grace_to_close() {
        let s = ConnState::new(None);
        s.handshaken(false);
        s.released.cancel();
        let began = Instant::now();
        let cut = supervise(std::future::pending::<()>(), &s).await;
        assert_eq!(cut, Some("released: not closed in time"));
        assert_eq!(began.elapsed(), RELEASE_GRACE);
        // One that finishes in time is not cut.
        let s = ConnState::new(None);
        s.released.cancel();
        let done = supervise(tokio::time::sleep(Duration::from_secs(1)), &s).await;
        assert_eq!(done, None);
    }

    #[tokio::test]
    async fn a_request_on_known_credentials_keeps_its_connection() {
        let t = Tracker::new(1, ConnMetrics::register(&prometheus::Registry::new()));
        // HTTP/2: one stream waits on an unknown token, another is served.
        let c = talking(&t);
        let _a = c.state.begin();
        let _wait = c.state.waiting_unknown();
        let b = c.state.begin();
        assert!(t.admit().is_none());
        drop(b);
        assert!(t.admit().is_some(), "only the unknown wait is left");
        // A trusted connection waiting on a rotated token is kept.
        let t = Tracker::new(1, ConnMetrics::register(&prometheus::Registry::new()));
        let c = talking(&t);
        c.state.trust();
        let _a = c.state.begin();
        let _wait = c.state.waiting_unknown();
        assert!(t.admit().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn phases_time_out_as_go_net_http() {
        let s = Arc::new(ConnState::new(None));
        s.set(HANDSHAKE);
        let start = Instant::now();
        assert_eq!(s.deadline(), Some(start + HANDSHAKE_TIMEOUT));
        s.handshaken(false);
        assert_eq!(s.deadline(), Some(start + READ_HEADER_TIMEOUT));
        let busy = s.begin();
        assert_eq!(s.deadline(), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(busy);
        assert_eq!(s.deadline(), Some(Instant::now() + IDLE_TIMEOUT));
        s.on_read();
        assert_eq!(s.deadline(), Some(Instant::now() + READ_HEADER_TIMEOUT));
        // HTTP/2: reads (pings, window updates) never start a header timer.
        let h2 = Arc::new(ConnState::new(None));
        h2.handshaken(true);
        h2.on_read();
        assert_eq!(h2.deadline(), Some(Instant::now() + IDLE_TIMEOUT));
        let cut = supervise(std::future::pending::<()>(), &h2).await;
        assert_eq!(cut, Some("idle timeout"));
    }
}

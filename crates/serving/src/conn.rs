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
//! At most [`MAX_CONNECTIONS`] are open. When full, a new connection closes
//! the oldest one that was read and had sent nothing (half-open), else the
//! oldest one not inside a request (handshaking, sending headers, idle), so a
//! crowd of half-open or idle connections cannot keep a scraper out; only
//! when every one is inside a request is the new one refused.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Open connections at most.
pub const MAX_CONNECTIONS: usize = 1024;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

const HANDSHAKE: u8 = 0;
const IDLE: u8 = 1;
const HEADERS: u8 = 2;
const BUSY: u8 = 3;

/// One connection's phase, shared by its reader, its service and its
/// watchdog.
pub struct ConnState {
    phase: AtomicU8,
    /// When the phase began, in ms since `epoch`.
    since_ms: AtomicU64,
    in_flight: AtomicUsize,
    h2: std::sync::atomic::AtomicBool,
    /// Any byte arrived (a half-open connection has sent none).
    received: std::sync::atomic::AtomicBool,
    /// The socket was read at all: only then does "nothing received" mean
    /// half-open (a task not yet run under load has simply not looked).
    polled: std::sync::atomic::AtomicBool,
    epoch: Instant,
    /// Cancelled when the connection is evicted.
    pub evicted: CancellationToken,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            phase: AtomicU8::new(HANDSHAKE),
            since_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            h2: false.into(),
            received: false.into(),
            polled: false.into(),
            epoch: Instant::now(),
            evicted: CancellationToken::new(),
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

    fn evictable(&self) -> bool {
        self.phase.load(Ordering::Relaxed) != BUSY
    }

    /// When the current phase times out (`None`: inside a request).
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
        // A second server in one process (tests) shares the first's.
        let _ = registry.register(Box::new(open.clone()));
        let _ = registry.register(Box::new(closed.clone()));
        ConnMetrics { open, closed }
    }
}

/// The open connections, oldest first.
pub struct Tracker {
    max: usize,
    metrics: ConnMetrics,
    next: AtomicU64,
    conns: Mutex<BTreeMap<u64, Arc<ConnState>>>,
}

/// A connection's place in the [`Tracker`], freed on drop.
pub struct Slot {
    tracker: Arc<Tracker>,
    id: u64,
    pub state: Arc<ConnState>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut conns = self.tracker.conns.lock();
        conns.remove(&self.id);
        let open = i64::try_from(conns.len()).unwrap_or(i64::MAX);
        self.tracker.metrics.open.set(open);
    }
}

impl Tracker {
    pub fn new(max: usize, metrics: ConnMetrics) -> Arc<Self> {
        Arc::new(Tracker {
            max: max.max(1),
            metrics,
            next: AtomicU64::new(0),
            conns: Mutex::new(BTreeMap::new()),
        })
    }

    /// A slot for a new connection, closing the oldest one outside a
    /// request when full; `None` when every connection is inside one.
    pub fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut conns = self.conns.lock();
        if conns.len() >= self.max {
            let silent = |s: &ConnState| {
                s.polled.load(Ordering::Relaxed) && !s.received.load(Ordering::Relaxed)
            };
            let oldest = conns
                .iter()
                .find(|(_, s)| silent(s) && s.evictable())
                .or_else(|| conns.iter().find(|(_, s)| s.evictable()))
                .map(|(id, _)| *id);
            let Some(oldest) = oldest else {
                self.metrics.closed.with_label_values(&["refused"]).inc();
                return None;
            };
            if let Some(s) = conns.remove(&oldest) {
                s.evicted.cancel();
                self.metrics.closed.with_label_values(&["evicted"]).inc();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new());
        state.set(HANDSHAKE);
        conns.insert(id, Arc::clone(&state));
        self.metrics
            .open
            .set(i64::try_from(conns.len()).unwrap_or(i64::MAX));
        Some(Slot {
            tracker: Arc::clone(self),
            id,
            state,
        })
    }

    pub fn open(&self) -> usize {
        self.conns.lock().len()
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
    loop {
        // Inside a request: look again later (requests here are short).
        let wake = state
            .deadline()
            .unwrap_or_else(|| Instant::now() + READ_HEADER_TIMEOUT);
        tokio::select! {
            _ = &mut conn => return None,
            () = state.evicted.cancelled() => return Some("evicted: too many connections"),
            () = tokio::time::sleep_until(wake) => {
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
    async fn half_open_connections_go_first() {
        let t = Tracker::new(2, ConnMetrics::register(&prometheus::Registry::new()));
        let talking = t.admit().expect("talking");
        talking.state.on_read();
        let silent = t.admit().expect("silent");
        silent.state.polled.store(true, Ordering::Relaxed);
        let _new = t.admit().expect("new");
        assert!(silent.state.evicted.is_cancelled());
        assert!(!talking.state.evicted.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn phases_time_out_as_go_net_http() {
        let s = Arc::new(ConnState::new());
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
        let h2 = Arc::new(ConnState::new());
        h2.handshaken(true);
        h2.on_read();
        assert_eq!(h2.deadline(), Some(Instant::now() + IDLE_TIMEOUT));
        let cut = supervise(std::future::pending::<()>(), &h2).await;
        assert_eq!(cut, Some("idle timeout"));
    }
}

//! Client-side token-bucket rate limiting, the equivalent of client-go's
//! `flowcontrol.NewTokenBucketRateLimiter(qps, burst)` that every KCM
//! controller client carries, with waiting requests served by namespace
//! in turns (beyond client-go, see [`TokenBucket`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceExt as _};

use super::metrics::{HostMetrics, is_watch};
use crate::workqueue::ready::Ready;

/// A token bucket holding at most `burst` tokens, refilled at `qps` tokens a
/// second, which starts full.
///
/// A request takes a token at once while tokens are in hand and nobody
/// waits. Otherwise it waits in the queue of its *flow* (the namespace it
/// addresses, see [`flow_of`]), and a driver task hands out each token as it
/// accrues to the flows in turns, FIFO within a flow (the work queue's
/// turns, `workqueue::ready`). So the rate is client-go's (golang.org/x/time/rate
/// behind `NewTokenBucketRateLimiter`: `burst` at once, then one request
/// every `1/qps`), but while requests queue, one namespace's hundreds of
/// pod creations no longer delay another namespace's first one: it waits
/// for at most one token per other waiting flow (docs/fair-share.md).
/// client-go serves waiters in arrival order. A request abandoned while it
/// waits takes no token.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

/// A request waiting for a token.
struct Waiter {
    flow: Arc<str>,
    granted: oneshot::Sender<()>,
}

fn flow_lane(w: &Waiter) -> &str {
    &w.flow
}

struct BucketState {
    /// Tokens available at `last`.
    tokens: f64,
    last: Instant,
    /// Waiting requests; not empty only while a driver task runs.
    waiters: Ready<Waiter>,
    driving: bool,
}

impl std::fmt::Debug for BucketState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketState")
            .field("tokens", &self.tokens)
            .field("waiting", &self.waiters.len())
            .finish_non_exhaustive()
    }
}

impl BucketState {
    fn refill(&mut self, now: Instant, qps: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * qps).min(burst);
        if now > self.last {
            self.last = now;
        }
    }
}

impl TokenBucket {
    /// A full bucket. `qps` must be finite and positive and `burst` at least
    /// one; the client builder validates both before calling this.
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps).max(f64::MIN_POSITIVE),
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                last: Instant::now(),
                waiters: Ready::fair(flow_lane),
                driving: false,
            }),
        }
    }

    /// Waits (asynchronously) for a token for a request of `flow` and
    /// returns the time spent waiting. Dropping the future before it
    /// completes leaves the token to the next waiter.
    pub async fn acquire(self: &Arc<Self>, flow: &str) -> Duration {
        let start = Instant::now();
        let granted = {
            let mut s = self.state.lock();
            s.refill(start, self.qps, self.burst);
            if s.waiters.is_empty() && s.tokens >= 1.0 {
                s.tokens -= 1.0;
                return Duration::ZERO;
            }
            let (tx, rx) = oneshot::channel();
            s.waiters.push_back(Waiter {
                flow: Arc::from(flow),
                granted: tx,
            });
            if !s.driving {
                s.driving = true;
                tokio::spawn(Arc::clone(self).drive());
            }
            rx
        };
        // Err only if the driver was dropped with the runtime.
        let _ = granted.await;
        start.elapsed()
    }

    /// Hands out tokens as they accrue, flows in turns, until nobody waits.
    async fn drive(self: Arc<Self>) {
        loop {
            let wait = {
                let mut s = self.state.lock();
                s.refill(Instant::now(), self.qps, self.burst);
                while s.tokens >= 1.0 {
                    let Some(w) = s.waiters.pop_front(0) else {
                        break;
                    };
                    // A waiter that gave up takes no token.
                    if w.granted.send(()).is_ok() {
                        s.tokens -= 1.0;
                    }
                }
                if s.waiters.is_empty() {
                    s.driving = false;
                    return;
                }
                Duration::try_from_secs_f64((1.0 - s.tokens) / self.qps)
                    .unwrap_or(Duration::from_secs(1))
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// The flow of a request: the namespace its path addresses
/// (`/api/v1/namespaces/{ns}/...`, `/apis/{group}/{version}/namespaces/{ns}/...`),
/// `""` for cluster-scoped requests.
pub fn flow_of(uri: &http::Uri) -> &str {
    let mut parts = uri.path().trim_start_matches('/').split('/');
    let ns_at = match parts.next() {
        Some("api") => 1,
        Some("apis") => 2,
        _ => return "",
    };
    let mut parts = parts.skip(ns_at);
    match (parts.next(), parts.next()) {
        (Some("namespaces"), Some(ns)) => ns,
        _ => "",
    }
}

/// Layer making every non-watch request wait for a token of a shared
/// [`TokenBucket`] (client-go's `flowcontrol.RateLimiter` in its REST
/// client; a work queue's retry pacing is
/// [`crate::workqueue::RetryRateLimit`]), observing the wait in
/// `rest_client_rate_limiter_duration_seconds{verb,host}`.
///
/// Watches are not throttled, as in client-go (`Request.Watch` skips the
/// limiter: a watch is one long request, and informers must be able to
/// re-establish them while the controller's writes are being throttled).
#[derive(Clone, Debug)]
pub struct ClientRateLimitLayer {
    bucket: Arc<TokenBucket>,
    m: HostMetrics,
}

impl ClientRateLimitLayer {
    /// Throttles through `bucket`, timing the waits into `m`.
    pub fn new(bucket: Arc<TokenBucket>, m: HostMetrics) -> Self {
        ClientRateLimitLayer { bucket, m }
    }
}

impl<S> Layer<S> for ClientRateLimitLayer {
    type Service = ClientRateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientRateLimit {
            inner,
            bucket: self.bucket.clone(),
            m: self.m.clone(),
        }
    }
}

/// Service produced by [`ClientRateLimitLayer`]. The inner service must be cheap
/// to clone (the transport's boxed stack): each call takes its own clone so
/// that waiting for a token holds no slot of the inner service.
#[derive(Clone, Debug)]
pub struct ClientRateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    m: HostMetrics,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ClientRateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send + 'static>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service is awaited in the call future, after
        // the token: a throttled request must not stall kube's buffer above
        // (its one worker serves every request of the client, watches too).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let inner = self.inner.clone();
        let bucket = self.bucket.clone();
        let m = self.m.clone();
        Box::pin(async move {
            if !is_watch(req.uri()) {
                let waited = bucket.acquire(flow_of(req.uri())).await;
                m.families
                    .rate_limiter_duration
                    .with_label_values(&[req.method().as_str(), &m.host])
                    .observe(waited.as_secs_f64());
                if waited > LONG_THROTTLE_LATENCY {
                    tracing::debug!(
                        waited_ms = waited.as_millis() as u64,
                        method = %req.method(),
                        uri = %req.uri(),
                        "waited due to client-side throttling"
                    );
                }
            }
            inner.oneshot(req).await.map_err(Into::into)
        })
    }
}

/// client-go logs throttling longer than this (`longThrottleLatency`).
const LONG_THROTTLE_LATENCY: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Who got a token when: (flow, index within the flow, time).
    type Log = Arc<Mutex<Vec<(&'static str, usize, Duration)>>>;

    /// Starts `n` requests of `flow` at once; each records when it got its
    /// token in `log` as (flow, index, time since `t0`).
    fn start(
        bucket: &Arc<TokenBucket>,
        flow: &'static str,
        n: usize,
        t0: Instant,
        log: &Log,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..n)
            .map(|i| {
                let (bucket, log) = (Arc::clone(bucket), Arc::clone(log));
                tokio::spawn(async move {
                    bucket.acquire(flow).await;
                    log.lock().push((flow, i, t0.elapsed()));
                })
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn burst_is_free_then_one_token_per_interval() {
        let bucket = Arc::new(TokenBucket::new(10.0, 3));
        for _ in 0..3 {
            assert_eq!(bucket.acquire("a").await, Duration::ZERO);
        }
        assert_eq!(bucket.acquire("a").await, ms(100));
        assert_eq!(bucket.acquire("a").await, ms(100));
        // 250 ms later 2.5 tokens have accrued: two free, the third waits
        // for the missing half.
        tokio::time::sleep(ms(250)).await;
        assert_eq!(bucket.acquire("a").await, Duration::ZERO);
        assert_eq!(bucket.acquire("a").await, Duration::ZERO);
        assert_eq!(bucket.acquire("a").await, ms(50));
    }

    #[tokio::test(start_paused = true)]
    async fn refill_is_capped_at_burst() {
        let bucket = Arc::new(TokenBucket::new(100.0, 2));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(bucket.acquire("").await, Duration::ZERO);
        assert_eq!(bucket.acquire("").await, Duration::ZERO);
        assert_eq!(bucket.acquire("").await, ms(10));
    }

    /// Requests queued at once get their tokens 1/qps apart, as client-go's
    /// reservations do, however many flows they come from.
    #[tokio::test(start_paused = true)]
    async fn queued_requests_keep_the_rate() {
        let bucket = Arc::new(TokenBucket::new(4.0, 1));
        let log = Log::default();
        let t0 = Instant::now();
        let mut tasks = start(&bucket, "a", 5, t0, &log);
        tasks.extend(start(&bucket, "b", 3, t0, &log));
        for t in tasks {
            assert!(t.await.is_ok());
        }
        let mut times: Vec<Duration> = log.lock().iter().map(|e| e.2).collect();
        times.sort();
        let want: Vec<Duration> = (0..8).map(|i| ms(250 * i)).collect();
        assert_eq!(times, want);
    }

    /// A flow that queues behind another's burst gets every other token,
    /// not the tokens after the whole burst; FIFO within each flow.
    #[tokio::test(start_paused = true)]
    async fn flows_take_turns_for_tokens() {
        let bucket = Arc::new(TokenBucket::new(10.0, 1));
        let log = Log::default();
        let t0 = Instant::now();
        let mut tasks = start(&bucket, "flood", 50, t0, &log);
        tokio::time::sleep(ms(1)).await;
        tasks.extend(start(&bucket, "quiet", 2, t0, &log));
        for t in tasks {
            assert!(t.await.is_ok());
        }
        let log = log.lock();
        let quiet: Vec<Duration> = log.iter().filter(|e| e.0 == "quiet").map(|e| e.2).collect();
        // The flood's first took the one token at once and its second the
        // 100 ms one; the quiet flow takes its turns at 200 and 400 ms
        // (a FIFO would give it 5.0 and 5.1 s).
        assert_eq!(quiet, vec![ms(200), ms(400)]);
        let flood: Vec<usize> = log.iter().filter(|e| e.0 == "flood").map(|e| e.1).collect();
        assert_eq!(flood.len(), 50);
        assert!(flood.windows(2).all(|w| w[0] < w[1]), "{flood:?}");
        assert_eq!(log.last().map(|e| e.2), Some(ms(5100)));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_wait_takes_no_token() {
        let bucket = Arc::new(TokenBucket::new(1.0, 1));
        assert_eq!(bucket.acquire("a").await, Duration::ZERO);
        // Gives up after 100 ms of a 1 s wait.
        let r = tokio::time::timeout(ms(100), bucket.acquire("a")).await;
        assert!(r.is_err());
        // The token accruing at 1 s goes to the next caller.
        assert_eq!(bucket.acquire("b").await, ms(900));
        assert_eq!(bucket.state.lock().waiters.len(), 0);
    }

    #[test]
    fn flow_is_the_namespace_of_the_path() {
        let f = |s: &str| flow_of(&s.parse::<http::Uri>().expect("uri")).to_string();
        assert_eq!(f("/api/v1/namespaces/ns1/pods"), "ns1");
        assert_eq!(f("/api/v1/namespaces/ns1/pods/p?dryRun=All"), "ns1");
        assert_eq!(
            f("/apis/batch/v1/namespaces/team-a/jobs/j/status"),
            "team-a"
        );
        assert_eq!(f("/apis/events.k8s.io/v1/namespaces/x/events"), "x");
        assert_eq!(f("/api/v1/namespaces/ns1"), "ns1");
        assert_eq!(f("/api/v1/nodes/n1"), "");
        assert_eq!(f("/api/v1/pods"), "");
        assert_eq!(f("/apis/batch/v1/jobs"), "");
        assert_eq!(f("/version"), "");
        assert_eq!(f("/"), "");
    }
}

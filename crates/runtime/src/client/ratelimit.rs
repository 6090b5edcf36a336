//! Client-side token-bucket rate limiting, the equivalent of client-go's
//! `flowcontrol.NewTokenBucketRateLimiter(qps, burst)` that every KCM
//! controller client carries.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceExt as _};

use super::metrics::{is_watch, rest_client_metrics};

/// A token bucket holding at most `burst` tokens, refilled at `qps` tokens a
/// second, which starts full.
///
/// Like golang.org/x/time/rate (behind client-go's limiter), a caller
/// *reserves* a token under the lock, possibly driving the balance negative,
/// and then sleeps until its reservation matures. Waiters are therefore
/// served in arrival order without polling, and a reservation abandoned
/// before it matures gives its token back.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens available at `last`; negative when reservations are queued.
    tokens: f64,
    last: Instant,
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
            }),
        }
    }

    /// Takes one token as of `now` and returns how long the caller must wait
    /// before using it (zero when a token was available).
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock();
        let elapsed = now.saturating_duration_since(s.last).as_secs_f64();
        s.tokens = (s.tokens + elapsed * self.qps).min(self.burst);
        if now > s.last {
            s.last = now;
        }
        s.tokens -= 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / self.qps)
        }
    }

    /// Returns a token taken by [`TokenBucket::reserve`] that was not used.
    fn unreserve(&self) {
        let mut s = self.state.lock();
        s.tokens = (s.tokens + 1.0).min(self.burst);
    }

    /// Waits (asynchronously) for a token and returns the time spent waiting.
    /// Dropping the future before it completes returns the token.
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            let guard = Unreserve(Some(self));
            tokio::time::sleep(wait).await;
            guard.disarm();
        }
        wait
    }
}

/// Gives a reserved token back if the waiting future is dropped.
struct Unreserve<'a>(Option<&'a TokenBucket>);

impl Unreserve<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Unreserve<'_> {
    fn drop(&mut self) {
        if let Some(bucket) = self.0 {
            bucket.unreserve();
        }
    }
}

/// Layer making every non-watch request wait for a token of a shared
/// [`TokenBucket`], observing the wait in
/// `rest_client_rate_limiter_duration_seconds{verb,host}`.
///
/// Watches are not throttled, as in client-go (`Request.Watch` skips the
/// limiter: a watch is one long request, and informers must be able to
/// re-establish them while the controller's writes are being throttled).
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
}

impl RateLimitLayer {
    /// Throttles through `bucket`; `host` is the metrics label.
    pub fn new(bucket: Arc<TokenBucket>, host: Arc<str>) -> Self {
        RateLimitLayer { bucket, host }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            host: self.host.clone(),
        }
    }
}

/// Service produced by [`RateLimitLayer`]. The inner service must be cheap
/// to clone (a `Buffer`): each call takes its own clone so that waiting for
/// a token holds no slot of the inner service.
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
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
        // the token: a throttled request must not hold a buffer slot.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let inner = self.inner.clone();
        let bucket = self.bucket.clone();
        let host = self.host.clone();
        Box::pin(async move {
            if !is_watch(req.uri()) {
                let waited = bucket.acquire().await;
                rest_client_metrics()
                    .rate_limiter_duration
                    .with_label_values(&[req.method().as_str(), &host])
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

    #[tokio::test(start_paused = true)]
    async fn burst_is_free_then_one_token_per_interval() {
        let bucket = TokenBucket::new(10.0, 3);
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.reserve(now), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(now), Duration::from_millis(100));
        assert_eq!(bucket.reserve(now), Duration::from_millis(200));
        // 250 ms later the two queued reservations have matured and half a
        // token has accrued: the next one waits 50 ms.
        let later = now + Duration::from_millis(250);
        let w = bucket.reserve(later);
        assert!((w.as_secs_f64() - 0.05).abs() < 1e-6, "{w:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn refill_is_capped_at_burst() {
        let bucket = TokenBucket::new(100.0, 2);
        let now = Instant::now() + Duration::from_secs(3600);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now), Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_sleeps_for_the_reservation() {
        let bucket = TokenBucket::new(4.0, 1);
        let start = Instant::now();
        assert_eq!(bucket.acquire().await, Duration::ZERO);
        assert_eq!(bucket.acquire().await, Duration::from_millis(250));
        assert_eq!(start.elapsed(), Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_reservation_returns_its_token() {
        let bucket = TokenBucket::new(1.0, 1);
        assert_eq!(bucket.acquire().await, Duration::ZERO);
        // Times out after 100 ms of a 1 s wait: the token goes back.
        let r = tokio::time::timeout(Duration::from_millis(100), bucket.acquire()).await;
        assert!(r.is_err());
        // 0.1 s accrued, so the next caller waits 0.9 s, not 1.9 s.
        let w = bucket.reserve(Instant::now());
        assert!((w.as_secs_f64() - 0.9).abs() < 1e-6, "{w:?}");
    }
}

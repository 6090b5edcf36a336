//! Two bounds on every request, enforced per attempt:
//!
//! * a timeout on every request that is not a watch, covering the response
//!   body too ([`REQUEST_TIMEOUT`] by default): a stalled connection or
//!   proxy cannot hold a worker for longer;
//! * the leadership write [`Fence`]: a write (any verb but GET, HEAD,
//!   OPTIONS) is refused once the fence has passed, and one in flight is
//!   cancelled when it passes. The leader elector moves the fence to
//!   "start of the last successful renewal + renew deadline", so a leader
//!   that cannot renew stops writing before a standby may acquire (which
//!   waits a whole lease duration from the renewal it observed).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Method, Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Layer, Service};

use super::metrics::is_watch;

/// Default bound on one non-watch request. kube-apiserver ends such requests
/// itself after its `--request-timeout` (60 s); half of that means a stall
/// somewhere between us and it is noticed well before.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `until` value of a fence that never closes (no leader election).
const OPEN: u64 = u64::MAX;

/// Until when this process may write. Cloning shares the fence.
#[derive(Clone)]
pub struct Fence(Arc<FenceState>);

struct FenceState {
    origin: Instant,
    /// Nanoseconds after `origin`; 0 = closed, [`OPEN`] = never closes.
    until: AtomicU64,
    /// Cancelled by [`Fence::close`]: writes in flight end at once.
    closed: CancellationToken,
}

impl Fence {
    /// A fence that never closes: the process writes without leader election.
    pub fn open() -> Self {
        Fence::with(OPEN)
    }

    /// A closed fence: no writes until [`Fence::extend_to`].
    pub fn closed() -> Self {
        Fence::with(0)
    }

    fn with(until: u64) -> Self {
        Fence(Arc::new(FenceState {
            origin: Instant::now(),
            until: AtomicU64::new(until),
            closed: CancellationToken::new(),
        }))
    }

    /// Allows writes until `until`, unless the fence was closed for good.
    pub fn extend_to(&self, until: Instant) {
        if self.0.closed.is_cancelled() {
            return;
        }
        let nanos = until.saturating_duration_since(self.0.origin).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(OPEN - 1).clamp(1, OPEN - 1);
        self.0.until.store(nanos, Ordering::SeqCst);
    }

    /// Refuses every write from now on, and cancels those in flight.
    pub fn close(&self) {
        self.0.until.store(0, Ordering::SeqCst);
        self.0.closed.cancel();
    }

    /// How long writes stay allowed: `None` for ever, zero once closed.
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.0.until.load(Ordering::SeqCst);
        if until == OPEN {
            return None;
        }
        let now = self.0.origin.elapsed();
        Some(Duration::from_nanos(until).saturating_sub(now))
    }

    /// Whether a write now would be refused.
    pub fn is_closed(&self) -> bool {
        self.remaining().is_some_and(|d| d.is_zero())
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.remaining() {
            None => f.write_str("Fence(open)"),
            Some(d) => write!(f, "Fence({d:?} left)"),
        }
    }
}

impl PartialEq for Fence {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Why a request was cut short.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeadlineError {
    #[error("request to the API server timed out after {0:?}")]
    TimedOut(Duration),
    #[error("write refused: leadership not renewed within the renew deadline")]
    Fenced,
}

/// Adds the bounds of this module to a service.
#[derive(Clone, Debug)]
pub struct DeadlineLayer {
    timeout: Duration,
    fence: Fence,
}

impl DeadlineLayer {
    pub fn new(timeout: Duration, fence: Fence) -> Self {
        DeadlineLayer { timeout, fence }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            timeout: self.timeout,
            fence: self.fence.clone(),
        }
    }
}

/// Service produced by [`DeadlineLayer`].
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
    timeout: Duration,
    fence: Fence,
}

fn is_write(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The bound for one request and which error passing it means.
fn bound_for(
    method: &Method,
    watch: bool,
    timeout: Duration,
    fence: &Fence,
) -> Option<(Duration, DeadlineError)> {
    let timed = (!watch).then_some((timeout, DeadlineError::TimedOut(timeout)));
    let fenced = is_write(method)
        .then(|| fence.remaining())
        .flatten()
        .map(|d| (d, DeadlineError::Fenced));
    match (timed, fenced) {
        (Some(t), Some(f)) => Some(if f.0 <= t.0 { f } else { t }),
        (t, f) => t.or(f),
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Deadline<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResBody: Send + 'static,
{
    type Response = Response<DeadlineBody<ResBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let req_method = &req.method().clone();
        let bound = bound_for(req.method(), is_watch(req.uri()), self.timeout, &self.fence);
        if let Some((d, DeadlineError::Fenced)) = &bound
            && d.is_zero()
        {
            return Box::pin(async { Err(DeadlineError::Fenced.into()) });
        }
        let fut = self.inner.call(req);
        let closed = is_write(req_method).then(|| self.fence.0.closed.clone());
        Box::pin(async move {
            let fut = async move {
                match closed {
                    Some(c) => tokio::select! {
                        r = fut => r.map_err(Into::into),
                        _ = c.cancelled() => Err(DeadlineError::Fenced.into()),
                    },
                    None => fut.await.map_err(Into::into),
                }
            };
            let Some((d, err)) = bound else {
                let res: Response<ResBody> = fut.await?;
                return Ok(res.map(|inner| DeadlineBody { inner, end: None }));
            };
            let end = Instant::now() + d;
            match tokio::time::timeout_at(end, fut).await {
                Ok(res) => {
                    let res: Response<ResBody> = res?;
                    let sleep = Box::pin(tokio::time::sleep_until(end));
                    Ok(res.map(|inner| DeadlineBody {
                        inner,
                        end: Some((sleep, err)),
                    }))
                }
                Err(_) => Err(err.into()),
            }
        })
    }
}

pin_project! {
    /// A response body that ends in an error once its request's bound
    /// passes (a stalled list cannot hold its reader for ever).
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        end: Option<(Pin<Box<Sleep>>, DeadlineError)>,
    }
}

impl<B: fmt::Debug> fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some((sleep, err)) = this.end.as_mut() {
            ready!(sleep.as_mut().poll(cx));
            let err = std::mem::replace(err, DeadlineError::Fenced);
            *this.end = None;
            return Poll::Ready(Some(Err(err.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_fence_opens_closes_and_runs_out() {
        assert_eq!(Fence::open().remaining(), None);
        let f = Fence::closed();
        assert!(f.is_closed());
        f.extend_to(Instant::now() + Duration::from_secs(10));
        assert_eq!(f.remaining(), Some(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(f.remaining(), Some(Duration::from_secs(6)));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(f.is_closed());
        f.extend_to(Instant::now() + Duration::from_secs(1));
        assert!(!f.is_closed());
        f.close();
        assert!(f.is_closed());
        // Closed for good: a late renewal does not reopen it.
        f.extend_to(Instant::now() + Duration::from_secs(10));
        assert!(f.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn writes_take_the_nearer_bound_and_watches_only_the_fence() {
        let t = Duration::from_secs(30);
        let f = Fence::closed();
        f.extend_to(Instant::now() + Duration::from_secs(5));
        let b = |m: Method, watch| bound_for(&m, watch, t, &f);
        assert_eq!(b(Method::GET, false), Some((t, DeadlineError::TimedOut(t))));
        assert_eq!(b(Method::GET, true), None);
        assert_eq!(
            b(Method::PATCH, false),
            Some((Duration::from_secs(5), DeadlineError::Fenced))
        );
        assert_eq!(
            b(Method::POST, true),
            Some((Duration::from_secs(5), DeadlineError::Fenced))
        );
        let open = Fence::open();
        assert_eq!(
            bound_for(&Method::DELETE, false, t, &open),
            Some((t, DeadlineError::TimedOut(t)))
        );
    }
}

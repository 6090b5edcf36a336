//! The `rest_client_*` metrics of client-go
//! (k8s.io/component-base/metrics/prometheus/restclient/metrics.go), with
//! their upstream names, labels and buckets, and the layers recording them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Method, Request, Response, Uri, header::USER_AGENT};
use http_body::{Body as HttpBody, Frame, SizeHint};
use pin_project_lite::pin_project;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Latency buckets of `rest_client_request_duration_seconds` and
/// `rest_client_rate_limiter_duration_seconds`, verbatim from client-go's
/// restclient metrics so dashboards computing quantiles keep working.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The `rest_client_*` metric families on one registry
/// ([`crate::metrics::Metrics`]), shared by every client built with it.
#[derive(Clone, Debug)]
pub struct RestClientMetrics {
    /// `rest_client_requests_total{code,method,host}`: one per HTTP attempt
    /// (a retried request counts once per attempt, as in client-go).
    pub requests_total: IntCounterVec,
    /// `rest_client_request_duration_seconds{verb,host}`: whole request,
    /// including throttling, retries and reading the response body.
    pub request_duration: HistogramVec,
    /// `rest_client_rate_limiter_duration_seconds{verb,host}`: time waited
    /// for a token, per attempt.
    pub rate_limiter_duration: HistogramVec,
    /// `rest_client_request_retries_total{code,method,host}`: attempts that
    /// were retried, labelled with the outcome that caused the retry.
    pub retries_total: IntCounterVec,
}

impl RestClientMetrics {
    /// The families, registered on `r`.
    pub fn new(r: &Registry) -> Self {
        let requests_total = IntCounterVec::new(
            Opts::new(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
            ),
            &["code", "method", "host"],
        )
        .expect("static metric definition is valid");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["verb", "host"],
        )
        .expect("static metric definition is valid");
        let rate_limiter_duration = HistogramVec::new(
            HistogramOpts::new(
                "rest_client_rate_limiter_duration_seconds",
                "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["verb", "host"],
        )
        .expect("static metric definition is valid");
        let retries_total = IntCounterVec::new(
            Opts::new(
                "rest_client_request_retries_total",
                "Number of request retries, partitioned by status code, verb, and host.",
            ),
            &["code", "verb", "host"],
        )
        .expect("static metric definition is valid");
        RestClientMetrics {
            requests_total: crate::metrics::register(r, requests_total),
            request_duration: crate::metrics::register(r, request_duration),
            rate_limiter_duration: crate::metrics::register(r, rate_limiter_duration),
            retries_total: crate::metrics::register(r, retries_total),
        }
    }
}

/// What each layer of one client records into: the families and the
/// client's `host` label.
#[derive(Clone, Debug)]
pub struct HostMetrics {
    pub families: Arc<RestClientMetrics>,
    pub host: Arc<str>,
}

/// Whether the request is a watch (`watch=true` or `watch=1` in the query):
/// watches are long-running, so they are neither throttled nor timed.
pub fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&').any(|pair| {
            matches!(
                pair.split_once('='),
                Some(("watch", "true" | "1" | "True" | "TRUE" | "t" | "T"))
            )
        })
    })
}

/// The `code` label: the status code, or `<error>` when no response came
/// back (client-go's `sanitize`, which keeps error strings out of labels).
pub fn code_label<B, E>(result: &Result<Response<B>, E>) -> String {
    match result {
        Ok(res) => res.status().as_u16().to_string(),
        Err(_) => "<error>".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Per-attempt counter.

/// Layer counting every HTTP attempt in `rest_client_requests_total`.
#[derive(Clone, Debug)]
pub struct AttemptMetricsLayer {
    m: HostMetrics,
}

impl AttemptMetricsLayer {
    /// Counts into `m`.
    pub fn new(m: HostMetrics) -> Self {
        AttemptMetricsLayer { m }
    }
}

impl<S> Layer<S> for AttemptMetricsLayer {
    type Service = AttemptMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptMetrics {
            inner,
            m: self.m.clone(),
        }
    }
}

/// Service produced by [`AttemptMetricsLayer`].
#[derive(Clone, Debug)]
pub struct AttemptMetrics<S> {
    inner: S,
    m: HostMetrics,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AttemptMetrics<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let method = req.method().clone();
        let m = self.m.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            m.families
                .requests_total
                .with_label_values(&[code_label(&result).as_str(), method.as_str(), &m.host])
                .inc();
            result
        })
    }
}

// ---------------------------------------------------------------------------
// Whole-request latency and user agent.

/// Outermost layer: sets the User-Agent and observes
/// `rest_client_request_duration_seconds` from the call until the response
/// body is finished (or dropped), like client-go's `Request.request`, which
/// times throttling, retries and reading the body. Watches are not timed.
#[derive(Clone, Debug)]
pub struct InstrumentLayer {
    m: HostMetrics,
    user_agent: HeaderValue,
}

impl InstrumentLayer {
    /// Times requests into `m` and sends `user_agent` on every request.
    pub fn new(m: HostMetrics, user_agent: HeaderValue) -> Self {
        InstrumentLayer { m, user_agent }
    }
}

impl<S> Layer<S> for InstrumentLayer {
    type Service = Instrument<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Instrument {
            inner,
            m: self.m.clone(),
            user_agent: self.user_agent.clone(),
        }
    }
}

/// Service produced by [`InstrumentLayer`].
#[derive(Clone, Debug)]
pub struct Instrument<S> {
    inner: S,
    m: HostMetrics,
    user_agent: HeaderValue,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Instrument<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = Response<TimedBody<ResBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        req.headers_mut()
            .insert(USER_AGENT, self.user_agent.clone());
        let timer = (!is_watch(req.uri())).then(|| RequestTimer {
            start: Instant::now(),
            method: req.method().clone(),
            m: self.m.clone(),
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            // On error the timer is dropped here, which records it.
            let res = fut.await.map_err(Into::into)?;
            Ok(res.map(|inner| TimedBody { inner, timer }))
        })
    }
}

/// Records the request duration when dropped.
#[derive(Debug)]
struct RequestTimer {
    start: Instant,
    method: Method,
    m: HostMetrics,
}

impl Drop for RequestTimer {
    fn drop(&mut self) {
        self.m
            .families
            .request_duration
            .with_label_values(&[self.method.as_str(), &self.m.host])
            .observe(self.start.elapsed().as_secs_f64());
    }
}

pin_project! {
    /// A response body that stops the request timer at its end: the last
    /// frame, an error, or being dropped unread, whichever comes first.
    #[derive(Debug)]
    pub struct TimedBody<B> {
        #[pin]
        inner: B,
        timer: Option<RequestTimer>,
    }
}

impl<B> HttpBody for TimedBody<B>
where
    B: HttpBody,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            drop(this.timer.take());
        }
        polled
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

    #[test]
    fn detects_watches_from_the_query() {
        let w = |s: &str| is_watch(&s.parse::<Uri>().expect("uri"));
        assert!(w("/api/v1/pods?watch=true&resourceVersion=1"));
        assert!(w("/api/v1/pods?resourceVersion=1&watch=1"));
        assert!(!w("/api/v1/pods?watch=false"));
        assert!(!w("/api/v1/pods?resourceVersion=0"));
        assert!(!w("/api/v1/pods"));
        assert!(!w("/api/v1/pods?allowWatchBookmarks=true"));
    }

    #[test]
    fn code_label_is_status_or_error() {
        let ok: Result<Response<()>, ()> =
            Ok(Response::builder().status(503).body(()).expect("response"));
        assert_eq!(code_label(&ok), "503");
        let err: Result<Response<()>, ()> = Err(());
        assert_eq!(code_label(&err), "<error>");
    }
}

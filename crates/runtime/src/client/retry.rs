//! The bounded retry policy that replaces kube's default
//! `RetryPolicy::server_retry()` (15 retries, up to 1000 s apart, any verb,
//! also on 504).

use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header::RETRY_AFTER};
use kube::client::Body;
use tower::BoxError;
use tower::retry::Policy;

use super::metrics::{HostMetrics, code_label};

/// At most this many retries after the first attempt.
pub const MAX_RETRIES: u32 = 3;
/// Backoff before the first retry when the server gave no Retry-After; it
/// doubles for each further retry (100 ms, 200 ms, 400 ms).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest Retry-After honoured. A reconcile must not stall longer than this
/// on one request; the work queue's own backoff takes over beyond it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Retries idempotent requests that failed with 429 Too Many Requests, 503
/// Service Unavailable, or (GET only) a dropped connection.
///
/// * Verbs: GET, HEAD, OPTIONS, PUT, DELETE, PATCH. POST (create, eviction,
///   binding, token review, …) is never retried: a lost response could mean
///   the object was created, and a 429 from the eviction subresource is a
///   PodDisruptionBudget verdict the caller must see.
/// * Connection errors (reset, broken pipe, unexpected EOF, refused,
///   connection closed before the response) only for GET, as client-go's
///   `Request.request` does.
/// * Delay: the Retry-After header in seconds, capped at
///   [`MAX_RETRY_AFTER`]; without one, exponential backoff from
///   [`INITIAL_BACKOFF`].
/// * Requests whose body cannot be cloned (streams) are not retried.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    attempts: u32,
    m: HostMetrics,
}

impl RetryPolicy {
    /// A fresh policy counting into `m`'s `rest_client_request_retries_total`.
    pub fn new(m: HostMetrics) -> Self {
        RetryPolicy { attempts: 0, m }
    }
}

/// What went wrong with one attempt, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The server answered with this status and optional Retry-After value.
    Status(StatusCode, Option<&'a str>),
    /// No response; `connection_lost` tells whether the error looks like a
    /// dropped or refused connection.
    Error {
        /// The transport error is a connection reset/EOF/refusal.
        connection_lost: bool,
    },
}

/// Whether retrying `method` can never apply a change twice in a way that
/// matters (HTTP idempotent methods plus PATCH, whose merge patches kcm-rs
/// sends are idempotent).
pub fn is_retryable_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::PATCH
    )
}

/// The retry decision: `Some(delay)` to retry after `delay`, `None` to give
/// the outcome to the caller. `retries_done` counts retries already made.
pub fn retry_delay(method: &Method, outcome: Outcome<'_>, retries_done: u32) -> Option<Duration> {
    if retries_done >= MAX_RETRIES || !is_retryable_method(method) {
        return None;
    }
    let backoff = INITIAL_BACKOFF.saturating_mul(1 << retries_done.min(16));
    match outcome {
        Outcome::Status(status, retry_after) => {
            if !matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ) {
                return None;
            }
            // client-go accepts only whole seconds (strconv.Atoi); HTTP dates
            // and garbage fall back to the backoff.
            let server = retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER));
            Some(server.unwrap_or(backoff))
        }
        Outcome::Error { connection_lost } => {
            (connection_lost && *method == Method::GET).then_some(backoff)
        }
    }
}

/// Whether a transport error means the connection was refused, reset or
/// closed early, looking through the whole `source()` chain (hyper-util
/// wraps the connector's `io::Error`, hyper reports an early close as an
/// incomplete message, an HTTP/2 connection's loss as an `h2::Error`).
pub fn is_connection_lost(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::ConnectionRefused
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            ) {
                return true;
            }
            // io::Error::source() skips a custom payload; look into it.
            if let Some(inner) = io.get_ref() {
                next = Some(inner as &(dyn std::error::Error + 'static));
                continue;
            }
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return true;
        }
        // Over HTTP/2: the connection failed or went away (GOAWAY), or
        // the server refused the stream (it never started).
        if let Some(h) = e.downcast_ref::<h2::Error>()
            && (h.is_io() || h.is_go_away() || h.reason() == Some(h2::Reason::REFUSED_STREAM))
        {
            return true;
        }
        next = e.source();
    }
    false
}

impl<ResBody> Policy<Request<Body>, Response<ResBody>, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<ResBody>, BoxError>,
    ) -> Option<Self::Future> {
        let outcome = match result {
            Ok(res) => Outcome::Status(
                res.status(),
                res.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()),
            ),
            Err(e) => Outcome::Error {
                connection_lost: is_connection_lost(e.as_ref()),
            },
        };
        let delay = retry_delay(req.method(), outcome, self.attempts)?;
        self.attempts += 1;
        self.m
            .families
            .retries_total
            .with_label_values(&[
                code_label(result).as_str(),
                req.method().as_str(),
                &self.m.host,
            ])
            .inc();
        tracing::debug!(
            method = %req.method(),
            uri = %req.uri(),
            code = %code_label(result),
            retry = self.attempts,
            delay_ms = delay.as_millis() as u64,
            "retrying request"
        );
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        if !is_retryable_method(req.method()) {
            return None;
        }
        let body = req.body().try_clone()?;
        let mut clone = Request::new(body);
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.version_mut() = req.version();
        *clone.headers_mut() = req.headers().clone();
        *clone.extensions_mut() = req.extensions().clone();
        Some(clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S503: Outcome<'static> = Outcome::Status(StatusCode::SERVICE_UNAVAILABLE, None);

    #[test]
    fn retries_get_on_503_three_times_with_backoff() {
        let delays: Vec<_> = (0..5).map(|n| retry_delay(&Method::GET, S503, n)).collect();
        assert_eq!(
            delays,
            vec![
                Some(Duration::from_millis(100)),
                Some(Duration::from_millis(200)),
                Some(Duration::from_millis(400)),
                None,
                None
            ]
        );
    }

    #[test]
    fn never_retries_post() {
        for outcome in [
            S503,
            Outcome::Status(StatusCode::TOO_MANY_REQUESTS, Some("1")),
            Outcome::Error {
                connection_lost: true,
            },
        ] {
            assert_eq!(retry_delay(&Method::POST, outcome, 0), None);
        }
    }

    #[test]
    fn idempotent_verbs_retry_on_429_and_503_only() {
        for m in [Method::GET, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(retry_delay(&m, S503, 0).is_some(), "{m}");
            let s429 = Outcome::Status(StatusCode::TOO_MANY_REQUESTS, None);
            assert!(retry_delay(&m, s429, 0).is_some(), "{m}");
            for code in [500, 502, 504, 404, 409, 410, 200] {
                let s = Outcome::Status(StatusCode::from_u16(code).expect("code"), None);
                assert_eq!(retry_delay(&m, s, 0), None, "{m} {code}");
            }
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let s = |v| Outcome::Status(StatusCode::TOO_MANY_REQUESTS, Some(v));
        assert_eq!(
            retry_delay(&Method::GET, s("2"), 0),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_delay(&Method::GET, s("0"), 0), Some(Duration::ZERO));
        assert_eq!(
            retry_delay(&Method::GET, s("3600"), 0),
            Some(MAX_RETRY_AFTER)
        );
        // Not whole seconds: back off instead.
        let date = s("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(
            retry_delay(&Method::GET, date, 1),
            Some(Duration::from_millis(200))
        );
    }

    #[test]
    fn connection_errors_retry_only_for_get() {
        let lost = Outcome::Error {
            connection_lost: true,
        };
        let other = Outcome::Error {
            connection_lost: false,
        };
        assert!(retry_delay(&Method::GET, lost, 0).is_some());
        assert_eq!(retry_delay(&Method::GET, other, 0), None);
        for m in [Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(retry_delay(&m, lost, 0), None, "{m}");
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("wrapper")]
    struct Wrapper(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("h2 wrapper")]
    struct H2Wrapper(#[source] h2::Error);

    #[test]
    fn finds_connection_errors_in_the_source_chain() {
        use std::io::{Error, ErrorKind};
        let reset = Wrapper(Error::from(ErrorKind::ConnectionReset));
        assert!(is_connection_lost(&reset));
        // A custom io::Error wrapping another io::Error.
        let nested = Error::other(Error::from(ErrorKind::UnexpectedEof));
        assert!(is_connection_lost(&nested));
        let denied = Wrapper(Error::from(ErrorKind::PermissionDenied));
        assert!(!is_connection_lost(&denied));
        let refused = H2Wrapper(h2::Error::from(h2::Reason::REFUSED_STREAM));
        assert!(is_connection_lost(&refused));
        let cancelled = H2Wrapper(h2::Error::from(h2::Reason::CANCEL));
        assert!(!is_connection_lost(&cancelled));
    }

    #[test]
    fn post_requests_are_not_even_cloned() {
        let mut p = RetryPolicy::new(HostMetrics {
            families: crate::metrics::Metrics::detached().client,
            host: "h".into(),
        });
        let post = Request::post("/api/v1/namespaces/d/pods")
            .body(Body::from(b"{}".to_vec()))
            .expect("request");
        assert!(
            <RetryPolicy as Policy<_, Response<Body>, BoxError>>::clone_request(&mut p, &post)
                .is_none()
        );
        let put = Request::put("/api/v1/namespaces/d/pods/p")
            .header("x", "y")
            .body(Body::from(b"{}".to_vec()))
            .expect("request");
        let c = <RetryPolicy as Policy<_, Response<Body>, BoxError>>::clone_request(&mut p, &put)
            .expect("clone");
        assert_eq!(c.method(), Method::PUT);
        assert_eq!(c.uri(), put.uri());
        assert_eq!(c.headers()["x"], "y");
    }
}

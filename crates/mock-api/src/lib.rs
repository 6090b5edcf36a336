//! The one mock API server of kcm-rs, for tests of request shapes only:
//! which requests a piece of code sends, in which order, with which
//! bodies and headers, and what it does with each kind of answer.
//! Behaviour is tested against the real API server (the `kcm-e2e` crate,
//! which re-exports this one as `kcm_e2e::mock`); this crate depends on
//! no kcm-rs crate, so every crate's unit tests can use it.
//!
//! A [`MockApi`] is a `tower` service: [`MockApi::client`] wraps it in a
//! `kube::Client`, [`MockApi::service`] gives it to a client stack under
//! test. It records every request ([`Seen`]) and answers from queues of
//! [`Reply`]s: one queue per HTTP method ([`MockApi::on`]) and one for any
//! method ([`MockApi::replies`]); the last reply of a queue repeats.
//! Without a queue for the request it answers 500 `InternalError`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::BoxError;

/// A `metav1.Status` failure body.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "code": code, "reason": reason, "message": "mock"})
}

/// Computes an answer from the request.
pub type Responder = Arc<dyn Fn(&Seen) -> (u16, Value) + Send + Sync>;

/// One answer of the mock.
#[derive(Clone)]
pub enum Reply {
    /// `code` with a JSON body, optionally a `Retry-After` header.
    Json {
        code: u16,
        body: Value,
        retry_after: Option<String>,
    },
    /// `code` with the request's own body.
    Echo(u16),
    /// An answer computed from the request.
    With(Responder),
    /// `code` with these bytes as a body of `content_type` (protobuf).
    Raw {
        code: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// The connection is reset: the client sees a transport error.
    Reset,
    /// Never answers.
    Stall,
}

impl Reply {
    pub fn json(code: u16, body: Value) -> Reply {
        Reply::Json {
            code,
            body,
            retry_after: None,
        }
    }

    /// `code` with a `metav1.Status` body of `reason`.
    pub fn status(code: u16, reason: &str) -> Reply {
        Reply::json(code, status(code, reason))
    }

    /// `code` with a body that is not JSON.
    pub fn raw(code: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply::Raw {
            code,
            content_type: content_type.to_owned(),
            body,
        }
    }

    pub fn with(f: impl Fn(&Seen) -> (u16, Value) + Send + Sync + 'static) -> Reply {
        Reply::With(Arc::new(f))
    }

    /// This answer with a `Retry-After` header (a [`Reply::Json`] only).
    #[must_use]
    pub fn retry_after(self, value: &str) -> Reply {
        match self {
            Reply::Json { code, body, .. } => Reply::Json {
                code,
                body,
                retry_after: Some(value.to_owned()),
            },
            other => other,
        }
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Json { code, .. } => write!(f, "Json({code})"),
            Reply::Echo(code) => write!(f, "Echo({code})"),
            Reply::With(_) => f.write_str("With(..)"),
            Reply::Raw { code, .. } => write!(f, "Raw({code})"),
            Reply::Reset => f.write_str("Reset"),
            Reply::Stall => f.write_str("Stall"),
        }
    }
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub user_agent: Option<String>,
    pub content_type: String,
    /// The `Accept` header ("" when absent).
    pub accept: String,
    /// The body as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// When it arrived (tokio's clock, so paused-time tests can read it).
    pub at: Instant,
}

impl Seen {
    /// `METHOD` plus ` status` for the status subresource, e.g. `PUT status`.
    pub fn verb(&self) -> String {
        let sub = if self.path.ends_with("/status") {
            " status"
        } else {
            ""
        };
        format!("{}{sub}", self.method)
    }
}

type Queue = (Option<Method>, VecDeque<Reply>);

/// The mock API server; clones share the queues and the record.
#[derive(Clone, Default)]
pub struct MockApi {
    queues: Arc<Mutex<Vec<Queue>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl MockApi {
    pub fn new() -> Self {
        MockApi::default()
    }

    /// Answers requests of any method (without a queue of their own) with
    /// `replies` in order.
    #[must_use]
    pub fn replies(self, replies: impl IntoIterator<Item = Reply>) -> Self {
        self.queues
            .lock()
            .push((None, replies.into_iter().collect()));
        self
    }

    /// Answers `method` requests with `replies` in order.
    #[must_use]
    pub fn on(self, method: &str, replies: impl IntoIterator<Item = Reply>) -> Self {
        let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
        self.queues
            .lock()
            .push((Some(method), replies.into_iter().collect()));
        self
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    /// [`Seen::verb`] of every request so far.
    pub fn verbs(&self) -> Vec<String> {
        self.seen().iter().map(Seen::verb).collect()
    }

    /// A `kube::Client` over the mock (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// The mock as a `tower` service, for a client stack under test.
    pub fn service(
        &self,
    ) -> impl tower::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = BoxError,
        Future = impl Future<Output = Result<Response<Body>, BoxError>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        let mock = self.clone();
        tower::service_fn(move |req: Request<Body>| {
            let mock = mock.clone();
            async move { mock.answer(req).await }
        })
    }

    fn next(&self, method: &Method) -> Option<Reply> {
        let mut queues = self.queues.lock();
        let pos = queues
            .iter()
            .position(|(m, _)| m.as_ref() == Some(method))
            .or_else(|| queues.iter().position(|(m, _)| m.is_none()))?;
        let q = &mut queues[pos].1;
        if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        }
    }

    async fn answer(&self, req: Request<Body>) -> Result<Response<Body>, BoxError> {
        let (parts, body) = req.into_parts();
        let header = |name| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (user_agent, content_type) = (
            header(http::header::USER_AGENT),
            header(http::header::CONTENT_TYPE).unwrap_or_default(),
        );
        let accept = header(http::header::ACCEPT).unwrap_or_default();
        let bytes = body.collect().await?.to_bytes();
        let seen = Seen {
            accept,
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            user_agent,
            content_type,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            at: Instant::now(),
        };
        self.seen.lock().push(seen.clone());
        let reply = self
            .next(&parts.method)
            .unwrap_or_else(|| Reply::status(500, "InternalError"));
        let (code, body, retry_after) = match reply {
            Reply::Json {
                code,
                body,
                retry_after,
            } => (code, body, retry_after),
            Reply::Echo(code) => (code, seen.body.clone(), None),
            Reply::With(f) => {
                let (code, body) = f(&seen);
                (code, body, None)
            }
            Reply::Reset => {
                let e = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
                return Err(Box::new(e));
            }
            Reply::Stall => std::future::pending().await,
            Reply::Raw {
                code,
                content_type,
                body,
            } => {
                let res = Response::builder()
                    .status(StatusCode::from_u16(code)?)
                    .header("content-type", content_type);
                return Ok(res.body(Body::from(body))?);
            }
        };
        let mut res = Response::builder()
            .status(StatusCode::from_u16(code)?)
            .header("content-type", "application/json");
        if let Some(ra) = retry_after {
            res = res.header("retry-after", ra);
        }
        Ok(res.body(Body::from(serde_json::to_vec(&body)?))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;

    #[tokio::test]
    async fn answers_by_method_then_any_and_records() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let mock = MockApi::new()
            .on("DELETE", [Reply::status(404, "NotFound")])
            .replies([
                Reply::status(503, "ServiceUnavailable"),
                Reply::json(200, pod),
            ]);
        let pods: Api<Pod> = Api::namespaced(mock.client(), "ns");
        assert!(pods.get("p").await.is_err(), "first: 503");
        assert!(pods.get("p").await.is_ok(), "then 200");
        assert!(pods.get("p").await.is_ok(), "the last repeats");
        let gone = pods.delete("p", &Default::default()).await;
        assert!(matches!(gone, Err(kube::Error::Api(e)) if e.code == 404));
        assert_eq!(mock.verbs(), ["GET", "GET", "GET", "DELETE"]);
        assert_eq!(mock.seen()[0].path, "/api/v1/namespaces/ns/pods/p");
    }

    #[tokio::test]
    async fn echo_and_computed_answers() {
        let mock = MockApi::new().on("POST", [Reply::Echo(201)]).on(
            "PATCH",
            [Reply::with(|s| {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": s.path.rsplit('/').next()}}),
                )
            })],
        );
        let pods: Api<Pod> = Api::namespaced(mock.client(), "ns");
        let body: Pod =
            serde_json::from_value(json!({"metadata": {"name": "new"}})).unwrap_or_default();
        let made = pods.create(&Default::default(), &body).await;
        assert_eq!(
            made.ok().and_then(|p| p.metadata.name).as_deref(),
            Some("new")
        );
        let patched = pods
            .patch(
                "q",
                &Default::default(),
                &kube::api::Patch::Merge(json!({})),
            )
            .await;
        assert_eq!(
            patched.ok().and_then(|p| p.metadata.name).as_deref(),
            Some("q")
        );
        assert_eq!(mock.seen()[1].content_type, "application/merge-patch+json");
    }
}

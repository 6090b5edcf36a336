//! The HTTPS accept loop and the check in front of every route.
//!
//! Per connection: a slot in the [`Tracker`] (bounded count, timeouts), the
//! TLS handshake with the configuration current at accept (reloaded files
//! apply to new connections), the client certificate verified after the
//! handshake, then exactly the protocol ALPN negotiated (`h2`: HTTP/2 with
//! KCM's 100 streams and 256 KiB frames; anything else: HTTP/1.1).
//!
//! Per request: bodies and methods other than GET/HEAD are refused before
//! any review (these endpoints only read), then authentication and
//! authorization (`auth.rs`), each request telling its connection's state
//! (`conn.rs`) whether it waits on a review of an unknown credential, was
//! refused, or was authorized. When hyper is done, the connection is closed
//! gracefully (`close.rs`), so a 431 or 413 reaches the client.
//!
//! Headers are bounded at [`MAX_HEADER_BYTES`] (HTTP/1 buffer, HTTP/2 header
//! list): with at most 1,024 connections (100 streams each on HTTP/2, but
//! at most 1,024 requests waiting on reviews), headers held cost at most
//! tens of MiB.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::{Authn, Authz, Delegate, Origin, User, cert_user, earns_trust};
use crate::close::{Reclaim, linger};
use crate::conn::{ConnState, Tracker, UnknownWait, Watched, supervise};
use crate::pace::Pacer;
use crate::reload::Reloader;
use crate::review::REVIEW_WAIT;

/// Streams open at once per HTTP/2 connection. KCM allows 100; a scraper
/// needs one, and each stream held by a hostile client is a request (with
/// up to [`MAX_HEADER_BYTES`] of headers) kept in memory.
pub const H2_MAX_STREAMS: u32 = 16;
/// KCM's HTTP/2 frame size (secure_serving.go).
const H2_MAX_FRAME: u32 = 256 * 1024;
/// HTTP/2 receive windows: request bodies are refused, so a client may
/// send little before its stream is answered (hyper's defaults, 1 MiB per
/// stream and connection, let 1,024 connections park a GiB).
pub const H2_STREAM_WINDOW: u32 = 16 * 1024;
pub const H2_CONN_WINDOW: u32 = 64 * 1024;
/// Request headers at most, per request. Go's `MaxHeaderBytes` is 1 MiB;
/// 64 KiB holds any bearer token or client's headers and bounds what 1,024
/// connections can make the server hold.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Who is at the other end of a connection (a request extension): the
/// verified client certificate's user, the address, the connection's state.
#[derive(Clone)]
struct Peer {
    user: Option<User>,
    addr: SocketAddr,
    conn: Arc<ConnState>,
}

fn too_many() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        "Too many requests, please try again later.\n",
    )
        .into_response()
}

/// Refuses what a read-only endpoint never needs: a body (413) or another
/// method (405). HTTP/1 closes after, so an unread body is not parsed.
fn refuse_unread(req: &Request) -> Option<Response> {
    let (code, msg) = if !req.body().is_end_stream() {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are not accepted\n",
        )
    } else if req.method() != Method::GET && req.method() != Method::HEAD {
        (StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n")
    } else {
        return None;
    };
    let mut resp = (code, [(header::ALLOW, "GET, HEAD")], msg).into_response();
    if req.version() < Version::HTTP_2 {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    Some(resp)
}

/// A 429 sent [`REVIEW_WAIT`] after the request began: the request is
/// dropped first, and the connection (HTTP/1) sends nothing more meanwhile,
/// so a flood of refused requests costs a timer each, not the CPU a
/// scraper needs. `_wait` keeps the connection among the first closed.
async fn overloaded(req: Request, began: Instant, _wait: Option<UnknownWait>) -> Response {
    drop(req);
    tokio::time::sleep_until(began + REVIEW_WAIT).await;
    too_many()
}

/// Which paths the router serves: anything else is answered 404 before
/// any review, so a path kcm-rs does not serve costs the API server
/// nothing (KCM reviews first: `/apis/<random>` costs it a
/// SubjectAccessReview each).
pub type Served = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What the check in front of every route needs.
pub struct Guard {
    pub delegate: Arc<Delegate>,
    pub served: Served,
    pub pacer: Pacer,
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

async fn check(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let began = Instant::now();
    let d = &g.delegate;
    let peer = req.extensions().get::<Peer>().cloned();
    let conn = peer.as_ref().map(|p| Arc::clone(&p.conn));
    let refuse = |resp: Response| {
        if let Some(c) = &conn {
            c.refuse();
        }
        resp
    };
    let source = peer.as_ref().map(|p| p.addr.ip());
    let cert = peer.and_then(|p| p.user);
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    // A verified certificate wins: its token is neither reviewed nor
    // remembered.
    let bearer = if cert.is_some() { None } else { bearer };
    // 1. Trusted: the connection was authorized for a scrape, or this
    //    credential was (a scraper on a new connection).
    let trusted = conn.as_ref().is_some_and(|c| c.trusted())
        || d.known_credential(cert.as_ref(), bearer.as_deref());
    if trusted && let Some(c) = &conn {
        c.trust();
    }
    // 2. Anything else takes turns (`pace.rs`), whatever it asks; while
    //    it waits, its connection is among the first closed when full.
    if !trusted {
        let waiting = conn.as_ref().map(|c| c.waiting_unknown());
        if !g.pacer.turn(source, began).await {
            d.metrics().untrusted.with_label_values(&["refused"]).inc();
            return refuse(overloaded(req, began, waiting).await);
        }
        d.metrics().untrusted.with_label_values(&["admitted"]).inc();
    }
    // 3. Nothing but GET and HEAD without a body; 4. only served paths.
    if let Some(refused) = refuse_unread(&req) {
        return refuse(refused);
    }
    let path = req.uri().path().to_string();
    if !(g.served)(&path) {
        return refuse(not_found());
    }
    if d.always_allowed(&path) {
        return next.run(req).await;
    }
    // 5. Who, then 6. may they.
    let origin = Origin { source, trusted };
    // While waiting on a review of a credential never authorized, the
    // connection is among the first closed when the server is full.
    let unknown_wait = |unknown: bool| match &conn {
        Some(c) if unknown && !trusted => Some(c.waiting_unknown()),
        _ => None,
    };
    let waiting = unknown_wait(bearer.as_deref().is_some_and(|t| d.token_unknown(t)));
    let authn = d
        .authenticate_from(cert.as_ref(), bearer.as_deref(), origin)
        .await;
    if authn == Authn::Overloaded {
        return refuse(overloaded(req, began, waiting).await);
    }
    drop(waiting);
    let user = match authn {
        Authn::User(u) => u,
        Authn::Overloaded => return refuse(too_many()),
        // Deliberately stricter than KCM, which authorizes anonymous callers
        // as system:anonymous: nobody unauthenticated reaches more than the
        // always-allowed paths.
        Authn::Anonymous | Authn::Denied(_) => {
            return refuse((StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response());
        }
    };
    let verb = req.method().as_str().to_ascii_lowercase();
    let waiting = unknown_wait(d.decision_unknown(&user, &verb, &path));
    let authz = d.authorize_from(&user, &verb, &path, origin).await;
    if authz == Authz::Overloaded {
        return refuse(overloaded(req, began, waiting).await);
    }
    drop(waiting);
    match authz {
        Authz::Allowed => {
            // 7. Only what a scrape needs earns trust.
            if earns_trust(&path) {
                d.remember(bearer.as_deref(), cert.as_ref(), &user, &verb, &path);
                if let Some(c) = &conn {
                    c.trust();
                }
            }
            next.run(req).await
        }
        Authz::Overloaded => refuse(too_many()),
        Authz::Denied(reason) => {
            refuse((StatusCode::FORBIDDEN, format!("Forbidden: {reason}\n")).into_response())
        }
        Authz::Error(reason) => {
            refuse((StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response())
        }
    }
}

/// `app` behind the check.
pub fn guarded(app: Router, guard: Arc<Guard>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(guard, check))
}

/// Serves `app` over TLS on `listener` until `stop`; in-flight requests
/// finish.
pub async fn run(
    listener: tokio::net::TcpListener,
    tls: Arc<Reloader>,
    tracker: Arc<Tracker>,
    app: Router,
    conn_metrics: crate::conn::ConnMetrics,
    stop: CancellationToken,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: do not spin.
                    tracing::debug!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = tracker.admit_from(Some(peer.ip())) else {
            tracing::debug!(%peer, "refused: its source's share is full, or every connection is inside a request");
            continue;
        };
        let built = tls.current();
        let app = app.clone();
        let closed = conn_metrics.closed.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let state = Arc::clone(&slot.state);
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&built.config));
            let handshake = acceptor.accept(Watched::new(tcp, Arc::clone(&state)));
            let tls = match tokio::select! {
                r = handshake => Some(r),
                () = state.evicted.cancelled() => None,
                () = tokio::time::sleep(crate::conn::HANDSHAKE_TIMEOUT) => None,
            } {
                Some(Ok(s)) => s,
                Some(Err(e)) => return log_cut(peer, &format!("TLS handshake: {e}")),
                None => {
                    if !state.evicted.is_cancelled() {
                        closed.with_label_values(&["handshake timeout"]).inc();
                    }
                    return log_cut(peer, "TLS handshake: timed out or evicted");
                }
            };
            let conn = tls.get_ref().1;
            let h2 = conn.alpn_protocol() == Some(b"h2");
            let user = conn
                .peer_certificates()
                .and_then(|chain| match built.verify_peer(chain) {
                    Ok(leaf) => cert_user(leaf.as_ref()),
                    Err(e) => {
                        tracing::debug!(%peer, "client certificate not accepted: {e}");
                        None
                    }
                });
            state.handshaken(h2);
            let who = Peer {
                user,
                addr: peer,
                conn: Arc::clone(&state),
            };
            let busy_state = Arc::clone(&state);
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    let busy = busy_state.begin();
                    let state = Arc::clone(&busy_state);
                    req.extensions_mut().insert(who.clone());
                    let answer = app.clone().oneshot(req.map(axum::body::Body::new));
                    async move {
                        let mut r = answer.await;
                        drop(busy);
                        // Released (`conn.rs`): this answer is its last.
                        if let Ok(resp) = &mut r
                            && state.released.is_cancelled()
                            && !h2
                        {
                            resp.headers_mut().insert(
                                header::CONNECTION,
                                header::HeaderValue::from_static("close"),
                            );
                        }
                        r
                    }
                },
            );
            let mut builder = auto::Builder::new(TokioExecutor::new());
            // Timeouts are `supervise`'s (hyper's would cut idle keep-alive
            // connections at the header timeout).
            builder
                .http1()
                .header_read_timeout(None)
                .max_buf_size(MAX_HEADER_BYTES);
            builder
                .http2()
                .max_concurrent_streams(H2_MAX_STREAMS)
                .initial_stream_window_size(H2_STREAM_WINDOW)
                .initial_connection_window_size(H2_CONN_WINDOW)
                .max_frame_size(H2_MAX_FRAME)
                .max_header_list_size(u32::try_from(MAX_HEADER_BYTES).unwrap_or(u32::MAX));
            let builder = if h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let (io, mut back) = Reclaim::new(tls);
            let conn = builder.serve_connection(TokioIo::new(io), svc).into_owned();
            match supervise(watcher.watch(conn), &state).await {
                Some(why) => {
                    if why.ends_with("timeout") {
                        closed.with_label_values(&[why]).inc();
                    }
                    log_cut(peer, why);
                }
                // Ended by hyper (answered, client gone, bad input): hyper
                // dropped the stream, which came back.
                None => {
                    if let Ok(tls) = back.try_recv() {
                        linger(tls, &state).await;
                    }
                }
            }
            drop(slot);
        });
    }
    // Let in-flight requests finish, briefly.
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

fn log_cut(peer: SocketAddr, why: &str) {
    tracing::debug!(%peer, "connection closed: {why}");
}

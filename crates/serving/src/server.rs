//! The HTTPS accept loop: TLS handshakes (bounded in time), the verified
//! client certificate's user handed to the request, and the
//! authentication/authorization check in front of every route.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::{Authn, Authz, Delegate, User, cert_user};

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The verified client certificate's user, if any (a request extension).
#[derive(Clone)]
struct PeerUser(Option<User>);

async fn check(State(d): State<Arc<Delegate>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if d.always_allowed(&path) {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<PeerUser>().and_then(|p| p.0.clone());
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let user = match d.authenticate(peer.as_ref(), bearer.as_deref()).await {
        Authn::User(u) => u,
        // Deliberately stricter than KCM, which authorizes anonymous callers
        // as system:anonymous: nobody unauthenticated reaches more than the
        // always-allowed paths.
        Authn::Anonymous | Authn::Denied(_) => {
            return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
        }
    };
    let verb = req.method().as_str().to_ascii_lowercase();
    match d.authorize(&user, &verb, &path).await {
        Authz::Allowed => next.run(req).await,
        Authz::Denied(reason) => {
            (StatusCode::FORBIDDEN, format!("Forbidden: {reason}\n")).into_response()
        }
        Authz::Error(reason) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response()
        }
    }
}

/// `app` behind the authentication and authorization check.
pub fn guarded(app: Router, delegate: Arc<Delegate>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(delegate, check))
}

/// Serves `app` over TLS on `listener` until `stop`; in-flight requests
/// finish.
pub async fn run(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    stop: CancellationToken,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!("accept: {e}");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let builder = auto::Builder::new(TokioExecutor::new());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return log_handshake(peer, &e.to_string()),
                Err(_) => return log_handshake(peer, "timed out"),
            };
            let user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| cert_user(c.as_ref()));
            let peer_user = PeerUser(user);
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer_user.clone());
                    app.clone().oneshot(req.map(axum::body::Body::new))
                },
            );
            let conn = builder.serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
    // Let in-flight requests finish, briefly.
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

fn log_handshake(peer: SocketAddr, why: &str) {
    tracing::debug!(%peer, "TLS handshake: {why}");
}

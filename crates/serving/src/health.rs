//! The health port: `/healthz`, `/livez` and `/readyz` over plain HTTP, on
//! a listener and an OS thread of their own, for the kubelet's probes.
//!
//! Why apart from the secure port: anyone holding any token can keep
//! thousands of connections busy on the secure port, and kcm-rs bounds the
//! connections and the work it does there per client (`conn.rs`,
//! `pace.rs`), so a probe there could wait behind a flood; a probe that
//! times out six times restarts a healthy process, in a loop for as long as
//! the flood lasts. KCM probes its one port, where Go starts a goroutine per
//! connection and answers the always-allowed paths without a review. Here
//! the answers cost nothing to compute and say nothing the always-allowed
//! paths of the secure port do not say to anyone; the thread is not shared
//! with the secure port's or the controllers' tasks, so the OS scheduler
//! gives a probe its turn whatever they do. The same paths stay on the
//! secure port, as KCM serves them.
//!
//! Bounds: at most [`MAX_HEALTH_CONNECTIONS`] open (a new one closes the
//! oldest, so a crowd of idle connections cannot keep a probe out), each
//! one request (`Connection: close`, as the kubelet asks anyway) whose
//! headers arrive within [`HEALTH_TIMEOUT`] and at most
//! [`MAX_HEALTH_HEADER_BYTES`]; GET and HEAD only, no body.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::ServeError;

/// Open connections at most on the health port.
pub const MAX_HEALTH_CONNECTIONS: usize = 64;
/// A connection's request must arrive and be answered within this.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Request headers at most (a probe sends a few hundred bytes).
pub const MAX_HEALTH_HEADER_BYTES: usize = 16 * 1024;

/// The open connections, oldest first; a new one over the cap closes the
/// oldest.
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, CancellationToken>,
}

impl Slots {
    fn admit(&mut self) -> (u64, CancellationToken) {
        if self.open.len() >= MAX_HEALTH_CONNECTIONS
            && let Some((_, oldest)) = self.open.pop_first()
        {
            oldest.cancel();
        }
        let id = self.next;
        self.next += 1;
        let cut = CancellationToken::new();
        self.open.insert(id, cut.clone());
        (id, cut)
    }
}

/// A bound health listener, not yet serving.
pub struct HealthServer {
    listener: std::net::TcpListener,
}

impl HealthServer {
    pub fn bind(addr: SocketAddr) -> Result<Self, ServeError> {
        let listener =
            crate::listen_std(addr).map_err(|source| ServeError::Bind { addr, source })?;
        Ok(HealthServer { listener })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `app`'s routes (GET and HEAD) on a thread and runtime of
    /// their own until `stop`.
    pub fn spawn_thread(
        self,
        app: Router,
        stop: CancellationToken,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        crate::on_own_thread("kcm-rs-health", move || self.serve(app, stop))
    }

    /// Serves `app` on the current runtime until `stop` (tests).
    pub async fn serve(self, app: Router, stop: CancellationToken) {
        let listener = match tokio::net::TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("health port: {e}");
                return;
            }
        };
        let slots = Arc::new(Mutex::new(Slots::default()));
        loop {
            let (tcp, _) = tokio::select! {
                () = stop.cancelled() => return,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!("health port accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let (id, cut) = slots.lock().admit();
            let app = app.clone();
            let slots = Arc::clone(&slots);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let app = app.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(app, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .max_buf_size(MAX_HEALTH_HEADER_BYTES)
                    .serve_connection(TokioIo::new(tcp), svc);
                tokio::select! {
                    _ = conn => {}
                    () = cut.cancelled() => {}
                    () = tokio::time::sleep(HEALTH_TIMEOUT) => {}
                }
                slots.lock().open.remove(&id);
            });
        }
    }
}

async fn answer(app: Router, req: hyper::Request<hyper::body::Incoming>) -> Response {
    use http_body::Body as _;
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, HEAD")],
            "only GET and HEAD\n",
        )
            .into_response();
    }
    if !req.body().is_end_stream() {
        return (StatusCode::PAYLOAD_TOO_LARGE, "no bodies\n").into_response();
    }
    let req: Request = req.map(axum::body::Body::new);
    match app.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get_raw(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn answers_a_probe_with_idle_connections_over_the_cap() {
        let server = HealthServer::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = server.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let app = Router::new().route("/livez", get(|| async { "ok" }));
        let task = tokio::spawn(server.serve(app, stop.clone()));
        // Twice the cap of connections that never send a byte.
        let mut idle = Vec::new();
        for _ in 0..2 * MAX_HEALTH_CONNECTIONS {
            idle.push(tokio::net::TcpStream::connect(addr).await.expect("idle"));
        }
        let t = std::time::Instant::now();
        let out = get_raw(addr, "/livez").await;
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.ends_with("ok"), "{out}");
        assert!(t.elapsed() < HEALTH_TIMEOUT, "{:?}", t.elapsed());
        let missing = get_raw(addr, "/metrics").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        stop.cancel();
        task.await.expect("server");
    }

    #[test]
    fn the_oldest_goes_when_full() {
        let mut s = Slots::default();
        let first = s.admit().1;
        for _ in 1..MAX_HEALTH_CONNECTIONS {
            s.admit();
        }
        assert!(!first.is_cancelled());
        s.admit();
        assert!(first.is_cancelled());
        assert_eq!(s.open.len(), MAX_HEALTH_CONNECTIONS);
    }
}

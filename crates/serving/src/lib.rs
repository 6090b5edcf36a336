//! Secure serving for kcm-rs, as kube-controller-manager serves
//! `/healthz` and `/metrics`: HTTPS on `--secure-port` with delegated
//! authentication and authorization.
//!
//! Layout:
//! - `tls.rs`: the serving certificate (files, or self-signed in memory or
//!   in `--cert-dir`), client-certificate verification, rustls settings;
//!   `ciphers.rs`: `--tls-min-version`, `--tls-cipher-suites`;
//!   `reload.rs`: the files reloaded when they change;
//! - `auth.rs`: who the caller is (client certificate, TokenReview) and
//!   whether they may (always-allowed paths, `system:masters`,
//!   SubjectAccessReview), both cached for 10 s; `review.rs`: reviews
//!   bounded in number, rate and per source, in two lanes (authorized
//!   before or not), merged per key; `known.rs`: what was authorized
//!   before, partitioned by user;
//! - `conn.rs`: the connection cap (which connection goes first when full)
//!   and KCM's header and idle timeouts; `close.rs`: the graceful close
//!   (a 431 or 413 reaches the client, not a reset);
//! - `server.rs`: the accept loop and the check in front of every route.
//!
//! Data flow: TCP → connection slot → TLS handshake → client certificate
//! verified → [`server`]'s check (no body, authenticate, authorize) → the
//! caller's router.
//! Every configuration error is returned by [`SecureServer::bind`] before
//! anything is served, so the binary can exit 2 with one line.

pub mod auth;
pub mod ciphers;
pub mod close;
pub mod conn;
pub mod health;
pub mod known;
pub mod pace;
pub mod rate;
pub mod reload;
pub mod review;
pub mod server;
pub mod tls;

#[cfg(test)]
mod flood_tests;
#[cfg(test)]
mod server_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod trust_tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

pub use auth::{Authn, Authz, Delegate, Metrics, Origin, User};
pub use ciphers::{CipherSuite, MinVersion, parse_cipher_suite, parse_min_version};
pub use health::HealthServer;
pub use server::Served;
pub use tls::TlsOptions;

/// KCM's `--authorization-always-allow-paths` default.
pub const DEFAULT_ALWAYS_ALLOW: &[&str] = &["/healthz", "/readyz", "/livez"];

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reading {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path}: {reason}")]
    Parse {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("writing the generated certificate to --cert-dir {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--tls-cert-file and --tls-private-key-file go together")]
    HalfPair,
    #[error("generating a self-signed certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("cannot serve on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The accept queue: Go listens with the kernel's maximum
/// (`net.core.somaxconn`, 4096 on current kernels); std's 128 would drop
/// a scraper's SYN (a 1 s retransmit) behind a burst of connections.
const BACKLOG: u32 = 4096;

/// A listening socket, not yet registered with any runtime (it is served
/// on a thread and runtime of its own).
fn listen_std(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(BACKLOG)?;
    let std = listener.into_std()?;
    Ok(std)
}

/// Runs `serve` on an OS thread with a single-threaded runtime of its own:
/// what floods one listener cannot take the controllers' thread, and the
/// OS scheduler shares the CPU between the threads whatever their tasks do.
pub fn on_own_thread<F, Fut>(name: &str, serve: F) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || runtime.block_on(serve()))
}

/// A bound, configured server, not yet accepting.
pub struct SecureServer {
    listener: std::net::TcpListener,
    tls: Arc<reload::Reloader>,
    tracker: Arc<conn::Tracker>,
    delegate: Arc<Delegate>,
    served: Served,
}

impl SecureServer {
    /// Loads or generates the certificate and binds `addr`.
    pub async fn bind(
        addr: SocketAddr,
        tls: &TlsOptions,
        delegate: Delegate,
    ) -> Result<Self, ServeError> {
        let reloader = reload::Reloader::new(tls)?;
        let conns = delegate.metrics().conns.clone();
        let listener = listen_std(addr).map_err(|source| ServeError::Bind { addr, source })?;
        Ok(SecureServer {
            listener,
            tls: Arc::new(reloader),
            tracker: conn::Tracker::new(conn::MAX_CONNECTIONS, conns),
            delegate: Arc::new(delegate),
            served: Arc::new(|_: &str| true),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// At most `max` open connections (default [`conn::MAX_CONNECTIONS`]).
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.tracker = conn::Tracker::new(max, self.delegate.metrics().conns.clone());
        self
    }

    /// Which paths the router serves (default: all); the others are
    /// answered 404 before any review.
    pub fn with_served(mut self, served: Served) -> Self {
        self.served = served;
        self
    }

    /// [`SecureServer::run`] as a task of the current runtime.
    pub fn spawn(self, app: Router, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(app, stop))
    }

    /// Serves `app` (every route behind the check) until `stop`, reloading
    /// the certificate files when they change. The binary runs it on a
    /// thread of its own ([`on_own_thread`]).
    pub async fn run(self, app: Router, stop: CancellationToken) {
        let conns = self.delegate.metrics().conns.clone();
        let guard = server::Guard {
            delegate: self.delegate,
            served: self.served,
            pacer: pace::Pacer::default(),
        };
        let app = server::guarded(app, Arc::new(guard));
        let listener = match tokio::net::TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("secure port: {e}");
                return;
            }
        };
        Arc::clone(&self.tls).spawn_poll(stop.clone());
        server::run(listener, self.tls, self.tracker, app, conns, stop).await;
    }
}

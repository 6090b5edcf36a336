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
pub mod known;
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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

pub use auth::{Authn, Authz, Delegate, Metrics, Origin, User};
pub use ciphers::{CipherSuite, MinVersion, parse_cipher_suite, parse_min_version};
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

fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// A bound, configured server, not yet accepting.
pub struct SecureServer {
    listener: tokio::net::TcpListener,
    tls: Arc<reload::Reloader>,
    tracker: Arc<conn::Tracker>,
    delegate: Arc<Delegate>,
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
        let listener = listen(addr).map_err(|source| ServeError::Bind { addr, source })?;
        Ok(SecureServer {
            listener,
            tls: Arc::new(reloader),
            tracker: conn::Tracker::new(conn::MAX_CONNECTIONS, conns),
            delegate: Arc::new(delegate),
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

    /// Serves `app` (every route behind the check) until `stop`, reloading
    /// the certificate files when they change.
    pub fn spawn(self, app: Router, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let conns = self.delegate.metrics().conns.clone();
        let app = server::guarded(app, self.delegate);
        Arc::clone(&self.tls).spawn_poll(stop.clone());
        tokio::spawn(server::run(
            self.listener,
            self.tls,
            self.tracker,
            app,
            conns,
            stop,
        ))
    }
}

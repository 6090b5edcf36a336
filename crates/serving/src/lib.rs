//! Secure serving for kcm-rs, as kube-controller-manager serves
//! `/healthz` and `/metrics`: HTTPS on `--secure-port` with delegated
//! authentication and authorization.
//!
//! Layout:
//! - `tls.rs`: the serving certificate (files, or self-signed in memory or
//!   in `--cert-dir`), client-certificate verification, rustls settings;
//! - `auth.rs`: who the caller is (client certificate, TokenReview) and
//!   whether they may (always-allowed paths, `system:masters`,
//!   SubjectAccessReview), both cached for 10 s;
//! - `server.rs`: the accept loop and the check in front of every route.
//!
//! Data flow: TCP → TLS handshake (client certificate verified) →
//! [`server`]'s check (authenticate, authorize) → the caller's router.
//! Every configuration error is returned by [`SecureServer::bind`] before
//! anything is served, so the binary can exit 2 with one line.

pub mod auth;
pub mod server;
pub mod tls;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

pub use auth::{Authn, Authz, Delegate, Metrics, User};
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

/// A bound, configured server, not yet accepting.
pub struct SecureServer {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    delegate: Arc<Delegate>,
}

impl SecureServer {
    /// Loads or generates the certificate and binds `addr`.
    pub async fn bind(
        addr: SocketAddr,
        tls: &TlsOptions,
        delegate: Delegate,
    ) -> Result<Self, ServeError> {
        let config = tls::server_config(tls)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok(SecureServer {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            delegate: Arc::new(delegate),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `app` (every route behind the check) until `stop`.
    pub fn spawn(self, app: Router, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let app = server::guarded(app, self.delegate);
        tokio::spawn(server::run(self.listener, self.acceptor, app, stop))
    }
}

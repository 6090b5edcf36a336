//! The connection under every client: one pool per API server and TLS
//! identity for the whole process, offering HTTP/2 by ALPN (`h2`, then
//! `http/1.1`). Against a server that takes `h2` (kube-apiserver does over
//! TLS) every watch and request of every controller is a stream of one
//! multiplexed connection, as client-go's one transport per host gives
//! KCM; otherwise (plain HTTP, or a server without `h2`) HTTP/1.1 with a
//! pooled connection per request in flight, as kube's own client.
//!
//! kube 5's client speaks HTTP/1.1 only; `kube::Client::new` takes any
//! service, so this builds kube's default stack (base URI, auth, extra
//! headers) over [`Transport`]: HTTP/2 on the `h2` crate directly
//! (`h2conn.rs`: hyper's HTTP/2 client writes a request's body apart from
//! its headers), HTTP/1.1 through hyper's pool. Settings, after Go's
//! HTTP/2 transport as client-go configures it:
//! - flow control: 4 MiB per stream (Go's `transportDefaultStreamFlow`),
//!   so a large list or a busy watch is not paced by 64 KiB windows; 32 MiB
//!   per connection (Go: 1 GiB), bounding what the server can make us
//!   buffer for streams we read slowly;
//! - keep-alive: a PING every 30 s, the connection dropped 15 s later
//!   without an answer (client-go's `ReadIdleTimeout` and `PingTimeout`;
//!   client-go pings only after 30 s without frames; two PINGs a minute are
//!   not worth tracking reads for), so a dead connection does not hold
//!   every watch;
//! - the API server allows 100 concurrent streams per connection
//!   (`--http2-max-streams-per-connection` 0 → 100); requests past that
//!   wait for a stream (h2 queues them), they do not open connections.
//!
//! `rest_client_connections{host,protocol}` counts the open connections
//! by negotiated protocol (`HTTP/2`, `HTTP/1.1`), and each new connection
//! is logged with its protocol.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use parking_lot::Mutex;
use pin_project_lite::pin_project;
use prometheus::{IntGaugeVec, Opts};
use tower::util::BoxCloneService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::h2conn::{H2Conn, Sent, Settings, TransportBody};

/// Go's HTTP/2 transport's initial stream window.
pub const STREAM_WINDOW: u32 = 4 << 20;
/// The connection window (see the module note).
pub const CONNECTION_WINDOW: u32 = 32 << 20;
const PING_AFTER: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// client-go's dial timeout (without a `connect_timeout` in the config).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// client-go's `TLSHandshakeTimeout`.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server that did not offer `h2` is taken to speak HTTP/1.1
/// only before the next connect offers `h2` again.
const HTTP1_REPROBE: Duration = Duration::from_secs(600);

type Https = Counting<hyper_rustls::HttpsConnector<HttpConnector>>;
type Pool = HyperClient<Https, Body>;

/// HTTP/2 on one [`H2Conn`] where the server takes it, else (or with
/// HTTP/2 off) HTTP/1.1 through hyper's pool.
#[derive(Clone)]
pub struct Transport {
    h2: Option<Arc<H2Conn<Https>>>,
    h1: Pool,
}

impl Service<Request<Body>> for Transport {
    type Response = Response<TransportBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Both paths wait inside the call: for a stream slot, for a pooled
        // connection.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let h2 = self.h2.clone();
        let h1 = self.h1.clone();
        Box::pin(async move {
            if let Some(h2) = h2 {
                match h2.request(req).await? {
                    Sent::H2(resp) => return Ok(resp.map(TransportBody::Http2)),
                    Sent::Http1(r) => req = r,
                }
            }
            let resp = h1.request(req).await?;
            Ok(resp.map(TransportBody::Http1))
        })
    }
}

/// The service every client of `config` sends through: kube's default
/// layers over the process's shared pool for `config`'s server and TLS
/// identity, its connections counted in `metrics` (the first client's for
/// a transport that clients of several registries share, as tests' do).
/// `http2: false` offers HTTP/1.1 only (a fresh pool: the
/// benchmark's "before", `KCM_RS_HTTP2=false`).
pub fn service(
    config: &kube::Config,
    host: &str,
    http2: bool,
    metrics: &crate::metrics::Metrics,
) -> Result<BoxCloneService<Request<Body>, Response<TransportBody>, BoxError>, kube::Error> {
    let pool = shared_transport(config, host, http2, metrics)?;
    let svc = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(pool);
    Ok(BoxCloneService::new(svc.map_err(Into::into)))
}

/// Whether HTTP/2 is offered: unless `KCM_RS_HTTP2=false` (a benchmark
/// switch, `docs/apiserver-cost.md`).
pub fn http2_from_env() -> bool {
    !std::env::var("KCM_RS_HTTP2").is_ok_and(|v| v == "false" || v == "0")
}

/// One transport per runtime (its connections' tasks live there), server
/// and TLS identity.
fn shared_transport(
    config: &kube::Config,
    host: &str,
    http2: bool,
    metrics: &crate::metrics::Metrics,
) -> Result<Transport, kube::Error> {
    static POOLS: OnceLock<Mutex<HashMap<(tokio::runtime::Id, u64), Transport>>> = OnceLock::new();
    let key = (
        tokio::runtime::Handle::current().id(),
        tls_key(config, http2),
    );
    let mut pools = POOLS.get_or_init(Default::default).lock();
    if let Some(p) = pools.get(&key) {
        return Ok(p.clone());
    }
    let h1 = HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .build(connector(config, host, false, &metrics.connections)?);
    let h2 = http2
        .then(|| connector(config, host, true, &metrics.connections))
        .transpose()?
        .map(|c| {
            Arc::new(H2Conn::new(
                c,
                Settings {
                    stream_window: STREAM_WINDOW,
                    connection_window: CONNECTION_WINDOW,
                    ping_after: PING_AFTER,
                    ping_timeout: PING_TIMEOUT,
                    connect_timeout: config.connect_timeout.unwrap_or(DIAL_TIMEOUT)
                        + TLS_HANDSHAKE_TIMEOUT,
                    reprobe: HTTP1_REPROBE,
                },
            ))
        });
    let transport = Transport { h2, h1 };
    pools.insert(key, transport.clone());
    Ok(transport)
}

/// What tells two configs' connections apart: the server, what the TLS
/// handshake presents and trusts. (Bearer tokens ride on requests: clients
/// with different tokens share connections, as in client-go.)
fn tls_key(config: &kube::Config, http2: bool) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let a = &config.auth_info;
    config.cluster_url.to_string().hash(&mut h);
    config.root_cert.hash(&mut h);
    config.root_cert_file.hash(&mut h);
    config.accept_invalid_certs.hash(&mut h);
    config.tls_server_name.hash(&mut h);
    config.connect_timeout.hash(&mut h);
    a.client_certificate.hash(&mut h);
    a.client_certificate_data.hash(&mut h);
    a.client_key.hash(&mut h);
    a.client_key_data
        .as_ref()
        .map(secrecy::ExposeSecret::expose_secret)
        .hash(&mut h);
    // An exec plugin may hand out client certificates: never shared.
    if a.exec.is_some() {
        std::ptr::from_ref(config).hash(&mut h);
    }
    http2.hash(&mut h);
    h.finish()
}

/// A connector offering `h2` and `http/1.1` by ALPN (`http2`), or
/// `http/1.1` only; plain TCP for `http://`.
fn connector(
    config: &kube::Config,
    host: &str,
    http2: bool,
    gauge: &IntGaugeVec,
) -> Result<Https, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config()?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|e| {
                kube::Error::Service(format!("invalid TLS server name {name:?}: {e}").into())
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = if http2 {
        builder.enable_all_versions().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    Ok(Counting {
        inner: https,
        host: host.into(),
        gauge: gauge.clone(),
    })
}

/// `rest_client_connections{host,protocol}` on `registry`
/// ([`crate::metrics::Metrics`]).
pub(crate) fn connections_gauge(registry: &prometheus::Registry) -> IntGaugeVec {
    let g = IntGaugeVec::new(
        Opts::new(
            "rest_client_connections",
            "Open connections to the API server, by host and negotiated protocol.",
        ),
        &["host", "protocol"],
    )
    .expect("static metric definition is valid");
    crate::metrics::register(registry, g)
}

/// A connector counting the connections it made while they are open.
#[derive(Clone)]
struct Counting<C> {
    inner: C,
    host: Arc<str>,
    gauge: IntGaugeVec,
}

impl<C> Service<http::Uri> for Counting<C>
where
    C: Service<http::Uri> + Send,
    C::Future: Send + 'static,
    C::Response: Connection,
{
    type Response = Counted<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let host = Arc::clone(&self.host);
        let gauge = self.gauge.clone();
        Box::pin(async move {
            let io = connecting.await?;
            let protocol = if io.connected().is_negotiated_h2() {
                "HTTP/2"
            } else {
                "HTTP/1.1"
            };
            tracing::info!(%host, protocol, "connected to the API server");
            let gauge = gauge.with_label_values(&[&host, protocol]);
            gauge.inc();
            Ok(Counted {
                io,
                open: OpenConnection(gauge),
            })
        })
    }
}

/// Decrements its gauge when the connection is dropped.
struct OpenConnection(prometheus::IntGauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pin_project! {
    /// A connection counted in `rest_client_connections`.
    struct Counted<T> {
        #[pin]
        io: T,
        open: OpenConnection,
    }
}

impl<T: Connection> Connection for Counted<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl<T: hyper::rt::Read> hyper::rt::Read for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write> hyper::rt::Write for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}

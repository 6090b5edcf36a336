//! The server end to end in process: ALPN, refused bodies, client
//! certificates verified after the handshake, reloaded files.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::{Delegate, Metrics, SecureServer, TlsOptions};

/// Held by the tests that flood a server with connections: run together,
/// they starve each other's servers (all on the test runtimes' threads)
/// and time out what they measure.
pub(crate) static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

pub(crate) fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(vec![]).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    Ca {
        cert: p.self_signed(&key).expect("ca"),
        key,
    }
}

/// A leaf signed by `ca`: a server certificate for 127.0.0.1 when `server`,
/// else a client certificate for `cn` in `org`; `expired` ended yesterday.
pub(crate) fn leaf(
    ca: &Ca,
    cn: &str,
    org: Option<&str>,
    server: bool,
    expired: bool,
) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let names = if server {
        vec!["127.0.0.1".to_string()]
    } else {
        vec![]
    };
    let mut p = CertificateParams::new(names).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    if expired {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let cert = p.signed_by(&key, &ca.cert, &ca.key).expect("leaf");
    (cert.pem(), key.serialize_pem())
}

pub(crate) struct Client {
    roots: rustls::RootCertStore,
    pub alpn: Vec<Vec<u8>>,
    pub cert: Option<(String, String)>,
}

impl Client {
    pub fn new(server_ca: &Ca) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(server_ca.cert.der().clone()).expect("root");
        Client {
            roots,
            alpn: vec![b"http/1.1".to_vec()],
            cert: None,
        }
    }

    pub async fn connect(
        &self,
        port: u16,
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        self.try_connect(port).await.expect("connect")
    }

    pub async fn try_connect(
        &self,
        port: u16,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(self.roots.clone());
        let mut config = match &self.cert {
            Some((c, k)) => {
                let chain = vec![CertificateDer::from_pem_slice(c.as_bytes()).expect("cert")];
                let key = PrivateKeyDer::from_pem_slice(k.as_bytes()).expect("key");
                b.with_client_auth_cert(chain, key).expect("client cert")
            }
            None => b.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn.clone();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let name = ServerName::try_from("127.0.0.1").expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// One raw HTTP/1.1 exchange; the status code (0: none) and the whole
    /// reply.
    pub async fn raw(&self, port: u16, request: &str) -> (u16, String) {
        let mut s = self.connect(port).await;
        s.write_all(request.as_bytes()).await.expect("write");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let code = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, text)
    }

    /// Writes all of `request` (pausing 300 ms after its first 128 KiB, as
    /// a slow client would, so the server has answered and closed by then),
    /// then reads the answer to its end: whether the write went through, the
    /// status code (0: none) and whether the answer ended cleanly (TLS
    /// close_notify, no reset).
    pub async fn strict(&self, port: u16, request: &[u8]) -> (bool, u16, bool) {
        let Ok(mut s) = self.try_connect(port).await else {
            return (false, 0, false);
        };
        let (first, rest) = request.split_at(request.len().min(128 * 1024));
        let mut wrote = s.write_all(first).await.is_ok() && s.flush().await.is_ok();
        tokio::time::sleep(Duration::from_millis(300)).await;
        wrote = wrote && s.write_all(rest).await.is_ok();
        let mut out = Vec::new();
        let end = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        let code = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (wrote, code, matches!(end, Ok(Ok(_))))
    }

    pub async fn get(&self, port: u16, path: &str) -> u16 {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        self.raw(port, &req).await.0
    }

    /// The subject CN of the certificate the server presents.
    async fn server_cn(&self, port: u16) -> String {
        let s = self.connect(port).await;
        let der = s.get_ref().1.peer_certificates().expect("certs")[0].clone();
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).expect("x509");
        let cn = c.subject().iter_common_name().next().expect("cn");
        cn.as_str().expect("utf8").to_string()
    }
}

fn write(path: &Path, text: &str) {
    // Write then rename, as a Secret volume swaps files.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

pub(crate) struct Served {
    pub port: u16,
    stop: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(opts: &TlsOptions) -> Served {
    let registry = prometheus::Registry::new();
    let delegate = Delegate::new(
        None,
        None,
        vec!["/healthz".into()],
        Metrics::register(&registry),
    );
    serve_with(opts, delegate, crate::conn::MAX_CONNECTIONS).await
}

/// Serves /healthz and /metrics with `delegate`, at most `max` connections.
pub(crate) async fn serve_with(opts: &TlsOptions, delegate: Delegate, max: usize) -> Served {
    let server = SecureServer::bind("127.0.0.1:0".parse().expect("addr"), opts, delegate)
        .await
        .expect("bind")
        .with_max_connections(max);
    let port = server.local_addr().expect("addr").port();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(|| async { "metrics" }));
    let stop = CancellationToken::new();
    server.spawn(app, stop.clone());
    Served { port, stop }
}

pub(crate) struct Setup {
    pub dir: tempfile::TempDir,
    pub server_ca: Ca,
    pub client_ca: Ca,
    pub opts: TlsOptions,
}

pub(crate) fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("dir");
    let server_ca = ca("server-ca");
    let client_ca = ca("client-ca");
    let (c, k) = leaf(&server_ca, "server-1", None, true, false);
    let opts = TlsOptions {
        cert_file: Some(dir.path().join("tls.crt")),
        key_file: Some(dir.path().join("tls.key")),
        client_ca_file: Some(dir.path().join("ca.crt")),
        ..Default::default()
    };
    write(&dir.path().join("tls.crt"), &c);
    write(&dir.path().join("tls.key"), &k);
    write(&dir.path().join("ca.crt"), &client_ca.cert.pem());
    Setup {
        dir,
        server_ca,
        client_ca,
        opts,
    }
}

#[tokio::test]
async fn exactly_the_protocol_alpn_negotiated_is_served() {
    let s = setup();
    let srv = serve(&s.opts).await;
    let mut c = Client::new(&s.server_ca);
    // ALPN http/1.1: an HTTP/2 preface is not answered with HTTP/2.
    let (code, reply) = c.raw(srv.port, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    assert!(code == 400 || reply.is_empty(), "{reply:?}");
    assert_eq!(c.get(srv.port, "/healthz").await, 200);
    // No ALPN at all: HTTP/1.1, as Go.
    c.alpn.clear();
    assert_eq!(c.get(srv.port, "/healthz").await, 200);
    // ALPN h2: HTTP/2.
    c.alpn = vec![b"h2".to_vec()];
    let tls = c.connect(srv.port).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::get("https://127.0.0.1/healthz")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("h2 response");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
}

#[tokio::test]
async fn bodies_and_other_methods_are_refused_before_authentication() {
    let s = setup();
    let srv = serve(&s.opts).await;
    let c = Client::new(&s.server_ca);
    let post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(c.raw(srv.port, post).await.0, 413);
    let chunked = "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(c.raw(srv.port, chunked).await.0, 413);
    let delete = "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(c.raw(srv.port, delete).await.0, 405);
    // Without either: the usual 401.
    assert_eq!(c.get(srv.port, "/metrics").await, 401);
}

/// Clients that write their whole request before reading the answer, as
/// many do: the server must take (and drop) the rest of the input, or the
/// client's write fails and the answer is lost to a reset.
#[tokio::test]
async fn too_large_headers_and_refused_bodies_are_answered_not_reset() {
    let s = setup();
    let srv = serve(&s.opts).await;
    let c = Arc::new(Client::new(&s.server_ca));
    let big = Arc::new(format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    ));
    let body = 3 << 20;
    let post = Arc::new(format!(
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {body}\r\n\r\n{}",
        "b".repeat(body)
    ));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (c, big, post) = (Arc::clone(&c), Arc::clone(&big), Arc::clone(&post));
        let port = srv.port;
        tasks.push(tokio::spawn(async move {
            let req = if i % 4 == 0 { &post } else { &big };
            c.strict(port, req.as_bytes()).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let want = if i % 4 == 0 { 413 } else { 431 };
        assert_eq!(t.await.expect("client"), (true, want, true), "client {i}");
    }
    // Headers under the bound are served.
    let fine = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fine: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(crate::server::MAX_HEADER_BYTES / 2)
    );
    assert_eq!(c.raw(srv.port, &fine).await.0, 200);
}

#[tokio::test]
async fn client_certificates_are_judged_after_the_handshake() {
    let s = setup();
    let srv = serve(&s.opts).await;
    let mut c = Client::new(&s.server_ca);
    c.cert = Some(leaf(
        &s.client_ca,
        "admin",
        Some("system:masters"),
        false,
        false,
    ));
    assert_eq!(c.get(srv.port, "/metrics").await, 200);
    // Trusted but not a master, and no authorizer here: 403.
    c.cert = Some(leaf(&s.client_ca, "someone", None, false, false));
    assert_eq!(c.get(srv.port, "/metrics").await, 403);
    // Untrusted CA or expired: the handshake completes, the request is
    // unauthenticated (401), as KCM.
    c.cert = Some(leaf(
        &ca("rogue"),
        "admin",
        Some("system:masters"),
        false,
        false,
    ));
    assert_eq!(c.get(srv.port, "/metrics").await, 401);
    c.cert = Some(leaf(
        &s.client_ca,
        "admin",
        Some("system:masters"),
        false,
        true,
    ));
    assert_eq!(c.get(srv.port, "/metrics").await, 401);
}

/// Polls until `f` holds; the reload poll runs every 2 s.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, f: impl Fn() -> F) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < end, "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn changed_files_are_reloaded_and_bad_ones_keep_the_last_good() {
    let s = setup();
    let srv = serve(&s.opts).await;
    let mut c = Client::new(&s.server_ca);
    assert_eq!(c.server_cn(srv.port).await, "server-1");
    let (cert2, key2) = leaf(&s.server_ca, "server-2", None, true, false);
    write(&s.dir.path().join("tls.key"), &key2);
    write(&s.dir.path().join("tls.crt"), &cert2);
    eventually("new serving certificate", || async {
        c.server_cn(srv.port).await == "server-2"
    })
    .await;
    // Garbage, then a key that does not match: the last good pair stays.
    write(&s.dir.path().join("tls.crt"), "not PEM");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.server_cn(srv.port).await, "server-2");
    let (_, other_key) = leaf(&s.server_ca, "x", None, true, false);
    write(&s.dir.path().join("tls.crt"), &cert2);
    write(&s.dir.path().join("tls.key"), &other_key);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.server_cn(srv.port).await, "server-2");
    write(&s.dir.path().join("tls.key"), &key2);
    // A new client CA: its certificates pass, the old CA's no longer.
    let ca2 = ca("client-ca-2");
    write(&s.dir.path().join("ca.crt"), &ca2.cert.pem());
    c.cert = Some(leaf(&ca2, "admin", Some("system:masters"), false, false));
    eventually("new client CA", || async {
        c.get(srv.port, "/metrics").await == 200
    })
    .await;
    c.cert = Some(leaf(
        &s.client_ca,
        "admin",
        Some("system:masters"),
        false,
        false,
    ));
    assert_eq!(c.get(srv.port, "/metrics").await, 401);
}

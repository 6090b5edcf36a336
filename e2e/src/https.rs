//! HTTPS GETs to kcm-rs's own endpoints in tests. kcm-rs serves a
//! self-signed certificate unless given one, so this client does not verify
//! the server (tests only); it can present a bearer token or a client
//! certificate, which is what the endpoints' authentication looks at.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// How the client authenticates.
#[derive(Clone, Copy, Debug, Default)]
pub enum Credential<'a> {
    #[default]
    None,
    Bearer(&'a str),
    /// PEM files of a client certificate and its key.
    Cert(&'a Path, &'a Path),
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// A TLS connection to `127.0.0.1:port` presenting `cred`'s certificate,
/// if any (no ALPN: the server speaks HTTP/1.1).
pub async fn connect(
    port: u16,
    cred: Credential<'_>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    connect_from(None, port, cred).await
}

/// [`connect`] from the local address `source` (any of `127.0.0.0/8` on
/// Linux), as a client on another host would come from its own.
pub async fn connect_from(
    source: Option<std::net::IpAddr>,
    port: u16,
    cred: Credential<'_>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(io_err)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)));
    let config = match cred {
        Credential::Cert(cert, key) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(io_err)?
                .collect::<Result<_, _>>()
                .map_err(io_err)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(io_err)?;
            builder.with_client_auth_cert(chain, key).map_err(io_err)?
        }
        _ => builder.with_no_client_auth(),
    };
    let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let tcp = match source {
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::new(ip, 0))?;
            socket.connect(server).await?
        }
        None => tokio::net::TcpStream::connect(server).await?,
    };
    let name = ServerName::try_from("localhost").map_err(io_err)?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// `GET path` on `127.0.0.1:port` over TLS; the status code and body.
pub async fn get_as(port: u16, path: &str, cred: Credential<'_>) -> std::io::Result<(u16, String)> {
    let mut s = connect(port, cred).await?;
    let auth = match cred {
        Credential::Bearer(t) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    let req = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    // A server closing without close_notify still delivered the whole reply.
    if let Err(e) = s.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(e);
    }
    let buf = String::from_utf8_lossy(&raw);
    let code = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    Ok((code.unwrap_or(0), body.unwrap_or_default()))
}

/// [`get_as`] without credentials.
pub async fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    get_as(port, path, Credential::None).await
}

/// `--authorization-always-allow-paths` for tests that read every endpoint
/// without credentials (the security tests use the default instead).
pub const OPEN_PATHS: &str =
    "--authorization-always-allow-paths=/healthz,/healthz/*,/readyz,/livez,/metrics";

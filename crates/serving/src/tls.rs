//! The serving certificate and the rustls configuration: the files given
//! by `--tls-cert-file`/`--tls-private-key-file`, or, as KCM does without
//! them, a self-signed certificate for `localhost`/`127.0.0.1` (kept in
//! `--cert-dir` when one is given, so restarts reuse it). TLS 1.2 and 1.3
//! only (`--tls-min-version`, `--tls-cipher-suites`: see `ciphers.rs`);
//! ALPN offers `h2` and `http/1.1`, as KCM.
//!
//! With `--client-ca-file` a client certificate is requested but, as Go's
//! `tls.RequestClientCert`, not judged in the handshake: the chain is
//! verified against the CA after it (`Built::verify_peer`), so an untrusted
//! or expired certificate is an unauthenticated request (401, or a bearer
//! token decides), not a failed handshake. rustls still checks that the
//! client holds the certificate's key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::ServeError;
use crate::ciphers::{CipherSuite, MinVersion};

/// File names in `--cert-dir`, as KCM names its own after the component.
pub const CERT_FILE: &str = "kcm-rs.crt";
pub const KEY_FILE: &str = "kcm-rs.key";

#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Where a generated certificate is written; empty: memory only.
    pub cert_dir: Option<PathBuf>,
    pub client_ca_file: Option<PathBuf>,
    /// `--tls-min-version`.
    pub min_version: MinVersion,
    /// `--tls-cipher-suites`; empty: rustls's defaults.
    pub cipher_suites: Vec<CipherSuite>,
}

/// The serving chain and key.
pub(crate) type Pair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|source| ServeError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certs(
    pem: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ServeError::Parse {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(ServeError::Parse {
            what,
            path: path.to_path_buf(),
            reason: "no PEM certificate in it".into(),
        });
    }
    Ok(certs)
}

fn key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, ServeError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| ServeError::Parse {
        what: "--tls-private-key-file",
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// A self-signed certificate for the loopback names, as PEM (cert, key).
fn self_signed() -> Result<(String, String), ServeError> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let key = rcgen::KeyPair::generate().map_err(|e| ServeError::Generate(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(names).map_err(|e| ServeError::Generate(e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost@kcm-rs");
    // Valid from yesterday for a year, as KCM's own (365 days).
    let day = |offset_days: i64| {
        let d = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * offset_days))
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        rcgen::date_time_ymd(
            i32::from(d.year()),
            u8::try_from(d.month()).unwrap_or(1),
            u8::try_from(d.day()).unwrap_or(1),
        )
    };
    params.not_before = day(-1);
    params.not_after = day(365);
    let cert = params
        .self_signed(&key)
        .map_err(|e| ServeError::Generate(e.to_string()))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The serving certificate chain and key, loaded or generated.
pub(crate) fn serving_pair(o: &TlsOptions) -> Result<Pair, ServeError> {
    match (&o.cert_file, &o.key_file) {
        (Some(c), Some(k)) => Ok((
            certs(&read(c, "--tls-cert-file")?, c, "--tls-cert-file")?,
            key(&read(k, "--tls-private-key-file")?, k)?,
        )),
        (Some(_), None) | (None, Some(_)) => Err(ServeError::HalfPair),
        (None, None) => {
            let (cert_pem, key_pem) = match &o.cert_dir {
                Some(dir) => {
                    let (c, k) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
                    if c.exists() && k.exists() {
                        let cert = String::from_utf8_lossy(&read(&c, "--cert-dir certificate")?)
                            .into_owned();
                        let key =
                            String::from_utf8_lossy(&read(&k, "--cert-dir key")?).into_owned();
                        (cert, key)
                    } else {
                        let (cert, key) = self_signed()?;
                        write_pair(dir, &c, &cert, &k, &key)?;
                        (cert, key)
                    }
                }
                None => self_signed()?,
            };
            let path = o.cert_dir.clone().unwrap_or_default();
            Ok((
                certs(cert_pem.as_bytes(), &path, "generated certificate")?,
                key(key_pem.as_bytes(), &path)?,
            ))
        }
    }
}

fn write_pair(dir: &Path, c: &Path, cert: &str, k: &Path, key: &str) -> Result<(), ServeError> {
    let io = |source| ServeError::Write {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(c, cert).map_err(io)?;
    // The key is readable by the owner only.
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(k).map_err(io)?;
    std::io::Write::write_all(&mut f, key.as_bytes()).map_err(io)
}

/// The client CA bundle as trust roots.
fn roots(path: &Path) -> Result<rustls::RootCertStore, ServeError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&read(path, "--client-ca-file")?, path, "--client-ca-file")? {
        roots.add(c).map_err(|e| ServeError::Parse {
            what: "--client-ca-file",
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// Requests a client certificate and checks the client holds its key, but
/// leaves the chain to [`Built::verify_peer`] (see the module comment).
#[derive(Debug)]
struct Deferred(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for Deferred {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A rustls configuration and the verifier of client certificates that
/// goes with it (both replaced together when the files change).
pub struct Built {
    pub config: Arc<ServerConfig>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
}

impl Built {
    /// The peer's chain verified against the client CA: the end-entity
    /// certificate, or why not.
    pub fn verify_peer<'a>(
        &self,
        chain: &'a [CertificateDer<'static>],
    ) -> Result<&'a CertificateDer<'static>, String> {
        let Some(v) = &self.client_verifier else {
            return Err("no --client-ca-file".into());
        };
        let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
        v.verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| leaf)
            .map_err(|e| e.to_string())
    }
}

/// The configuration for `o` with the serving `pair`. Every error names the
/// flag and file.
pub(crate) fn build(o: &TlsOptions, pair: Pair) -> Result<Built, ServeError> {
    let mut provider = rustls::crypto::ring::default_provider();
    let (suites, missing) = crate::ciphers::select(&provider.cipher_suites, &o.cipher_suites);
    for m in &missing {
        tracing::warn!(
            cipher_suite = m.name,
            "--tls-cipher-suites: not implemented by rustls, skipped"
        );
    }
    for s in o.cipher_suites.iter().filter(|s| s.insecure) {
        tracing::warn!(cipher_suite = s.name, "use of insecure cipher detected");
    }
    provider.cipher_suites = suites;
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = match o.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let (builder, client_verifier) = match &o.client_ca_file {
        Some(path) => {
            let verifier: Arc<dyn ClientCertVerifier> =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(path)?), provider)
                    .build()
                    .map_err(|e| ServeError::Parse {
                        what: "--client-ca-file",
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
            let deferred = Arc::new(Deferred(Arc::clone(&verifier)));
            (builder.with_client_cert_verifier(deferred), Some(verifier))
        }
        None => (builder.with_no_client_auth(), None),
    };
    let mut config = builder
        .with_single_cert(pair.0, pair.1)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Built {
        config: Arc::new(config),
        client_verifier,
    })
}

/// The rustls server configuration for `o`, certificate loaded or
/// generated. Every error is a start-up error naming the flag and file.
pub fn server_config(o: &TlsOptions) -> Result<Arc<ServerConfig>, ServeError> {
    Ok(build(o, serving_pair(o)?)?.config)
}

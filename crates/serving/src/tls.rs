//! The serving certificate and the rustls configuration: the files given
//! by `--tls-cert-file`/`--tls-private-key-file`, or, as KCM does without
//! them, a self-signed certificate for `localhost`/`127.0.0.1` (kept in
//! `--cert-dir` when one is given, so restarts reuse it). TLS 1.2 and 1.3
//! only. With `--client-ca-file`, client certificates signed by that CA are
//! verified (and optional: a bearer token may authenticate instead).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::ServeError;

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
}

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
fn serving_pair(
    o: &TlsOptions,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServeError> {
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

/// The rustls server configuration for `o`. Every error is a start-up
/// error naming the flag and file.
pub fn server_config(o: &TlsOptions) -> Result<Arc<ServerConfig>, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let builder = match &o.client_ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(&read(path, "--client-ca-file")?, path, "--client-ca-file")? {
                roots.add(c).map_err(|e| ServeError::Parse {
                    what: "--client-ca-file",
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ServeError::Parse {
                    what: "--client-ca-file",
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let (chain, key) = serving_pair(o)?;
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

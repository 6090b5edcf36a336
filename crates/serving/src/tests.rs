use std::time::Duration;

use super::auth::{Authn, Authz, Delegate, Metrics, User, cert_user};
use super::tls::{self, TlsOptions};

fn delegate(client: Option<kube::Client>) -> Delegate {
    let registry = prometheus::Registry::new();
    let paths = vec!["/healthz".into(), "/debug/*".into()];
    Delegate::new(client.clone(), client, paths, Metrics::register(&registry))
}

/// A client whose server never answers (nothing listens on the port).
fn dead_client() -> kube::Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(1);
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().expect("url"));
    config.connect_timeout = Some(Duration::from_millis(200));
    kube::Client::try_from(config).expect("client")
}

#[test]
fn always_allowed_paths_are_exact_or_prefixed_by_star() {
    let d = delegate(None);
    assert!(d.always_allowed("/healthz"));
    assert!(!d.always_allowed("/healthz/job-controller"));
    assert!(d.always_allowed("/debug/x"));
    assert!(!d.always_allowed("/metrics"));
}

#[tokio::test]
async fn no_credentials_is_anonymous_and_a_failed_review_denies() {
    let d = delegate(Some(dead_client()));
    assert_eq!(d.authenticate(None, None).await, Authn::Anonymous);
    // The TokenReview cannot be made: denied (401), never allowed.
    assert!(matches!(
        d.authenticate(None, Some("t")).await,
        Authn::Denied(_)
    ));
    let user = User {
        name: "u".into(),
        ..Default::default()
    };
    assert!(matches!(
        d.authorize(&user, "get", "/metrics").await,
        Authz::Error(_)
    ));
    let master = User {
        groups: vec!["system:masters".into()],
        ..user
    };
    assert_eq!(
        d.authorize(&master, "get", "/metrics").await,
        Authz::Allowed
    );
}

#[tokio::test]
async fn without_a_review_client_tokens_are_refused() {
    let d = delegate(None);
    assert!(matches!(
        d.authenticate(None, Some("t")).await,
        Authn::Denied(_)
    ));
}

#[test]
fn client_certificate_subject_is_the_user() {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec![]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "prometheus");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:monitoring");
    let cert = params.self_signed(&key).expect("cert");
    let u = cert_user(cert.der()).expect("user");
    assert_eq!(u.name, "prometheus");
    assert_eq!(u.groups, ["system:monitoring", "system:authenticated"]);
    assert!(cert_user(b"garbage").is_none());
}

#[test]
fn generated_certificate_is_kept_in_cert_dir_with_a_private_key() {
    let dir = tempfile::tempdir().expect("dir");
    let o = TlsOptions {
        cert_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    tls::server_config(&o).expect("config");
    let cert = std::fs::read(dir.path().join(tls::CERT_FILE)).expect("cert");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(tls::KEY_FILE))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // A restart reuses it.
    tls::server_config(&o).expect("config");
    assert_eq!(
        std::fs::read(dir.path().join(tls::CERT_FILE)).expect("cert"),
        cert
    );
}

#[test]
fn bad_files_are_errors_naming_the_flag() {
    let dir = tempfile::tempdir().expect("dir");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not PEM").expect("write");
    let err = |o: TlsOptions| {
        tls::server_config(&o)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let missing = err(TlsOptions {
        cert_file: Some("/nonexistent.crt".into()),
        key_file: Some("/nonexistent.key".into()),
        ..Default::default()
    });
    assert!(
        missing.starts_with("reading --tls-cert-file /nonexistent.crt"),
        "{missing}"
    );
    let ca = err(TlsOptions {
        client_ca_file: Some(junk.clone()),
        ..Default::default()
    });
    assert!(ca.starts_with("--client-ca-file"), "{ca}");
    let half = err(TlsOptions {
        key_file: Some(junk),
        ..Default::default()
    });
    assert!(half.contains("go together"), "{half}");
}

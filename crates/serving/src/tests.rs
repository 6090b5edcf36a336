use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;

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
    assert!(u.uid.is_none() && u.extra.is_empty());
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

/// An openssl-made certificate whose subject is
/// `CN=first, O=team-a, CN=last, O=team-b` (rcgen cannot repeat an
/// attribute).
const TWO_CNS: &str = "-----BEGIN CERTIFICATE-----
MIIB2DCCAX+gAwIBAgIUC6UC6A1J1XOk6oH6ivb2+ESyanswCgYIKoZIzj0EAwIw
QTEOMAwGA1UEAwwFZmlyc3QxDzANBgNVBAoMBnRlYW0tYTENMAsGA1UEAwwEbGFz
dDEPMA0GA1UECgwGdGVhbS1iMCAXDTI2MTIwMzA4MDA1MFoYDzIxMjYxMTA5MDgw
MDUwWjBBMQ4wDAYDVQQDDAVmaXJzdDEPMA0GA1UECgwGdGVhbS1hMQ0wCwYDVQQD
DARsYXN0MQ8wDQYDVQQKDAZ0ZWFtLWIwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AAQRxzR0rjwdHY/bT05KXpqMk7fwUK4kcjdrz6J+XBGT0pKpRmGKzRmWjqNhaTez
iz6+Z4NGh+tmlfGZodquvgdio1MwUTAdBgNVHQ4EFgQUBF+gtz5mFeKxrp3aFwA1
AXq1JmcwHwYDVR0jBBgwFoAUBF+gtz5mFeKxrp3aFwA1AXq1JmcwDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiB6LbGzklP0t/pJjY6u+T6TYC+iFZ8v
mACEz6DV9vSW3QIgShMufKFPbekpNn+prIpH79HCKxeq1aDcYTGTD26Bdqo=
-----END CERTIFICATE-----";

#[test]
fn the_last_common_name_is_the_user_as_go_reads_it() {
    let der = rustls_pki_types::CertificateDer::from_pem_slice(TWO_CNS.as_bytes()).expect("pem");
    let u = cert_user(der.as_ref()).expect("user");
    assert_eq!(u.name, "last");
    assert_eq!(u.groups, ["team-a", "team-b", "system:authenticated"]);
}

/// A stand-in API server for the reviews: TokenReview authenticates
/// `good-*` tokens as alice (uid, a group, the token as an extra value)
/// after 50 ms; SubjectAccessReview allows and records the spec. Counts
/// calls and the most in flight at once.
#[derive(Default)]
pub(crate) struct Reviews {
    pub(crate) token_reviews: AtomicUsize,
    pub(crate) sars: parking_lot::Mutex<Vec<serde_json::Value>>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

pub(crate) async fn review_server() -> (Arc<Reviews>, kube::Client) {
    use axum::routing::post;
    let seen = Arc::new(Reviews::default());
    let (s1, s2) = (Arc::clone(&seen), Arc::clone(&seen));
    let app = axum::Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(move |body: axum::body::Bytes| {
                let s = Arc::clone(&s1);
                async move {
                    s.token_reviews.fetch_add(1, Ordering::SeqCst);
                    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    s.most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    s.in_flight.fetch_sub(1, Ordering::SeqCst);
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let token = v["spec"]["token"].as_str().unwrap_or_default().to_string();
                    let status = if token.starts_with("good-") {
                        serde_json::json!({ "authenticated": true, "user": {
                            "username": "alice", "uid": "u-1", "groups": ["devs"],
                            "extra": { "example.com/token": [token] } } })
                    } else {
                        serde_json::json!({ "authenticated": false, "error": "bad token" })
                    };
                    let out = serde_json::json!({ "apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenReview", "spec": v["spec"], "status": status });
                    (axum::http::StatusCode::CREATED, out.to_string())
                }
            }),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(move |body: axum::body::Bytes| {
                let s = Arc::clone(&s2);
                async move {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    s.sars.lock().push(v["spec"].clone());
                    let out = serde_json::json!({ "apiVersion": "authorization.k8s.io/v1",
                        "kind": "SubjectAccessReview", "spec": v["spec"],
                        "status": { "allowed": true } });
                    (axum::http::StatusCode::CREATED, out.to_string())
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().expect("url"));
    (seen, kube::Client::try_from(config).expect("client"))
}

#[tokio::test]
async fn concurrent_requests_with_one_token_make_one_review() {
    let (seen, client) = review_server().await;
    let d = Arc::new(delegate(Some(client)));
    let answers: Vec<Authn> = futures_join((0..50).map(|_| {
        let d = Arc::clone(&d);
        async move { d.authenticate(None, Some("good-1")).await }
    }))
    .await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Authn::User(u) if u.name == "alice"))
    );
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_caller_that_goes_away_leaves_the_review_to_the_next() {
    let (seen, client) = review_server().await;
    let d = Arc::new(delegate(Some(client)));
    let ask = |d: &Arc<Delegate>| {
        let d = Arc::clone(d);
        tokio::spawn(async move { d.authenticate(None, Some("good-1")).await })
    };
    let first = ask(&d);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = ask(&d);
    tokio::time::sleep(Duration::from_millis(10)).await;
    first.abort();
    assert!(matches!(second.await.expect("task"), Authn::User(_)));
    let reviews = seen.token_reviews.load(Ordering::SeqCst);
    assert!((1..=2).contains(&reviews), "{reviews} reviews");
    // Cached now.
    assert!(matches!(
        d.authenticate(None, Some("good-1")).await,
        Authn::User(_)
    ));
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), reviews);
}

#[tokio::test]
async fn uid_groups_and_extra_reach_the_access_review_and_its_cache_key() {
    let (seen, client) = review_server().await;
    let d = delegate(Some(client));
    let Authn::User(one) = d.authenticate(None, Some("good-1")).await else {
        panic!("not authenticated");
    };
    assert_eq!(one.uid.as_deref(), Some("u-1"));
    assert_eq!(one.groups, ["devs", "system:authenticated"]);
    assert_eq!(d.authorize(&one, "get", "/metrics").await, Authz::Allowed);
    assert_eq!(d.authorize(&one, "get", "/metrics").await, Authz::Allowed);
    let Authn::User(two) = d.authenticate(None, Some("good-2")).await else {
        panic!("not authenticated");
    };
    // Same name, uid and groups, other extra: asked again.
    assert_eq!(d.authorize(&two, "get", "/metrics").await, Authz::Allowed);
    let sars = seen.sars.lock().clone();
    assert_eq!(sars.len(), 2, "{sars:?}");
    assert_eq!(sars[0]["user"], "alice");
    assert_eq!(sars[0]["uid"], "u-1");
    assert_eq!(
        sars[0]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    assert_eq!(
        sars[0]["extra"],
        serde_json::json!({ "example.com/token": ["good-1"] })
    );
    assert_eq!(
        sars[1]["extra"],
        serde_json::json!({ "example.com/token": ["good-2"] })
    );
    assert_eq!(
        sars[0]["nonResourceAttributes"],
        serde_json::json!({ "path": "/metrics", "verb": "get" })
    );
}

#[tokio::test]
async fn a_flood_of_distinct_bogus_tokens_is_bounded() {
    let (seen, client) = review_server().await;
    let d = Arc::new(delegate(Some(client)));
    let answers: Vec<Authn> = futures_join((0..400).map(|i| {
        let d = Arc::clone(&d);
        async move { d.authenticate(None, Some(&format!("bogus-{i}"))).await }
    }))
    .await;
    let most = seen.most.load(Ordering::SeqCst);
    assert!(most <= crate::review::MAX_UNKNOWN, "{most} reviews at once");
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Authn::Denied(_) | Authn::Overloaded))
    );
    // Denied answers are cached apart: a good token still authenticates.
    assert!(matches!(
        d.authenticate(None, Some("good-9")).await,
        Authn::User(_)
    ));
}

/// Runs every future concurrently (as tasks) and collects the outputs.
async fn futures_join<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

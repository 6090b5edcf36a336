//! What a token holder can make the server (and the API server) do, in
//! process against a stand-in review server that allows everything: paths
//! not served cost no review; only a scrape earns trust; untrusted
//! requests take turns while a known scraper does not wait.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::server_tests::{Client, setup};
use crate::{Delegate, Metrics, SecureServer};

struct Running {
    port: u16,
    metrics: Metrics,
    _stop: tokio_util::sync::DropGuard,
}

/// Serves `/version` and `/metrics` (only those: `with_served`) with
/// reviews by the stand-in.
async fn serve(reviews: kube::Client, opts: &crate::TlsOptions) -> Running {
    let registry = prometheus::Registry::new();
    let metrics = Metrics::register(&registry);
    let delegate = Delegate::new(
        Some(reviews.clone()),
        Some(reviews),
        vec!["/healthz".into()],
        metrics.clone(),
    );
    let server = SecureServer::bind("127.0.0.1:0".parse().expect("addr"), opts, delegate)
        .await
        .expect("bind")
        .with_served(Arc::new(|p: &str| p == "/version" || p == "/metrics"));
    let port = server.local_addr().expect("addr").port();
    let app = Router::new()
        .route("/version", get(|| async { "v" }))
        .route("/metrics", get(|| async { "m" }));
    let stop = CancellationToken::new();
    server.spawn(app, stop.clone());
    Running {
        port,
        metrics,
        _stop: stop.drop_guard(),
    }
}

/// One keep-alive exchange: the status.
async fn ask<S>(s: &mut S, path: &str, token: &str) -> u16
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(head) = text.find("\r\n\r\n") {
            let len: usize = text[..head]
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= head + 4 + len {
                return text[9..12].parse().expect("status");
            }
        }
    }
}

fn admitted(m: &Metrics) -> u64 {
    m.untrusted.with_label_values(&["admitted"]).get()
}

#[tokio::test]
async fn paths_not_served_are_answered_without_a_review() {
    let (seen, reviews) = crate::tests::review_server().await;
    let s = setup();
    let srv = serve(reviews, &s.opts).await;
    let c = Client::new(&s.server_ca);
    let mut conn = c.connect(srv.port).await;
    for n in 0..20 {
        assert_eq!(ask(&mut conn, &format!("/apis/r{n}"), "good-1").await, 404);
    }
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), 0);
    assert!(seen.sars.lock().is_empty());
}

#[tokio::test]
async fn only_a_scrape_earns_trust() {
    let (_seen, reviews) = crate::tests::review_server().await;
    let s = setup();
    let srv = serve(reviews, &s.opts).await;
    let c = Client::new(&s.server_ca);
    let mut conn = c.connect(srv.port).await;
    // Allowed to anyone (as `system:discovery` allows /version): no trust.
    assert_eq!(ask(&mut conn, "/version", "good-1").await, 200);
    assert_eq!(ask(&mut conn, "/version", "good-1").await, 200);
    assert_eq!(admitted(&srv.metrics), 2, "both took turns");
    // A scrape: the connection and the token are known from then on.
    assert_eq!(ask(&mut conn, "/metrics", "good-1").await, 200);
    assert_eq!(ask(&mut conn, "/apis/x", "good-1").await, 404);
    assert_eq!(admitted(&srv.metrics), 3, "trusted after the scrape");
    let mut fresh = c.connect(srv.port).await;
    assert_eq!(ask(&mut fresh, "/version", "good-1").await, 200);
    assert_eq!(
        admitted(&srv.metrics),
        3,
        "a known token on a new connection"
    );
    // Another token on a new connection takes turns again.
    let mut other = c.connect(srv.port).await;
    assert_eq!(ask(&mut other, "/version", "good-2").await, 200);
    assert_eq!(admitted(&srv.metrics), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_requests_take_turns_and_a_known_scraper_does_not_wait() {
    let _heavy = crate::server_tests::HEAVY.lock().await;
    let (_seen, reviews) = crate::tests::review_server().await;
    let s = setup();
    let srv = serve(reviews, &s.opts).await;
    let c = Arc::new(Client::new(&s.server_ca));
    let mut scraper = c.connect(srv.port).await;
    assert_eq!(ask(&mut scraper, "/metrics", "good-scraper").await, 200);
    // More requests at once from one source than its burst: connected
    // first, then all sent together (so its rate barely refills meanwhile).
    let extra = 60;
    let burst = usize::try_from(crate::pace::SOURCE_BURST).expect("small");
    let go = Arc::new(tokio::sync::Barrier::new(burst + extra + 1));
    let flood: Vec<_> = (0..burst + extra)
        .map(|i| {
            let (c, go) = (Arc::clone(&c), Arc::clone(&go));
            let port = srv.port;
            tokio::spawn(async move {
                let mut conn = c.connect(port).await;
                go.wait().await;
                ask(&mut conn, &format!("/apis/r{i}"), "good-tenant").await
            })
        })
        .collect();
    go.wait().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let began = Instant::now();
    assert_eq!(ask(&mut scraper, "/metrics", "good-scraper").await, 200);
    assert!(
        began.elapsed() < crate::pace::PACE_WAIT,
        "{:?}",
        began.elapsed()
    );
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for f in flood {
        *codes.entry(f.await.expect("task")).or_default() += 1;
    }
    let (served, refused) = (
        codes.get(&404).copied().unwrap_or(0),
        codes.get(&429).copied().unwrap_or(0),
    );
    assert_eq!(served + refused, burst + extra, "{codes:?}");
    // The burst (less the scraper's first request), and what the source's
    // rate refilled while they arrived (well under a second's worth).
    let per_second = usize::try_from(crate::pace::SOURCE_PER_SECOND).expect("small");
    assert!(
        served >= burst - 1 && served < burst + per_second / 2,
        "{codes:?}"
    );
    assert_eq!(
        srv.metrics.untrusted.with_label_values(&["refused"]).get(),
        u64::try_from(refused).expect("small")
    );
}

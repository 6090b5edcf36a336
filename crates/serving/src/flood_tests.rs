//! The cheap variant of `tests/abuse.rs`, in process: more connections
//! than the cap sending random bearer tokens back to back (each waiting on
//! a TokenReview) must not keep an authorized scraper out, and the flood's
//! connections are released (answered, then closed), not cut.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server_tests::{Client, serve_with, setup};
use crate::{Delegate, Metrics};

const CAP: usize = 24;
const FLOOD: usize = 40;

/// One keep-alive HTTP/1.1 exchange: the status and whether the server
/// keeps the connection (`None`: cut before an answer).
async fn exchange<S>(s: &mut S, token: &str) -> Option<(u16, bool)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let req = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    let code = text.get(9..12)?.parse().ok()?;
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((code, !text.contains("connection: close")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_tokens_on_more_connections_than_the_cap_never_keep_the_scraper_out() {
    let _heavy = crate::server_tests::HEAVY.lock().await;
    let (_seen, reviews) = crate::tests::review_server().await;
    let s = setup();
    let registry = prometheus::Registry::new();
    let delegate = Delegate::new(
        Some(reviews.clone()),
        Some(reviews),
        vec!["/healthz".into()],
        Metrics::register(&registry),
    );
    let srv = serve_with(&s.opts, delegate, CAP).await;
    let port = srv.port;
    let client = Arc::new(Client::new(&s.server_ca));
    // Authorized once: cached, and known.
    let scrape = |c: Arc<Client>| async move {
        let mut conn = c.try_connect(port).await.ok()?;
        exchange(&mut conn, "good-scraper").await
    };
    assert_eq!(scrape(Arc::clone(&client)).await, Some((200, true)));

    let stop = Arc::new(AtomicBool::new(false));
    let codes = Arc::new(Mutex::new(BTreeMap::<&str, usize>::new()));
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (c, stop, codes) = (Arc::clone(&client), Arc::clone(&stop), Arc::clone(&codes));
            let connected = Arc::clone(&connected);
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut conn) = c.try_connect(port).await else {
                        *codes.lock().entry("no connection").or_default() += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    connected.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let what = match exchange(&mut conn, &format!("bogus-{i}-{n}")).await {
                            Some((401, true)) => "401",
                            Some((429, true)) => "429",
                            Some((429, false)) => "429, released",
                            Some((401, false)) => "401, released",
                            Some(_) => "other",
                            None => "cut",
                        };
                        *codes.lock().entry(what).or_default() += 1;
                        if what != "401" && what != "429" {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    // The flood's first connections are a burst of handshakes, where a
    // scraper's is one among them (nothing is known of a client before its
    // request): the scrapes start once every flood connection was up.
    let ramp = Instant::now();
    while connected.load(Ordering::Relaxed) < FLOOD && ramp.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut scrapes = Vec::new();
    for _ in 0..15 {
        let began = Instant::now();
        let got = scrape(Arc::clone(&client)).await;
        scrapes.push((got, began.elapsed()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.abort();
    }
    let codes = codes.lock().clone();
    // Never queued behind the flood's reviews (that would take the review
    // wait, 2 s, or end in a 429), never cut.
    assert!(
        scrapes
            .iter()
            .all(|(got, took)| got.is_some_and(|(c, _)| c == 200)
                && *took < crate::review::REVIEW_WAIT),
        "scrapes: {scrapes:?}; flood: {codes:?}"
    );
    assert!(
        codes.keys().all(|k| k.starts_with("401")
            || k.starts_with("429")
            || ["cut", "no connection"].contains(k)),
        "{codes:?}"
    );
    assert!(
        codes.keys().any(|k| k.ends_with("released")),
        "over the cap, the flood's connections are released: {codes:?}"
    );
}

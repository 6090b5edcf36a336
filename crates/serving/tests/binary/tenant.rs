//! The authenticated tenant's floods (issue "[authenticated-abuse]"): a
//! ServiceAccount with no bindings of its own, whose token every API
//! server authenticates and whose `system:discovery` role allows `GET
//! /version` and `/apis/*`. Over HTTP/1.1, keep-alive connections each
//! send `GET /version`, then `GET /apis/r<random>` back to back; over
//! HTTP/2, h2load (nghttp2) sends the same paths on many streams. Beside
//! them, a scraper on a new connection every 0.5 s and a probe every 1 s,
//! each with the kubelet's 5 s timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::flood::{FLOOD_SOURCE, FloodStats, connect, flood_with, read_response};

/// How long a scrape or a probe may take (the kubelet's probe timeout,
/// the scraper's).
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// `conns` keep-alive HTTP/1.1 connections to `port` from
/// [`FLOOD_SOURCE`] (the tenant's pod; the scraper is another), each
/// sending `GET /version` with `token`, then `GET /apis/r<random>` as soon
/// as the last was answered, connecting again whenever closed, until
/// `stop`.
pub fn h1_flood(
    port: u16,
    conns: usize,
    token: &str,
    stop: Arc<AtomicBool>,
) -> (Arc<FloodStats>, Vec<tokio::task::JoinHandle<()>>) {
    let token = token.to_string();
    flood_with(port, Some(FLOOD_SOURCE), conns, stop, move |i| {
        let token = token.clone();
        move |n| {
            let path = match n {
                0 => "/version".to_string(),
                n => format!("/apis/r{:x}", ((i as u64) << 32) + n),
            };
            format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
        }
    })
}

/// h2load (nghttp2-client) against `https://127.0.0.1:port`: `conns`
/// connections × `streams` streams, for `secs` seconds, cycling through
/// `/version` and 10,000 `/apis/r<n>` paths with `token`. Its summary.
pub fn h2_flood(
    port: u16,
    conns: usize,
    streams: usize,
    secs: u64,
    token: &str,
    dir: &std::path::Path,
) -> std::io::Result<String> {
    let uris = dir.join("h2load-uris.txt");
    let mut list = vec![format!("https://127.0.0.1:{port}/version")];
    list.extend((0..10_000).map(|n| format!("https://127.0.0.1:{port}/apis/r{n:x}")));
    std::fs::write(&uris, list.join("\n") + "\n")?;
    let out = std::process::Command::new("h2load")
        .arg("-c")
        .arg(conns.to_string())
        .arg("-m")
        .arg(streams.to_string())
        .arg("-D")
        .arg(secs.to_string())
        .arg("-H")
        .arg(format!("authorization: Bearer {token}"))
        .arg("-i")
        .arg(&uris)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // The lines that say what happened: requests and status codes.
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("requests:")
                || l.starts_with("status codes:")
                || l.starts_with("finished in")
        })
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; "))
}

/// One answer: status (0: none in time), latency, when it began.
pub type Answer = (u16, Duration, Instant);

/// `GET path` on a new connection every `every` until `stop`, each within
/// [`TIMEOUT`]; plain HTTP (`tls: false`, the health port) or HTTPS with
/// `token`. On a thread and runtime of its own, so its latency is the
/// server's, not the flood's.
pub fn poller(
    port: u16,
    path: &'static str,
    tls: bool,
    token: Option<String>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Answer>> {
    kcm_e2e::thread::spawn_with_runtime(move || async move {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let began = Instant::now();
            let auth = token
                .as_deref()
                .map(|t| format!("Authorization: Bearer {t}\r\n"))
                .unwrap_or_default();
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
            );
            let once = async {
                if tls {
                    let mut s = connect(port).await?;
                    s.write_all(req.as_bytes()).await?;
                    Ok(read_response(&mut s).await?.0)
                } else {
                    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
                    s.write_all(req.as_bytes()).await?;
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).await?;
                    let text = String::from_utf8_lossy(&buf);
                    std::io::Result::Ok(
                        text.split_whitespace()
                            .nth(1)
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(0),
                    )
                }
            };
            let code = match tokio::time::timeout(TIMEOUT, once).await {
                Ok(Ok(c)) => c,
                _ => 0,
            };
            out.push((code, began.elapsed(), began));
            tokio::time::sleep(every.saturating_sub(began.elapsed())).await;
        }
        out
    })
}

/// "answered/all (p99 latency; longest run of failures)".
pub fn answered(answers: &[Answer]) -> String {
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let mut lat: Vec<Duration> = answers.iter().filter(|a| a.0 == 200).map(|a| a.1).collect();
    lat.sort();
    let p99 = lat
        .get(((lat.len() as f64 - 1.0) * 0.99).round() as usize)
        .copied()
        .unwrap_or_default();
    let (mut run, mut worst) = (0, 0);
    for a in answers {
        run = if a.0 == 200 { 0 } else { run + 1 };
        worst = worst.max(run);
    }
    format!(
        "{ok} / {} (p99 {:.2} s{})",
        answers.len(),
        p99.as_secs_f64(),
        if worst > 0 {
            format!("; up to {worst} failures in a row")
        } else {
            String::new()
        }
    )
}

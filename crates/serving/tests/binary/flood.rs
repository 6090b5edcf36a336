//! Hostile and authorized HTTPS clients for the abuse test: keep-alive
//! connections sending random bearer tokens back to back, clients with
//! oversized headers or bodies that write everything before reading, and
//! scrapers that time every answer. Any server (kcm-rs or upstream KCM) on
//! 127.0.0.1; certificates are not verified (tests only).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A TLS connection to `127.0.0.1:port` (HTTP/1.1: no ALPN).
pub async fn connect(port: u16) -> std::io::Result<TlsStream<TcpStream>> {
    kcm_e2e::https::connect(port, kcm_e2e::https::Credential::None).await
}

/// The address floods come from by default; the scrapers come from
/// 127.0.0.1 (two pods, two addresses).
pub const FLOOD_SOURCE: std::net::IpAddr =
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

/// Reads more of `s` into `buf`; an error at the end of the stream.
async fn fill(s: &mut TlsStream<TcpStream>, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 8192];
    let n = s.read(&mut chunk).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// Takes one CRLF-ended line from the front of `buf`, reading as needed.
async fn line(s: &mut TlsStream<TcpStream>, buf: &mut Vec<u8>) -> std::io::Result<String> {
    loop {
        if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
            let l = String::from_utf8_lossy(&buf[..i]).into_owned();
            buf.drain(..i + 2);
            return Ok(l);
        }
        if buf.len() > 64 * 1024 {
            return Err(std::io::Error::other("line too long"));
        }
        fill(s, buf).await?;
    }
}

/// Drops `n` bytes from the front of `buf`, reading as needed.
async fn skip(s: &mut TlsStream<TcpStream>, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    let mut left = n;
    loop {
        let take = left.min(buf.len());
        buf.drain(..take);
        left -= take;
        if left == 0 {
            return Ok(());
        }
        fill(s, buf).await?;
    }
}

/// Reads one HTTP/1.1 response (body by Content-Length, chunked, or to the
/// end); its status and whether the server keeps the connection.
pub async fn read_response(s: &mut TlsStream<TcpStream>) -> std::io::Result<(u16, bool)> {
    let mut buf = Vec::with_capacity(8192);
    let status = line(s, &mut buf).await?;
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut keep = status.starts_with("HTTP/1.1");
    let (mut length, mut chunked) = (None, false);
    loop {
        let l = line(s, &mut buf).await?.to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        } else if l.starts_with("transfer-encoding:") && l.contains("chunked") {
            chunked = true;
        } else if l.starts_with("connection:") && l.contains("close") {
            keep = false;
        }
    }
    if chunked {
        loop {
            let size = line(s, &mut buf).await?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(std::io::Error::other)?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !line(s, &mut buf).await?.is_empty() {}
                return Ok((code, keep));
            }
            skip(s, &mut buf, size + 2).await?;
        }
    }
    match length {
        Some(len) => {
            skip(s, &mut buf, len).await?;
            Ok((code, keep))
        }
        None => {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            Ok((code, false))
        }
    }
}

/// What the flood saw.
#[derive(Default)]
pub struct FloodStats {
    pub requests: AtomicU64,
    pub connects: AtomicU64,
    /// Connections that ended without an answer (reset, EOF, refused).
    pub cut: AtomicU64,
    pub codes: Mutex<BTreeMap<u16, u64>>,
}

impl FloodStats {
    pub fn summary(&self) -> String {
        format!(
            "{} requests on {} connections ({} cut): {:?}",
            self.requests.load(Ordering::Relaxed),
            self.connects.load(Ordering::Relaxed),
            self.cut.load(Ordering::Relaxed),
            self.codes.lock()
        )
    }
}

/// A token nobody issued: 40 hex characters from a xorshift.
fn token(state: &mut u64) -> String {
    let mut out = String::with_capacity(48);
    out.push_str("flood-");
    for _ in 0..5 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        out.push_str(&format!("{:08x}", *state as u32));
    }
    out
}

/// `conns` keep-alive connections to `port`, each sending `GET /metrics`
/// with a new random bearer token as soon as the last was answered, and
/// connecting again whenever cut, until `stop`.
pub fn flood(
    port: u16,
    conns: usize,
    stop: Arc<AtomicBool>,
) -> (Arc<FloodStats>, Vec<tokio::task::JoinHandle<()>>) {
    flood_with(port, None, conns, stop, |i| {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407);
        move |_| {
            format!(
                "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\r\n",
                token(&mut rng)
            )
        }
    })
}

/// `conns` keep-alive connections to `port`, each sending the requests
/// `requests(i)` makes for connection `i` (given the request's number
/// on its connection) as soon as the last was answered, and connecting
/// again whenever closed, until `stop`.
pub fn flood_with<R>(
    port: u16,
    source: Option<std::net::IpAddr>,
    conns: usize,
    stop: Arc<AtomicBool>,
    requests: impl Fn(usize) -> R,
) -> (Arc<FloodStats>, Vec<tokio::task::JoinHandle<()>>)
where
    R: FnMut(u64) -> String + Send + 'static,
{
    let stats = Arc::new(FloodStats::default());
    let tasks = (0..conns)
        .map(|i| {
            let (stats, stop) = (Arc::clone(&stats), Arc::clone(&stop));
            let mut next = requests(i);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let conn = kcm_e2e::https::connect_from(
                        source,
                        port,
                        kcm_e2e::https::Credential::None,
                    );
                    let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(10), conn).await
                    else {
                        stats.cut.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    stats.connects.fetch_add(1, Ordering::Relaxed);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let req = next(n);
                        n += 1;
                        let answer = async {
                            s.write_all(req.as_bytes()).await?;
                            read_response(&mut s).await
                        };
                        match tokio::time::timeout(Duration::from_secs(30), answer).await {
                            Ok(Ok((code, keep))) => {
                                stats.requests.fetch_add(1, Ordering::Relaxed);
                                *stats.codes.lock().entry(code).or_default() += 1;
                                if !keep {
                                    break;
                                }
                            }
                            _ => {
                                stats.cut.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    (stats, tasks)
}

/// What a client that writes its whole request before reading got: the
/// write went through, the status (0: none), the answer ended cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Strict {
    pub wrote: bool,
    pub code: u16,
    pub clean: bool,
}

/// Writes `request` (its first 128 KiB, a 300 ms pause as a slow client's,
/// then the rest), then reads to the end.
pub async fn strict(port: u16, request: &[u8]) -> Strict {
    let failed = Strict {
        wrote: false,
        code: 0,
        clean: false,
    };
    let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(10), connect(port)).await else {
        return failed;
    };
    let (first, rest) = request.split_at(request.len().min(128 * 1024));
    let mut wrote = s.write_all(first).await.is_ok() && s.flush().await.is_ok();
    tokio::time::sleep(Duration::from_millis(300)).await;
    wrote = wrote && s.write_all(rest).await.is_ok() && s.flush().await.is_ok();
    let mut out = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Strict {
        wrote,
        code,
        clean: matches!(end, Ok(Ok(_))),
    }
}

/// One scrape's outcome: status (0: none), latency, when it began.
pub type Scrape = (u16, Duration, Instant);

/// Scrapes `/metrics` with `token` every `every` until `stop`, each on a
/// new connection (`fresh`) or on one kept alive (a Prometheus's way,
/// connecting again only when the server closed it). On a thread and
/// runtime of its own, so its latency is the server's, not the flood's.
pub fn scraper(
    port: u16,
    token: String,
    fresh: bool,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Scrape>> {
    kcm_e2e::thread::spawn_with_runtime(move || async move {
        let mut out = Vec::new();
        let mut kept: Option<TlsStream<TcpStream>> = None;
        while !stop.load(Ordering::Relaxed) {
            let began = Instant::now();
            let once = async {
                let mut s = match kept.take() {
                    Some(s) if !fresh => s,
                    _ => connect(port).await?,
                };
                let req = format!(
                    "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n{}\r\n",
                    if fresh { "Connection: close\r\n" } else { "" }
                );
                s.write_all(req.as_bytes()).await?;
                let (code, keep) = read_response(&mut s).await?;
                if keep && !fresh {
                    kept = Some(s);
                }
                std::io::Result::Ok(code)
            };
            let code = match tokio::time::timeout(Duration::from_secs(10), once).await {
                Ok(Ok(c)) => c,
                _ => 0,
            };
            out.push((code, began.elapsed(), began));
            tokio::time::sleep(every).await;
        }
        out
    })
}

/// The scrapes not 200 or not within `bound`: (code, latency, seconds
/// since `since`).
pub fn bad(scrapes: &[Scrape], bound: Duration, since: Instant) -> Vec<(u16, Duration, f64)> {
    scrapes
        .iter()
        .filter(|s| s.0 != 200 || s.1 >= bound)
        .map(|s| (s.0, s.1, s.2.duration_since(since).as_secs_f64()))
        .collect()
}

/// "n, p50, p99, max, not 200 / over `bound`" of some scrapes.
pub fn describe(scrapes: &[Scrape], bound: Duration) -> String {
    let mut lat: Vec<Duration> = scrapes.iter().map(|s| s.1).collect();
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    let failed = scrapes.iter().filter(|s| s.0 != 200).count();
    let slow = scrapes.iter().filter(|s| s.1 >= bound).count();
    format!(
        "{} scrapes, p50 {:?}, p99 {:?}, max {:?}; not 200: {failed}, over {bound:?}: {slow}",
        scrapes.len(),
        pct(0.5),
        pct(0.99),
        lat.last().copied().unwrap_or_default(),
    )
}

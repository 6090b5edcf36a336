//! [`H2Conn`] against an h2 server over in-memory pipes: what leaves per
//! request, reconnection, and the HTTP/1.1 verdict.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::client::legacy::connect::{Connected as Negotiated, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;

use super::*;

/// The client end of a pipe, counting its write calls.
struct Pipe {
    io: TokioIo<DuplexStream>,
    writes: Arc<AtomicUsize>,
    h2: bool,
}

impl Connection for Pipe {
    fn connected(&self) -> Negotiated {
        let c = Negotiated::new();
        if self.h2 { c.negotiated_h2() } else { c }
    }
}

impl hyper::rt::Read for Pipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Pipe {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    /// As `writev` to a socket: every slice in one call (the pipe has room).
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        Pin::new(&mut self.io).poll_write(cx, &all)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Makes a pipe per connect, its server end served by [`serve`].
#[derive(Clone)]
struct Connector {
    connects: Arc<AtomicUsize>,
    writes: Arc<AtomicUsize>,
    h2: bool,
    /// Requests each connection serves before it says GOAWAY.
    close_after: Option<usize>,
    /// Connects never finish (a server that never completes TLS).
    hang: bool,
}

impl Connector {
    fn new(h2: bool, close_after: Option<usize>) -> Self {
        Connector {
            connects: Arc::default(),
            writes: Arc::default(),
            h2,
            close_after,
            hang: false,
        }
    }
}

impl Service<http::Uri> for Connector {
    type Response = Pipe;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Pipe, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        self.connects.fetch_add(1, Ordering::SeqCst);
        if self.hang {
            return Box::pin(std::future::pending());
        }
        let (client, server) = tokio::io::duplex(1 << 20);
        if self.h2 {
            tokio::spawn(serve(server, self.close_after));
        }
        Box::pin(std::future::ready(Ok(Pipe {
            io: TokioIo::new(client),
            writes: Arc::clone(&self.writes),
            h2: self.h2,
        })))
    }
}

/// Answers each request with `got <body length>`, each in its own task
/// (the connection is driven only while `accept` is polled).
async fn serve(io: DuplexStream, close_after: Option<usize>) {
    let mut conn = h2::server::handshake(io).await.expect("handshake");
    let mut accepted = 0;
    while let Some(r) = conn.accept().await {
        let Ok((req, respond)) = r else { return };
        tokio::spawn(answer(req, respond));
        accepted += 1;
        if Some(accepted) == close_after {
            conn.graceful_shutdown();
        }
    }
}

async fn answer(req: http::Request<RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    let mut body = req.into_body();
    let mut len = 0;
    while let Some(d) = body.data().await {
        let d = d.expect("request body");
        let _ = body.flow_control().release_capacity(d.len());
        len += d.len();
    }
    let mut tx = respond
        .send_response(http::Response::new(()), false)
        .expect("respond");
    tx.send_data(Bytes::from(format!("got {len}")), true)
        .expect("body");
}

fn settings() -> Settings {
    Settings {
        stream_window: 4 << 20,
        connection_window: 32 << 20,
        ping_after: Duration::from_secs(30),
        ping_timeout: Duration::from_secs(15),
        connect_timeout: Duration::from_secs(10),
        reprobe: Duration::from_secs(600),
    }
}

fn uri() -> http::Uri {
    "https://apiserver.test/api/v1/namespaces/a/pods"
        .parse()
        .expect("uri")
}

async fn request(conn: &H2Conn<Connector>, body: &'static [u8]) -> String {
    let req = Request::post(uri())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_vec()))
        .expect("request");
    let Sent::H2(resp) = conn.request(req).await.expect("response") else {
        panic!("sent as HTTP/1.1");
    };
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}

#[tokio::test]
async fn a_request_and_its_body_leave_in_one_write() {
    let connector = Connector::new(true, None);
    let writes = Arc::clone(&connector.writes);
    let conn = H2Conn::new(connector, settings());
    // The preface, SETTINGS and their acknowledgement go first.
    assert_eq!(request(&conn, b"{}").await, "got 2");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = writes.load(Ordering::SeqCst);
    let body = &[b'x'; 3000];
    assert_eq!(request(&conn, body).await, "got 3000");
    assert_eq!(
        writes.load(Ordering::SeqCst) - before,
        1,
        "HEADERS and DATA in one write"
    );
}

#[tokio::test]
async fn a_connection_that_went_away_is_replaced() {
    let connector = Connector::new(true, Some(1));
    let connects = Arc::clone(&connector.connects);
    let conn = H2Conn::new(connector, settings());
    assert_eq!(request(&conn, b"one").await, "got 3");
    // The server's GOAWAY ends the first connection's driver.
    for _ in 0..100 {
        if conn.current().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(conn.current().is_none(), "closed connection still current");
    assert_eq!(request(&conn, b"two!").await, "got 4");
    assert_eq!(connects.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn concurrent_first_requests_share_one_connect() {
    let connector = Connector::new(true, None);
    let connects = Arc::clone(&connector.connects);
    let conn = Arc::new(H2Conn::new(connector, settings()));
    let all = (0..8).map(|_| {
        let conn = Arc::clone(&conn);
        async move { request(&conn, b"abc").await }
    });
    for got in futures::future::join_all(all).await {
        assert_eq!(got, "got 3");
    }
    assert_eq!(connects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_server_without_h2_is_remembered_as_http1() {
    let connector = Connector::new(false, None);
    let connects = Arc::clone(&connector.connects);
    let conn = H2Conn::new(connector, settings());
    assert!(conn.sender(&uri()).await.expect("connect").is_none());
    assert!(conn.sender(&uri()).await.expect("again").is_none());
    assert_eq!(connects.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_http1_verdict_is_asked_again_later() {
    let connector = Connector::new(false, None);
    let connects = Arc::clone(&connector.connects);
    let conn = H2Conn::new(connector, settings());
    assert!(conn.sender(&uri()).await.expect("connect").is_none());
    tokio::time::advance(settings().reprobe).await;
    assert!(conn.sender(&uri()).await.expect("again").is_none());
    assert_eq!(connects.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_connect_that_never_finishes_gives_up_and_lets_the_next_try() {
    let mut connector = Connector::new(true, None);
    connector.hang = true;
    let connects = Arc::clone(&connector.connects);
    let conn = H2Conn::new(connector, settings());
    let err = conn.sender(&uri()).await.expect_err("no connection");
    assert!(err.to_string().contains("no connection within"), "{err}");
    assert!(conn.sender(&uri()).await.is_err());
    assert_eq!(connects.load(Ordering::SeqCst), 2);
}

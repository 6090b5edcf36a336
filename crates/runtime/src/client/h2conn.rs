//! The HTTP/2 connection to an API server, on the `h2` crate directly.
//!
//! hyper's HTTP/2 client hands a request body to h2 only once the stream
//! has send capacity, and h2 assigns capacity only to streams its
//! connection task has opened, so every request with a body (a pod
//! creation, a finalizer patch, a status update, an event) left as two
//! writes: HEADERS, then, a poll later, DATA. Two TLS records, two wake-ups
//! here and two reads in the API server, where client-go writes one. Here
//! the body is queued with `send_data` right after `send_request` (h2
//! buffers data beyond the window), and h2 writes both frames in one flush
//! when it opens the stream.
//!
//! [`H2Conn`] keeps one connection: made on first use (a request waits
//! for the one connect in flight), replaced when it closes (error, GOAWAY,
//! no answer to a keep-alive PING). A connection whose ALPN is not `h2`
//! marks the server HTTP/1.1-only; the caller then uses its pool.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Ping, RecvStream};
use http::{HeaderMap, Request, Response, Version, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioIo;
use kube::client::Body;
use tower::{BoxError, Service};

/// A connection's request sender and the flag its driver sets when it
/// closes.
type Sender = (SendRequest<Bytes>, Arc<AtomicBool>);

/// What a connect found the server to speak.
enum Connected {
    H2(Sender),
    /// Since when: the verdict is asked again after [`Settings::reprobe`]
    /// (a load balancer in front of the API server may change its mind).
    Http1(tokio::time::Instant),
}

/// HTTP/2 settings (the transport's module note says why these values).
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub stream_window: u32,
    pub connection_window: u32,
    pub ping_after: Duration,
    pub ping_timeout: Duration,
    /// Bound on a whole connect: TCP, TLS and the HTTP/2 preface.
    pub connect_timeout: Duration,
    /// How long an HTTP/1.1-only verdict holds.
    pub reprobe: Duration,
}

/// One HTTP/2 connection, made by `connector` on demand.
pub(super) struct H2Conn<C> {
    connector: tokio::sync::Mutex<C>,
    settings: Settings,
    /// The live connection, or that the server speaks HTTP/1.1 only.
    state: parking_lot::Mutex<Option<Connected>>,
}

impl<C, IO> H2Conn<C>
where
    C: Service<http::Uri, Response = IO> + Send,
    C::Future: Send,
    C::Error: Into<BoxError>,
    IO: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
{
    pub fn new(connector: C, settings: Settings) -> Self {
        H2Conn {
            connector: tokio::sync::Mutex::new(connector),
            settings,
            state: parking_lot::Mutex::new(None),
        }
    }

    /// The live connection's sender and its closed flag, `None` if the
    /// server speaks HTTP/1.1 only; connects when there is no live
    /// connection.
    async fn sender(&self, uri: &http::Uri) -> Result<Option<Sender>, BoxError> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        // One connect at a time: whoever waited here finds it made.
        let mut connector = self.connector.lock().await;
        if let Some(s) = self.current() {
            return Ok(s);
        }
        // Bounded: a server that takes the TCP connection and never
        // finishes the TLS handshake must not hold every request here.
        let connected = tokio::time::timeout(
            self.settings.connect_timeout,
            self.connect(&mut connector, uri),
        )
        .await
        .map_err(|_| {
            format!(
                "connecting to {uri}: no connection within {:?}",
                self.settings.connect_timeout
            )
        })??;
        let sender = match &connected {
            Connected::H2(s) => Some(s.clone()),
            Connected::Http1(_) => None,
        };
        *self.state.lock() = Some(connected);
        Ok(sender)
    }

    fn current(&self) -> Option<Option<Sender>> {
        match &*self.state.lock() {
            Some(Connected::H2(s)) if !s.1.load(Ordering::Acquire) => Some(Some(s.clone())),
            Some(Connected::Http1(since)) if since.elapsed() < self.settings.reprobe => Some(None),
            _ => None,
        }
    }

    async fn connect(&self, connector: &mut C, uri: &http::Uri) -> Result<Connected, BoxError> {
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let io = connector.call(uri.clone()).await.map_err(Into::into)?;
        if !io.connected().is_negotiated_h2() {
            return Ok(Connected::Http1(tokio::time::Instant::now()));
        }
        let s = self.settings;
        let (sender, conn) = h2::client::Builder::new()
            .enable_push(false)
            .initial_window_size(s.stream_window)
            .initial_connection_window_size(s.connection_window)
            .max_header_list_size(MAX_HEADER_LIST)
            // Until the server's SETTINGS say otherwise (kube-apiserver: 100),
            // as hyper: requests queued behind a reconnect must not open more
            // streams than the server takes, or it refuses them.
            .initial_max_send_streams(INITIAL_MAX_STREAMS)
            .handshake::<_, Bytes>(TokioIo::new(io))
            .await?;
        let closed = Arc::new(AtomicBool::new(false));
        tokio::spawn(drive(conn, s, Arc::clone(&closed)));
        Ok(Connected::H2((sender, closed)))
    }

    /// Sends `req` on the connection, or hands it back when the server
    /// speaks HTTP/1.1 only. A connection found closed before the request
    /// went out is replaced once; the request was not sent on it.
    pub async fn request(&self, req: Request<Body>) -> Result<Sent, BoxError> {
        for attempt in 0..2 {
            let Some((sender, closed)) = self.sender(req.uri()).await? else {
                break;
            };
            match sender.ready().await {
                Ok(ready) => return Ok(Sent::H2(send(ready, &closed, req).await?)),
                Err(e) if attempt == 1 => return Err(e.into()),
                Err(_) => closed.store(true, Ordering::Release),
            }
        }
        Ok(Sent::Http1(req))
    }
}

/// What [`H2Conn::request`] did with a request.
pub(super) enum Sent {
    H2(Response<H2Body>),
    /// Not sent: the server speaks HTTP/1.1 only.
    Http1(Request<Body>),
}

/// Response headers we accept (hyper's client default).
const MAX_HEADER_LIST: u32 = 16 << 10;
/// Streams opened before the server's SETTINGS arrive.
const INITIAL_MAX_STREAMS: usize = 100;

/// Runs the connection until it closes or stops answering PINGs, then
/// marks it closed so the next request connects anew.
async fn drive<T>(mut conn: h2::client::Connection<T, Bytes>, s: Settings, closed: Arc<AtomicBool>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let pinger = conn.ping_pong();
    let keepalive = async move {
        // Taken once per connection: `None` is impossible here.
        let Some(mut pinger) = pinger else {
            return std::future::pending::<String>().await;
        };
        loop {
            tokio::time::sleep(s.ping_after).await;
            match tokio::time::timeout(s.ping_timeout, pinger.ping(Ping::opaque())).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return format!("PING failed: {e}"),
                Err(_) => return format!("no PING answer within {:?}", s.ping_timeout),
            }
        }
    };
    tokio::select! {
        r = &mut conn => match r {
            Ok(()) => tracing::debug!("HTTP/2 connection to the API server closed"),
            Err(e) => tracing::info!(error = %e, "HTTP/2 connection to the API server lost"),
        },
        why = keepalive => tracing::info!(reason = %why, "dropping the HTTP/2 connection to the API server"),
    }
    closed.store(true, Ordering::Release);
}

/// Hop-by-hop headers HTTP/2 forbids (RFC 9113 8.2.2); h2 refuses them.
const CONNECTION_HEADERS: [&str; 6] = [
    "connection",
    "transfer-encoding",
    "upgrade",
    "host",
    "keep-alive",
    "proxy-connection",
];

/// Sends `req` on a connection ready for a new stream: HEADERS and the
/// whole body queued together, so they leave in one write.
/// A refusal for the connection's sake (it went away or failed) marks it
/// `closed`, so the next request connects anew.
async fn send(
    mut sender: SendRequest<Bytes>,
    closed: &AtomicBool,
    req: Request<Body>,
) -> Result<Response<H2Body>, BoxError> {
    let (mut parts, body) = req.into_parts();
    // kube's request bodies are whole byte buffers: this does not wait.
    let data = body.collect().await?.to_bytes();
    for h in CONNECTION_HEADERS {
        parts.headers.remove(h);
    }
    if parts
        .headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes() != b"trailers")
    {
        parts.headers.remove(header::TE);
    }
    parts.version = Version::HTTP_2;
    let end = data.is_empty();
    let (response, mut stream) = sender
        .send_request(Request::from_parts(parts, ()), end)
        .inspect_err(|e| {
            // The driver may not have seen the GOAWAY or the failure yet.
            if e.is_go_away() || e.is_io() {
                closed.store(true, Ordering::Release);
            }
        })?;
    if !end {
        stream.send_data(data, true)?;
    }
    let (parts, recv) = response.await?.into_parts();
    Ok(Response::from_parts(
        parts,
        H2Body {
            recv,
            _send: stream,
            trailers_done: false,
        },
    ))
}

/// A response body read from an h2 stream, its flow-control window
/// released as data is taken. Dropped before its end, the stream is reset
/// (h2 sends RST_STREAM when the last handle goes).
pub struct H2Body {
    recv: RecvStream,
    /// Held so the stream stays whole until the response is read.
    _send: h2::SendStream<Bytes>,
    trailers_done: bool,
}

impl HttpBody for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let me = &mut *self;
        if !me.recv.is_end_stream() {
            match me.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    // Cannot fail for data this stream received.
                    let _ = me.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        if me.trailers_done {
            return Poll::Ready(None);
        }
        match me.recv.poll_trailers(cx) {
            Poll::Ready(Ok(t)) => {
                me.trailers_done = true;
                Poll::Ready(t.map(|t: HeaderMap| Ok(Frame::trailers(t))))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.trailers_done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The transport's response body: hyper's for HTTP/1.1, h2's for HTTP/2.
pub enum TransportBody {
    Http1(Incoming),
    Http2(H2Body),
}

impl HttpBody for TransportBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            TransportBody::Http1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            TransportBody::Http2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            TransportBody::Http1(b) => b.is_end_stream(),
            TransportBody::Http2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            TransportBody::Http1(b) => b.size_hint(),
            TransportBody::Http2(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;

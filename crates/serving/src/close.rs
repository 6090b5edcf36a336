//! The graceful close. A connection hyper is done with may still have
//! unread input: a request whose headers were too large (431) or whose body
//! was refused (413), or one the client is still sending. Closing a socket
//! with unread input makes the kernel send a reset, which destroys the
//! answer in the client's receive buffer, and a client still writing never
//! reads it. So, as Go's net/http (`closeWriteAndWait`) but reading:
//! TLS close_notify, TCP write side shut (FIN), then the rest of the input
//! read and discarded, undecrypted, until the client closes, at most
//! [`LINGER_BYTES`] and [`LINGER_TIME`]; the connection is among the first
//! closed when the server is full (`conn.rs`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

use crate::conn::ConnState;

/// Input discarded at most before the close (Go's 1 MiB header limit, a
/// refused body of a few MiB).
pub const LINGER_BYTES: usize = 4 << 20;
/// How long the close waits for the client at most.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// An I/O handed to hyper that comes back when hyper drops it, so the
/// connection can be closed gracefully.
pub struct Reclaim<T> {
    inner: Option<T>,
    back: Option<oneshot::Sender<T>>,
}

impl<T> Reclaim<T> {
    pub fn new(inner: T) -> (Self, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        (
            Reclaim {
                inner: Some(inner),
                back: Some(tx),
            },
            rx,
        )
    }

    fn get(&mut self) -> io::Result<&mut T> {
        self.inner
            .as_mut()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl<T> Drop for Reclaim<T> {
    fn drop(&mut self) {
        if let (Some(inner), Some(back)) = (self.inner.take(), self.back.take()) {
            let _ = back.send(inner);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Reclaim<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(inner) => Pin::new(inner).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Reclaim<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get() {
            Ok(inner) => Pin::new(inner).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(inner) => Pin::new(inner).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(inner) => Pin::new(inner).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get() {
            Ok(inner) => Pin::new(inner).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(T::is_write_vectored)
    }
}

/// Reads and drops input until end of stream, an error or `max` bytes; the
/// bytes read.
pub async fn discard<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> usize {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    while total < max {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    total
}

/// Closes `tls` gracefully (module note); returns when the client closed,
/// a bound was reached, or the connection was evicted.
pub async fn linger<T>(tls: tokio_rustls::server::TlsStream<T>, state: &ConnState)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    state.linger();
    let quiet = async move {
        let mut tls = tls;
        // close_notify and FIN; hyper may have sent both already.
        let _ = tls.shutdown().await;
        let (mut raw, _) = tls.into_inner();
        discard(&mut raw, LINGER_BYTES).await
    };
    tokio::select! {
        _ = tokio::time::timeout(LINGER_TIME, quiet) => {}
        () = state.evicted.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn discard_stops_at_the_bound_and_at_the_end() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            let chunk = vec![7u8; 64 * 1024];
            let mut sent = 0;
            while sent < 3 * LINGER_BYTES {
                if client.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        });
        let n = discard(&mut server, LINGER_BYTES).await;
        assert!((LINGER_BYTES..LINGER_BYTES + 16 * 1024).contains(&n), "{n}");
        drop(server);
        assert!(writer.await.expect("writer") < 3 * LINGER_BYTES);
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(b"rest").await.expect("write");
        drop(client);
        assert_eq!(discard(&mut server, LINGER_BYTES).await, 4);
    }

    #[tokio::test]
    async fn reclaim_gives_the_io_back_when_dropped() {
        let (a, _b) = tokio::io::duplex(16);
        let (mut io, back) = Reclaim::new(a);
        io.write_all(b"x").await.expect("write");
        drop(io);
        assert!(back.await.is_ok());
    }
}

//! The outage switch at the connection level: a listener that drops new connections and a
//! stream that fails reads and writes while the fake is [`Reachability::Down`], so a client
//! observes what a network failure looks like (no HTTP status at all).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::Reachability;

/// Shared switch, read without taking the fake's state lock.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    mode: AtomicU8,
    /// Connections dropped and requests refused (503) while not `Up`.
    refused: AtomicUsize,
}

impl Gate {
    pub(crate) fn mode(&self) -> Reachability {
        Reachability::from_u8(self.mode.load(Ordering::SeqCst))
    }

    pub(crate) fn set(&self, mode: Reachability) {
        self.mode.store(mode.to_u8(), Ordering::SeqCst);
    }

    pub(crate) fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    fn down(&self) -> bool {
        self.mode() == Reachability::Down
    }
}

pub(crate) struct GatedListener {
    pub(crate) inner: TcpListener,
    pub(crate) gate: Arc<Gate>,
}

impl axum::serve::Listener for GatedListener {
    type Io = GatedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) if self.gate.down() => {
                    // Accepted and closed before a byte is read: the client sees the
                    // connection die, as with a broken network path.
                    self.gate.count_refusal();
                    drop(stream);
                    tracing::debug!(%addr, "fake GitHub is down: connection dropped");
                }
                Ok((stream, addr)) => {
                    let io = GatedStream {
                        inner: stream,
                        gate: self.gate.clone(),
                    };
                    return (io, addr);
                }
                Err(err) => {
                    tracing::debug!(%err, "fake GitHub accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP stream that fails every read and write while the gate is down (open keep-alive
/// connections die too, not only new ones).
pub(crate) struct GatedStream {
    inner: TcpStream,
    gate: Arc<Gate>,
}

fn reset() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "fake GitHub is down")
}

impl AsyncRead for GatedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.gate.down() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for GatedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.gate.down() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

//! Accepting connections at every front door so that no client can stop it: a failed
//! `accept` is logged and retried after a pause that grows while failures repeat (the
//! process out of file descriptors ends nothing), and a connection that sends nothing is
//! dropped after a while (HTTP bounds its request headers, the PostgreSQL wire its sign-in,
//! Flight SQL its first bytes).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long a client may take to send its request headers (HTTP) or its first bytes
/// (Flight SQL) before the connection is closed; an idle HTTP keep-alive connection is
/// closed after as long.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(20);

/// The pause after a failed `accept`: 10 ms, doubling while failures repeat, at most 1 s.
#[derive(Debug)]
pub(crate) struct AcceptPause {
    next: Duration,
}

impl Default for AcceptPause {
    fn default() -> Self {
        Self {
            next: Duration::from_millis(10),
        }
    }
}

impl AcceptPause {
    pub fn reset(&mut self) {
        self.next = Duration::from_millis(10);
    }

    /// Logs a failed accept at `door` and waits before the next.
    pub async fn after(&mut self, error: &io::Error, door: &str) {
        tracing::warn!(door, error = %error, pause_ms = self.next.as_millis() as u64, "accept a connection failed; retrying");
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(1));
    }
}

/// Accepts from `listener` until `shutdown`, pausing after failures: `None` once shut down.
pub(crate) async fn accept(
    listener: &TcpListener,
    pause: &mut AcceptPause,
    door: &str,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    pause.reset();
                    return Some(accepted);
                }
                Err(e) => pause.after(&e, door).await,
            },
            _ = shutdown.cancelled() => return None,
        }
    }
}

/// The accepted connections of `listener` as a stream (for tonic), until `shutdown`, each
/// held to [`FIRST_BYTES_TIMEOUT`] for its first bytes.
pub(crate) fn incoming(
    listener: TcpListener,
    door: &'static str,
    shutdown: CancellationToken,
) -> impl futures::Stream<Item = io::Result<FirstBytes<TcpStream>>> {
    futures::stream::unfold(
        (listener, AcceptPause::default(), shutdown),
        move |(listener, mut pause, shutdown)| async move {
            let (socket, _) = accept(&listener, &mut pause, door, &shutdown).await?;
            let _ = socket.set_nodelay(true);
            Some((
                Ok(FirstBytes::new(socket, FIRST_BYTES_TIMEOUT)),
                (listener, pause, shutdown),
            ))
        },
    )
}

/// A connection that fails its reads when no byte has arrived within its deadline: a
/// client that connects and says nothing gives its socket back.
pub(crate) struct FirstBytes<T> {
    inner: T,
    /// Until the first byte arrives.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> FirstBytes<T> {
    pub fn new(inner: T, within: Duration) -> Self {
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstBytes<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.deadline = None,
            Poll::Pending => {
                if let Some(deadline) = self.deadline.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing in time",
                    )));
                }
            }
            _ => {}
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FirstBytes<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for FirstBytes<TcpStream> {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_silent_client_times_out_and_a_talking_one_does_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _silent = TcpStream::connect(address).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let mut wrapped = FirstBytes::new(socket, Duration::from_millis(50));
        let mut buf = [0u8; 8];
        let err = wrapped.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let mut talking = TcpStream::connect(address).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let mut wrapped = FirstBytes::new(socket, Duration::from_millis(50));
        talking.write_all(b"hi").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 2);
        // Past the first bytes, quiet spells are the protocol's business.
        tokio::time::sleep(Duration::from_millis(80)).await;
        talking.write_all(b"!").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 1);
    }
}

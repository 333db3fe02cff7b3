//! Accepting connections at every front door so that no client can stop it: a failed
//! `accept` is logged and retried after a pause that grows while failures repeat (the
//! process out of file descriptors ends nothing), and a connection that sends nothing is
//! dropped after a while (HTTP bounds its request headers and the quiet spells of its
//! bodies, the PostgreSQL wire its sign-in, Flight SQL its HTTP/2 opening).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long a client may take to send its request headers (HTTP) or its HTTP/2 opening
/// (Flight SQL) before the connection is closed; an idle HTTP keep-alive connection is
/// closed after as long, and a request body that stalls as long fails.
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
/// held to [`FIRST_BYTES_TIMEOUT`] for its HTTP/2 opening.
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
                Ok(FirstBytes::new(
                    socket,
                    FIRST_BYTES_TIMEOUT,
                    HTTP2_OPENING_BYTES,
                )),
                (listener, pause, shutdown),
            ))
        },
    )
}

/// The bytes an HTTP/2 client sends before anything else: the 24-byte connection preface and
/// the header of its SETTINGS frame, which must follow at once.
pub const HTTP2_OPENING_BYTES: usize = 24 + 9;

/// A connection that fails its reads when its first `count` bytes have not arrived within its
/// deadline: a client that connects and says nothing, or starts a handshake and stops, gives
/// its socket back.
pub(crate) struct FirstBytes<T> {
    inner: T,
    /// Until the first `count` bytes have arrived.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Bytes still to arrive before the deadline is lifted.
    awaited: usize,
}

impl<T> FirstBytes<T> {
    pub fn new(inner: T, within: Duration, count: usize) -> Self {
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            awaited: count.max(1),
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
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.awaited = self.awaited.saturating_sub(buf.filled().len() - before);
                if self.awaited == 0 {
                    self.deadline = None;
                } else if let Some(deadline) = self.deadline.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not finish its opening in time",
                    )));
                }
            }
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

/// A request body that fails when none of it arrives for `idle`: a client that sends its
/// headers and then stops partway through the body gets an error (and its connection
/// closed) instead of holding a handler forever.
pub(crate) struct IdleBody<B> {
    inner: B,
    idle: Duration,
    /// When the current quiet spell ends the body; armed when a read finds nothing, so the
    /// time a handler takes before it reads does not count.
    quiet_until: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl<B> IdleBody<B> {
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            quiet_until: Box::pin(tokio::time::sleep(idle)),
            armed: false,
        }
    }
}

/// The error of a body that stalled.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: nothing of it arrived for {0} s")]
pub(crate) struct BodyStalled(u64);

impl<B> hyper::body::Body for IdleBody<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.armed = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if !this.armed {
                    let end = tokio::time::Instant::now() + this.idle;
                    this.quiet_until.as_mut().reset(end);
                    this.armed = true;
                }
                if this.quiet_until.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(BodyStalled(this.idle.as_secs())))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl tonic::transport::server::Connected for FirstBytes<TcpStream> {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A gRPC server as every front door of Floe's runs one: dead peers found by keep-alive
/// pings (a peer that never starts is dropped by [`incoming`]), TLS when `tls` is given.
pub(crate) fn grpc_server(
    tls: Option<crate::tls::TlsFiles>,
) -> Result<tonic::transport::Server, tonic::transport::Error> {
    let builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    match tls {
        Some(files) => builder.tls_config(
            tonic::transport::ServerTlsConfig::new()
                .identity(files.identity())
                .timeout(FIRST_BYTES_TIMEOUT),
        ),
        None => Ok(builder),
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
        let mut wrapped = FirstBytes::new(socket, Duration::from_millis(50), 3);
        let mut buf = [0u8; 8];
        let err = wrapped.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let mut talking = TcpStream::connect(address).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let mut wrapped = FirstBytes::new(socket, Duration::from_millis(50), 3);
        talking.write_all(b"hi!").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 3);
        // Past the first bytes, quiet spells are the protocol's business.
        tokio::time::sleep(Duration::from_millis(80)).await;
        talking.write_all(b"!").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_client_that_stops_partway_through_its_opening_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut halting = TcpStream::connect(address).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let mut wrapped = FirstBytes::new(socket, Duration::from_millis(50), 8);
        halting.write_all(b"PRI").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 3);
        let err = wrapped.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    /// One frame, then silence.
    struct OneThenNothing(Option<bytes::Bytes>);

    impl hyper::body::Body for OneThenNothing {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(data) => Poll::Ready(Some(Ok(hyper::body::Frame::data(data)))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_and_a_late_reader_is_not_counted_against_it() {
        use hyper::body::Body;

        let mut body = IdleBody::new(
            OneThenNothing(Some(bytes::Bytes::from_static(b"{"))),
            Duration::from_millis(50),
        );
        // The handler reads late: the body's first frame is still there.
        tokio::time::sleep(Duration::from_millis(80)).await;
        let first = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.into_data().unwrap().as_ref(), b"{");
        let stalled = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
            .await
            .unwrap()
            .unwrap_err();
        assert!(stalled.to_string().contains("stalled"), "{stalled}");
    }
}

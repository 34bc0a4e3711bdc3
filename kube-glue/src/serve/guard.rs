//! Per-connection deadlines (issue #30, slowloris): a request's headers must arrive
//! within `header` of its first byte, a new connection must begin its first request
//! within `first` (issue #41: idle connections that never ask anything cannot fill the
//! connection limit), and between requests a connection may stay idle for `idle`.
//!
//! hyper's own `header_read_timeout` cannot be used: its timer also runs while a
//! keep-alive connection waits for its next request, so it closes idle connections after
//! the header timeout — and a client that sends its next request on such a connection at
//! that moment gets EOF (seen from the API server: `failed calling webhook … EOF`, a
//! refused pod). The API server's clients keep idle connections 90 s; `idle` must be
//! longer, so that they, not we, close idle connections.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// Where the connection is in its request cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No request in progress (before the first, or after a response).
    Idle,
    /// A request's first bytes arrived; its headers are not complete yet.
    Head,
    /// The request reached the handler (its body is the handler's to time).
    Handled,
}

/// Shared between the connection's IO, its service and its listener (`shed.rs`).
#[derive(Debug)]
pub struct ConnState {
    /// The phase, and when it began.
    phase: Mutex<(Phase, Instant)>,
    /// The listener asked the connection to close while it waits on its client.
    shed: AtomicBool,
    /// The read waiting for the client's next bytes, woken by [`ConnState::shed`].
    reader: Mutex<Option<Waker>>,
    /// Wakes a TLS handshake in progress.
    shed_notify: Notify,
}

/// What a connection is doing, as its listener judges whether to shed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Waiting on its client — idle, before its first request, or in unfinished headers —
    /// for this long.
    For(Duration),
    /// A request in flight, or a TLS handshake whose client has spoken.
    Busy,
    /// Already asked to close.
    Shed,
}

/// A connection's deadlines.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// A request's headers, from its first byte.
    pub header: Duration,
    /// The first request's first byte, from the connection's start.
    pub first: Duration,
    /// The next request's first byte, from the previous response.
    pub idle: Duration,
}

impl ConnState {
    pub fn new() -> Arc<Self> {
        Arc::new(ConnState {
            phase: Mutex::new((Phase::Idle, Instant::now())),
            shed: AtomicBool::new(false),
            reader: Mutex::new(None),
            shed_notify: Notify::new(),
        })
    }

    /// The request's headers were parsed and it reached the service.
    pub fn handled(&self) {
        self.set(Phase::Handled);
    }

    /// The client of a TLS handshake sent its first bytes: a handshake under way is not
    /// shed (its own timeout bounds it).
    pub fn spoke(&self) {
        self.set(Phase::Handled);
    }

    /// The TLS handshake is done: the connection waits for its first request.
    pub fn handshake_done(&self) {
        self.set(Phase::Idle);
    }

    fn set(&self, phase: Phase) {
        *self.lock() = (phase, Instant::now());
    }

    /// Whether, and since when, the connection waits on its client at `now`.
    pub fn waiting(&self, now: Instant) -> Waiting {
        if self.is_shed() {
            return Waiting::Shed;
        }
        match *self.lock() {
            (Phase::Handled, _) => Waiting::Busy,
            (_, since) => Waiting::For(now.saturating_duration_since(since)),
        }
    }

    /// Asks the connection to close: its read waiting on the client fails at once (a read
    /// that finds the client's bytes goes on: the connection is then not waiting).
    pub fn shed(&self) {
        self.shed.store(true, Ordering::SeqCst);
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = reader {
            w.wake();
        }
        self.shed_notify.notify_one();
    }

    pub fn is_shed(&self) -> bool {
        self.shed.load(Ordering::SeqCst)
    }

    /// Resolves once the connection is asked to close.
    pub async fn shed_requested(&self) {
        if !self.is_shed() {
            self.shed_notify.notified().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Phase, Instant)> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An IO whose reads fail with `TimedOut` past the current deadline.
pub struct Guarded<I> {
    io: I,
    state: Arc<ConnState>,
    deadlines: Deadlines,
    /// The deadline of the current phase, and the phase it was set for.
    timer: Pin<Box<Sleep>>,
    timed: Option<Phase>,
}

impl<I> Guarded<I> {
    /// Until its first request begins, the connection has `deadlines.first`.
    pub fn new(io: I, state: Arc<ConnState>, deadlines: Deadlines) -> Self {
        Guarded {
            io,
            state,
            deadlines,
            timer: Box::pin(tokio::time::sleep(deadlines.first)),
            timed: Some(Phase::Idle),
        }
    }

    /// Re-arms the timer when the phase changed since it was set.
    fn arm(&mut self, phase: Phase) {
        if self.timed == Some(phase) {
            return;
        }
        self.timed = Some(phase);
        let after = match phase {
            Phase::Idle => self.deadlines.idle,
            Phase::Head => self.deadlines.header,
            Phase::Handled => return,
        };
        self.timer.as_mut().reset(Instant::now() + after);
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Guarded<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        let got = buf.filled().len() > before;
        let phase = {
            let mut phase = this.state.lock();
            if got && phase.0 == Phase::Idle {
                *phase = (Phase::Head, Instant::now());
            }
            phase.0
        };
        this.arm(phase);
        if result.is_pending() && phase != Phase::Handled {
            // Waiting on the client: the listener may shed the connection (`shed.rs`).
            // The waker first, then the flag: a shed between the two still wakes us.
            *this.state.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            if this.state.is_shed() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "shed at the connection limit while waiting on its client",
                )));
            }
        }
        if result.is_pending() && phase != Phase::Handled && this.timer.as_mut().poll(cx).is_ready()
        {
            let what = match phase {
                Phase::Head => "request headers did not arrive in time",
                _ => "connection idle for too long (or no first request in time)",
            };
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Guarded<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            // A response (HTTP/1.1, no pipelining): the next bytes begin a new request.
            let mut phase = this.state.lock();
            if phase.0 == Phase::Handled {
                *phase = (Phase::Idle, Instant::now());
            }
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A TLS handshake's transport: marks its connection busy once the client sent its first
/// bytes (a handshake under way is not shed; a silent one may be).
pub struct Spoken<I> {
    io: I,
    state: Arc<ConnState>,
    spoke: bool,
}

impl<I> Spoken<I> {
    pub fn new(io: I, state: Arc<ConnState>) -> Self {
        Spoken {
            io,
            state,
            spoke: false,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Spoken<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if !self.spoke && buf.filled().len() > before {
            self.spoke = true;
            self.state.spoke();
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Spoken<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn guarded(
        header: u64,
        idle: u64,
    ) -> (
        Guarded<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<ConnState>,
    ) {
        let (server, client) = tokio::io::duplex(1024);
        let state = ConnState::new();
        let deadlines = Deadlines {
            header: Duration::from_secs(header),
            first: Duration::from_secs(3),
            idle: Duration::from_secs(idle),
        };
        let g = Guarded::new(server, state.clone(), deadlines);
        (g, client, state)
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_asks_is_closed_at_the_first_request_timeout() {
        let (mut server, _client, _) = guarded(5, 120);
        let started = Instant::now();
        let mut buf = [0u8; 64];
        let err = server.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(3), "first, not idle");
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_headers_are_cut_at_the_header_timeout() {
        let (mut server, mut client, _) = guarded(5, 120);
        client
            .write_all(b"POST /mutate HTTP/1.1\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        let started = Instant::now();
        let err = server.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shed_connection_fails_its_waiting_read_at_once_but_not_its_clients_bytes() {
        let (mut server, mut client, state) = guarded(5, 120);
        let mut buf = [0u8; 64];
        // The client's bytes are already there: the read goes on.
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        state.shed();
        assert!(server.read(&mut buf).await.unwrap() > 0);
        assert_eq!(state.waiting(Instant::now()), Waiting::Shed);
        // Nothing more to read: the waiting read fails, long before any timeout.
        let started = Instant::now();
        let reading = tokio::spawn(async move { server.read(&mut buf).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let err = reading.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_waits_from_its_last_response_and_is_busy_in_between() {
        let (mut server, mut client, state) = guarded(5, 120);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            state.waiting(Instant::now()),
            Waiting::For(Duration::from_secs(2))
        );
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        state.handled();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(state.waiting(Instant::now()), Waiting::Busy);
        server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            state.waiting(Instant::now()),
            Waiting::For(Duration::from_millis(500))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_keep_alive_connection_lives_until_the_idle_timeout() {
        let (mut server, mut client, state) = guarded(5, 120);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        state.handled();
        // The handler takes longer than the header timeout: no deadline meanwhile.
        tokio::time::sleep(Duration::from_secs(30)).await;
        server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let started = Instant::now();
        let err = server.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(120),
            "idle, not header"
        );
    }
}

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
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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

/// Shared between the connection's IO and its service.
#[derive(Debug)]
pub struct ConnState {
    phase: Mutex<Phase>,
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
            phase: Mutex::new(Phase::Idle),
        })
    }

    /// The request's headers were parsed and it reached the service.
    pub fn handled(&self) {
        *self.lock() = Phase::Handled;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
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
            if got && *phase == Phase::Idle {
                *phase = Phase::Head;
            }
            *phase
        };
        this.arm(phase);
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
            if *phase == Phase::Handled {
                *phase = Phase::Idle;
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

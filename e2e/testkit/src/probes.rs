//! A listener under attack, as the host's and the controller's probe-port tests drive it
//! (security review R1, R9): connections from other loopback addresses that ask once and
//! then idle, and a kubelet's probe beside them.

use anyhow::{ensure, Context, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection from `from` (any 127.0.0.0/8 address) to `127.0.0.1:port`.
pub async fn tcp_from(from: Ipv4Addr, port: u16) -> Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    Ok(socket
        .connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await?)
}

/// Reads one HTTP response's head (to its blank line); its status code.
pub async fn response_code<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Result<u16> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        ensure!(n > 0, "closed before a response");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status in {text:?}"))
}

/// A connection from `from` that asks `/healthz` once (keep-alive) and then stays silent,
/// holding its connection as long as the server lets it (up to `cap`); how long it was held.
pub async fn ask_once_then_idle(from: Ipv4Addr, port: u16, cap: Duration) -> Result<Duration> {
    let started = Instant::now();
    let mut tcp = tcp_from(from, port).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n")
        .await?;
    response_code(&mut tcp).await?;
    let mut buf = [0u8; 64];
    let _ = tokio::time::timeout(cap, tcp.read(&mut buf)).await;
    Ok(started.elapsed())
}

/// A kubelet's probe: a fresh connection from 127.0.0.1, `Connection: close`; how long it
/// took to be answered 200, or `None` past 1 s (the probe's default timeout).
pub async fn probe(port: u16) -> Result<Option<Duration>> {
    let started = Instant::now();
    let asked = async {
        let mut tcp = tcp_from(Ipv4Addr::LOCALHOST, port).await?;
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            .await?;
        response_code(&mut tcp).await
    };
    match tokio::time::timeout(Duration::from_secs(1), asked).await {
        Ok(Ok(200)) => Ok(Some(started.elapsed())),
        Ok(Ok(code)) => anyhow::bail!("the probe was answered {code}"),
        Ok(Err(_)) | Err(_) => Ok(None),
    }
}

//! Fault injection on loopback: a TCP proxy that delays traffic, resets connections or
//! hangs them, and a kubeconfig that routes a process's API traffic through it.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the proxy does to each connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Added before forwarding each chunk, in both directions (chunks wait in turn:
    /// a busy stream falls further behind).
    pub delay: Duration,
    /// Each chunk from the server reaches the client this long after it arrived, chunks
    /// in flight together (a watch that lags by a fixed time, as a far or busy API
    /// server's does, without falling further behind).
    pub lag: Duration,
    /// Every `reset_every`-th connection (1-based; 0 = never) is cut after `reset_after`.
    pub reset_every: usize,
    pub reset_after: Duration,
}

/// Counters of what the proxy did, and a switch the test flips.
#[derive(Debug, Default)]
pub struct FaultStats {
    pub connections: AtomicUsize,
    pub resets: AtomicUsize,
    /// While set, a connection that carries data stops forwarding for good: its bytes are
    /// swallowed and the socket stays open, so requests on it hang (the network fault
    /// that timeouts exist for). Connections opened after it is cleared work again.
    pub hang: AtomicBool,
    /// Connections hung so far.
    pub hung: AtomicUsize,
    /// Milliseconds added before each chunk forwarded from the client to the server,
    /// on top of [`Faults::delay`], while set (a slow API path switched on and off).
    pub slow_ms: std::sync::atomic::AtomicU64,
    /// The next this many client-to-server chunks over 1 KiB (writes carrying an object,
    /// not GETs or watch requests) each wait `slow_large_ms` more: one slow write.
    pub slow_large: AtomicUsize,
    pub slow_large_ms: std::sync::atomic::AtomicU64,
}

/// Starts a proxy on a loopback port forwarding to `upstream` with `faults`.
pub async fn fault_proxy(
    upstream: SocketAddr,
    faults: Faults,
) -> Result<(SocketAddr, Arc<FaultStats>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(FaultStats::default());
    let shared = stats.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let n = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
            let reset = faults.reset_every > 0 && n.is_multiple_of(faults.reset_every);
            let stats = shared.clone();
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(upstream).await else {
                    return;
                };
                let relay = relay(inbound, outbound, faults, &stats);
                if reset {
                    if tokio::time::timeout(faults.reset_after, relay)
                        .await
                        .is_err()
                    {
                        stats.resets.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    relay.await;
                }
            });
        }
    });
    Ok((addr, stats))
}

/// Copies both ways, sleeping `delay` before each forwarded chunk (or, with a `lag`,
/// delivering the server's chunks `lag` late); dropping the future closes both sockets
/// (a reset from either side's point of view). A chunk seen while `stats.hang` is set
/// hangs the connection (see [`FaultStats::hang`]; with a `lag`, a client's chunk).
async fn relay(a: TcpStream, b: TcpStream, faults: Faults, stats: &FaultStats) {
    let (delay, lag) = (faults.delay, faults.lag);
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let dead = AtomicBool::new(false);
    match lag.is_zero() {
        true => {
            tokio::join!(
                pump(ar, bw, delay, stats, &dead, true),
                pump(br, aw, delay, stats, &dead, false)
            );
        }
        false => {
            tokio::join!(pump(ar, bw, delay, stats, &dead, true), lagged(br, aw, lag));
        }
    }
}

/// Forwards server-to-client chunks, each `lag` after it arrived.
async fn lagged(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    lag: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(4096);
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let due = tokio::time::Instant::now() + lag;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
    stats: &FaultStats,
    dead: &AtomicBool,
    to_server: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if stats.hang.load(Ordering::SeqCst) && !dead.swap(true, Ordering::SeqCst) {
            stats.hung.fetch_add(1, Ordering::Relaxed);
        }
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        let slow = match to_server {
            true => {
                let large = n > 1024
                    && stats
                        .slow_large
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| k.checked_sub(1))
                        .is_ok();
                let extra = match large {
                    true => stats.slow_large_ms.load(Ordering::SeqCst),
                    false => 0,
                };
                Duration::from_millis(stats.slow_ms.load(Ordering::SeqCst) + extra)
            }
            false => Duration::ZERO,
        };
        tokio::time::sleep(delay + slow).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if !dead.load(Ordering::SeqCst) {
        let _ = to.shutdown().await;
    }
}

/// The API server's address from a kubeconfig (`https://127.0.0.1:PORT`).
pub fn api_server_addr(kubeconfig: &Path) -> Result<SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .context("no server in the kubeconfig")?
        .trim()
        .trim_start_matches("https://")
        .to_string();
    server
        .parse()
        .with_context(|| format!("server address {server:?}"))
}

/// A copy of `kubeconfig` whose server is `via` (same credentials and CA; the API
/// server's certificate is valid for 127.0.0.1 on any port).
pub fn kubeconfig_via(kubeconfig: &Path, via: SocketAddr) -> Result<PathBuf> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let upstream = api_server_addr(kubeconfig)?;
    let rewritten = text.replace(&upstream.to_string(), &via.to_string());
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", crate::unique_name("via")));
    std::fs::write(&path, rewritten)?;
    Ok(path)
}

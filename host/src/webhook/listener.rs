//! The listeners: connections accepted under a global and a per-peer limit that shed idle
//! connections instead of refusing new ones (`connections.rs`), served over TLS or plain
//! HTTP under their deadlines (`guard.rs`), drained at shutdown.

use super::connections::Connections;
use super::{guard, PeerCertificate};
use anyhow::{Context, Result};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Connection limits of a listener.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// A request's headers must arrive within this of its first byte (slowloris); a
    /// connection's TLS handshake too.
    pub header_timeout: Duration,
    /// A connection may wait this long for its next request (longer than the API
    /// server's 90 s, so that the client closes idle connections, not us: `guard.rs`).
    pub idle_timeout: Duration,
    /// A new connection must begin its first request (its TLS handshake included)
    /// within this.
    pub first_request_timeout: Duration,
    /// Open connections of one peer address: past it, the peer's longest-idle connection
    /// is closed (never one with a request in flight; 0: no limit).
    pub max_connections_per_peer: usize,
    /// Open connections: at it, the longest-idle connection of the peer with the most idle
    /// ones is closed; with none idle, new ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// After shutdown, in-flight requests may finish for this long.
    pub drain: Duration,
    /// Client certificates are asked for (`--client-ca-file`): a connection that
    /// presented none may wait only `first_request_timeout` between requests (only the
    /// API server, which has one, keeps connections for `idle_timeout`).
    pub client_auth: bool,
}

impl ServeOptions {
    /// The health and metrics port's limits (issue #58, R1): its callers — the kubelet's
    /// probes, Prometheus — open a connection per request or re-dial idempotent GETs, so
    /// a few per peer, short idle and first-request timeouts take nothing from them, and
    /// pods that hold connections open there cannot starve the probes.
    pub fn for_health(&self) -> Self {
        ServeOptions {
            header_timeout: self.header_timeout.min(HEALTH_TIMEOUT),
            idle_timeout: HEALTH_IDLE,
            first_request_timeout: HEALTH_TIMEOUT,
            max_connections_per_peer: HEALTH_PER_PEER,
            max_connections: HEALTH_MAX,
            drain: self.drain,
            client_auth: false,
        }
    }
}

const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
const HEALTH_IDLE: Duration = Duration::from_secs(10);
const HEALTH_PER_PEER: usize = 8;
/// The health port's connections at most (counted in the memory-fit check).
pub const HEALTH_MAX: usize = 64;

/// A connection's IO under its deadlines (`guard.rs`).
fn guarded<I>(
    io: I,
    state: &Arc<guard::ConnState>,
    options: &ServeOptions,
    idle: Duration,
) -> hyper_util::rt::TokioIo<guard::Guarded<I>> {
    hyper_util::rt::TokioIo::new(guard::Guarded::new(
        io,
        state.clone(),
        guard::Deadlines {
            header: options.header_timeout,
            first: options.first_request_timeout,
            idle,
        },
    ))
}

/// hyper's read buffer per connection at most (its default is ~400 KiB): request heads
/// are small and bodies stream through it. Counted in the memory-fit check
/// (`limits::CONNECTION_KIB`).
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown`
/// resolves, then lets in-flight requests finish (bounded by `options.drain`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
    options: ServeOptions,
) -> Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Connections::new(options.max_connections, options.max_connections_per_peer);
    // Peers over their limit are brought back to it even when no connection arrives.
    let sweeper = tokio::spawn({
        let connections = connections.clone();
        async move {
            let mut every = tokio::time::interval(super::connections::SWEEP);
            loop {
                every.tick().await;
                connections.sweep();
            }
        }
    });
    tokio::pin!(shutdown);
    loop {
        // Room first: at the cap an idle connection is shed, or (none idle) connections
        // queue in the backlog instead of each holding a task, a TLS state and buffers.
        tokio::select! {
            () = connections.room() => {}
            () = &mut shutdown => break,
        }
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // One peer cannot hold the connection limit: past its own, its longest-idle
        // connection goes.
        let state = connections.new_state();
        let registered = connections.register(peer.ip(), state.clone());
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        let handshake_timeout = options.header_timeout.min(options.first_request_timeout);
        tokio::spawn(async move {
            let _registered = registered;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.max_buf_size(READ_BUFFER_BYTES);
            let with_peer = |presented: Option<Vec<String>>| {
                let state = state.clone();
                let tagged = tower::ServiceExt::map_request(
                    router,
                    move |mut r: hyper::Request<hyper::body::Incoming>| {
                        state.handled();
                        r.extensions_mut()
                            .insert(PeerCertificate(presented.clone()));
                        r
                    },
                );
                hyper_util::service::TowerToHyperService::new(tagged)
            };
            let Some(acceptor) = acceptor else {
                let service = with_peer(None);
                let idle = options.idle_timeout;
                let conn = http.serve_connection(guarded(tcp, &state, &options, idle), service);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "connection: {e}");
                }
                return;
            };
            let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
            let stream = match handshake.await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            // rustls verified the certificate against the client CA when one was sent.
            let presented = stream.get_ref().1.peer_certificates().map(|chain| {
                chain
                    .first()
                    .map(|c| crate::tls::client_auth::names_of(c))
                    .unwrap_or_default()
            });
            let idle = if options.client_auth && presented.is_none() {
                options.first_request_timeout
            } else {
                options.idle_timeout
            };
            let service = with_peer(presented);
            let conn = http.serve_connection(guarded(stream, &state, &options, idle), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
    sweeper.abort();
    tracing::info!("shutting down: draining in-flight requests");
    if tokio::time::timeout(options.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {:?}; closing", options.drain);
    }
    Ok(())
}

/// Binds `addr`, reporting a clear error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .with_context(|| format!("listening on {addr}"))?;
    socket
        .set_reuseaddr(true)
        .and_then(|()| socket.bind(addr))
        .and_then(|()| socket.listen(BACKLOG))
        .with_context(|| format!("listening on {addr}"))
}

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). The
/// default of 128 overflows under a burst of connections (an API server's burst, or
/// attackers'): the kernel then drops the handshakes' last packets and a client's
/// connection hangs half-open, out of reach of the per-peer limit.
const BACKLOG: u32 = 1024;

#[cfg(test)]
mod tests;

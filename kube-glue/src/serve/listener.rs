//! The listeners: connections accepted under a global and a per-peer limit, served over
//! TLS or plain HTTP under their deadlines (`guard.rs`), drained at shutdown.

use super::shed::{Connections, Parked};
use super::{guard, PeerAddr, PeerCertificate, READ_BUFFER_BYTES};
use anyhow::{Context, Result};
use axum::Router;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
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
    /// Open connections of one peer address at most (more are closed at once; 0: no
    /// limit, the default: one API server's burst opens hundreds).
    pub max_connections_per_peer: usize,
    /// Open connections; at the cap the heaviest peer's longest-waiting connection is
    /// shed, new ones waiting accepted meanwhile ([`Parked`], `shed.rs`).
    pub max_connections: usize,
    /// A connection waiting on its client may be shed at the cap only after this.
    pub shed_after: Duration,
    /// After shutdown, in-flight requests may finish for this long.
    pub drain: Duration,
}

impl ServeOptions {
    /// A port for probes and scrapes (the host's health port, the controller's metrics
    /// port): probes open a connection each, scrapes keep one, nothing there waits long.
    pub fn probes(max_connections: usize) -> Self {
        ServeOptions {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            first_request_timeout: Duration::from_secs(2),
            max_connections_per_peer: 0,
            max_connections,
            // The kubelet's probe gives up after 1 s (its default timeout).
            shed_after: Duration::from_millis(250),
            drain: Duration::from_secs(15),
        }
    }
}

/// A connection's IO under its deadlines (`guard.rs`).
fn guarded<I>(
    io: I,
    state: &Arc<guard::ConnState>,
    options: &ServeOptions,
) -> hyper_util::rt::TokioIo<guard::Guarded<I>> {
    hyper_util::rt::TokioIo::new(guard::Guarded::new(
        io,
        state.clone(),
        guard::Deadlines {
            header: options.header_timeout,
            first: options.first_request_timeout,
            idle: options.idle_timeout,
        },
    ))
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown`
/// resolves, then lets in-flight requests finish (bounded by `options.drain`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
    options: ServeOptions,
    shed_metric: prometheus_client::metrics::counter::Counter,
) -> Result<()> {
    let server = Server {
        connections: Connections::new(options.max_connections, options.shed_after),
        acceptor: tls.map(TlsAcceptor::from),
        router,
        graceful: hyper_util::server::graceful::GracefulShutdown::new(),
        options,
    };
    let connections = server.connections.clone();
    let peers = Peers::new(options.max_connections_per_peer);
    // Waiting connections: a few per allowed one (each only a socket), for the header
    // timeout at most (the API server's webhook timeout is about that).
    let mut parked = Parked::new(
        options.max_connections.saturating_mul(4),
        options.header_timeout,
    );
    tokio::pin!(shutdown);
    loop {
        // Serve waiting connections while there is room, the least-connected peer first.
        let mut wait = Duration::ZERO;
        while !parked.is_empty() {
            if !connections.has_room() {
                // At the cap: shed one connection waiting on its client (`shed.rs`).
                let (shed, after) = connections.shed_one();
                if shed {
                    shed_metric.inc();
                }
                wait = after;
                break;
            }
            let (next, expired) = parked.next(Instant::now(), |p| connections.open_of(p));
            if expired > 0 {
                shed_metric.inc_by(expired as u64);
                tracing::debug!(
                    expired,
                    "connections closed: waited past the header timeout for room"
                );
            }
            let Some((_, (tcp, peer, peer_slot))) = next else {
                break;
            };
            server.spawn(tcp, peer, peer_slot);
        }
        // Accepting never stops: a flood of one peer's connections must not queue the
        // others behind it in the kernel's first-come backlog.
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = connections.closed(), if !parked.is_empty() => continue,
            () = tokio::time::sleep(wait), if !parked.is_empty() => continue,
            () = &mut shutdown => break,
        };
        // Past a peer's own limit (when set), its connection is closed at once.
        let Some(peer_slot) = peers.take(peer.ip()) else {
            tracing::debug!(%peer, "connection closed: the peer's connection limit is reached");
            continue;
        };
        let dropped = parked.push(peer.ip(), (tcp, peer, peer_slot), Instant::now(), |p| {
            connections.open_of(p)
        });
        if dropped > 0 {
            shed_metric.inc_by(dropped as u64);
        }
    }
    tracing::info!("shutting down: draining in-flight requests");
    if tokio::time::timeout(options.drain, server.graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {:?}; closing", options.drain);
    }
    Ok(())
}

/// What every connection of a listener is served with.
struct Server {
    connections: Arc<Connections>,
    acceptor: Option<TlsAcceptor>,
    router: Router,
    graceful: hyper_util::server::graceful::GracefulShutdown,
    options: ServeOptions,
}

impl Server {
    /// Serves one accepted connection in a task of its own, counted in `connections`.
    fn spawn(&self, tcp: tokio::net::TcpStream, peer: SocketAddr, peer_slot: PeerSlot) {
        let options = self.options;
        let state = guard::ConnState::new();
        let slot = self.connections.register(peer.ip(), state.clone());
        let acceptor = self.acceptor.clone();
        let router = self.router.clone();
        let watcher = self.graceful.watcher();
        let handshake_timeout = options.header_timeout.min(options.first_request_timeout);
        tokio::spawn(async move {
            let _slot = slot;
            let _peer_slot = peer_slot;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.max_buf_size(READ_BUFFER_BYTES);
            let with_peer = |presented: Option<Vec<u8>>| {
                let state = state.clone();
                let tagged = tower::ServiceExt::map_request(
                    router,
                    move |mut r: hyper::Request<hyper::body::Incoming>| {
                        state.handled();
                        r.extensions_mut()
                            .insert(PeerCertificate(presented.clone()));
                        r.extensions_mut().insert(PeerAddr(peer.ip()));
                        r
                    },
                );
                hyper_util::service::TowerToHyperService::new(tagged)
            };
            let Some(acceptor) = acceptor else {
                let service = with_peer(None);
                let conn = http.serve_connection(guarded(tcp, &state, &options), service);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "connection: {e}");
                }
                return;
            };
            // A handshake whose client has sent nothing may be shed; one under way is
            // bounded by its timeout.
            let tcp = guard::Spoken::new(tcp, state.clone());
            let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                    Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                },
                () = state.shed_requested() => {
                    return tracing::debug!(%peer, "shed before its TLS handshake began");
                }
            };
            state.handshake_done();
            // rustls verified the certificate against the client CA when one was sent.
            let presented = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|c| c.as_ref().to_vec());
            let service = with_peer(presented);
            let conn = http.serve_connection(guarded(stream, &state, &options), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
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

/// Open connections per peer address, at most `limit` each (0: no limit).
struct Peers {
    limit: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a peer; counted down when dropped.
struct PeerSlot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Peers {
    fn new(limit: usize) -> Self {
        Peers {
            limit,
            open: Arc::default(),
        }
    }

    /// A slot for a connection of `ip`, or `None` when it has `limit` open already. The
    /// map holds only peers with open connections (at most the listener's limit).
    fn take(&self, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if self.limit > 0 && *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            ip,
            open: self.open.clone(),
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_limit_and_slots_come_back() {
        let peers = Peers::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = peers.take(a).unwrap();
        let _second = peers.take(a).unwrap();
        assert!(
            peers.take(a).is_none(),
            "a third connection of the same peer"
        );
        assert!(peers.take(b).is_some(), "another peer has its own");
        drop(first);
        assert!(
            peers.take(a).is_some(),
            "a closed connection frees its slot"
        );
        assert!(Peers::new(0).take(a).is_some(), "0: no limit");
    }

    #[test]
    fn peers_without_connections_are_forgotten() {
        let peers = Peers::new(4);
        for i in 0..100u8 {
            drop(peers.take(IpAddr::from([10, 0, 1, i])).unwrap());
        }
        assert!(peers.open.lock().unwrap().is_empty());
    }
}

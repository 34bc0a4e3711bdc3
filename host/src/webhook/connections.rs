//! The open connections of a listener (issue #58, R1): which peer holds each and which are
//! idle, so that no caller can hold a listener's connections and no limit drops what the
//! API server sends. A limit never refuses a new connection and never closes one with a
//! request in flight:
//! * a peer past `per_peer` open connections gives up its longest-idle ones (at once when
//!   it opens another, else at the next sweep, every [`SWEEP`]);
//! * at `max` open, the peer with the most idle connections gives up its longest-idle one;
//!   with none idle anywhere (every connection busy with a request, each under its
//!   deadlines: `guard.rs`, `body.rs`), `accept()` waits for one to end or turn idle, and
//!   new connections wait in the kernel's backlog meanwhile.
//!
//! Idle means waiting for a request past a grace: [`MIN_IDLE`] after a response,
//! [`FIRST_GRACE`] after opening for a connection that has not asked anything yet (its
//! handshake and first request may still be on their way).
//!
//! So an API server's burst — one address, one connection per admission in flight (up to
//! its `--max-requests-inflight` + `--max-mutating-requests-inflight`, 600 by default) — is
//! answered whole: its busy and new connections are never closed, and it keeps few idle
//! ones (client-go's transport keeps at most 25 idle connections per host and reuses the
//! most recently used first, so its longest-idle one is the one it is least likely to send
//! on). A pod that opens connections and leaves them idle loses them to the next comer —
//! the kubelet's probe, the API server's next connection — or to the sweep.

use super::guard::ConnState;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A connection that answered a request is shed only once idle this long: a response
/// just written is flushed before its connection may be closed.
const MIN_IDLE: Duration = Duration::from_millis(100);
/// A connection that has not asked anything yet is shed only this long after it opened:
/// an honest client's handshake and first request come well within it (a connection shed
/// while still in its handshake would fail that first request).
const FIRST_GRACE: Duration = Duration::from_secs(1);
/// How often peers over their limit are brought back to it when no new connection
/// arrives to do it.
pub const SWEEP: Duration = Duration::from_millis(250);

type Conns = Vec<(u64, Arc<ConnState>)>;

/// The connections of one listener.
pub struct Connections {
    max: usize,
    per_peer: usize,
    open: Mutex<Open>,
    /// Told when a connection closes or turns idle (`guard.rs`).
    changed: Arc<Notify>,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    total: usize,
    /// Only peers with open connections (at most `total` entries).
    by_peer: HashMap<IpAddr, Conns>,
}

/// One open connection; removed from the registry when dropped.
pub struct Registered {
    id: u64,
    ip: IpAddr,
    connections: Arc<Connections>,
}

impl Connections {
    /// At most `max` connections (at least 1), `per_peer` of one address (0: no limit).
    pub fn new(max: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Connections {
            max: max.max(1),
            per_peer,
            open: Mutex::default(),
            changed: Arc::new(Notify::new()),
        })
    }

    /// The state of a new connection: its turning idle wakes [`Self::room`].
    pub fn new_state(&self) -> Arc<ConnState> {
        ConnState::with_notify(Some(self.changed.clone()))
    }

    /// Waits until a connection may be accepted: below `max`, or once an idle connection
    /// of the peer holding the most idle ones has been shed.
    pub async fn room(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let open = self.lock();
                let pending = open.total.saturating_sub(self.max);
                // Connections shed but not yet closed make room already.
                let shed: usize = open.by_peer.values().map(shed_count).sum();
                if open.total < self.max || shed > pending || shed_most_idle(open.by_peer.values())
                {
                    return;
                }
            }
            // A connection closing or turning idle wakes this; one still in its grace
            // becomes sheddable without a wake-up.
            let _ = tokio::time::timeout(MIN_IDLE, changed).await;
        }
    }

    /// Registers a connection of `ip`. Past the peer's limit, its longest-idle connection
    /// is shed first (none when all are busy or new: a busy peer is not refused).
    pub fn register(self: &Arc<Self>, ip: IpAddr, state: Arc<ConnState>) -> Registered {
        let mut open = self.lock();
        if let Some(conns) = open.by_peer.get(&ip) {
            if self.over_limit(conns) && shed_most_idle(std::iter::once(conns)) {
                tracing::debug!(%ip, "closed the peer's longest-idle connection: its limit is reached");
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        open.total += 1;
        open.by_peer.entry(ip).or_default().push((id, state));
        Registered {
            id,
            ip,
            connections: self.clone(),
        }
    }

    /// Brings every peer over its limit back to it, shedding its longest-idle connections
    /// past their grace (as many as there are). How many were shed.
    pub fn sweep(&self) -> usize {
        let open = self.lock();
        let mut total = 0;
        for (ip, conns) in &open.by_peer {
            let excess = conns
                .len()
                .saturating_sub(self.per_peer + shed_count(conns));
            if self.per_peer == 0 || excess == 0 {
                continue;
            }
            let mut idle = sheddable(conns);
            idle.sort_by_key(|(since, _)| *since);
            let n = idle
                .iter()
                .filter(|(_, s)| s.shed_if_idle())
                .take(excess)
                .count();
            if n > 0 {
                tracing::debug!(%ip, n, "closed idle connections of a peer over its limit");
            }
            total += n;
        }
        total
    }

    /// Open connections now.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// A new connection would put the peer past its limit (counting none already shed).
    fn over_limit(&self, conns: &Conns) -> bool {
        self.per_peer > 0 && conns.len() - shed_count(conns) >= self.per_peer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn shed_count(conns: &Conns) -> usize {
    conns.iter().filter(|(_, s)| s.is_shed()).count()
}

/// Sheds the longest-idle connection past its grace of the peer (among `peers`) with the
/// most such connections. Whether one was shed.
fn shed_most_idle<'a>(peers: impl Iterator<Item = &'a Conns>) -> bool {
    let mut candidates: Vec<_> = peers.map(sheddable).filter(|c| !c.is_empty()).collect();
    // The peer with the most idle connections first, its longest-idle one first. One that
    // turned busy since it was looked at refuses, and the next is tried.
    candidates.sort_by_key(|idle| std::cmp::Reverse(idle.len()));
    candidates.into_iter().any(|mut idle| {
        idle.sort_by_key(|(since, _)| *since);
        idle.iter().any(|(_, s)| s.shed_if_idle())
    })
}

/// The idle connections among `conns` past their grace ([`MIN_IDLE`] after a response,
/// [`FIRST_GRACE`] before the first request), with the time they turned idle.
fn sheddable(conns: &Conns) -> Vec<(Instant, Arc<ConnState>)> {
    let now = Instant::now();
    conns
        .iter()
        .filter_map(|(_, s)| {
            let (since, served) = s.idle_since()?;
            let grace = if served { MIN_IDLE } else { FIRST_GRACE };
            (now.duration_since(since) >= grace).then(|| (since, s.clone()))
        })
        .collect()
}

impl Drop for Registered {
    fn drop(&mut self) {
        {
            let mut open = self.connections.lock();
            if let Some(conns) = open.by_peer.get_mut(&self.ip) {
                conns.retain(|(id, _)| *id != self.id);
                if conns.is_empty() {
                    open.by_peer.remove(&self.ip);
                }
            }
            open.total = open.total.saturating_sub(1);
        }
        self.connections.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests;

//! The connection limit without a stopped `accept()` (issue #58 R1, issue #66).
//!
//! A listener holds at most `max` connections. Blocking `accept()` at the cap let anyone
//! who opens connections and keeps them idle — one request then silence, or nothing at
//! all — stop the health port's probes (every host restarts) and the webhook's admissions
//! (`failurePolicy: Fail` refuses every pod). Closing a peer's connections past a
//! per-peer cap at once refused the API server's own bursts instead: a 600-pod scale-in
//! opens more than 256 connections from one address, and each closed one was a failed
//! admission.
//!
//! So at the cap the listener makes room by shedding, and only where it is safe:
//! - only from the **heaviest peer** (the address holding the most connections, busy ones
//!   included): a peer with fewer connections than the one filling the listener is never
//!   shed for it — the API server is not shed while an attacker holds more;
//! - only a connection **waiting on its client**: idle between requests, or before its
//!   first (its TLS handshake included, when its client has sent nothing), or with
//!   request headers still unfinished — never one with a request in flight;
//! - only one that has waited at least `min_wait`: a client about to reuse its idle
//!   connection reuses its most recent one (Go's transport takes the newest idle
//!   connection), so the longest-waiting is shed, and none that was busy a moment ago.
//!
//! When the heaviest peer has no such connection yet, newcomers wait — for the heaviest
//! peer's connections to age, or for one to close. When it has none at all (every
//! connection busy), the next heaviest is considered.
//!
//! Newcomers wait accepted, in [`Parked`], not in the kernel's backlog: the backlog is
//! first come first served, so a peer reconnecting as fast as it is shed queued every probe
//! behind hundreds of its own connections (13 of 30 probes answered within 1 s). The next
//! one served is the oldest of the peer with the fewest open connections.

use super::guard::{ConnState, Waiting};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often a listener at its cap with nothing to shed looks again.
const RECHECK: Duration = Duration::from_millis(100);

/// The open connections of one listener.
pub struct Connections {
    max: usize,
    min_wait: Duration,
    open: Mutex<HashMap<u64, Open>>,
    next_id: AtomicU64,
    /// A connection closed (the accept loop may go on).
    closed: Notify,
}

struct Open {
    peer: IpAddr,
    state: Arc<ConnState>,
}

/// One open connection; removed from its listener's count when dropped.
pub struct Slot {
    id: u64,
    owner: Arc<Connections>,
}

impl Connections {
    pub fn new(max: usize, min_wait: Duration) -> Arc<Self> {
        Arc::new(Connections {
            max: max.max(1),
            min_wait,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            closed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open connections.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Counts a connection of `peer`, accepted, with `state`.
    pub fn register(self: &Arc<Self>, peer: IpAddr, state: Arc<ConnState>) -> Slot {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Open { peer, state });
        Slot {
            id,
            owner: self.clone(),
        }
    }

    /// Whether a connection may be served now.
    pub fn has_room(&self) -> bool {
        self.lock().len() < self.max
    }

    /// Open connections of `peer`.
    pub fn open_of(&self, peer: IpAddr) -> usize {
        self.lock().values().filter(|o| o.peer == peer).count()
    }

    /// At the cap, sheds one connection where it is safe (module docs); returns whether it
    /// shed one and how long to wait before asking again.
    pub fn shed_one(&self) -> (bool, Duration) {
        let open = self.lock();
        if open.len() < self.max {
            return (false, Duration::ZERO);
        }
        let now = Instant::now();
        let views: Vec<View> = open
            .iter()
            .map(|(&id, o)| View {
                id,
                peer: o.peer,
                waiting: o.state.waiting(now),
            })
            .collect();
        match choose(&views, self.min_wait) {
            Choice::Shed(id) => {
                if let Some(o) = open.get(&id) {
                    o.state.shed();
                }
                (true, RECHECK)
            }
            Choice::Wait(d) => (false, d.min(RECHECK)),
            Choice::Nothing => (false, RECHECK),
        }
    }

    /// Resolves when a connection closes.
    pub async fn closed(&self) {
        self.closed.notified().await
    }
}

/// Accepted connections not served yet (the listener at its cap). `accept()` never stops,
/// so that the kernel's backlog, which is first come first served, never queues a probe
/// or the API server behind a flood of one peer's reconnections: the next connection
/// served is the oldest of the peer with the fewest open connections. A connection waits
/// at most `limit` (its client has given up by then); past `max` waiting, the oldest of
/// the peer holding the most (open and waiting) is closed.
pub struct Parked<T> {
    max: usize,
    limit: Duration,
    by_peer: HashMap<IpAddr, VecDeque<(Instant, T)>>,
    len: usize,
}

impl<T> Parked<T> {
    pub fn new(max: usize, limit: Duration) -> Self {
        Parked {
            max: max.max(1),
            limit,
            by_peer: HashMap::new(),
            len: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Parks `conn` of `peer`; returns the connections closed to make room for it.
    pub fn push(
        &mut self,
        peer: IpAddr,
        conn: T,
        now: Instant,
        open_of: impl Fn(IpAddr) -> usize,
    ) -> usize {
        let mut dropped = 0;
        if self.len >= self.max {
            let heaviest = self
                .by_peer
                .iter()
                .map(|(p, q)| (open_of(*p) + q.len(), std::cmp::Reverse(*p)))
                .max()
                .map(|(_, std::cmp::Reverse(p))| p);
            if let Some(p) = heaviest {
                if self.pop(p).is_some() {
                    dropped += 1;
                }
            }
        }
        self.by_peer.entry(peer).or_default().push_back((now, conn));
        self.len += 1;
        dropped
    }

    /// The next connection to serve: the oldest of the peer with the fewest open
    /// connections (ties: the one waiting longest), after those waiting past `limit` are
    /// closed (their count is returned too).
    pub fn next(
        &mut self,
        now: Instant,
        open_of: impl Fn(IpAddr) -> usize,
    ) -> (Option<(IpAddr, T)>, usize) {
        let mut expired = 0;
        for q in self.by_peer.values_mut() {
            while q
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.limit)
            {
                q.pop_front();
                self.len -= 1;
                expired += 1;
            }
        }
        self.by_peer.retain(|_, q| !q.is_empty());
        let lightest = self
            .by_peer
            .iter()
            .filter_map(|(p, q)| Some((open_of(*p), q.front()?.0, *p)))
            .min()
            .map(|(_, _, p)| p);
        (lightest.and_then(|p| self.pop(p).map(|c| (p, c))), expired)
    }

    fn pop(&mut self, peer: IpAddr) -> Option<T> {
        let q = self.by_peer.get_mut(&peer)?;
        let (_, conn) = q.pop_front()?;
        self.len -= 1;
        if q.is_empty() {
            self.by_peer.remove(&peer);
        }
        Some(conn)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.owner.lock().remove(&self.id);
        self.owner.closed.notify_one();
    }
}

/// A connection as the choice sees it.
#[derive(Clone, Copy, Debug)]
struct View {
    id: u64,
    peer: IpAddr,
    waiting: Waiting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    /// Shed this connection.
    Shed(u64),
    /// The heaviest peer's longest-waiting connection may be shed after this.
    Wait(Duration),
    /// Every connection is busy (or already shed).
    Nothing,
}

/// The connection to shed at the cap (module docs): the longest-waiting of the heaviest
/// peer's connections that waited `min_wait`; peers whose connections are all busy are
/// passed over.
fn choose(open: &[View], min_wait: Duration) -> Choice {
    let mut weight: HashMap<IpAddr, usize> = HashMap::new();
    for v in open {
        *weight.entry(v.peer).or_default() += 1;
    }
    let mut peers: Vec<(IpAddr, usize)> = weight.into_iter().collect();
    // Heaviest first; ties by address, so the choice does not depend on the map's order.
    peers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (peer, _) in peers {
        let longest = open
            .iter()
            .filter(|v| v.peer == peer)
            .filter_map(|v| match v.waiting {
                Waiting::For(d) => Some((d, v.id)),
                Waiting::Busy | Waiting::Shed => None,
            })
            .max();
        match longest {
            Some((d, id)) if d >= min_wait => return Choice::Shed(id),
            Some((d, _)) => return Choice::Wait(min_wait - d),
            None => continue,
        }
    }
    Choice::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(1);

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn view(id: u64, peer: u8, waiting: Waiting) -> View {
        View {
            id,
            peer: ip(peer),
            waiting,
        }
    }

    fn secs(s: f64) -> Waiting {
        Waiting::For(Duration::from_secs_f64(s))
    }

    #[test]
    fn the_heaviest_peers_longest_waiting_connection_is_shed() {
        type Case = (&'static str, Vec<View>, Choice);
        let cases: Vec<Case> = vec![
            (
                "the attacker holds more: its longest-idle goes",
                vec![
                    view(1, 1, secs(30.0)),
                    view(2, 2, secs(2.0)),
                    view(3, 2, secs(5.0)),
                ],
                Choice::Shed(3),
            ),
            (
                "the heaviest peer's connections are young: wait for them, do not shed the other's",
                vec![
                    view(1, 1, secs(30.0)),
                    view(2, 2, secs(0.25)),
                    view(3, 2, secs(0.5)),
                ],
                Choice::Wait(Duration::from_millis(500)),
            ),
            (
                "the heaviest peer is all busy: the next one's",
                vec![
                    view(1, 1, secs(3.0)),
                    view(2, 2, Waiting::Busy),
                    view(3, 2, Waiting::Busy),
                ],
                Choice::Shed(1),
            ),
            (
                "already shed: not again",
                vec![view(1, 1, Waiting::Shed), view(2, 1, Waiting::Busy)],
                Choice::Nothing,
            ),
            (
                "every connection busy: nothing",
                vec![view(1, 1, Waiting::Busy), view(2, 2, Waiting::Busy)],
                Choice::Nothing,
            ),
            (
                "a tie: the lower address",
                vec![view(1, 2, secs(9.0)), view(2, 1, secs(2.0))],
                Choice::Shed(2),
            ),
        ];
        for (what, open, want) in cases {
            assert_eq!(choose(&open, MIN), want, "{what}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_a_young_idle_connection_waits_an_old_one_is_shed_a_busy_one_never() {
        let conns = Connections::new(2, MIN);
        let busy = ConnState::new();
        busy.handled();
        let idle = ConnState::new();
        let first = conns.register(ip(1), busy.clone());
        let second = conns.register(ip(1), idle.clone());
        assert!(!conns.has_room());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(conns.shed_one(), (false, Duration::from_millis(100)));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(conns.shed_one().0);
        assert!(idle.is_shed(), "idle for 1.2 s at the cap");
        assert!(!busy.is_shed(), "a request in flight is never shed");
        drop(second);
        assert!(conns.has_room());
        assert_eq!(conns.open_of(ip(1)), 1);
        drop(first);
        assert_eq!(conns.len(), 0);
    }

    #[test]
    fn the_lightest_peer_is_served_first_and_the_heaviest_gives_way() {
        let now = Instant::now();
        let open = |p: IpAddr| if p == ip(9) { 50 } else { 0 };
        let mut parked = Parked::new(3, Duration::from_secs(10));
        // A flood from .9 (50 open) parks first; the probe from .1 comes last.
        assert_eq!(parked.push(ip(9), "flood-1", now, open), 0);
        assert_eq!(parked.push(ip(9), "flood-2", now, open), 0);
        assert_eq!(parked.push(ip(1), "probe", now, open), 0);
        // Full: the heaviest peer's oldest gives way.
        assert_eq!(parked.push(ip(9), "flood-3", now, open), 1);
        assert_eq!(parked.next(now, open), (Some((ip(1), "probe")), 0));
        assert_eq!(parked.next(now, open), (Some((ip(9), "flood-2")), 0));
        // Waiting past the limit: closed, not served.
        let later = now + Duration::from_secs(11);
        assert_eq!(parked.next(later, open), (None, 1));
        assert!(parked.is_empty());
    }
}

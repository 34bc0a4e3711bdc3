//! Reconciles coalesced per WorkloadSpread during a burst (issue #28): after a status
//! write, the next reconcile waits until `interval` has passed and then writes
//! everything that changed meanwhile at once. A pod burst thus costs about one status
//! write — and one computation of the status — per WorkloadSpread per interval instead
//! of one per pod event (deferring only the write still recomputed the status for every
//! pod event: ~2 ms of controller CPU per admitted pod in a 200-pod burst).
//!
//! Deferring is safe for exactness: until the controller writes, the status keeps the
//! host's claims and the pods it already counted, so admissions see the subsets at
//! least as full as they are (a slower controller, which the counter protocol
//! tolerates: `docs/counter-protocol.md`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The last status write per WorkloadSpread (namespace, name); entries older than the
/// interval are dropped on every use, so the map holds only the WorkloadSpreads written
/// within the last interval.
pub struct StatusPacing {
    interval: Duration,
    written: Mutex<HashMap<(String, String), Instant>>,
}

impl StatusPacing {
    /// `interval` zero writes at once, every time.
    pub fn new(interval: Duration) -> Self {
        StatusPacing {
            interval,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// How long a status write for `key` must still wait (`None`: write now).
    pub fn wait(&self, key: &(String, String), now: Instant) -> Option<Duration> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.retain(|_, at| now.saturating_duration_since(*at) < self.interval);
        let at = written.get(key)?;
        Some(self.interval - now.saturating_duration_since(*at))
    }

    /// A status write for `key` happened at `now`.
    pub fn wrote(&self, key: (String, String), now: Instant) {
        if self.interval.is_zero() {
            return;
        }
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.insert(key, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> (String, String) {
        ("ns".into(), name.into())
    }

    #[test]
    fn a_write_within_the_interval_waits_for_its_end() {
        let pacing = StatusPacing::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(pacing.wait(&key("a"), t0), None);
        pacing.wrote(key("a"), t0);
        let t1 = t0 + Duration::from_millis(300);
        assert_eq!(pacing.wait(&key("a"), t1), Some(Duration::from_millis(700)));
        // Another WorkloadSpread is not held back.
        assert_eq!(pacing.wait(&key("b"), t1), None);
        // Once the interval has passed the entry is gone and the write goes at once.
        let t2 = t0 + Duration::from_secs(1);
        assert_eq!(pacing.wait(&key("a"), t2), None);
        assert!(pacing.written.lock().unwrap().is_empty());
    }

    #[test]
    fn zero_interval_never_waits() {
        let pacing = StatusPacing::new(Duration::ZERO);
        let t0 = Instant::now();
        pacing.wrote(key("a"), t0);
        assert_eq!(pacing.wait(&key("a"), t0), None);
    }
}

//! How long a failed reconcile waits before it is tried again, by what failed:
//!
//! * `NotLeader`: after [`BASE`], without doubling. A replica that lost its Lease for
//!   good stops and the next leader reconciles every WorkloadSpread afresh; but a renewal
//!   that lands late (its call slower than the renew deadline) gives the Lease back to a
//!   replica that keeps running, and the spreads refused meanwhile must not wait for a
//!   watch event to be reconciled again (their timed work: expiring placeholders,
//!   creating windows, rescheduling). A non-leader returns at its first write: cheap.
//! * `Conflicts`: after [`CONFLICT_RETRY`]. The status kept changing under us (the
//!   admission host writes it too); a fresh read soon will most likely go through.
//! * Everything else — the API server refusing or unreachable, a call timing out, caches
//!   not synced, a target or object that cannot be read: [`BASE`] after the first
//!   failure, doubling with each consecutive failure of the same WorkloadSpread up to
//!   [`MAX`], so an unavailable API server is not hammered and a recovered one is seen
//!   again within [`MAX`]. A successful reconcile starts the count over.
//!
//! Watch events reconcile a WorkloadSpread whatever its backoff: this only spaces the
//! retries nothing else asks for.

use crate::metrics::ReconcileFailure;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Retry of a reconcile whose status kept conflicting.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// First retry of any other failure (the fixed retry before #44).
pub const BASE: Duration = Duration::from_secs(5);
/// Longest retry.
pub const MAX: Duration = Duration::from_secs(60);
/// A WorkloadSpread that has not failed for this long starts over (it was deleted, or
/// reconciled fine by a watch event in between).
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// When to retry after the `consecutive`-th failure (1 for the first) of kind `kind`.
pub fn delay(kind: ReconcileFailure, consecutive: u32) -> Duration {
    match kind {
        ReconcileFailure::NotLeader => BASE,
        ReconcileFailure::Conflicts => CONFLICT_RETRY,
        _ => {
            let doublings = consecutive.saturating_sub(1).min(16);
            BASE.saturating_mul(1 << doublings).min(MAX)
        }
    }
}

/// Consecutive failures per WorkloadSpread (namespace, name).
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<(String, String), (u32, Instant)>>,
}

impl Backoff {
    /// Notes a failure of kind `kind` of `key` at `now`; returns when to retry.
    pub fn failed(&self, key: (String, String), kind: ReconcileFailure, now: Instant) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
        let (count, at) = failures.entry(key).or_insert((0, now));
        *count = count.saturating_add(1);
        *at = now;
        delay(kind, *count)
    }

    /// `key` reconciled: its next failure is a first one again.
    pub fn succeeded(&self, key: &(String, String)) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(key);
    }

    /// WorkloadSpreads whose failures are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> (String, String) {
        ("ns".into(), name.into())
    }

    #[test]
    fn each_kind_has_its_retry() {
        // A late renewal gives the Lease back without a restart: retried, not doubled.
        assert_eq!(delay(ReconcileFailure::NotLeader, 1), BASE);
        assert_eq!(delay(ReconcileFailure::NotLeader, 9), BASE);
        assert_eq!(delay(ReconcileFailure::Conflicts, 1), CONFLICT_RETRY);
        assert_eq!(delay(ReconcileFailure::Conflicts, 9), CONFLICT_RETRY);
        let secs = |n| delay(ReconcileFailure::Api, n).as_secs();
        assert_eq!([1, 2, 3, 4, 5, 6].map(secs), [5, 10, 20, 40, 60, 60]);
        assert_eq!(secs(u32::MAX), 60, "bounded, without overflow");
        for kind in ReconcileFailure::ALL {
            let retry = delay(kind, 1);
            assert!(retry <= BASE, "{kind:?}: {retry:?}");
        }
    }

    #[test]
    fn failures_are_counted_per_workloadspread_until_one_succeeds() {
        let backoff = Backoff::default();
        let t0 = Instant::now();
        let timeout = ReconcileFailure::Timeout;
        assert_eq!(backoff.failed(key("a"), timeout, t0), BASE);
        assert_eq!(backoff.failed(key("a"), timeout, t0), BASE * 2);
        assert_eq!(
            backoff.failed(key("b"), timeout, t0),
            BASE,
            "another WorkloadSpread starts at the base"
        );
        assert_eq!(backoff.failed(key("a"), timeout, t0), BASE * 4);
        backoff.succeeded(&key("a"));
        assert_eq!(backoff.failed(key("a"), timeout, t0), BASE);
        // Long after its last failure a WorkloadSpread is forgotten: memory follows
        // what fails now, whatever the churn.
        let later = t0 + FORGET_AFTER;
        assert_eq!(backoff.failed(key("c"), timeout, later), BASE);
        assert_eq!(backoff.len(), 1);
    }
}

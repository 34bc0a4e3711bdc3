//! Leader election on a `coordination.k8s.io/v1` Lease with client-go's semantics: only
//! the holder reconciles.
//!
//! * A candidate judges a Lease held by another by its *own* clock: the Lease is free once
//!   it has not changed for `duration` since this candidate last saw it change. Clocks of
//!   different machines are never compared.
//! * The holder renews every `retry` and gives up leadership when no renewal succeeded
//!   for `renew_deadline` (< `duration`): it stops before any other candidate may take
//!   over, so there are never two writers. Every write of the reconciler first checks
//!   [`Leadership::holds`], which turns false at that deadline even if the process was
//!   paused and the renewal loop has not run yet.
//! * Every write is guarded by `resourceVersion`; every call is bounded by `retry`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use workloadspread_core::Timestamp;

/// Timing of an election, derived from the lease duration as client-go's defaults are
/// (15 s / 10 s / 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease that stopped changing stays someone else's.
    pub duration: Duration,
    /// How long the holder may fail to renew before it stops leading.
    pub renew_deadline: Duration,
    /// Pause between attempts, and the bound of each API call.
    pub retry: Duration,
}

impl Timing {
    pub fn from_duration(duration: Duration) -> Self {
        Timing {
            duration,
            renew_deadline: duration * 2 / 3,
            retry: duration * 2 / 15,
        }
    }
}

/// What a candidate last saw of the Lease, and when (its own clock).
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    holder: Option<String>,
    renewed: Option<MicroTime>,
    resource_version: Option<String>,
}

/// One candidate.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Mutex<Option<(Seen, Instant)>>,
}

/// Errors of one attempt.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error("Lease {0}: {1}")]
    Api(String, #[source] Box<kube::Error>),
    #[error("Lease {0}: no answer within {1:?}")]
    Timeout(String, Duration),
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            observed: Mutex::new(None),
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, ElectionError> {
        tokio::time::timeout(self.timing.retry, call)
            .await
            .map_err(|_| ElectionError::Timeout(self.name.clone(), self.timing.retry))
    }

    /// Tries once to acquire or renew; `Ok(true)` while this candidate holds the Lease.
    pub async fn try_acquire(&self, now: Timestamp) -> Result<bool, ElectionError> {
        let api_err = |e| ElectionError::Api(self.name.clone(), Box::new(e));
        let Some(lease) = self
            .bounded(self.api.get_opt(&self.name))
            .await?
            .map_err(api_err)?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            let created = self
                .bounded(self.api.create(&PostParams::default(), &lease))
                .await?;
            return self.settle(created);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        let since_change = self.observe(&lease);
        if !mine && !holder.is_empty() && since_change < self.timing.duration {
            return Ok(false);
        }
        let acquired = match (mine, &spec.acquire_time) {
            (true, Some(t)) => t.0,
            _ => now,
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let mut updated = lease;
        updated.spec = Some(self.spec(now, acquired, transitions));
        let written = self
            .bounded(
                self.api
                    .replace(&self.name, &PostParams::default(), &updated),
            )
            .await?;
        self.settle(written)
    }

    /// How long ago (this candidate's clock) the Lease last changed as seen from here.
    fn observe(&self, lease: &Lease) -> Duration {
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = Seen {
            holder: spec.holder_identity,
            renewed: spec.renew_time,
            resource_version: lease.metadata.resource_version.clone(),
        };
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match observed.as_ref() {
            Some((last, at)) if *last == seen => at.elapsed(),
            _ => {
                *observed = Some((seen, Instant::now()));
                Duration::ZERO
            }
        }
    }

    /// The outcome of a create/replace: a 409 means another candidate wrote first.
    fn settle(&self, written: Result<Lease, kube::Error>) -> Result<bool, ElectionError> {
        match written {
            Ok(lease) => {
                self.observe(&lease);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(ElectionError::Api(self.name.clone(), Box::new(e))),
        }
    }

    /// Gives the Lease up (graceful shutdown) so another replica takes over at once.
    pub async fn release(&self) -> Result<(), ElectionError> {
        let api_err = |e| ElectionError::Api(self.name.clone(), Box::new(e));
        let Some(mut lease) = self
            .bounded(self.api.get_opt(&self.name))
            .await?
            .map_err(api_err)?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.bounded(self.api.replace(&self.name, &PostParams::default(), &lease))
            .await?
            .map(|_| ())
            .map_err(api_err)
    }

    fn spec(&self, now: Timestamp, acquired: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.timing.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

/// Whether this replica may write: always without leader election; with it, until
/// `renew_deadline` after the last successful renewal (own clock).
pub struct Leadership {
    renewed: Mutex<Option<Instant>>,
    renew_deadline: Option<Duration>,
}

impl Leadership {
    /// No election: this replica always writes.
    pub fn unelected() -> Self {
        Leadership {
            renewed: Mutex::new(None),
            renew_deadline: None,
        }
    }

    /// Elected: holds from now (the Lease was just acquired) until the renew deadline.
    pub fn elected(renew_deadline: Duration) -> Self {
        Leadership {
            renewed: Mutex::new(Some(Instant::now())),
            renew_deadline: Some(renew_deadline),
        }
    }

    pub fn renewed(&self) {
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    pub fn holds(&self) -> bool {
        let Some(deadline) = self.renew_deadline else {
            return true;
        };
        self.renewed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_follows_client_go_defaults() {
        let t = Timing::from_duration(Duration::from_secs(15));
        assert_eq!(
            (t.renew_deadline, t.retry),
            (Duration::from_secs(10), Duration::from_secs(2))
        );
    }

    #[test]
    fn leadership_ends_at_the_renew_deadline() {
        assert!(Leadership::unelected().holds());
        let l = Leadership::elected(Duration::from_millis(30));
        assert!(l.holds());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!l.holds(), "no renewal within the deadline");
        l.renewed();
        assert!(l.holds());
    }
}

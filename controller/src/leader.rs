//! Leader election on a `coordination.k8s.io/v1` Lease: only the holder reconciles.
//! The holder renews every `renew`; a Lease not renewed for `duration` may be taken
//! over. Every write is guarded by `resourceVersion`, so two candidates never both win.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::time::Duration;
use workloadspread_core::Timestamp;

/// One candidate.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Tries once to acquire or renew; `Ok(true)` while this candidate holds the Lease.
    pub async fn try_acquire(&self, now: Timestamp) -> Result<bool, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !expired(&spec, now) {
            return Ok(false);
        }
        let acquired = if mine {
            spec.acquire_time.map_or(now, |t| t.0)
        } else {
            now
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let mut updated = lease;
        updated.spec = Some(self.spec(now, acquired, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (graceful shutdown) so another replica takes over at once.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
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
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    fn spec(&self, now: Timestamp, acquired: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

/// Whether the holder stopped renewing (or there is no holder).
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(holder) = spec.holder_identity.as_deref() else {
        return true;
    };
    if holder.is_empty() {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref() else {
        return true;
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let deadline = renewed.0 + k8s_openapi::jiff::SignedDuration::from_secs(duration);
    deadline < now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_secs: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed_secs).unwrap())),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }
    }

    #[test]
    fn expiry() {
        let now = Timestamp::from_second(100).unwrap();
        assert!(!expired(&spec(Some("a"), 90), now));
        assert!(expired(&spec(Some("a"), 80), now));
        assert!(expired(&spec(None, 99), now));
        assert!(expired(&spec(Some(""), 99), now));
    }
}

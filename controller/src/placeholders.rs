//! When the controller first saw each `creatingPods` entry — reserved-slot placeholders
//! (`docs/counter-protocol.md`, *Reserved slots*) and claims — by its own monotonic clock:
//! a placeholder no counted pod stands for expires that long after
//! (`workloadspread_core::controller::status`), and a claim whose pod never appears is
//! dropped early that long after (the `creating` module), so neither a host's skewed stamps nor
//! a step of this machine's wall clock makes one go early.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use workloadspread_core::admission::reserve::stale::Sightings;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::Timestamp;

/// A WorkloadSpread not reconciled for this long is forgotten (deleted ones).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Sightings per WorkloadSpread uid.
#[derive(Default)]
pub struct Placeholders {
    seen: Mutex<HashMap<String, (Sightings, Instant)>>,
}

impl Placeholders {
    /// Notes the placeholders of `ws`'s status as seen now (monotonic) and returns the
    /// sightings to reconcile with: ages are judged against
    /// `workloadspread_kube::clock::monotonic_now`.
    pub fn observe(&self, ws: &WorkloadSpread, now: Timestamp) -> Sightings {
        let status = ws.status.clone().unwrap_or_default();
        let uid = ws.metadata.uid.clone().unwrap_or_default();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, (_, used)| used.elapsed() < FORGET_AFTER);
        let (sightings, used) = seen
            .entry(uid.clone())
            .or_insert_with(|| (Sightings::default(), Instant::now()));
        sightings.observe_creating(&status, now);
        *used = Instant::now();
        let out = sightings.clone();
        if out.is_empty() {
            seen.remove(&uid);
        }
        out
    }

    /// WorkloadSpreads with placeholders remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws(uid: &str, creating: serde_json::Value) -> WorkloadSpread {
        let statuses = json!([{"name": "a", "missingReplicas": 3, "creatingPods": creating}]);
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"subsets": [{"name": "a", "maxReplicas": 5}]},
            "status": {"versionedSubsetStatuses": {"versionIgnored": statuses}}}))
        .unwrap()
    }

    /// First sightings are kept across reconciles (not reset by a newer stamp), and a
    /// WorkloadSpread without creating entries is not remembered: memory follows what is
    /// held, whatever the churn of WorkloadSpreads.
    #[test]
    fn sightings_are_kept_while_placeholders_exist_and_forgotten_after() {
        let p = Placeholders::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later = t0 + std::time::Duration::from_secs(6);
        let held = ws("u1", json!({"~h1.1": "2026-01-01T00:00:05Z"}));
        let first = p.observe(&held, t0);
        let again = p.observe(&held, later);
        assert_eq!(first, again, "first seen at t0, still");
        assert_eq!(
            again.age("~h1.1", later),
            k8s_openapi::jiff::SignedDuration::from_secs(6)
        );
        for i in 0..1000 {
            p.observe(&ws(&format!("churn-{i}"), json!({})), t0);
        }
        assert_eq!(p.len(), 1);
        p.observe(&ws("u1", json!({})), later);
        assert_eq!(p.len(), 0);
    }
}

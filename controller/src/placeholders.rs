//! What the controller knows of reserved-slot placeholders (`docs/counter-protocol.md`,
//! *Reserved slots*): when it first saw each one (its own clock, so a host's skewed
//! stamps never make one expire early), and which ones an existing pod names — from its
//! pod cache, and, before any would expire, from a live listing of the pods carrying
//! their holders' label (a pod whose owner or watch event the caches lack yet must not
//! lose its slot). The rule is `workloadspread_core::controller::status`.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use workloadspread_core::admission::reserve::stale::{
    holder_selector, named_placeholders, stale_after, Sightings,
};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::status::StatusCalc;
use workloadspread_core::controller::ReconcileOptions;
use workloadspread_core::Timestamp;

/// A WorkloadSpread not reconciled for this long is forgotten (deleted ones).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The placeholders of one reconcile: sightings and the ones pods name.
#[derive(Debug, Default)]
pub struct Known {
    pub sightings: Sightings,
    pub named: BTreeSet<String>,
}

/// Sightings per WorkloadSpread uid.
#[derive(Default)]
pub struct Placeholders {
    seen: Mutex<HashMap<String, (Sightings, Instant)>>,
}

impl Placeholders {
    /// Notes the placeholders of `ws`'s status as seen `now` and finds which an existing
    /// pod names: the namespace's cached pods, and before any placeholder would expire, a
    /// live listing by their holders' label (`timeout` bounds it). A failed listing keeps
    /// every placeholder that would expire (looked at again on the next reconcile).
    pub async fn known(
        &self,
        ws: &WorkloadSpread,
        cached_pods: &[Pod],
        client: &Client,
        options: &ReconcileOptions,
        now: Timestamp,
        timeout: Duration,
    ) -> Known {
        let status = ws.status.clone().unwrap_or_default();
        let sightings = self.observe(ws, &status, now);
        let mut named = named_placeholders(cached_pods);
        let window = StatusCalc::placeholder_window(options.creating_window);
        let expiring = stale_after(&status, &sightings, now, window, |k| named.contains(k));
        if let Some(selector) = holder_selector(&expiring) {
            let namespace = ws.metadata.namespace.as_deref().unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let params = ListParams::default().labels(&selector);
            match tokio::time::timeout(timeout, pods.list_metadata(&params)).await {
                Ok(Ok(list)) => {
                    let listed: Vec<Pod> = list
                        .items
                        .into_iter()
                        .map(|p| Pod {
                            metadata: p.metadata,
                            ..Default::default()
                        })
                        .collect();
                    named.extend(named_placeholders(&listed));
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer in {timeout:?}"),
                    };
                    tracing::warn!(
                        workloadspread = ws.metadata.name.as_deref().unwrap_or_default(),
                        "listing the pods that may name {} expiring placeholders: {why}; kept until a listing works",
                        expiring.len()
                    );
                    named.extend(expiring.into_iter().map(|s| s.key));
                }
            }
        }
        Known { sightings, named }
    }

    fn observe(
        &self,
        ws: &WorkloadSpread,
        status: &workloadspread_core::api::v1beta1::WorkloadSpreadStatus,
        now: Timestamp,
    ) -> Sightings {
        let uid = ws.metadata.uid.clone().unwrap_or_default();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, (_, used)| used.elapsed() < FORGET_AFTER);
        let (sightings, used) = seen
            .entry(uid.clone())
            .or_insert_with(|| (Sightings::default(), Instant::now()));
        sightings.observe(status, now);
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
    /// WorkloadSpread without placeholders is not remembered: memory follows what is
    /// held, whatever the churn of WorkloadSpreads.
    #[test]
    fn sightings_are_kept_while_placeholders_exist_and_forgotten_after() {
        let p = Placeholders::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later = t0 + std::time::Duration::from_secs(6);
        let held = ws("u1", json!({"~h1.1": "2026-01-01T00:00:05Z"}));
        let first = p.observe(&held, held.status.as_ref().unwrap(), t0);
        let again = p.observe(&held, held.status.as_ref().unwrap(), later);
        assert_eq!(first, again, "first seen at t0, still");
        assert_eq!(
            again.age("~h1.1", later),
            k8s_openapi::jiff::SignedDuration::from_secs(6)
        );
        for i in 0..1000 {
            let empty = ws(&format!("churn-{i}"), json!({}));
            p.observe(&empty, empty.status.as_ref().unwrap(), t0);
        }
        assert_eq!(p.len(), 1);
        let settled = ws("u1", json!({"web-1": "2026-01-01T00:00:05Z"}));
        p.observe(&settled, settled.status.as_ref().unwrap(), later);
        assert_eq!(p.len(), 0);
    }
}

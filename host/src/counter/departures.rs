//! Departures confirmed before a claim is decided. A `deletingPods` entry is an intent: a
//! DELETE or eviction of the pod was admitted, and the API server may still refuse it (a
//! PodDisruptionBudget, a later admission plugin) — or the review was forged. Its slot is
//! freed only once the pod's departure is a fact (`workloadspread_core::admission::room`),
//! so before it decides the claims and reservations of a batch, an attempt reads each pod
//! whose deletion the status records in their versions, consistently (no
//! `resourceVersion`): deleted (a `deletionTimestamp`), finished or gone is a fact; a pod
//! that still runs, or a read that fails, is not (the subset then looks fuller than it may
//! be — a spill, never an overfill). Deletions are in the status only between their
//! admission and the controller's next recount (about a second), so this costs a read per
//! pod being deleted for the claims of that moment, and nothing otherwise.

use super::{Committer, Op, Pending, Work};
use crate::metrics::{DepartureLabels, DepartureResult};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::collections::BTreeSet;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpread;

/// Most pods read per attempt: the ones beyond are left unconfirmed (their subsets look
/// fuller until the controller recounts).
const MAX_READS: usize = 64;

impl Committer {
    /// The pods among those whose deletion `ws`'s status records, in the versions the
    /// batch claims or reserves in, whose departure the API server has stored.
    pub(super) async fn departures(
        &self,
        namespace: &str,
        ws: &WorkloadSpread,
        batch: &[Pending],
        budget: Duration,
    ) -> BTreeSet<String> {
        let names = deleting_in_claimed_versions(ws, batch);
        if names.is_empty() {
            return names;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let reads = names.into_iter().take(MAX_READS).map(|name| {
            let pods = pods.clone();
            async move { (read(&pods, &name, budget).await, name) }
        });
        let mut departed = BTreeSet::new();
        for (result, name) in join_all(reads).await {
            self.metrics
                .departures
                .get_or_create(&DepartureLabels {
                    result: result.clone(),
                })
                .inc();
            if result == DepartureResult::Departed {
                departed.insert(name);
            }
        }
        departed
    }
}

/// The pods whose deletion the status records in a version the batch claims or reserves
/// in (by name; several versions may name the same pod).
fn deleting_in_claimed_versions(ws: &WorkloadSpread, batch: &[Pending]) -> BTreeSet<String> {
    let versions: BTreeSet<&str> = batch
        .iter()
        .filter_map(|p| match &p.work {
            Work::Op(Op::Claim(c)) => Some(c.pod.version.as_str()),
            Work::Reserve { slot, .. } => Some(slot.0.as_str()),
            _ => None,
        })
        .collect();
    let Some(status) = ws.status.as_ref() else {
        return BTreeSet::new();
    };
    versions
        .iter()
        .filter_map(|v| status.versioned_subset_statuses.get(*v))
        .flatten()
        .flat_map(|s| s.deleting_pods.keys().cloned())
        .collect()
}

/// Whether pod `name`'s departure is stored — gone, deleted or finished — by a consistent
/// read within `budget`. A read that fails or is late is no fact.
async fn read(pods: &Api<Pod>, name: &str, budget: Duration) -> DepartureResult {
    match tokio::time::timeout(budget, pods.get_opt(name)).await {
        Ok(Ok(None)) => DepartureResult::Departed,
        Ok(Ok(Some(pod))) if !runs(&pod) => DepartureResult::Departed,
        Ok(Ok(Some(_))) => DepartureResult::Running,
        _ => DepartureResult::Failed,
    }
}

/// Whether a pod runs for the count: not being deleted and not finished (the controller
/// counts neither as a replica).
pub(super) fn runs(pod: &Pod) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    pod.metadata.deletion_timestamp.is_none() && !finished
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_runs_until_it_is_deleted_or_finished() {
        let cases = [
            (
                json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}}),
                true,
            ),
            (
                json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}),
                true,
            ),
            (json!({"metadata": {"name": "p"}}), true),
            (
                json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                    "status": {"phase": "Running"}}),
                false,
            ),
            (
                json!({"metadata": {"name": "p"}, "status": {"phase": "Failed"}}),
                false,
            ),
            (
                json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}),
                false,
            ),
        ];
        for (pod, want) in cases {
            let p: Pod = serde_json::from_value(pod.clone()).unwrap();
            assert_eq!(runs(&p), want, "{pod}");
        }
    }
}

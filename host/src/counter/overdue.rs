//! Entries nobody recounted (`workloadspread_core::admission::expire`): with the
//! controller down, every admission and deletion leaves an entry in the status that only
//! its recount removes. Each attempt notes when this replica first saw each entry (its
//! own monotonic clock, never a stamp); once entries have been seen for the expiry
//! (`--counter-expiry-seconds`, well past the controller's windows), the attempt lists
//! the namespace's pods consistently — at most once per [`LIST_EVERY`] — and resolves
//! them with the batch's write, so the status stays as large as the pods are.

use super::{lock, Committer, Queue};
use crate::metrics::{ExpiredAction, ExpiredLabels};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use workloadspread_core::admission::expire::{Expired, Overdue, PodFacts};
use workloadspread_core::admission::reserve::is_placeholder;
use workloadspread_core::admission::reserve::stale::Sightings;
use workloadspread_core::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};

/// Overdue entries are looked at (a namespace list) at most this often.
const LIST_EVERY: Duration = Duration::from_secs(10);

/// When this replica first saw each claim and each deletion of the object.
#[derive(Default)]
pub(super) struct EntrySightings {
    creating: Sightings,
    deleting: Sightings,
    /// When the namespace was last listed for them.
    listed: Option<Instant>,
}

impl EntrySightings {
    /// Notes the entries of `status` at `now` and returns those seen for `expiry`.
    fn overdue(
        &mut self,
        status: &WorkloadSpreadStatus,
        now: workloadspread_core::Timestamp,
        expiry: Duration,
    ) -> Overdue {
        let creating = keys(status, |s| &s.creating_pods);
        let deleting = keys(status, |s| &s.deleting_pods);
        self.creating.observe_keys(&creating, now);
        self.deleting.observe_keys(&deleting, now);
        let expiry = k8s_openapi::jiff::SignedDuration::try_from(expiry).unwrap_or_default();
        let due = |sightings: &Sightings, keys: BTreeSet<String>| -> BTreeSet<String> {
            keys.into_iter()
                .filter(|k| sightings.age(k, now) >= expiry)
                .collect()
        };
        Overdue {
            creating: due(&self.creating, creating),
            deleting: due(&self.deleting, deleting),
        }
    }
}

/// The entries (not placeholders) of the versioned statuses in the map `of` picks.
fn keys(
    status: &WorkloadSpreadStatus,
    of: impl Fn(
        &workloadspread_core::api::v1beta1::WorkloadSpreadSubsetStatus,
    ) -> &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    >,
) -> BTreeSet<String> {
    status
        .versioned_subset_statuses
        .values()
        .flatten()
        .flat_map(|s| of(s).keys())
        .filter(|k| !is_placeholder(k))
        .cloned()
        .collect()
}

impl Committer {
    /// The overdue entries of `ws` and the namespace's pods to resolve them by, when some
    /// are overdue and the namespace was not listed for them in the last [`LIST_EVERY`].
    /// A listing that fails or is late resolves nothing (the next attempt tries again).
    pub(super) async fn overdue(
        &self,
        queue: &Queue,
        ws: &WorkloadSpread,
        budget: Duration,
    ) -> Option<(Overdue, PodFacts)> {
        let status = ws.status.as_ref()?;
        let now = crate::clock::monotonic_now();
        let overdue = {
            let mut shared = lock(&queue.shared);
            let overdue = shared.entries.overdue(status, now, self.lifetimes.expiry);
            let recent = shared
                .entries
                .listed
                .is_some_and(|t| t.elapsed() < LIST_EVERY);
            if overdue.is_empty() || recent {
                return None;
            }
            shared.entries.listed = Some(Instant::now());
            overdue
        };
        let namespace = ws.metadata.namespace.as_deref().unwrap_or_default();
        let name = ws.metadata.name.as_deref().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // No resourceVersion: read from etcd, pods created or deleted a moment ago count.
        match tokio::time::timeout(budget, pods.list(&ListParams::default())).await {
            Ok(Ok(list)) => Some((overdue, PodFacts::from_pods(&list.items, name))),
            Ok(Err(e)) => {
                tracing::warn!(
                    workloadspread = name,
                    "listing pods for overdue entries: {e}"
                );
                None
            }
            Err(_) => {
                tracing::warn!(
                    workloadspread = name,
                    "listing pods for overdue entries: no answer in {budget:?}"
                );
                None
            }
        }
    }

    /// Counts what resolving overdue entries did.
    pub(super) fn count_expired(&self, done: Expired) {
        for (action, n) in [
            (ExpiredAction::Folded, done.folded),
            (ExpiredAction::Dropped, done.dropped),
        ] {
            self.metrics
                .expired
                .get_or_create(&ExpiredLabels { action })
                .inc_by(n as u64);
        }
    }
}

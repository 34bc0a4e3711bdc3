//! Claims whose pods never appear (issue #30), and entries about to expire (#40): the
//! I/O around `core::controller::creating` — which entries are past the early window
//! and unseen in the cache, or past their window and unseen, confirmed by a live read of
//! the namespace's pod metadata; the first are dropped before the reconcile recounts the
//! status, and an entry past its window that a live pod carries means the cache is
//! behind: the reconcile waits for it instead of freeing a slot the pod holds.

use crate::calls::{bounded, CallError};
use crate::placeholders::Placeholders;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use std::collections::BTreeSet;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::creating::{absent, drop_creating, early_check, expiring};
use workloadspread_core::controller::status::StatusCalc;

/// What the live check found.
#[derive(Debug, Default)]
pub struct Unseen {
    /// Entries dropped (their pods are confirmed absent past the early window).
    pub dropped: BTreeSet<String>,
    /// When the next entry reaches the early window.
    pub recheck: Option<SignedDuration>,
    /// Entries the reconcile would expire that a live pod carries: the cache is behind.
    pub behind: BTreeSet<String>,
}

/// What the live check reads with, and its windows.
pub struct Check<'a> {
    pub client: &'a Client,
    pub placeholders: &'a Placeholders,
    /// Drop entries whose pod is confirmed absent after this long (`None`: never early).
    pub early_drop: Option<SignedDuration>,
    /// The creating window (`ReconcileOptions::creating_window`).
    pub window: SignedDuration,
}

/// Drops creatingPods entries past `check.early_drop` whose pod neither the cache nor a
/// live (consistent) read of the namespace shows, and finds the entries past their
/// window that only the live read shows (`core::controller::creating`).
pub async fn drop_unseen(
    ws: &mut WorkloadSpread,
    pods: &Store<Pod>,
    with: Check<'_>,
) -> Result<Unseen, CallError> {
    let now = workloadspread_kube::clock::monotonic_now();
    let sightings = with.placeholders.observe(ws, now);
    let cached = pods.state();
    let check = match with.early_drop {
        Some(early) => early_check(
            ws,
            cached.iter().map(|p| p.as_ref()),
            &sightings,
            now,
            early,
        ),
        None => Default::default(),
    };
    let window = with.window;
    let windows = (window, StatusCalc::placeholder_window(window));
    let due = expiring(
        ws,
        cached.iter().map(|p| p.as_ref()),
        &sightings,
        now,
        windows,
    );
    if check.unseen.is_empty() && due.is_empty() {
        return Ok(Unseen {
            recheck: check.next,
            ..Default::default()
        });
    }
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(with.client.clone(), &ns);
    // Metadata only, read from etcd (no resourceVersion): pods created a moment ago count.
    let live: Vec<Pod> = bounded(api.list_metadata(&kube::api::ListParams::default()))
        .await??
        .items
        .into_iter()
        .map(|m| Pod {
            metadata: m.metadata,
            ..Default::default()
        })
        .collect();
    let gone = absent(&check.unseen, &live);
    if let Some(status) = ws.status.as_mut() {
        drop_creating(status, &gone);
    }
    let behind: BTreeSet<String> = due.difference(&absent(&due, &live)).cloned().collect();
    Ok(Unseen {
        dropped: gone,
        recheck: check.next,
        behind,
    })
}

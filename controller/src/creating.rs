//! Claims whose pods never appear (issue #30): the I/O around
//! `core::controller::creating` — which entries are past the early window and unseen in
//! the cache, confirmed by a live read of the namespace's pod metadata, then dropped
//! before the reconcile recounts the status.

use crate::reconciler::{bounded, Context, Error};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use kube::runtime::reflector::Store;
use kube::Api;
use std::collections::BTreeSet;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::creating::{absent, drop_creating, early_check};

/// Drops creatingPods entries past `ctx.early_drop` whose pod neither the cache nor a
/// live (consistent) read of the namespace shows (`core::controller::creating`). Returns
/// the dropped keys and when the next entry reaches the early window.
pub async fn drop_unseen(
    ws: &mut WorkloadSpread,
    pods: &Store<Pod>,
    ctx: &Context,
) -> Result<(BTreeSet<String>, Option<SignedDuration>), Error> {
    let Some(early) = ctx.early_drop else {
        return Ok(Default::default());
    };
    let now = crate::placeholders::monotonic_now();
    let sightings = ctx.placeholders.observe(ws, now);
    let cached = pods.state();
    let check = early_check(
        ws,
        cached.iter().map(|p| p.as_ref()),
        &sightings,
        now,
        early,
    );
    if check.unseen.is_empty() {
        return Ok((Default::default(), check.next));
    }
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
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
    Ok((gone, check.next))
}

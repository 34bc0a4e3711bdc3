//! The pending label's end (`docs/counter-protocol.md`, best-effort by size), in two
//! steps so that a best-effort admission counts each pod once whichever of its two
//! caches (WorkloadSpreads, pending pods) sees an update first:
//!
//! 1. **Stamp.** Once a status write that counts the pod has succeeded (or found the
//!    status already equal), the controller writes [`COUNTED_ANNOTATION`] on it: this
//!    WorkloadSpread's status counts the pod from that `resourceVersion` on. An
//!    admission reading an older status still adds the pod; one reading that status or
//!    a newer one does not (`admission::best_effort::CountedIn::covers`).
//! 2. **Unlabel.** [`PENDING_GRACE`] after the stamp, and once the controller's own
//!    watch has delivered the stamped version, the label and the stamp are removed: the
//!    pod leaves the admissions' list. Only a WorkloadSpread cache lagging its pod cache
//!    by more than the grace could then miss the pod.
//!
//! Only pods the written status counted (the workload's active pods, as the reconcile
//! grouped them) are stamped; a pod whose owner the controller cannot resolve yet keeps
//! its label, and admissions keep counting it. Pods that finished (Succeeded/Failed)
//! lose the label at once: admissions ignore them anyway.

use super::cost::CostPatch;
use crate::admission::best_effort::{version, CountedIn};
use crate::api::v1beta1::WorkloadSpread;
use crate::api::{COUNTED_ANNOTATION, PENDING_LABEL, POD_DELETION_COST_ANNOTATION};
use crate::pods::{is_active, matched, name};
use crate::workload::is_pod_selected;
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use serde_json::{json, Map, Value};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

/// How long a stamped pod keeps its label: longer than any WorkloadSpread cache should
/// lag the pod cache of the same host.
pub const PENDING_GRACE: SignedDuration = SignedDuration::from_secs(5);

/// What to do with one pending pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingPatch {
    /// Write the stamp (the label stays).
    Stamp(CountedIn),
    /// Remove the label and the stamp.
    Unlabel,
}

/// Everything the decision needs.
#[derive(Clone, Copy, Debug)]
pub struct PendingInput<'a, P = Pod> {
    pub ws: &'a WorkloadSpread,
    /// The namespace's pods (any borrowable pod).
    pub namespace_pods: &'a [P],
    /// Names of the pods the written status counts (see [`counted_pods`]).
    pub counted: &'a BTreeSet<String>,
    /// The `resourceVersion` whose status counts them: the one the write returned, or
    /// the one read when the status was already equal.
    pub written_version: &'a str,
    /// The `resourceVersion` of the object the controller's own watch delivered for
    /// this reconcile.
    pub observed_version: &'a str,
    pub now: Timestamp,
    pub grace: SignedDuration,
}

/// The patches, and when to look again (a stamp waiting for its grace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingPlan {
    pub patches: Vec<(String, PendingPatch)>,
    pub requeue_after: Option<SignedDuration>,
}

impl PendingPlan {
    fn wait(&mut self, d: SignedDuration) {
        let d = d.max(SignedDuration::from_millis(100));
        if self.requeue_after.is_none_or(|r| d < r) {
            self.requeue_after = Some(d);
        }
    }
}

/// Names of the workload's pods a status computed from `workload_pods` counts: active,
/// selected by the `targetFilter`, and placed by their matched annotation into this
/// WorkloadSpread.
pub fn counted_pods<P: Borrow<Pod>>(ws: &WorkloadSpread, workload_pods: &[P]) -> BTreeSet<String> {
    let no_labels = BTreeMap::new();
    let filter = ws.spec.target_filter.as_ref();
    workload_pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p: &&Pod| is_active(p))
        .filter(|p| {
            is_pod_selected(filter, p.metadata.labels.as_ref().unwrap_or(&no_labels))
                .unwrap_or(false)
        })
        .filter(|p| matched(p).is_some_and(|m| m.name == ws.name()))
        .map(|p| name(p).to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The stamps and label removals of this reconcile (module doc).
pub fn plan_pending<P: Borrow<Pod>>(input: &PendingInput<'_, P>) -> PendingPlan {
    let mut plan = PendingPlan::default();
    let Some(uid) = input.ws.metadata.uid.as_deref() else {
        return plan;
    };
    let mine = input
        .namespace_pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p: &&Pod| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(PENDING_LABEL))
                && matched(p).is_some_and(|m| m.name == input.ws.name())
        });
    for pod in mine {
        let pod_name = name(pod);
        if pod_name.is_empty() || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if !is_active(pod) {
            plan.patches
                .push((pod_name.to_string(), PendingPatch::Unlabel));
            continue;
        }
        if !input.counted.contains(pod_name) {
            continue;
        }
        match CountedIn::of(pod).filter(|c| c.uid == uid) {
            Some(stamp) => {
                let left = input.grace - input.now.duration_since(stamp.at.0);
                let observed = match (
                    version(input.observed_version),
                    version(&stamp.resource_version),
                ) {
                    (Some(o), Some(s)) => o >= s,
                    // Not numbers: the grace alone.
                    _ => true,
                };
                if !left.is_positive() && observed {
                    plan.patches
                        .push((pod_name.to_string(), PendingPatch::Unlabel));
                } else {
                    plan.wait(left.max(SignedDuration::from_secs(1)));
                }
            }
            None => {
                let stamp = CountedIn {
                    uid: uid.to_string(),
                    resource_version: input.written_version.to_string(),
                    at: Time(input.now),
                };
                plan.patches
                    .push((pod_name.to_string(), PendingPatch::Stamp(stamp)));
                plan.wait(input.grace);
            }
        }
    }
    plan
}

/// Whether `pod` is in the pending label's flow (labelled pending, or stamped): its
/// label changes follow the status write, and its cost goes in the same patch.
pub fn in_pending_flow(pod: &Pod) -> bool {
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PENDING_LABEL));
    let stamped = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(COUNTED_ANNOTATION));
    labelled || stamped
}

/// Splits the reconcile's deletion costs into those written **before** the status write
/// and those written with the pending changes after it. A status that counts a pod is
/// written only once the pod's cost is, so whoever sees the status settled (a user about
/// to scale in, `status`, a test) sees the costs that decide the scale-in; the pods in
/// the pending flow (best-effort admissions) keep one patch for cost and label, after
/// the status as that flow requires.
pub fn costs_before_status<P: Borrow<Pod>>(
    costs: &[CostPatch],
    namespace_pods: &[P],
) -> (Vec<CostPatch>, Vec<CostPatch>) {
    let pending: BTreeSet<&str> = namespace_pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p: &&Pod| in_pending_flow(p))
        .map(name)
        .collect();
    costs
        .iter()
        .cloned()
        .partition(|c| !pending.contains(c.pod.as_str()))
}

/// One strategic-merge patch per pod: its new deletion cost and/or its pending stamp or
/// label removal. Sorted by pod name.
pub fn pod_patches(
    costs: &[CostPatch],
    pending: &[(String, PendingPatch)],
) -> Vec<(String, Value)> {
    let mut patches: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    let annotations = |m: &mut Map<String, Value>| -> Map<String, Value> {
        match m.remove("annotations") {
            Some(Value::Object(a)) => a,
            _ => Map::new(),
        }
    };
    for c in costs {
        let entry = patches.entry(&c.pod).or_default();
        let mut a = annotations(entry);
        a.insert(
            POD_DELETION_COST_ANNOTATION.into(),
            Value::String(c.cost.to_string()),
        );
        entry.insert("annotations".into(), Value::Object(a));
    }
    for (pod, patch) in pending {
        let entry = patches.entry(pod).or_default();
        let mut a = annotations(entry);
        match patch {
            PendingPatch::Stamp(stamp) => {
                a.insert(
                    COUNTED_ANNOTATION.into(),
                    Value::String(stamp.to_annotation()),
                );
            }
            PendingPatch::Unlabel => {
                a.insert(COUNTED_ANNOTATION.into(), Value::Null);
                entry.insert("labels".into(), json!({ PENDING_LABEL: null }));
            }
        }
        entry.insert("annotations".into(), Value::Object(a));
    }
    patches
        .into_iter()
        .map(|(pod, metadata)| (pod.to_string(), json!({ "metadata": metadata })))
        .collect()
}

#[cfg(test)]
mod tests;

//! Best-effort admission (no counter capability: Kubewarden's policy-server, or
//! `mode: best-effort`): the decision on the controller's last status plus the pods
//! still labelled pending (`super::count_pending`), without writing.
//!
//! Concurrent evaluations cannot see each other's pods (policy-server evaluates a
//! ReplicaSet's burst in parallel against reflector caches that lag what it has just
//! admitted). With the claim rule's first-fit choice every evaluation of a burst picks
//! the same first subset with room and overfills it. Here, under [`Rules::Planned`],
//! an evaluation chooses among the subsets the claim rule would accept *in proportion
//! to their free room towards the planned spread* (the target for the current replicas,
//! [`planned_spread_holding`], minus what the status and the pending pods already put
//! there), by a stable hash of the request: k pods evaluated on the same view split the
//! way the plan does, on average, instead of all landing in one subset. Evaluations
//! that see each other still fill every subset exactly to its plan (a subset without
//! free room has no weight). The subset chosen is then claimed with the claim rule
//! restricted to it ([`claim_among`]), which caps it by what the status says is free
//! minus what the cache shows in flight. What overshoot is left, the controller's
//! rebalancing (opt-in) or deletion costs correct.
//!
//! [`CountedIn`] is the other half of the count: the controller's stamp on a pending
//! pod saying which status counts it, so the count does not depend on which of the
//! two caches (WorkloadSpreads, pending pods) sees its update first.

use super::{
    claim_among, count_pending, create_path, decide_create, versioned_statuses, CreateDecision,
    CreatePath, PendingPod, PodKey, Scale,
};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadSubsetStatus};
use crate::api::COUNTED_ANNOTATION;
use crate::percent::scaled_value;
use crate::rules::{planned_spread_holding, Rules};
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The best-effort create decision for `pod` on `ws` as read, with the pending pods the
/// caller listed: the status plus the pending pods, then the spread choice (module doc),
/// then the claim rule. Nothing is written (`new_status` is the status the decision
/// was made on, for callers that log it).
pub fn decide(
    ws: &WorkloadSpread,
    pending: &[PendingPod],
    pod: PodKey<'_>,
    scale: Scale,
    now: Timestamp,
    request_uid: &str,
) -> CreateDecision {
    let mut counted = ws.clone();
    let status = counted.status.get_or_insert_with(Default::default);
    count_pending(status, ws, pending, scale, now);
    if create_path(ws, pod.name) == CreatePath::Counted {
        let mut status = counted.status.clone().unwrap_or_default();
        let statuses = versioned_statuses(&mut status, ws, pod.version, scale.replicas);
        let key = if pod.name.is_empty() {
            request_uid
        } else {
            pod.name
        };
        if let Some(subset) = spread_choice(ws, statuses, scale, key) {
            let claim = claim_among(&mut status, ws, pod, &[subset], scale, now, request_uid);
            if claim.subset.is_some() {
                return CreateDecision {
                    subset: claim.subset,
                    generated_uid: claim.generated_uid,
                    new_status: claim.status_changed.then_some(status),
                };
            }
        }
    }
    decide_create(&counted, pod, scale, now, request_uid)
}

/// The subset a best-effort evaluation takes under [`Rules::Planned`]: among the spec
/// subsets with free room towards the planned spread (and room under the claim rule),
/// one drawn in proportion to that room by `hash(key)`; subsets still below their
/// `minReplicas` first, in proportion to what they miss. `None` when no subset has
/// free room towards the plan (the caller then applies the claim rule's first fit), or
/// under the reference rules (OpenKruise's first fit).
pub fn spread_choice(
    ws: &WorkloadSpread,
    statuses: &[WorkloadSpreadSubsetStatus],
    scale: Scale,
    key: &str,
) -> Option<String> {
    if scale.rules != Rules::Planned {
        return None;
    }
    let replicas = usize::try_from(scale.replicas).unwrap_or(0);
    let status_of = |name: &str| statuses.iter().find(|s| s.name == name);
    let occupancy: Vec<i64> = ws
        .spec
        .subsets
        .iter()
        .map(|s| status_of(&s.name).map_or(0, |s| super::room::occupancy(s, scale.departed)))
        .collect();
    let held: Vec<Option<usize>> = ws
        .spec
        .subsets
        .iter()
        .zip(&occupancy)
        .map(|(s, &n)| {
            let unschedulable = status_of(&s.name).is_some_and(|st| st.is_unschedulable());
            unschedulable.then(|| usize::try_from(n).unwrap_or(0))
        })
        .collect();
    let target = planned_spread_holding(ws, replicas, &held);
    let accepts = |name: &str| claim_would_take(ws, statuses, name, scale);
    let below_min: Vec<u64> = ws
        .spec
        .subsets
        .iter()
        .zip(&occupancy)
        .zip(&held)
        .map(|((s, &n), held)| {
            let min = s
                .min_replicas
                .as_ref()
                .and_then(|m| scaled_value(m, scale.replicas).ok())
                .map_or(0, i64::from);
            let missing = u64::try_from(min - n).unwrap_or(0);
            if held.is_none() && missing > 0 && accepts(&s.name) {
                missing
            } else {
                0
            }
        })
        .collect();
    let weights: Vec<u64> = if below_min.iter().any(|&w| w > 0) {
        below_min
    } else {
        ws.spec
            .subsets
            .iter()
            .zip(&occupancy)
            .zip(&target.subsets)
            .zip(&held)
            .map(|(((s, &n), &want), held)| {
                let room = u64::try_from(i64::try_from(want).unwrap_or(i64::MAX) - n).unwrap_or(0);
                if held.is_none() && room > 0 && accepts(&s.name) {
                    room
                } else {
                    0
                }
            })
            .collect()
    };
    let index = weighted_pick(&weights, stable_hash(key))?;
    Some(ws.spec.subsets[index].name.clone())
}

/// Whether the claim rule, restricted to `subset`, would place a pod there: the room
/// is decided in one place (`claim_among`), here on a copy.
fn claim_would_take(
    ws: &WorkloadSpread,
    statuses: &[WorkloadSpreadSubsetStatus],
    subset: &str,
    scale: Scale,
) -> bool {
    let mut probe = crate::api::v1beta1::WorkloadSpreadStatus::default();
    probe
        .versioned_subset_statuses
        .insert(String::new(), statuses.to_vec());
    let pod = PodKey {
        name: "~probe",
        version: "",
    };
    let claim = claim_among(
        &mut probe,
        ws,
        pod,
        &[subset.to_string()],
        scale,
        Timestamp::UNIX_EPOCH,
        "",
    );
    claim.subset.is_some()
}

/// The index whose cumulative weight interval holds `hash mod total`; `None` when every
/// weight is 0.
fn weighted_pick(weights: &[u64], hash: u64) -> Option<usize> {
    let total: u64 = weights.iter().sum();
    if total == 0 {
        return None;
    }
    let mut point = hash % total;
    for (i, &w) in weights.iter().enumerate() {
        if point < w {
            return Some(i);
        }
        point -= w;
    }
    None
}

/// FNV-1a over the key, finished with SplitMix64's mixer: stable across builds and
/// platforms (the Wasm guest and native tests agree), uniform enough over uids.
pub fn stable_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The controller's stamp on a pod labelled pending ([`COUNTED_ANNOTATION`]): the
/// status of WorkloadSpread `uid` counts the pod from `resourceVersion` on; written
/// `at`. An admission reading that WorkloadSpread at that version or later does not add
/// the pod (the status counts it); one reading an older version does (its status does
/// not). Whichever cache sees its update first, the pod is counted once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountedIn {
    pub uid: String,
    pub resource_version: String,
    pub at: Time,
}

impl CountedIn {
    /// The stamp a pod carries, if any (an unreadable one counts as none).
    pub fn of(pod: &Pod) -> Option<Self> {
        let value = pod.metadata.annotations.as_ref()?.get(COUNTED_ANNOTATION)?;
        serde_json::from_str(value).ok()
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether `ws` as read is this WorkloadSpread at a version whose status counts the
    /// pod. `resourceVersion`s are compared as numbers (they are on every etcd-backed
    /// API server); when either is not one, the pod is taken as not counted (the subset
    /// looks fuller: a spill, never an overfill).
    pub fn covers(&self, ws: &WorkloadSpread) -> bool {
        let same = ws.metadata.uid.as_deref() == Some(self.uid.as_str());
        let read = ws.metadata.resource_version.as_deref().and_then(version);
        same && matches!((read, version(&self.resource_version)), (Some(r), Some(s)) if r >= s)
    }
}

/// A `resourceVersion` as a number.
pub fn version(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

#[cfg(test)]
mod tests;

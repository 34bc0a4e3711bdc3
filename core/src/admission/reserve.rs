//! Reserved slots (`docs/counter-protocol.md`, *Reserved slots*): a host replica (the
//! *holder*) reserves a block of a subset's free slots in one status write, as
//! `creatingPods` entries keyed `~<holder>.<n>` (*placeholders*), and admits pods into
//! them without writing. For every reader a placeholder is a creating pod, so the
//! subset's occupancy never exceeds its maximum. The pod admitted into a placeholder
//! carries [`RESERVATION_ANNOTATION`]; a later batched write (*settle*) renames the entry
//! to the pod's key, and the controller counts such a pod once even before that.
//!
//! These are the pure rules; the host keeps which placeholders are still unused.

use super::{
    claim_among, occupancy, planned_max, tracked_subset, unclaim, versioned_statuses, PodKey, Scale,
};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

/// Pod annotation naming the placeholder a pod was admitted into.
pub const RESERVATION_ANNOTATION: &str = "workloadspread.io/reservation";

/// A placeholder older than this (by its stamp in the status) is dead: its holder hands
/// placeholders out only while they are younger than [`HANDOUT_SECONDS`], settles the
/// ones it handed out within milliseconds and returns the rest, so an older one belongs
/// to a holder that died (or lost the API server). Hosts drop it before they claim or
/// reserve in its version (never their own handed-out ones), and so does the controller:
/// a dead holder's slots return within this time, not the creating window.
pub const PLACEHOLDER_TTL_SECONDS: i64 = 5;

/// A holder hands a placeholder out only while its stamp in the status is younger than
/// this.
pub const HANDOUT_SECONDS: i64 = 2;

/// Whether a `creatingPods` key is a placeholder (`~` starts neither a pod name nor a
/// uid, so it cannot collide with a pod).
pub fn is_placeholder(key: &str) -> bool {
    key.starts_with('~')
}

/// The key of placeholder `n` of `holder`.
pub fn placeholder_key(holder: &str, n: u64) -> String {
    format!("~{holder}.{n}")
}

/// Whether `key` is a placeholder of `holder`.
pub fn held_by(key: &str, holder: &str) -> bool {
    key.strip_prefix('~')
        .and_then(|k| k.strip_prefix(holder))
        .is_some_and(|rest| rest.starts_with('.'))
}

/// Where a claim goes once placeholders are taken into account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The chosen subset holds one of the holder's unused placeholders: the pod takes
    /// that one (`key`), nothing is written.
    Take { subset: String, key: String },
    /// Another holder's placeholders decide the choice (without them an earlier subset,
    /// or any subset at all, would have room): wait for them to be used or returned
    /// rather than spill the pod.
    Wait,
    /// Claim a new slot in this subset (`None`: no candidate has room).
    Claim(Option<String>),
}

/// The holder's unused placeholders of one version: (subset, key).
pub type Unused<'a> = &'a [(&'a str, &'a str)];

/// A claim as [`place`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub pod: PodKey<'a>,
    /// The claim's generated id (the creatingPods key of an unnamed pod).
    pub new_uid: &'a str,
    pub candidates: &'a [String],
    pub scale: Scale,
    /// Placeholders are handed out only while younger than [`HANDOUT_SECONDS`] by
    /// their stamp in the status.
    pub now: Timestamp,
}

/// Chooses the subset of a claim as if the holder's `unused` placeholders were free
/// (they are its own room), and compares it with the choice were every other holder's
/// placeholders free too. A pod already tracked (a retried request) is claimed again,
/// which answers its subset. Callers drop stale placeholders first ([`drop_stale`]).
pub fn place(
    status: &WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    claimant: &Claimant<'_>,
    holder: &str,
    unused: Unused<'_>,
) -> Placement {
    let Claimant {
        pod,
        new_uid,
        candidates,
        scale,
        now,
    } = *claimant;
    if let Some(tracked) = status
        .versioned_subset_statuses
        .get(pod.version)
        .and_then(|v| {
            let by_uid = || {
                (pod.name.is_empty())
                    .then(|| tracked_subset(v, new_uid))
                    .flatten()
            };
            tracked_subset(v, pod.name).or_else(by_uid)
        })
    {
        return Placement::Claim(Some(tracked));
    }
    // Only placeholders this copy holds, young enough to hand out, are room: one it lacks
    // belongs to a recreated object or was dropped; an old one may be dropped by another
    // writer before this pod's settle.
    let handout = SignedDuration::from_secs(HANDOUT_SECONDS);
    let held = |subset: &str, key: &str| {
        status
            .versioned_subset_statuses
            .get(pod.version)
            .and_then(|v| v.iter().find(|s| s.name == subset))
            .and_then(|s| s.creating_pods.get(key))
            .is_some_and(|at| now.duration_since(at.0) < handout)
    };
    let unused: Vec<(&str, &str)> = unused.iter().copied().filter(|(s, k)| held(s, k)).collect();
    let mut own = status.clone();
    for (subset, key) in &unused {
        unclaim(&mut own, ws, pod, key, subset, scale);
    }
    let mut all = own.clone();
    let foreign: Vec<(String, String)> =
        versioned_statuses(&mut all, ws, pod.version, scale.replicas)
            .iter()
            .flat_map(|s| {
                s.creating_pods
                    .keys()
                    .filter(|k| is_placeholder(k) && !held_by(k, holder))
                    .map(|k| (s.name.clone(), k.clone()))
            })
            .collect();
    for (subset, key) in &foreign {
        unclaim(&mut all, ws, pod, key, subset, scale);
    }
    let choose = |mut status: WorkloadSpreadStatus| {
        claim_among(
            &mut status,
            ws,
            pod,
            candidates,
            scale,
            Timestamp::UNIX_EPOCH,
            new_uid,
        )
        .subset
    };
    let chosen = choose(own);
    if !foreign.is_empty() && choose(all) != chosen {
        return Placement::Wait;
    }
    let mine = |s: &str| {
        unused
            .iter()
            .find(|(u, _)| *u == s)
            .map(|(_, k)| k.to_string())
    };
    match chosen {
        Some(subset) => match mine(&subset) {
            Some(key) => Placement::Take { subset, key },
            None => Placement::Claim(Some(subset)),
        },
        None => Placement::Claim(None),
    }
}

/// Reserves up to `keys.len()` placeholders in `subset` (never more than half its free
/// room, so the last slot is always claimed by a write and another holder is never
/// starved); keys already present (a write that landed and was retried) count as
/// reserved. Returns the reserved keys.
pub fn reserve(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    version: &str,
    subset: &str,
    keys: &[String],
    scale: Scale,
    now: Timestamp,
) -> Vec<String> {
    let statuses = versioned_statuses(status, ws, version, scale.replicas);
    let Some(s) = statuses.iter().find(|s| s.name == subset) else {
        return vec![];
    };
    let mut reserved: Vec<String> = keys
        .iter()
        .filter(|k| s.creating_pods.contains_key(*k))
        .cloned()
        .collect();
    let room = match planned_max(ws, s, scale) {
        Some(max) => i64::from(max) - occupancy(s),
        None if s.missing_replicas >= 0 => i64::from(s.missing_replicas),
        // Unlimited subsets are not tracked: nothing to reserve.
        None => 0,
    };
    let more = usize::try_from(room / 2).unwrap_or(0);
    let candidates = [subset.to_string()];
    let fresh: Vec<&String> = keys.iter().filter(|k| !reserved.contains(k)).collect();
    for key in fresh.into_iter().take(more) {
        let pod = PodKey { name: key, version };
        let c = claim_among(status, ws, pod, &candidates, scale, now, "");
        if !(c.status_changed && c.subset.is_some()) {
            break;
        }
        reserved.push(key.clone());
    }
    reserved
}

/// Renames `placeholder` in `subset` to `key`, the pod admitted into it; the occupancy is
/// unchanged. False (and nothing changed) when the placeholder is gone: normally because
/// the controller already counted the pod through its reservation annotation (recording
/// the key then would count the pod twice until the controller's next count, and spill
/// pods meanwhile). A live holder settles long before anyone drops its placeholder as
/// stale, and never drops it itself.
pub fn settle(
    status: &mut WorkloadSpreadStatus,
    version: &str,
    subset: &str,
    placeholder: &str,
    key: &str,
    now: Timestamp,
) -> bool {
    let Some(s) = status
        .versioned_subset_statuses
        .get_mut(version)
        .and_then(|v| v.iter_mut().find(|s| s.name == subset))
    else {
        return false;
    };
    if s.creating_pods.remove(placeholder).is_none() {
        return false;
    }
    s.creating_pods.entry(key.to_string()).or_insert(Time(now));
    true
}

/// Frees the placeholders of `version` older than [`PLACEHOLDER_TTL_SECONDS`] (a dead
/// holder's), except those `keep` names (the caller's own, handed to pods whose settle
/// is pending). Returns whether any was dropped.
pub fn drop_stale(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    version: &str,
    scale: Scale,
    now: Timestamp,
    keep: impl Fn(&str) -> bool,
) -> bool {
    let ttl = SignedDuration::from_secs(PLACEHOLDER_TTL_SECONDS);
    let Some(statuses) = status.versioned_subset_statuses.get(version) else {
        return false;
    };
    let stale: Vec<(String, String)> = statuses
        .iter()
        .flat_map(|s| {
            s.creating_pods
                .iter()
                .filter(|(k, at)| is_placeholder(k) && now.duration_since(at.0) > ttl && !keep(k))
                .map(|(k, _)| (s.name.clone(), k.clone()))
        })
        .collect();
    let pod = PodKey { name: "", version };
    let mut dropped = false;
    for (subset, key) in stale {
        dropped |= unclaim(status, ws, pod, &key, &subset, scale);
    }
    dropped
}

#[cfg(test)]
mod tests;

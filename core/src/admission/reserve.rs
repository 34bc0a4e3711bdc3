//! Reserved slots (`docs/counter-protocol.md`, *Reserved slots*): a host replica (the
//! *holder*) reserves a block of a subset's free slots in one status write, as
//! `creatingPods` entries keyed `~<holder>.<n>` (*placeholders*), and admits pods into
//! them without writing. For every reader a placeholder is a creating pod, so the
//! subset's occupancy never exceeds its maximum. The pod admitted into a placeholder
//! carries [`RESERVATION_ANNOTATION`]; a later batched write (*settle*) renames the entry
//! to the pod's key, and the controller counts such a pod once even before that.
//!
//! These are the pure rules ([`decide`], [`reserve`], [`settle`], [`stale`]); the host
//! keeps which placeholders are still unused and applies the decisions.

use super::room::room_left;
use super::{
    chosen_subset, claim_among, claimed_subset, unclaim, versioned_statuses, Claim, Free, PodKey,
    Scale,
};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

pub use crate::api::{RESERVATION_ANNOTATION, RESERVATION_LABEL};

/// A placeholder another writer has seen for longer than this (by its own monotonic
/// clock, from when it first saw it: [`stale::Sightings`]) is *stale*: its holder hands
/// placeholders out only within [`HANDOUT_SECONDS`] of its own stamp, settles those it
/// handed out within about a second and returns the rest, so a stale one belongs to a
/// holder that died or lost the API server. The next writer settles it to the pod that
/// names it ([`stale::resolve`]); one no pod names is dropped only after
/// [`PLACEHOLDER_DROP_SECONDS`].
pub const PLACEHOLDER_TTL_SECONDS: i64 = 5;

/// A holder hands a placeholder out only while its stamp in the status is younger than
/// this.
pub const HANDOUT_SECONDS: i64 = 2;

/// A stale placeholder no pod names is dropped once seen this long: a pod admitted into
/// it may still be on its way through the rest of the admission chain (other webhooks, a
/// slow API server) — the reference's creating window tolerates the same for a written
/// claim. Until then claims that need its room wait (at most 5.5 s) and then spill,
/// never overfill.
pub const PLACEHOLDER_DROP_SECONDS: i64 = 30;

/// The pod label naming the placeholder a pod took, as a label value
/// (`<holder>.<n>`: a label value cannot start with `~`): whoever finds the placeholder
/// stale lists exactly the pods naming it.
pub fn reservation_label_value(placeholder: &str) -> Option<&str> {
    placeholder.strip_prefix('~').filter(|v| !v.is_empty())
}

/// Whether a `creatingPods` key is a placeholder (`~` starts neither a pod name nor a
/// uid, so it cannot collide with a pod).
pub fn is_placeholder(key: &str) -> bool {
    key.starts_with('~')
}

/// The key of placeholder `n` of `holder`.
pub fn placeholder_key(holder: &str, n: u64) -> String {
    format!("~{holder}.{n}")
}

/// The holder of placeholder `key` (`~<holder>.<n>`).
pub fn holder_of(key: &str) -> Option<&str> {
    key.strip_prefix('~')?.rsplit_once('.').map(|(h, _)| h)
}

/// Whether `key` is a placeholder of `holder`.
pub fn held_by(key: &str, holder: &str) -> bool {
    key.strip_prefix('~')
        .and_then(|k| k.strip_prefix(holder))
        .is_some_and(|rest| rest.starts_with('.'))
}

/// What a claim comes to once placeholders are taken into account: the one decision the
/// host applies (`docs/counter-protocol.md`, *Reserved slots*).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The chosen subset holds one of the holder's unused placeholders: the pod takes
    /// that one (`key`), nothing is written.
    Take { subset: String, key: String },
    /// Placeholders decide the choice — another holder's (without them an earlier
    /// subset, or any subset at all, would have room), or the holder's own being given
    /// back: ask again later rather than spill the pod.
    Wait,
    /// The claim rules applied to the status (write it when `status_changed`).
    Claimed(Claim),
}

/// The holder's unused placeholders of one version: (subset, key).
pub type Unused<'a> = &'a [(&'a str, &'a str)];

/// A claim as [`decide`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub pod: PodKey<'a>,
    /// The claim's generated id (the creatingPods key of an unnamed pod).
    pub new_uid: &'a str,
    pub candidates: &'a [String],
    pub scale: Scale<'a>,
    /// Placeholders are handed out only while younger than [`HANDOUT_SECONDS`] by
    /// their stamp in the status (written by this holder's own clock).
    pub now: Timestamp,
    /// Whether the claim may still wait ([`Decision::Wait`]); once it has waited its
    /// limit it is placed without the placeholders in its way.
    pub may_wait: bool,
}

/// The placeholders one holder may hand out: its own, unused ones (`unused`) and those
/// it is giving back (room of its own, but not to hand out).
#[derive(Clone, Copy, Debug)]
pub struct Holding<'a> {
    pub holder: &'a str,
    pub unused: Unused<'a>,
    pub returning: Unused<'a>,
}

/// Decides a claim on `status` (the newest copy, stale placeholders already resolved,
/// [`stale::resolve`]) for a holder with `holding`:
/// * a pod already tracked (a retried request) is answered its subset;
/// * otherwise the subset is chosen as if the holder's own placeholders were free (they
///   are its room); if every other holder's placeholders being free too would change
///   that choice, the claim waits for them;
/// * the chosen subset holding one of the holder's unused placeholders young enough to
///   hand out: [`Decision::Take`];
/// * else the claim is written into the chosen subset — or, when the holder's own
///   placeholders being given back fill it, it waits for that return (placed among
///   every candidate once it may wait no more).
///
/// On [`Decision::Claimed`] `status` holds the claim; otherwise it is unchanged (a version
/// without subset statuses always has room for the restricted claim, the one step that
/// could fill them in).
pub fn decide(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    claimant: &Claimant<'_>,
    holding: Holding<'_>,
) -> Decision {
    let Claimant {
        pod,
        new_uid,
        candidates,
        scale,
        now,
        may_wait,
    } = *claimant;
    let claim_in = |status: &mut WorkloadSpreadStatus, candidates: &[String]| {
        claim_among(status, ws, pod, candidates, scale, now, new_uid)
    };
    if is_tracked(status, pod, new_uid) {
        return Decision::Claimed(claim_in(status, candidates));
    }
    // Only placeholders this copy holds, young enough to hand out, can be taken: one it
    // lacks belongs to a recreated object or was dropped; an old one may be resolved by
    // another writer before this pod's settle.
    let handout = SignedDuration::from_secs(HANDOUT_SECONDS);
    let stamp = |subset: &str, key: &str| {
        status
            .versioned_subset_statuses
            .get(pod.version)
            .and_then(|v| v.iter().find(|s| s.name == subset))
            .and_then(|s| s.creating_pods.get(key))
            .map(|at| at.0)
    };
    let takeable: Vec<(&str, &str)> = holding
        .unused
        .iter()
        .copied()
        .filter(|(s, k)| stamp(s, k).is_some_and(|at| now.duration_since(at) < handout))
        .collect();
    // The holder's own placeholders (unused or being given back) are its room: the
    // subset is chosen as if they were free.
    let own: Vec<(&str, &str)> = holding
        .unused
        .iter()
        .chain(holding.returning)
        .copied()
        .collect();
    let choose = |free: Free<'_>| chosen_subset(status, ws, pod.version, candidates, scale, free);
    let chosen = choose(Free::own(&own));
    // Were every other holder's placeholders free too, and the choice differed, they
    // decide it: wait for them.
    if may_wait
        && has_foreign(status, pod.version, holding.holder)
        && choose(Free::own(&own).and_foreign(holding.holder)) != chosen
    {
        return Decision::Wait;
    }
    let Some(subset) = chosen else {
        return Decision::Claimed(claim_in(status, candidates));
    };
    if let Some((_, key)) = takeable.iter().find(|(s, _)| *s == subset) {
        return Decision::Take {
            subset,
            key: key.to_string(),
        };
    }
    // The holder's unused placeholders are no room for a write: claim in the subset the
    // rules chose with them free (they are elsewhere, or too old to hand out).
    let claim = claim_in(status, std::slice::from_ref(&subset));
    if claim.subset.is_some() {
        return Decision::Claimed(claim);
    }
    if may_wait {
        return Decision::Wait;
    }
    Decision::Claimed(claim_in(status, candidates))
}

/// Whether `version` records a placeholder of a holder other than `holder`.
fn has_foreign(status: &WorkloadSpreadStatus, version: &str, holder: &str) -> bool {
    placeholders(status, version).any(|k| !held_by(k, holder))
}

/// The placeholders `version` records, in every subset.
pub fn placeholders<'s>(
    status: &'s WorkloadSpreadStatus,
    version: &str,
) -> impl Iterator<Item = &'s str> + 's {
    status
        .versioned_subset_statuses
        .get(version)
        .into_iter()
        .flatten()
        .flat_map(|s| s.creating_pods.keys())
        .map(String::as_str)
        .filter(|k| is_placeholder(k))
}

/// Whether the pod (by name, or by the claim's generated id when unnamed) is already in
/// `creatingPods` of its version (a retried request).
fn is_tracked(status: &WorkloadSpreadStatus, pod: PodKey<'_>, new_uid: &str) -> bool {
    status
        .versioned_subset_statuses
        .get(pod.version)
        .is_some_and(|v| {
            claimed_subset(v, pod.name).is_some()
                || (pod.name.is_empty() && claimed_subset(v, new_uid).is_some())
        })
}

/// Reserves up to `keys.len()` placeholders in `subset` (never more than half its free
/// room, so the last slot is always claimed by a write and another holder is never
/// starved); keys already present (a write that landed and was retried) count as
/// reserved. Returns the reserved keys with their stamps in the status: a key found in
/// place keeps the stamp of the write that landed, so the holder ages it from then.
pub fn reserve(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    version: &str,
    subset: &str,
    keys: &[String],
    scale: Scale,
    now: Timestamp,
) -> Vec<(String, Timestamp)> {
    let statuses = versioned_statuses(status, ws, version, scale.replicas);
    let Some(s) = statuses.iter().find(|s| s.name == subset) else {
        return vec![];
    };
    let mut reserved: Vec<(String, Timestamp)> = keys
        .iter()
        .filter_map(|k| s.creating_pods.get(k).map(|at| (k.clone(), at.0)))
        .collect();
    // Unlimited subsets are not tracked: nothing to reserve.
    let room = room_left(ws, s, scale).unwrap_or(0);
    let more = usize::try_from(room / 2).unwrap_or(0);
    let candidates = [subset.to_string()];
    let fresh: Vec<&String> = keys
        .iter()
        .filter(|k| !reserved.iter().any(|(r, _)| r == *k))
        .collect();
    for key in fresh.into_iter().take(more) {
        let pod = PodKey { name: key, version };
        let c = claim_among(status, ws, pod, &candidates, scale, now, "");
        if !(c.status_changed && c.subset.is_some()) {
            break;
        }
        reserved.push((key.clone(), now));
    }
    reserved
}

/// What a settle did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The placeholder now carries the pod's key; the occupancy is unchanged.
    Renamed,
    /// The pod's key was in the subset's `creatingPods` already (the same request was
    /// answered by another replica too, which wrote it): the placeholder is freed, the
    /// pod counted once.
    Freed,
    /// The pod's key is in another subset (two replicas answered the same request into
    /// different subsets): the placeholder stays — an over-count, a spill at worst —
    /// until the controller counts the pod where it is.
    Kept,
    /// The placeholder is gone: normally because the controller already counted the
    /// pod through its reservation annotation (recording the key then would count the
    /// pod twice until the controller's next count, and spill pods meanwhile).
    Gone,
}

/// Renames `placeholder` in `subset` of `version` to `key`, the pod admitted into it (see
/// [`Settled`]). Used by the holder for the pods it admitted, and by any writer for a
/// stale placeholder a pod names ([`stale::resolve`]).
pub fn settle(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    (version, subset): (&str, &str),
    placeholder: &str,
    key: &str,
    scale: Scale,
    now: Timestamp,
) -> Settled {
    let Some(statuses) = status.versioned_subset_statuses.get_mut(version) else {
        return Settled::Gone;
    };
    let here = statuses.iter().find(|s| s.name == subset);
    if !here.is_some_and(|s| s.creating_pods.contains_key(placeholder)) {
        return Settled::Gone;
    }
    let creating_here = here.is_some_and(|s| s.creating_pods.contains_key(key));
    let elsewhere = statuses
        .iter()
        .any(|s| s.name != subset && s.creating_pods.contains_key(key));
    let pod = PodKey { name: "", version };
    if creating_here {
        unclaim(status, ws, pod, placeholder, subset, scale);
        return Settled::Freed;
    }
    if elsewhere {
        return Settled::Kept;
    }
    if let Some(s) = status
        .versioned_subset_statuses
        .get_mut(version)
        .and_then(|v| v.iter_mut().find(|s| s.name == subset))
    {
        s.creating_pods.remove(placeholder);
        s.creating_pods.insert(key.to_string(), Time(now));
    }
    Settled::Renamed
}

pub mod stale;

#[cfg(test)]
mod tests;

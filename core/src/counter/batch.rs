//! A batch of counter work applied to one copy of a WorkloadSpread, in the order the
//! protocol needs (`docs/counter-protocol.md`, *Order within a write*): stale
//! placeholders resolved and overdue entries recounted, then returns and settles, then
//! the policy's operations (claims, releases, unclaims), then reservations. Every claim
//! is decided once ([`decide`]) and answered whole: subset, generated id, placeholder,
//! deletion cost.
//!
//! Pure: the host keeps the queue, the write (newest copy, `resourceVersion`, 409s,
//! deadlines) and time; what one replica holds reaches the batch through [`Holdings`]
//! (the host's pool), and what the batch takes or puts back goes to it the same way.

use super::{
    apply_claim, apply_release, apply_unclaim, ClaimRequest, ClaimResponse, ReleaseRequest,
    ReleaseResponse, UnclaimRequest,
};
use crate::admission::expire::{expire, Expired, Overdue, PodFacts};
use crate::admission::reserve::stale::{self, Naming, Resolved, Stale};
use crate::admission::reserve::{decide, reserve, settle, Claimant, Decision, Holding};
use crate::admission::{unclaim, Claim, PodKey, Scale};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::controller::cost::claimed_pod_cost;
use crate::rules::Rules;
use crate::Timestamp;
use std::collections::BTreeSet;

/// One replica's placeholders of one WorkloadSpread, as a batch sees and changes them
/// (the host's pool implements it).
pub trait Holdings {
    /// The replica's placeholder prefix.
    fn holder(&self) -> &str;
    /// Its placeholders of `version` reserved and not handed out: (subset, key).
    fn unused(&self, version: &str) -> Vec<(String, String)>;
    /// Its placeholders of `version` being given back: room of its own, not to hand out.
    fn returning(&self, version: &str) -> Vec<(String, String)>;
    /// The hand-out a claim (by its key, [`ClaimRequest::key`]) already got, and whether
    /// it is confirmed (only then is it answered).
    fn handed(&self, claim_key: &str) -> Option<(&ClaimResponse, bool)>;
    /// Records `taking`'s placeholder handed to its claim with `answer` (completed with
    /// the placeholder); `None` when the placeholder is not unused here.
    fn take(&mut self, taking: Taking<'_>, answer: ClaimResponse) -> Option<ClaimResponse>;
    /// Gives back the placeholder handed to `claim_key` (its pod was refused): unused
    /// again. False when it holds none (or its settle is being written).
    fn untake(&mut self, claim_key: &str) -> bool;
}

/// A placeholder being handed to a claim.
#[derive(Clone, Copy, Debug)]
pub struct Taking<'a> {
    pub version: &'a str,
    pub subset: &'a str,
    pub placeholder: &'a str,
    pub claim_key: &'a str,
    pub scale: Scale<'static>,
    /// Answered at once; false: held for the caller to confirm the copy's spec first.
    pub confirmed: bool,
}

/// One piece of a batch.
#[derive(Clone, Copy, Debug)]
pub enum Work<'a> {
    /// A claim, and whether it may still wait for placeholders in its way.
    Claim {
        req: &'a ClaimRequest,
        may_wait: bool,
    },
    Release(&'a ReleaseRequest),
    Unclaim(&'a UnclaimRequest),
    /// Reserve up to `keys.len()` placeholders in `subset` of `version` (none in an
    /// object other than `uid`'s).
    Reserve {
        version: &'a str,
        subset: &'a str,
        keys: &'a [String],
        scale: Scale<'static>,
        uid: Option<&'a str>,
    },
    /// Rename handed-out placeholders to their pods' keys.
    Settle(&'a [Settle<'a>]),
    /// Give back placeholders of `subset` of `version`.
    Return {
        version: &'a str,
        subset: &'a str,
        keys: &'a [String],
        scale: Scale<'static>,
    },
}

/// A handed-out placeholder to rename to its pod's key.
#[derive(Clone, Copy, Debug)]
pub struct Settle<'a> {
    pub version: &'a str,
    pub subset: &'a str,
    pub placeholder: &'a str,
    pub key: &'a str,
    pub scale: Scale<'static>,
}

/// The answer to a claim or a release.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Claim(ClaimResponse),
    Release(ReleaseResponse),
}

/// How one piece of work came out.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Answered with the batch's write (or without one when nothing changed).
    Written(Answer),
    /// The operation names another object than this copy's (the WorkloadSpread was
    /// recreated): no answer from this one.
    Recreated,
    /// Answered already, whatever the write does (a placeholder taken or put back).
    Now(Answer),
    /// Placeholders in the way (or a hand-out not yet confirmed): ask again later.
    Wait,
    /// The placeholders reserved, with their stamps in the status.
    Reserved(Vec<(String, Timestamp)>),
    Done,
}

/// What an attempt knows besides the object.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    pub now: Timestamp,
    /// The pods whose departure was seen stored: their `deletingPods` entries free slots.
    pub departed: &'a BTreeSet<String>,
    /// Entries overdue for a recount, and the namespace's pods to recount them with.
    pub overdue: Option<(&'a Overdue, &'a PodFacts)>,
    /// Whether a placeholder taken is answered at once ([`Taking::confirmed`]).
    pub confirm_takes: bool,
}

/// Stale placeholders to resolve first, the pods naming them (`None`: not listed,
/// nothing is dropped), and the scale to judge them by when the batch has no claim.
#[derive(Clone, Copy, Debug, Default)]
pub struct StaleWork<'a> {
    pub stale: &'a [Stale],
    pub named: Option<&'a [Naming]>,
    pub scale: Option<Scale<'static>>,
}

/// What a batch did: one outcome per piece, in order, and whether the status changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    pub outcomes: Vec<Outcome>,
    pub resolved: Resolved,
    pub expired: Expired,
    pub changed: bool,
}

/// Applies `batch` to `ws`'s status. With `holdings` (reserved slots on) claims take
/// this replica's placeholders or wait for another's; without, every claim is written.
pub fn apply(
    ws: &mut WorkloadSpread,
    batch: &[Work<'_>],
    facts: Facts<'_>,
    stale_work: StaleWork<'_>,
    mut holdings: Option<&mut (dyn Holdings + '_)>,
) -> Applied {
    let original = ws.status.clone();
    let scale = batch_scale(batch)
        .or(stale_work.scale)
        .unwrap_or(Scale::new(0, Rules::Reference));
    let scale = scale.with_departed(facts.departed);
    let mut status = ws.status.take().unwrap_or_default();
    // A dead holder's placeholders first: settled to the pods naming them, else freed
    // for this batch's claims.
    let named = stale_work.named;
    let resolved = stale::resolve(&mut status, ws, stale_work.stale, named, scale, facts.now);
    // Entries the controller has left far too long, resolved by the pods.
    let expired = match facts.overdue {
        Some((overdue, pods)) => expire(&mut status, ws, overdue, pods, scale),
        None => Expired::default(),
    };
    ws.status = Some(status);
    // Returns and settles first: a claim must see the room a return gives back, and a
    // settle must rename its placeholder before an unclaim of the same pod removes its
    // key. Then the policy's operations; reservations last: a claim must not see a
    // block reserved in this write (its placeholders are not held until the write
    // lands, so it would count them as taken).
    let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
    for pass in [Pass::Own, Pass::Ops, Pass::Reserve] {
        for (work, outcome) in batch.iter().zip(outcomes.iter_mut()) {
            if outcome.is_none() && pass.takes(work) {
                let holdings = holdings.as_deref_mut();
                *outcome = Some(apply_one(ws, work, facts, holdings));
            }
        }
    }
    Applied {
        outcomes: outcomes.into_iter().flatten().collect(),
        resolved,
        expired,
        changed: ws.status != original,
    }
}

#[derive(Clone, Copy)]
enum Pass {
    Own,
    Ops,
    Reserve,
}

impl Pass {
    fn takes(self, work: &Work<'_>) -> bool {
        match self {
            Pass::Own => matches!(work, Work::Return { .. } | Work::Settle(_)),
            Pass::Ops => matches!(
                work,
                Work::Claim { .. } | Work::Release(_) | Work::Unclaim(_)
            ),
            Pass::Reserve => true,
        }
    }
}

/// The scale of the batch's first claim or reservation.
fn batch_scale(batch: &[Work<'_>]) -> Option<Scale<'static>> {
    batch.iter().find_map(|w| match w {
        Work::Claim { req, .. } => Some(req.scale()),
        Work::Reserve { scale, .. } => Some(*scale),
        _ => None,
    })
}

fn apply_one(
    ws: &mut WorkloadSpread,
    work: &Work<'_>,
    facts: Facts<'_>,
    holdings: Option<&mut (dyn Holdings + '_)>,
) -> Outcome {
    let (now, departed) = (facts.now, facts.departed);
    let op_uid = match work {
        Work::Claim { req, .. } => req.workload_spread.uid.as_deref(),
        Work::Release(r) => r.workload_spread.uid.as_deref(),
        Work::Unclaim(u) => u.workload_spread.uid.as_deref(),
        _ => None,
    };
    if op_uid.is_some_and(|uid| ws.metadata.uid.as_deref() != Some(uid)) {
        return Outcome::Recreated;
    }
    let holdings = match (work, holdings) {
        (Work::Claim { req, may_wait }, Some(h)) => {
            return claim_holding(ws, req, facts, h, *may_wait);
        }
        (_, holdings) => holdings,
    };
    // A placeholder handed to the refused pod is simply unused again.
    if let (Work::Unclaim(u), Some(h)) = (work, holdings) {
        if h.untake(u.key()) {
            return Outcome::Now(Answer::Release(ReleaseResponse { released: true }));
        }
    }
    let (status, outcome) = match work {
        Work::Claim { req, .. } => {
            let (s, a) = apply_claim(ws, req, now, departed);
            (s, Outcome::Written(Answer::Claim(a)))
        }
        Work::Unclaim(u) => {
            let (s, a) = apply_unclaim(ws, u);
            (s, Outcome::Written(Answer::Release(a)))
        }
        Work::Release(r) => {
            let (s, a) = apply_release(ws, r, now);
            (s, Outcome::Written(Answer::Release(a)))
        }
        Work::Reserve { uid, .. } if *uid != ws.metadata.uid.as_deref() => {
            return Outcome::Reserved(vec![]);
        }
        Work::Reserve {
            version,
            subset,
            keys,
            scale,
            ..
        } => {
            let mut status = ws.status.clone().unwrap_or_default();
            let scale = scale.with_departed(departed);
            let reserved = reserve(&mut status, ws, version, subset, keys, scale, now);
            (status, Outcome::Reserved(reserved))
        }
        Work::Settle(settles) => {
            let mut status = ws.status.clone().unwrap_or_default();
            for s in *settles {
                let scale = s.scale.with_departed(departed);
                let at = (s.version, s.subset);
                settle(&mut status, ws, at, s.placeholder, s.key, scale, now);
            }
            (status, Outcome::Done)
        }
        Work::Return {
            version,
            subset,
            keys,
            scale,
        } => {
            let mut status = ws.status.clone().unwrap_or_default();
            let pod = PodKey { name: "", version };
            let scale = scale.with_departed(departed);
            for key in *keys {
                unclaim(&mut status, ws, pod, key, subset, scale);
            }
            (status, Outcome::Done)
        }
    };
    ws.status = Some(status);
    outcome
}

/// A claim with reserved slots on, as [`decide`] says: take one of ours, wait, or claim
/// a slot with the write.
fn claim_holding(
    ws: &mut WorkloadSpread,
    req: &ClaimRequest,
    facts: Facts<'_>,
    holdings: &mut (dyn Holdings + '_),
    may_wait: bool,
) -> Outcome {
    // A retried request for a pod already given a placeholder gets the same answer,
    // once that hand-out is confirmed; until then it waits.
    if let Some((answer, confirmed)) = holdings.handed(req.key()) {
        return match confirmed {
            true => Outcome::Now(Answer::Claim(answer.clone())),
            false => Outcome::Wait,
        };
    }
    let mut status = ws.status.clone().unwrap_or_default();
    let held = Held::of(&*holdings, &req.pod.version);
    match claim_decision(ws, &mut status, req, &held, facts, may_wait) {
        Decision::Take { subset, key } => {
            let taking = (subset.as_str(), key.as_str());
            match take(ws, &status, req, taking, (facts, &held), holdings) {
                Some(answer) => Outcome::Now(Answer::Claim(answer)),
                // Decided from the holdings' own list: they hold it. Should they not,
                // the claim comes again with the next write rather than spill.
                None => Outcome::Wait,
            }
        }
        Decision::Wait => Outcome::Wait,
        Decision::Claimed(claim) => {
            let scale = req.scale().with_departed(facts.departed);
            let answer = answer(ws, &status, req, claim, scale, &held.unused_subsets());
            ws.status = Some(status);
            Outcome::Written(Answer::Claim(answer))
        }
    }
}

/// What the holdings hold of one version, read once per claim: the decision and the
/// answer's cost see the same placeholders.
struct Held {
    holder: String,
    unused: Vec<(String, String)>,
    returning: Vec<(String, String)>,
}

impl Held {
    fn of(holdings: &(dyn Holdings + '_), version: &str) -> Self {
        Held {
            holder: holdings.holder().to_string(),
            unused: holdings.unused(version),
            returning: holdings.returning(version),
        }
    }

    /// The subsets of the unused placeholders (slots, not pods, for the cost).
    fn unused_subsets(&self) -> Vec<&str> {
        self.unused.iter().map(|(s, _)| s.as_str()).collect()
    }
}

/// What [`decide`] makes of `req` on `status` (changed only by a claim) for `held`.
fn claim_decision(
    ws: &WorkloadSpread,
    status: &mut WorkloadSpreadStatus,
    req: &ClaimRequest,
    held: &Held,
    facts: Facts<'_>,
    may_wait: bool,
) -> Decision {
    let (unused, returning) = (refs(&held.unused), refs(&held.returning));
    let claimant = Claimant {
        pod: req.pod_key(),
        new_uid: &req.generated_uid,
        candidates: &req.candidates,
        scale: req.scale().with_departed(facts.departed),
        now: facts.now,
        may_wait,
    };
    let holding = Holding {
        holder: &held.holder,
        unused: &unused,
        returning: &returning,
    };
    decide(status, ws, &claimant, holding)
}

fn refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(s, k)| (s.as_str(), k.as_str())).collect()
}

/// Hands placeholder `key` of `subset` (decided on `status`) to `req`: the complete
/// answer, recorded in `holdings` (`None`: they do not hold it unused).
fn take(
    ws: &WorkloadSpread,
    status: &WorkloadSpreadStatus,
    req: &ClaimRequest,
    (subset, key): (&str, &str),
    (facts, held): (Facts<'_>, &Held),
    holdings: &mut (dyn Holdings + '_),
) -> Option<ClaimResponse> {
    let scale = req.scale().with_departed(facts.departed);
    let claim = Claim {
        subset: Some(subset.to_string()),
        generated_uid: req.pod.name.is_empty().then(|| req.generated_uid.clone()),
        status_changed: false,
    };
    let answer = answer(ws, status, req, claim, scale, &held.unused_subsets());
    let taking = Taking {
        version: &req.pod.version,
        subset,
        placeholder: key,
        claim_key: req.key(),
        scale: req.scale(),
        confirmed: facts.confirm_takes,
    };
    holdings.take(taking, answer)
}

/// A claim answered from one of `holdings`' placeholders without a write: only when
/// [`decide`] on `ws`'s status chooses a subset where one is held (anything else is the
/// queue's, which decides again on the copy it writes). Taken unconfirmed.
pub fn hand_out(
    ws: &WorkloadSpread,
    req: &ClaimRequest,
    now: Timestamp,
    holdings: &mut (dyn Holdings + '_),
) -> Option<ClaimResponse> {
    let none = BTreeSet::new();
    let facts = Facts {
        now,
        departed: &none,
        overdue: None,
        confirm_takes: false,
    };
    let mut status = ws.status.clone().unwrap_or_default();
    let held = Held::of(&*holdings, &req.pod.version);
    let Decision::Take { subset, key } = claim_decision(ws, &mut status, req, &held, facts, true)
    else {
        return None;
    };
    take(ws, &status, req, (&subset, &key), (facts, &held), holdings)
}

/// The whole answer to a claim placed by `claim` on `status`: its subset, generated id
/// and the pod's planned deletion cost (`controller::cost::claimed_pod_cost`; `unused`: the
/// subsets of placeholders held and not taken, slots rather than pods).
pub(super) fn answer(
    ws: &WorkloadSpread,
    status: &WorkloadSpreadStatus,
    req: &ClaimRequest,
    claim: Claim,
    scale: Scale<'_>,
    unused: &[&str],
) -> ClaimResponse {
    let version = &req.pod.version;
    let deletion_cost = claim
        .subset
        .as_deref()
        .and_then(|subset| claimed_pod_cost(ws, scale, status, version, subset, req.key(), unused));
    ClaimResponse {
        subset: claim.subset,
        generated_uid: claim.generated_uid,
        reservation: None,
        deletion_cost,
    }
}

#[cfg(test)]
mod tests;

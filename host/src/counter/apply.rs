//! A batch applied to one decoded WorkloadSpread, in the order the protocol needs
//! (`docs/counter-protocol.md`, *Order within a write*): stale placeholders resolved,
//! then returns and settles, then the policy's operations, then reservations. Each
//! claim is decided once, by `workloadspread_core::admission::reserve::decide`.

use super::{Answer, Applied1, CommitError, Op, Pending, Work, MAX_WAIT};
use crate::counter::reserve::Pool;
use kube::api::DynamicObject;
use std::collections::BTreeSet;
use workloadspread_core::admission::expire::{expire, Expired, Overdue, PodFacts};
use workloadspread_core::admission::reserve::stale::{self, Naming, Resolved, Stale};
use workloadspread_core::admission::reserve::{
    decide, reserve, settle, Claimant, Decision, Holding,
};
use workloadspread_core::admission::{claimed_pod_cost, unclaim, PodKey, Scale};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::counter::{
    apply_claim, apply_release, apply_unclaim, ClaimRequest, ClaimResponse, ReleaseResponse,
    UnclaimRequest,
};
use workloadspread_core::rules::Rules;
use workloadspread_core::Timestamp;

/// The stale placeholders of an attempt's copy and the pods that name them (`None`: the
/// pods could not be listed, nothing is dropped), and what resolving them did.
#[derive(Debug, Default)]
pub(super) struct Resolution {
    pub stale: Vec<Stale>,
    pub named: Option<Vec<Naming>>,
    pub done: Resolved,
    /// The scale stale placeholders are dropped with when the batch has no claim.
    pub scale: Option<Scale<'static>>,
    /// What resolving overdue entries did.
    pub expired: Expired,
}

impl Resolution {
    pub fn new(stale: Vec<Stale>, named: Option<Vec<Naming>>) -> Self {
        Resolution {
            stale,
            named,
            ..Default::default()
        }
    }
}

/// The object to write (`None` when the status did not change) and one outcome per
/// piece of work.
#[cfg(test)]
pub(super) type Applied = (Option<DynamicObject>, Vec<Applied1>);

/// Applies `batch` in order. With `pool` (reserved slots on), claims take this
/// replica's placeholders or wait for another's, and the queue's own work is applied.
#[cfg(test)]
pub(super) fn apply_batch(
    object: &DynamicObject,
    batch: &[Pending],
    now: Timestamp,
    pool: Option<&mut Pool>,
    resolution: &mut Resolution,
) -> Result<Applied, CommitError> {
    let mut ws = decode(object)?;
    let departed = BTreeSet::new();
    let facts = Facts {
        now,
        departed: &departed,
        overdue: None,
        confirm_takes: true,
    };
    let (outcomes, changed) = apply_decoded(&mut ws, batch, facts, pool, resolution);
    Ok((updated_object(object, &ws, changed)?, outcomes))
}

pub(super) fn decode(object: &DynamicObject) -> Result<WorkloadSpread, CommitError> {
    workloadspread_kube::resource::decode_workloadspread(object)
        .map_err(|e| CommitError::Codec(format!("decoding WorkloadSpread: {e}")))
}

/// `object` with `ws`'s status when `changed`.
pub(super) fn updated_object(
    object: &DynamicObject,
    ws: &WorkloadSpread,
    changed: bool,
) -> Result<Option<DynamicObject>, CommitError> {
    if !changed {
        return Ok(None);
    }
    let mut updated = object.clone();
    let status = serde_json::to_value(&ws.status)
        .map_err(|e| CommitError::Codec(format!("encoding WorkloadSpread status: {e}")))?;
    if let Some(map) = updated.data.as_object_mut() {
        map.insert("status".into(), status);
    }
    Ok(Some(updated))
}

/// What an attempt knows besides the object: its clock, the pods whose departure it has
/// seen stored (their `deletingPods` entries free slots: `admission::room`), and the
/// entries overdue for a recount with the namespace's pods (`overdue.rs`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Facts<'a> {
    pub now: Timestamp,
    pub departed: &'a BTreeSet<String>,
    pub overdue: Option<&'a (Overdue, PodFacts)>,
    /// Whether a placeholder taken is answered at once; false: taken unconfirmed, for
    /// the caller to confirm the copy's spec first (`fence.rs`).
    pub confirm_takes: bool,
}

/// [`apply_batch`] on a decoded object (the caller decodes and encodes outside the
/// queue's lock): the outcomes, and whether the status changed.
pub(super) fn apply_decoded(
    ws: &mut WorkloadSpread,
    batch: &[Pending],
    facts: Facts<'_>,
    mut pool: Option<&mut Pool>,
    resolution: &mut Resolution,
) -> (Vec<Applied1>, bool) {
    let now = facts.now;
    if let Some(pool) = pool.as_deref_mut() {
        pool.track_uid(ws.metadata.uid.as_deref());
    }
    let original = ws.status.clone();
    // A dead holder's placeholders first: settled to the pods naming them, else freed
    // for this batch's claims.
    let scale = batch_scale(batch).or(resolution.scale);
    let mut status = ws.status.take().unwrap_or_default();
    resolution.done = stale::resolve(
        &mut status,
        ws,
        &resolution.stale,
        resolution.named.as_deref(),
        scale
            .unwrap_or(Scale::new(0, Rules::Reference))
            .with_departed(facts.departed),
        now,
    );
    // Entries the controller has left far too long, resolved by the pods (`overdue.rs`).
    if let Some((overdue, pods)) = facts.overdue {
        let scale = scale
            .unwrap_or(Scale::new(0, Rules::Reference))
            .with_departed(facts.departed);
        resolution.expired = expire(&mut status, ws, overdue, pods, scale);
    }
    ws.status = Some(status);
    let mut outcomes: Vec<Option<Applied1>> = batch.iter().map(|_| None).collect();
    // Returns and settles first, then the policy's operations, then reservations: a
    // claim must see the room a return gives back (the returned placeholders have left
    // the pool already); a settle must rename its placeholder before an unclaim of the
    // same pod removes its key; and a claim must not see a block reserved in this write
    // (its placeholders are not in the pool until the write lands, so it would count
    // them as taken).
    let passes: [fn(&Work) -> bool; 3] = [
        |w| matches!(w, Work::Return(_) | Work::Settle(_)),
        |w| matches!(w, Work::Op(_)),
        |_| true,
    ];
    for pass in passes {
        for (p, outcome) in batch.iter().zip(outcomes.iter_mut()) {
            if outcome.is_some() || !pass(&p.work) {
                continue;
            }
            *outcome = Some(match &p.work {
                Work::Op(op) => apply_op(ws, op, p.since, facts, pool.as_deref_mut()),
                work => apply_own(ws, work, facts),
            });
        }
    }
    let outcomes: Vec<Applied1> = outcomes.into_iter().flatten().collect();
    let changed = ws.status != original;
    (outcomes, changed)
}

/// The scale of the batch's first claim or reservation.
fn batch_scale(batch: &[Pending]) -> Option<Scale<'static>> {
    batch.iter().find_map(|p| match &p.work {
        Work::Op(Op::Claim(c)) => Some(super::scale_of(c)),
        Work::Reserve { scale, .. } => Some(*scale),
        _ => None,
    })
}

fn apply_op(
    ws: &mut WorkloadSpread,
    op: &Op,
    since: std::time::Instant,
    facts: Facts<'_>,
    pool: Option<&mut Pool>,
) -> Applied1 {
    let now = facts.now;
    if let Some(uid) = &op.key().uid {
        if ws.metadata.uid.as_ref() != Some(uid) {
            return Applied1::Written(Err(CommitError::Recreated {
                name: op.key().name.clone(),
            }));
        }
    }
    let mut pool = pool;
    if let (Op::Unclaim(u), Some(pool)) = (op, pool.as_deref_mut()) {
        // A placeholder handed to the refused pod is simply unused again.
        if pool.untake(unclaim_key(u)) {
            return Applied1::Now(Answer::Release(ReleaseResponse { released: true }));
        }
    }
    let (status, answer) = match (op, pool) {
        (Op::Claim(c), Some(pool)) => {
            let may_wait = since.elapsed() < MAX_WAIT;
            return claim_reserving(ws, c, facts, pool, may_wait);
        }
        (Op::Claim(c), None) => {
            let (s, a) = apply_claim(ws, c, now, facts.departed);
            (s, Answer::Claim(a))
        }
        (Op::Release(r), _) => {
            let (s, a) = apply_release(ws, r, now);
            (s, Answer::Release(a))
        }
        (Op::Unclaim(u), _) => {
            let (s, a) = apply_unclaim(ws, u);
            (s, Answer::Release(a))
        }
    };
    ws.status = Some(status);
    Applied1::Written(Ok(answer))
}

fn unclaim_key(u: &UnclaimRequest) -> &str {
    u.generated_uid.as_deref().unwrap_or(&u.pod.name)
}

/// The claimant and holding of `c` for this replica's `pool`, and what [`decide`] made
/// of it on `status` (changed only by a claim).
pub(super) fn decide_claim(
    ws: &WorkloadSpread,
    status: &mut workloadspread_core::api::v1beta1::WorkloadSpreadStatus,
    c: &ClaimRequest,
    pool: &Pool,
    facts: Facts<'_>,
    may_wait: bool,
) -> Decision {
    let unused = pool.unused(&c.pod.version);
    let returning = pool.returning(&c.pod.version);
    let unused_refs: Vec<(&str, &str)> = unused
        .iter()
        .map(|(s, k)| (s.as_str(), k.as_str()))
        .collect();
    let returning_refs: Vec<(&str, &str)> = returning
        .iter()
        .map(|(s, k)| (s.as_str(), k.as_str()))
        .collect();
    let claimant = Claimant {
        pod: PodKey {
            name: &c.pod.name,
            version: &c.pod.version,
        },
        new_uid: &c.generated_uid,
        candidates: &c.candidates,
        scale: super::scale_of(c).with_departed(facts.departed),
        now: facts.now,
        may_wait,
    };
    let holding = Holding {
        holder: pool.holder(),
        unused: &unused_refs,
        returning: &returning_refs,
    };
    decide(status, ws, &claimant, holding)
}

/// The pod's planned deletion cost for a claim placing it in `subset` on `status`
/// (`admission::claimed_pod_cost`; the pool's unused placeholders are slots, not pods).
pub(super) fn claim_cost(
    ws: &WorkloadSpread,
    status: &workloadspread_core::api::v1beta1::WorkloadSpreadStatus,
    c: &ClaimRequest,
    (subset, departed): (&str, &BTreeSet<String>),
    pool: &Pool,
) -> Option<i64> {
    let unused = pool.unused(&c.pod.version);
    let unused: Vec<&str> = unused.iter().map(|(s, _)| s.as_str()).collect();
    let key = match c.pod.name.is_empty() {
        true => c.generated_uid.as_str(),
        false => c.pod.name.as_str(),
    };
    let version = &c.pod.version;
    let scale = super::scale_of(c).with_departed(departed);
    claimed_pod_cost(ws, scale, status, version, subset, key, &unused)
}

/// The answer of a claim taking placeholder `key` of `subset` (decided on `status`),
/// recorded in `pool` (`None`: the pool does not hold it unused).
pub(super) fn take(
    pool: &mut Pool,
    c: &ClaimRequest,
    (ws, status): (
        &WorkloadSpread,
        &workloadspread_core::api::v1beta1::WorkloadSpreadStatus,
    ),
    (subset, key): (String, &str),
    (departed, confirmed): (&BTreeSet<String>, bool),
) -> Option<ClaimResponse> {
    let answer = ClaimResponse {
        subset: Some(subset.clone()),
        generated_uid: c.pod.name.is_empty().then(|| c.generated_uid.clone()),
        reservation: None,
        deletion_cost: claim_cost(ws, status, c, (&subset, departed), pool),
    };
    let slot = (c.pod.version.clone(), subset);
    let (claim_key, scale) = (super::claim_key(c), super::scale_of(c));
    match confirmed {
        true => pool.take(&slot, key, claim_key, scale, answer),
        false => pool.take_unconfirmed(&slot, key, claim_key, scale, answer),
    }
}

/// A claim with reserved slots on, as [`decide`] says: take one of ours, wait, or
/// claim a slot with the write.
fn claim_reserving(
    ws: &mut WorkloadSpread,
    c: &ClaimRequest,
    facts: Facts<'_>,
    pool: &mut Pool,
    may_wait: bool,
) -> Applied1 {
    // A retried request for a pod already given a placeholder gets the same answer,
    // once that hand-out is confirmed (`fence.rs`); until then it waits.
    if let Some(h) = pool.handed(super::claim_key(c)) {
        return match h.confirmed {
            true => Applied1::Now(Answer::Claim(h.answer.clone())),
            false => Applied1::Wait,
        };
    }
    let mut status = ws.status.clone().unwrap_or_default();
    match decide_claim(ws, &mut status, c, pool, facts, may_wait) {
        Decision::Take { subset, key } => {
            // Unconfirmed unless the caller says so: `attempt.rs` confirms the copy's
            // spec before it answers.
            let how = (facts.departed, facts.confirm_takes);
            match take(pool, c, (ws, &status), (subset, &key), how) {
                Some(answer) => Applied1::Now(Answer::Claim(answer)),
                // Decided from the pool's own list: it holds it. Should it not, the claim
                // comes again with the next write rather than spill.
                None => Applied1::Wait,
            }
        }
        Decision::Wait => Applied1::Wait,
        Decision::Claimed(claim) => {
            let deletion_cost = claim
                .subset
                .as_deref()
                .and_then(|subset| claim_cost(ws, &status, c, (subset, facts.departed), pool));
            ws.status = Some(status);
            Applied1::Written(Ok(Answer::Claim(ClaimResponse {
                subset: claim.subset,
                generated_uid: claim.generated_uid,
                reservation: None,
                deletion_cost,
            })))
        }
    }
}

/// The queue's own work: reserve, settle, return.
fn apply_own(ws: &mut WorkloadSpread, work: &Work, facts: Facts<'_>) -> Applied1 {
    let (now, departed) = (facts.now, facts.departed);
    let mut status = ws.status.clone().unwrap_or_default();
    let outcome = match work {
        Work::Reserve { uid, .. } if *uid != ws.metadata.uid => Applied1::Reserved(vec![]),
        Work::Reserve {
            slot, keys, scale, ..
        } => {
            let (version, subset) = slot;
            let scale = scale.with_departed(departed);
            Applied1::Reserved(reserve(&mut status, ws, version, subset, keys, scale, now))
        }
        Work::Settle(handed) => {
            for h in handed {
                let (version, subset) = &h.slot;
                let (placeholder, key) = (&h.placeholder, &h.key);
                let at = (version.as_str(), subset.as_str());
                let scale = h.scale.with_departed(departed);
                settle(&mut status, ws, at, placeholder, key, scale, now);
            }
            Applied1::Done
        }
        Work::Return(r) => {
            let (version, subset) = &r.slot;
            let pod = PodKey { name: "", version };
            let scale = r.scale.with_departed(departed);
            for key in &r.keys {
                unclaim(&mut status, ws, pod, key, subset, scale);
            }
            Applied1::Done
        }
        Work::Op(_) => Applied1::Done,
    };
    ws.status = Some(status);
    outcome
}

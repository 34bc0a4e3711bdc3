//! A batch applied to one decoded WorkloadSpread: the queue's work translated to
//! `workloadspread_core::counter::batch`, which applies it in the order the protocol
//! needs (`docs/counter-protocol.md`, *Order within a write*) and answers every claim
//! whole; the object decoded before and encoded after.

use super::{Applied1, CommitError, Op, Pending, Work, MAX_WAIT};
use crate::counter::reserve::{Handed, Pool};
use kube::api::DynamicObject;
use std::collections::BTreeSet;
use workloadspread_core::admission::expire::{Expired, Overdue, PodFacts};
use workloadspread_core::admission::reserve::stale::{Naming, Resolved, Stale};
use workloadspread_core::admission::Scale;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::counter::batch::{self, Holdings, Outcome, StaleWork};
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
/// queue's lock): the outcomes, and whether the status changed. The rules and their
/// order are `workloadspread_core::counter::batch`'s; this translates the queue's work
/// and the pool (its [`Holdings`]) to them, and how long each claim has waited.
pub(super) fn apply_decoded(
    ws: &mut WorkloadSpread,
    batch: &[Pending],
    facts: Facts<'_>,
    mut pool: Option<&mut Pool>,
    resolution: &mut Resolution,
) -> (Vec<Applied1>, bool) {
    if let Some(pool) = pool.as_deref_mut() {
        pool.track_uid(ws.metadata.uid.as_deref());
    }
    let settles: Vec<Vec<batch::Settle<'_>>> = batch
        .iter()
        .map(|p| match &p.work {
            Work::Settle(handed) => handed.iter().map(settle_of).collect(),
            _ => vec![],
        })
        .collect();
    let works: Vec<batch::Work<'_>> = batch
        .iter()
        .zip(&settles)
        .map(|(p, settles)| work_of(p, settles))
        .collect();
    let core_facts = batch::Facts {
        now: facts.now,
        departed: facts.departed,
        overdue: facts.overdue.map(|(o, p)| (o, p)),
        confirm_takes: facts.confirm_takes,
    };
    let stale = StaleWork {
        stale: &resolution.stale,
        named: resolution.named.as_deref(),
        scale: resolution.scale,
    };
    let holdings = pool.map(|p| p as &mut dyn Holdings);
    let applied = batch::apply(ws, &works, core_facts, stale, holdings);
    resolution.done = applied.resolved;
    resolution.expired = applied.expired;
    let outcomes = batch
        .iter()
        .zip(applied.outcomes)
        .map(|(p, o)| applied1(p, o))
        .collect();
    (outcomes, applied.changed)
}

fn settle_of(h: &Handed) -> batch::Settle<'_> {
    batch::Settle {
        version: &h.slot.0,
        subset: &h.slot.1,
        placeholder: &h.placeholder,
        key: &h.key,
        scale: h.scale,
    }
}

fn work_of<'a>(p: &'a Pending, settles: &'a [batch::Settle<'a>]) -> batch::Work<'a> {
    match &p.work {
        Work::Op(Op::Claim(req)) => batch::Work::Claim {
            req,
            may_wait: p.since.elapsed() < MAX_WAIT,
        },
        Work::Op(Op::Release(r)) => batch::Work::Release(r),
        Work::Op(Op::Unclaim(u)) => batch::Work::Unclaim(u),
        Work::Reserve {
            slot,
            keys,
            scale,
            uid,
        } => batch::Work::Reserve {
            version: &slot.0,
            subset: &slot.1,
            keys,
            scale: *scale,
            uid: uid.as_deref(),
        },
        Work::Settle(_) => batch::Work::Settle(settles),
        Work::Return(r) => batch::Work::Return {
            version: &r.slot.0,
            subset: &r.slot.1,
            keys: &r.keys,
            scale: r.scale,
        },
    }
}

fn applied1(p: &Pending, outcome: Outcome) -> Applied1 {
    match outcome {
        Outcome::Written(answer) => Applied1::Written(Ok(answer)),
        Outcome::Recreated => {
            let name = match &p.work {
                Work::Op(op) => op.key().name.clone(),
                _ => String::new(),
            };
            Applied1::Written(Err(CommitError::Recreated { name }))
        }
        Outcome::Now(answer) => Applied1::Now(answer),
        Outcome::Wait => Applied1::Wait,
        Outcome::Reserved(keys) => Applied1::Reserved(keys),
        Outcome::Done => Applied1::Done,
    }
}

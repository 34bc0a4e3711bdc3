//! A claim answered from one of this replica's placeholders without the queue: only when
//! `decide` on the newest copy (the queue's or the reflector's) says *take*. Anything
//! else — a write, a wait, a copy showing placeholders of ours the pool does not know
//! yet, or deletions in the claim's version whose departure the queue must confirm
//! first (`departures.rs`) — is left to the queue, which decides again on the copy it
//! writes. What it takes is answered only once [`super::fence`] confirms the copy's spec
//! is the stored one.

use super::fence::SpecId;
use super::{lock, Committer, Queue, QueueKey};
use crate::counter::reserve::Pool;
use crate::metrics::ReservationEvent;
use std::sync::Arc;
use workloadspread_core::admission::reserve::{held_by, placeholders};
use workloadspread_core::api::v1beta1::WorkloadSpreadStatus;
use workloadspread_core::counter::batch::hand_out;
use workloadspread_core::counter::{ClaimRequest, ClaimResponse};

impl Committer {
    /// A claim answered from one of this replica's placeholders, without a write: only
    /// when the claim rules on the newest copy choose a subset where one is held. A
    /// placeholder taken now is [`Reserved::Taken`], unconfirmed: the caller confirms
    /// the copy's spec is the stored one before answering (`fence.rs`).
    pub(super) fn from_reservation(
        self: &Arc<Self>,
        key: &QueueKey,
        c: &ClaimRequest,
    ) -> Option<Reserved> {
        self.reserving?;
        let queue = lock(&self.queues).get(key).cloned()?;
        let (refill, spec, placeholder) = {
            let mut shared = lock(&queue.shared);
            // A retried request for a pod given a placeholder gets it again once that
            // hand-out is confirmed; until then the queue waits for it to be confirmed
            // or withdrawn.
            if let Some(h) = shared.pool.handed(c.key()) {
                return h.confirmed.then(|| Reserved::Confirmed(h.answer.clone()));
            }
            if shared.pool.unused(&c.pod.version).is_empty() {
                return None;
            }
            let ws = shared.newest(self.reflected_arc(&key.0, &key.1))?;
            let spec = SpecId::of(&ws.metadata);
            // A read found the spec edited since this copy: the queue reads it live.
            if shared
                .fence
                .stored
                .as_ref()
                .is_some_and(|s| spec.is_behind(s))
            {
                return None;
            }
            if c.workload_spread.uid.is_some() && ws.metadata.uid != c.workload_spread.uid {
                return None;
            }
            shared.pool.track_uid(ws.metadata.uid.as_deref());
            // Without a status there is no placeholder to take.
            let status = ws.status.as_ref()?;
            // A block of ours this copy shows but the pool does not hold yet (the watch
            // saw its write first) would count as taken: leave the claim to the queue.
            if !own_placeholders_known(status, &c.pod.version, &shared.pool) {
                return None;
            }
            // A deletion in flight may free a slot ahead of the placeholder's subset once
            // its departure is confirmed, which takes a read: the queue's business.
            if deletions_recorded(status, &c.pod.version) {
                return None;
            }
            let answer = hand_out(&ws, c, self.now(), &mut shared.pool)?;
            let refill = self.claimed(&ws, &mut shared.pool, c, &answer);
            (refill, spec, answer.reservation)
        };
        self.metrics.reservation(ReservationEvent::Taken, 1);
        if let Some(work) = refill {
            self.send(key, work, None);
        }
        Some(Reserved::Taken {
            queue,
            spec,
            placeholder: placeholder.unwrap_or_default(),
        })
    }
}

/// A claim [`Committer::from_reservation`] answered.
pub(super) enum Reserved {
    /// A retried request: the pod's hand-out was confirmed already.
    Confirmed(ClaimResponse),
    /// A placeholder taken on the copy whose spec is `spec`, held unconfirmed in
    /// `queue`'s pool: not answered before a read shows that spec is the stored one.
    Taken {
        queue: Queue,
        spec: SpecId,
        placeholder: String,
    },
}

/// Whether `version` records a pod's deletion in any subset.
fn deletions_recorded(status: &WorkloadSpreadStatus, version: &str) -> bool {
    status
        .versioned_subset_statuses
        .get(version)
        .into_iter()
        .flatten()
        .any(|s| !s.deleting_pods.is_empty())
}

/// Whether every placeholder of this replica in `version` is one its pool knows.
fn own_placeholders_known(status: &WorkloadSpreadStatus, version: &str, pool: &Pool) -> bool {
    placeholders(status, version)
        .filter(|k| held_by(k, pool.holder()))
        .all(|k| pool.knows(k))
}

//! A hand-out's proof that the spec it was decided on is the stored one.
//!
//! A placeholder is handed out without a write, on the copy of the WorkloadSpread this
//! replica holds (the queue's last read or write, or the watch's). A spec edit — a
//! maximum lowered, a subset removed or made unschedulable — is stored before the watch
//! brings it; a placeholder reserved under the old spec and handed out meanwhile admits a
//! pod the new one forbids (seen in CI: `fault_matrix::a_lowered_maximum_…`, a pod added
//! to a subset whose maximum had been lowered to what it held). A claim written to the
//! status cannot do that: its write names the `resourceVersion` it was decided on, and an
//! edit makes it conflict.
//!
//! So a hand-out is answered only once a read *begun after it was decided* shows the
//! stored object with the uid and generation of the copy it was decided on: metadata
//! only, no `resourceVersion` (read from etcd); a spec edit bumps the generation, status
//! writes do not. One read serves every hand-out decided before it began and after the
//! one before began (under load, one read per round trip, not per pod). Until then the
//! hand-out is held unconfirmed (`Pool::take_unconfirmed`): not answered, not settled,
//! and a retried request for the same pod waits. When the stored generation has moved
//! (or the read fails, or the waiting caller goes away), the hand-out is withdrawn
//! (`Pool::withdraw`) and the claim decided again on a copy read live. An edit stored after the read began is in the same window as an edit stored
//! after a claim's write: the pod was admitted under the spec stored when it was
//! decided.

use super::{lock, CommitError, Committer, Queue, QueueKey, CALL_TIMEOUT};
use crate::metrics::ReservationEvent;
use futures::future::{BoxFuture, FutureExt, Shared};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::Api;
use std::time::Instant;
use workloadspread_core::counter::ClaimResponse;

/// Which spec a copy carries: the object's uid (a recreated WorkloadSpread is another
/// one) and its generation (bumped by every spec edit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SpecId {
    uid: Option<String>,
    generation: Option<i64>,
}

impl SpecId {
    pub(super) fn of(meta: &ObjectMeta) -> Self {
        SpecId {
            uid: meta.uid.clone(),
            generation: meta.generation,
        }
    }

    /// Whether a copy carrying `self` is older than the stored `stored`: another object,
    /// or a lower generation.
    pub(super) fn is_behind(&self, stored: &SpecId) -> bool {
        self.uid != stored.uid || self.generation < stored.generation
    }
}

/// What a read found: the stored spec, `None` for a deleted object.
type Found = Result<Option<SpecId>, CommitError>;

/// The last read a queue began, and when: hand-outs decided before that wait for it.
#[derive(Default)]
pub(super) struct Fence {
    current: Option<(Instant, Shared<BoxFuture<'static, Found>>)>,
    /// The highest stored spec a read found: copies behind it decide nothing without
    /// a live read (the watch has not brought the edit yet).
    pub(super) stored: Option<SpecId>,
}

/// A hand-out taken and not confirmed yet ([`Pool::take_unconfirmed`]): withdrawn if
/// dropped unresolved (its caller went away while the read was in flight).
///
/// [`Pool::take_unconfirmed`]: crate::counter::reserve::Pool::take_unconfirmed
pub(super) struct Unconfirmed {
    queue: Queue,
    key: String,
    placeholder: String,
    resolved: bool,
}

impl Unconfirmed {
    /// The hand-out of `placeholder` to the pod with claim key `key`.
    pub(super) fn new(queue: Queue, key: &str, placeholder: String) -> Self {
        Unconfirmed {
            queue,
            key: key.to_string(),
            placeholder,
            resolved: false,
        }
    }

    /// Confirms the hand-out when `same` (its spec is the stored one) and gives its
    /// answer; otherwise withdraws it: its placeholder is unused again, and `None`.
    /// `None` too when the pool no longer holds this hand-out (the object recreated).
    pub(super) fn resolve(mut self, same: bool) -> Option<ClaimResponse> {
        self.resolved = true;
        let mut shared = lock(&self.queue.shared);
        let h = shared.pool.handed(&self.key)?;
        if h.placeholder != self.placeholder {
            return None;
        }
        if h.confirmed || same {
            return shared.pool.confirm(&self.key);
        }
        shared.pool.withdraw(&self.key, &self.placeholder);
        None
    }
}

impl Drop for Unconfirmed {
    fn drop(&mut self) {
        if !self.resolved {
            let mut shared = lock(&self.queue.shared);
            shared.pool.withdraw(&self.key, &self.placeholder);
        }
    }
}

impl Fence {
    /// Notes a spec read stored (by a fence read or a live read of the whole object):
    /// the newest generation of the object last seen.
    pub(super) fn saw(&mut self, stored: SpecId) {
        if self
            .stored
            .as_ref()
            .is_none_or(|known| known.is_behind(&stored))
        {
            self.stored = Some(stored);
        }
    }
}

impl Committer {
    /// Whether the spec `decided_on` (the copy a hand-out was decided on at `decided`)
    /// is still the stored one, by a read begun no earlier than `decided`. A failed read
    /// confirms nothing.
    pub(super) async fn spec_unchanged(
        &self,
        key: &QueueKey,
        queue: &Queue,
        decided_on: &SpecId,
        decided: Instant,
    ) -> bool {
        // A read begun after `decided` is joined; one begun before and still in flight
        // is waited for, and then the next read (every hand-out decided meanwhile
        // shares it) — one read per round trip under load, never one begun earlier.
        let found = loop {
            let (read, joined) = {
                let mut shared = lock(&queue.shared);
                match &shared.fence.current {
                    Some((began, read)) if *began >= decided => (read.clone(), true),
                    Some((_, read)) if read.peek().is_none() => (read.clone(), false),
                    _ => {
                        self.metrics.reservation(ReservationEvent::SpecRead, 1);
                        let read = self.spec_read(key).boxed().shared();
                        shared.fence.current = Some((Instant::now(), read.clone()));
                        (read, true)
                    }
                }
            };
            let found = read.await;
            if joined {
                break found;
            }
        };
        match found {
            Ok(Some(stored)) => {
                let same = *decided_on == stored;
                if !same {
                    self.metrics.reservation(ReservationEvent::SpecMoved, 1);
                }
                lock(&queue.shared).fence.saw(stored);
                same
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(
                    workloadspread = key.1,
                    "confirming a hand-out's spec: {e}; the claim is decided again"
                );
                false
            }
        }
    }

    /// One metadata read of `key`, abandoned after [`CALL_TIMEOUT`].
    fn spec_read(&self, key: &QueueKey) -> impl std::future::Future<Output = Found> + 'static {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.0, &self.resource);
        let name = key.1.clone();
        let took = self.metrics.spec_read_seconds.clone();
        async move {
            let began = Instant::now();
            let answer = tokio::time::timeout(CALL_TIMEOUT, api.get_metadata_opt(&name)).await;
            took.observe(began.elapsed().as_secs_f64());
            match answer {
                Ok(Ok(found)) => Ok(found.map(|m| SpecId::of(&m.metadata))),
                Ok(Err(e)) => Err(CommitError::Read {
                    name,
                    reason: e.to_string(),
                }),
                Err(_) => Err(CommitError::Read {
                    name,
                    reason: format!("no answer in {CALL_TIMEOUT:?}"),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(uid: &str, generation: i64) -> SpecId {
        SpecId {
            uid: Some(uid.into()),
            generation: Some(generation),
        }
    }

    #[test]
    fn a_copy_is_behind_a_later_generation_or_another_object() {
        let cases = [
            (id("u", 2), id("u", 2), false, "the same spec"),
            (id("u", 2), id("u", 3), true, "an edit stored since"),
            (id("u", 3), id("u", 2), false, "a read older than the copy"),
            (id("u", 2), id("v", 1), true, "the object recreated"),
        ];
        for (copy, stored, behind, why) in cases {
            assert_eq!(copy.is_behind(&stored), behind, "{why}");
        }
    }
}

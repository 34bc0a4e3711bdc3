//! A batch's write: the newest copy of the WorkloadSpread (the queue's own, the
//! reflector's, or a live read), stale placeholders resolved against the pods that may
//! name them, the batch applied, one status write guarded by `resourceVersion`; a 409
//! re-reads and re-applies, until the batch's deadline.

use super::apply::{apply_decoded, decode, updated_object, Facts, Resolution};
use super::fence::{SpecId, Unconfirmed};
use super::queue::still_awaited;
use super::{
    internal, lock, Answer, Applied1, CommitError, Committer, Listed, Op, Pending, Queue, QueueKey,
    Shared, Work, ANSWER_BUDGET, CALL_TIMEOUT, COMMIT_DEADLINE, DONE, LIST_EVERY, MAX_ATTEMPTS,
    SETTLE_GIVE_UP,
};
use crate::capabilities::ProviderError as _;
use crate::metrics::ReservationEvent;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams};
use kube::Api;
use std::time::{Duration, Instant};
use workloadspread_core::admission::reserve::stale::{self, Naming, Stale};
use workloadspread_kube::status::{StatusError, StatusWrite};

impl Committer {
    /// Applies `batch` to the WorkloadSpread and writes the status once; on 409
    /// re-reads and re-applies. Answers every operation; returns what is carried to the
    /// next batch (claims waiting for placeholders in their way, refills).
    pub(super) async fn commit(
        &self,
        api: &Api<DynamicObject>,
        key: &QueueKey,
        queue: &Queue,
        batch: Vec<Pending>,
    ) -> Vec<Pending> {
        let name = key.1.as_str();
        let (mut batch, abandoned) = still_awaited(batch);
        self.metrics.abandoned.inc_by(abandoned as u64);
        if batch.is_empty() {
            return vec![];
        }
        self.metrics.batch_size.observe(batch.len() as f64);
        let mut carried = vec![];
        let mut failure = CommitError::NotAttempted;
        let deadline = answer_deadline(&batch);
        // Set when a copy's uid differs from an operation's: read the object live once
        // (a recreated WorkloadSpread) before answering "recreated".
        let (mut read_live, mut refreshed) = (false, false);
        for attempt in 0..MAX_ATTEMPTS {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                // Only the operations whose own time is up fail; the rest is carried to
                // the next batch with the time they have left.
                let (expired, rest) = past_their_time(batch);
                if !rest.is_empty() {
                    self.failed(queue, expired, &failure.gave_up(ANSWER_BUDGET));
                    carried.extend(rest);
                    return carried;
                }
                batch = expired;
                failure = failure.gave_up(COMMIT_DEADLINE);
                break;
            }
            let budget = left.min(CALL_TIMEOUT);
            let known = match std::mem::take(&mut read_live) {
                true => None,
                false => {
                    // A clone: claims answered without the queue read it meanwhile.
                    let (cached, stored) = {
                        let shared = lock(&queue.shared);
                        (shared.cached.clone(), shared.fence.stored.clone())
                    };
                    let reflected = self.reflected_arc(&key.0, name).map(|o| (*o).clone());
                    // A copy behind the spec a read found stored is read again.
                    newer(cached, reflected)
                        .filter(|o| stored.is_none_or(|s| !SpecId::of(&o.metadata).is_behind(&s)))
                }
            };
            let object = match known {
                Some(o) => o,
                None => match read(api, name, budget).await {
                    Ok(o) => {
                        lock(&queue.shared).fence.saw(SpecId::of(&o.metadata));
                        o
                    }
                    Err(e) if e.is_gone() => {
                        failure = e;
                        break;
                    }
                    Err(e) => {
                        failure = e;
                        read_live = true;
                        backoff(attempt).await;
                        continue;
                    }
                },
            };
            if !refreshed && uid_differs(&object, &batch) {
                (read_live, refreshed) = (true, true);
                continue;
            }
            // After the copy written on is known: releases of pods no longer running are
            // left to the controller's recount (`departed.rs`).
            batch = self.drop_departed(&key.0, batch, budget).await;
            if batch.is_empty() {
                return carried;
            }
            // Decoded and encoded outside the lock claims answered without the queue take.
            let mut ws = match decode(&object) {
                Ok(ws) => ws,
                Err(e) => {
                    failure = e;
                    break;
                }
            };
            let mut resolution = self.resolution(queue, &ws, budget).await;
            // Deletions free slots only once their pods' departure is read stored
            // (`departures.rs`).
            let departed = self.departures(&key.0, &ws, &batch, budget).await;
            let overdue = self.overdue(queue, &ws, budget).await;
            let (mut outcomes, changed) = {
                let mut shared = lock(&queue.shared);
                let reserving = self.reserving.is_some();
                let pool = reserving.then_some(&mut shared.pool);
                let facts = Facts {
                    now: self.now(),
                    departed: &departed,
                    overdue: overdue.as_ref(),
                    confirm_takes: false,
                };
                apply_decoded(&mut ws, &batch, facts, pool, &mut resolution)
            };
            // Placeholders taken on this copy are answered only once a read, begun now,
            // shows its spec is the stored one (`fence.rs`); else they are withdrawn and
            // their claims decided again by the next batch, which reads the stored spec.
            self.confirm_takes(key, queue, &object, &batch, &mut outcomes, deadline)
                .await;
            if resolution.done.settled + resolution.done.dropped > 0 {
                let done = resolution.done;
                self.metrics
                    .reservation(ReservationEvent::StaleSettled, done.settled);
                self.metrics
                    .reservation(ReservationEvent::StaleDropped, done.dropped);
            }
            let updated = match updated_object(&object, &ws, changed) {
                Ok(u) => u,
                Err(e) => {
                    failure = e;
                    break;
                }
            };
            batch = self.settle_early(queue, batch, outcomes.iter(), &mut carried);
            let outcomes: Vec<Applied1> = outcomes
                .into_iter()
                .filter(|o| !matches!(o, Applied1::Now(_) | Applied1::Wait | Applied1::Again))
                .collect();
            let Some(updated) = updated else {
                carried.extend(self.answer(queue, object, batch, outcomes));
                return carried;
            };
            // What the read left of the deadline, not the read's own budget. None left: a
            // write abandoned at once would only say "no answer in 0ns"; the loop's head
            // answers what is due and carries the rest.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                failure = CommitError::NoTimeToWrite { name: name.into() };
                read_live = true;
                continue;
            }
            self.metrics.status_writes.inc();
            let budget = left.min(CALL_TIMEOUT);
            let reserves = batch.iter().any(|p| matches!(p.work, Work::Reserve { .. }));
            let late = reserves && self.late_reserve_answer();
            let write = async {
                let written = self.status.replace_within(&updated, budget).await;
                if late {
                    tokio::time::sleep(super::LATE_ANSWER).await;
                }
                written
            };
            let written = match tokio::time::timeout(budget, write).await {
                Ok(Ok(written)) => Ok(written),
                Ok(Err(StatusError::Api(e))) => Err(*e),
                Ok(Err(StatusError::Timeout(_))) | Err(_) => {
                    // It may have landed: the next attempt reads the object again.
                    self.metrics.unanswered_writes.inc();
                    failure = CommitError::Write {
                        name: name.into(),
                        reason: format!("no answer in {budget:?}"),
                    };
                    read_live = true;
                    continue;
                }
            };
            match written {
                Ok(StatusWrite::Written(written)) => {
                    self.count_expired(resolution.expired);
                    carried.extend(self.answer(queue, *written, batch, outcomes));
                    return carried;
                }
                Ok(StatusWrite::Conflict) => {
                    // Someone wrote meanwhile; the reflector may not have seen it yet.
                    self.metrics.conflicts.inc();
                    failure = CommitError::Conflict { name: name.into() };
                    read_live = true;
                }
                Ok(StatusWrite::Gone) => {
                    failure = CommitError::Deleted { name: name.into() };
                    break;
                }
                // Invalid, Forbidden, ...: retrying cannot help.
                Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                    failure = CommitError::Write {
                        name: name.into(),
                        reason: s.message,
                    };
                    break;
                }
                Err(e) => {
                    failure = CommitError::Write {
                        name: name.into(),
                        reason: e.to_string(),
                    };
                    read_live = true;
                    backoff(attempt).await;
                }
            }
        }
        tracing::warn!(
            workloadspread = name,
            kind = failure.metric_label(),
            "counter batch failed: {failure}"
        );
        self.failed(queue, batch, &failure);
        carried
    }

    /// Confirms the placeholders this attempt took for `batch` (unconfirmed, on
    /// `object`) once a read begun now shows `object`'s spec is the stored one; else —
    /// an edit since, a failed read, no answer before `deadline` — withdraws them and
    /// turns their outcomes into [`Applied1::Again`].
    async fn confirm_takes(
        &self,
        key: &QueueKey,
        queue: &Queue,
        object: &DynamicObject,
        batch: &[Pending],
        outcomes: &mut [Applied1],
        deadline: tokio::time::Instant,
    ) {
        let taken: Vec<(usize, String, String)> = {
            let shared = lock(&queue.shared);
            batch
                .iter()
                .zip(outcomes.iter())
                .enumerate()
                .filter_map(|(i, (p, o))| {
                    let (Work::Op(Op::Claim(c)), Applied1::Now(Answer::Claim(a))) = (&p.work, o)
                    else {
                        return None;
                    };
                    let h = shared.pool.handed(c.key())?;
                    let placeholder = a.reservation.as_deref()?;
                    (!h.confirmed && h.placeholder == placeholder)
                        .then(|| (i, c.key().to_string(), placeholder.to_string()))
                })
                .collect()
        };
        if taken.is_empty() {
            return;
        }
        let spec = SpecId::of(&object.metadata);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let confirm = self.spec_unchanged(key, queue, &spec, Instant::now());
        let same = matches!(tokio::time::timeout(left, confirm).await, Ok(true));
        for (i, claim_key, placeholder) in taken {
            let pending = Unconfirmed::new(queue.clone(), &claim_key, placeholder);
            if pending.resolve(same).is_none() {
                outcomes[i] = Applied1::Again;
            }
        }
    }

    /// The stale placeholders of `ws` for this replica (seen for longer than the TTL on
    /// its monotonic clock, not its own) and the pods that name them, listed live by the
    /// placeholders' own label values — at most once a second for the same placeholders.
    /// A listing that fails resolves nothing (a placeholder whose pod may exist is never
    /// freed); the next attempt or write tries again.
    async fn resolution(
        &self,
        queue: &Queue,
        ws: &workloadspread_core::api::v1beta1::WorkloadSpread,
        budget: Duration,
    ) -> Resolution {
        let now = crate::clock::monotonic_now();
        let (stale, scale, listed): (Vec<Stale>, _, _) = {
            let mut shared = lock(&queue.shared);
            let status = ws.status.clone().unwrap_or_default();
            let stale = stale_for(&mut shared, &status, now);
            let listed = shared
                .listed
                .as_ref()
                .filter(|l| l.at.elapsed() < LIST_EVERY)
                .filter(|l| stale.iter().all(|s| l.keys.contains(&s.key)))
                .map(|l| l.named.clone());
            (stale, shared.scale, listed)
        };
        let named = match (stale::reservation_selector(&stale), listed) {
            (None, _) => Some(vec![]),
            (Some(_), Some(named)) => Some(named),
            (Some(selector), None) => {
                let namespace = ws.metadata.namespace.as_deref().unwrap_or_default();
                let named = self.namings(namespace, &selector, ws, budget).await;
                if let Some(named) = &named {
                    lock(&queue.shared).listed = Some(Listed {
                        at: Instant::now(),
                        keys: stale.iter().map(|s| s.key.clone()).collect(),
                        named: named.clone(),
                    });
                }
                named
            }
        };
        Resolution {
            scale,
            ..Resolution::new(stale, named)
        }
    }

    /// The placeholders named by the pods `selector` lists in `namespace` (`None`: the
    /// listing failed).
    async fn namings(
        &self,
        namespace: &str,
        selector: &str,
        ws: &workloadspread_core::api::v1beta1::WorkloadSpread,
        budget: Duration,
    ) -> Option<Vec<Naming>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default().labels(selector);
        let ws_name = ws.metadata.name.as_deref().unwrap_or_default();
        match tokio::time::timeout(budget, pods.list_metadata(&params)).await {
            Ok(Ok(list)) => {
                let pods: Vec<Pod> = list
                    .items
                    .into_iter()
                    .map(|p| Pod {
                        metadata: p.metadata,
                        ..Default::default()
                    })
                    .collect();
                Some(stale::namings(&pods, ws_name))
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    workloadspread = ws_name,
                    "listing the pods naming stale placeholders: {e}; they stay until a listing works"
                );
                None
            }
            Err(_) => {
                tracing::warn!(
                    workloadspread = ws_name,
                    "listing the pods naming stale placeholders: no answer in {budget:?}"
                );
                None
            }
        }
    }

    /// Answers the work an attempt settled without the write (placeholders taken or put
    /// back) and sets waiting claims aside; returns the rest, in order.
    fn settle_early<'a>(
        &self,
        queue: &Queue,
        batch: Vec<Pending>,
        outcomes: impl Iterator<Item = &'a Applied1>,
        carried: &mut Vec<Pending>,
    ) -> Vec<Pending> {
        let mut rest = Vec::with_capacity(batch.len());
        for (p, outcome) in batch.into_iter().zip(outcomes) {
            match outcome {
                Applied1::Now(answer) => {
                    if let Work::Op(op) = &p.work {
                        self.record(op, Some(answer));
                    }
                    if let (Work::Op(Op::Claim(c)), Answer::Claim(a)) = (&p.work, answer) {
                        self.metrics.reservation(ReservationEvent::Taken, 1);
                        // As on the fast path: the block follows the claims it answers.
                        let mut shared = lock(&queue.shared);
                        if let Some(ws) = shared.newest(None) {
                            let refill = self.claimed(&ws, &mut shared.pool, c, a);
                            carried.extend(refill.map(internal));
                        }
                    }
                    if let Some(reply) = p.reply {
                        let _ = reply.send(Ok(answer.clone()));
                    }
                }
                Applied1::Wait => {
                    if !p.waited {
                        self.metrics.reservation(ReservationEvent::Waited, 1);
                    }
                    carried.push(Pending { waited: true, ..p });
                }
                Applied1::Again => carried.push(p),
                _ => rest.push(p),
            }
        }
        rest
    }

    /// Keeps `object` (as written, or read when nothing changed) as the queue's copy and
    /// answers the batch; returns refills to queue. One lock for both: a claim answered
    /// without the queue must never see placeholders in the copy that are not yet in
    /// the pool (it would count them as taken and place the pod further down).
    fn answer(
        &self,
        queue: &Queue,
        object: DynamicObject,
        batch: Vec<Pending>,
        outcomes: Vec<Applied1>,
    ) -> Vec<Pending> {
        let mut follow = vec![];
        let mut shared = lock(&queue.shared);
        shared.cached = Some(object);
        let ws = shared.newest(None);
        for (p, outcome) in batch.into_iter().zip(outcomes) {
            let Pending { work, reply, .. } = p;
            let answer = match (work, outcome) {
                (Work::Op(op), Applied1::Written(answer)) => {
                    self.record(&op, answer.as_ref().ok());
                    if let (Op::Claim(c), Ok(Answer::Claim(a)), Some(ws)) = (&op, &answer, &ws) {
                        shared.scale = Some(c.scale());
                        follow.extend(self.claimed(ws, &mut shared.pool, c, a).map(internal));
                    }
                    answer
                }
                (Work::Reserve { slot, .. }, Applied1::Reserved(keys)) => {
                    self.metrics
                        .reservation(ReservationEvent::Reserved, keys.len());
                    shared.pool.reserved(&slot, keys);
                    Ok(DONE)
                }
                (Work::Settle(done), _) => {
                    self.metrics
                        .reservation(ReservationEvent::Settled, done.len());
                    shared.pool.settled(&done);
                    Ok(DONE)
                }
                (Work::Return(r), _) => {
                    self.metrics
                        .reservation(ReservationEvent::Returned, r.keys.len());
                    shared.pool.returned(&r);
                    Ok(DONE)
                }
                (work, outcome) => {
                    tracing::error!(?work, ?outcome, "counter work and outcome disagree");
                    Err(CommitError::Internal("counter work and outcome disagree"))
                }
            };
            if let Some(reply) = reply {
                // The waiter may have given up (webhook deadline); nothing to do then.
                let _ = reply.send(answer);
            }
        }
        follow
    }

    /// The batch's write failed for good: operations get the error; unwritten
    /// placeholders are not held (one that did land is resolved once stale); settles are
    /// retried by the next write unless the object is gone (a handed-out placeholder
    /// stays this replica's to settle until its pod is recorded).
    fn failed(&self, queue: &Queue, batch: Vec<Pending>, failure: &CommitError) {
        let mut shared = lock(&queue.shared);
        let gone = failure.is_gone();
        for p in batch {
            match &p.work {
                Work::Op(op) => self.record(op, None),
                Work::Reserve { slot, .. } if gone => shared.pool.reserved(slot, vec![]),
                // The write may have landed: its keys are given back.
                Work::Reserve { slot, keys, .. } => shared.pool.reserve_failed(slot, keys.clone()),
                Work::Settle(done) if gone => shared.pool.settled(done),
                Work::Settle(done) => {
                    self.metrics
                        .reservation(ReservationEvent::SettleFailed, done.len());
                    shared
                        .pool
                        .settle_failed(done, Instant::now(), SETTLE_GIVE_UP)
                }
                Work::Return(r) if gone => shared.pool.returned(r),
                Work::Return(r) => shared.pool.return_failed(r.clone(), Instant::now()),
            }
            if let Some(reply) = p.reply {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}

/// Notes the placeholders of `status` as seen by this replica and returns those seen for
/// longer than the TTL that are not its own (its own it settles or returns itself).
pub(super) fn stale_for(
    shared: &mut Shared,
    status: &workloadspread_core::api::v1beta1::WorkloadSpreadStatus,
    now: workloadspread_core::Timestamp,
) -> Vec<Stale> {
    shared.sightings.observe(status, now);
    let pool = &shared.pool;
    stale::stale(status, &shared.sightings, now, |k| pool.knows(k))
}

/// Splits `batch` into the operations whose time to be answered is up and the rest (the
/// queue's own work always goes with the expired part: it is retried by the pool).
fn past_their_time(batch: Vec<Pending>) -> (Vec<Pending>, Vec<Pending>) {
    let now = Instant::now();
    batch
        .into_iter()
        .partition(|p| p.reply.is_none() || now.saturating_duration_since(p.since) >= ANSWER_BUDGET)
}

/// When the batch must be answered: [`COMMIT_DEADLINE`] from now, or earlier when an
/// operation has already waited (for placeholders in its way).
fn answer_deadline(batch: &[Pending]) -> tokio::time::Instant {
    let by_arrival = batch
        .iter()
        .filter(|p| p.reply.is_some())
        .map(|p| tokio::time::Instant::from_std(p.since + ANSWER_BUDGET))
        .min();
    let by_now = tokio::time::Instant::now() + COMMIT_DEADLINE;
    by_arrival.map_or(by_now, |t| t.min(by_now))
}

/// One GET of the WorkloadSpread, abandoned after `budget`: [`CommitError::NotFound`]
/// when it does not exist, else a [`CommitError::Read`] worth another attempt.
async fn read(
    api: &Api<DynamicObject>,
    name: &str,
    budget: Duration,
) -> Result<DynamicObject, CommitError> {
    let failed = |reason: String| CommitError::Read {
        name: name.into(),
        reason,
    };
    match tokio::time::timeout(budget, api.get_opt(name)).await {
        Ok(Ok(Some(o))) => Ok(o),
        Ok(Ok(None)) => Err(CommitError::NotFound { name: name.into() }),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(_) => Err(failed(format!("no answer in {budget:?}"))),
    }
}

/// Whether an operation names a uid other than the object's (recreated meanwhile, or a
/// stale copy of ours).
fn uid_differs(object: &DynamicObject, batch: &[Pending]) -> bool {
    let uid = object.metadata.uid.as_deref();
    batch.iter().any(|p| match &p.work {
        Work::Op(op) => op
            .key()
            .uid
            .as_deref()
            .is_some_and(|want| Some(want) != uid),
        _ => false,
    })
}

/// The copy with the higher `resourceVersion` (the queue's own on a tie or when either
/// is not a number: it may hold this host's own last write).
pub(super) fn newer(
    own: Option<DynamicObject>,
    reflected: Option<DynamicObject>,
) -> Option<DynamicObject> {
    let version = |o: &DynamicObject| {
        o.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (own, reflected) {
        (Some(own), Some(r)) => match (version(&own), version(&r)) {
            (Some(a), Some(b)) if b > a => Some(r),
            _ => Some(own),
        },
        (own, r) => own.or(r),
    }
}

async fn backoff(attempt: u32) {
    let ms = 20u64.saturating_mul(1 << attempt.min(5));
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

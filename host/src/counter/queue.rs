//! One queue per WorkloadSpread: a task that batches the operations sent to it, adds
//! its own maintenance (settles, returns) and stops — its entry removed — once idle.

use super::{internal, lock, Committer, Pending, Queue, QueueKey, Shared, Work, TICK};
use crate::counter::reserve::Pool;
use kube::api::DynamicObject;
use kube::Api;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

impl Committer {
    pub(super) fn send(
        self: &Arc<Self>,
        key: &QueueKey,
        work: Work,
        reply: Option<oneshot::Sender<Result<super::Answer, super::CommitError>>>,
    ) {
        self.send_since(key, work, reply, Instant::now());
    }

    /// [`Committer::send`] for work that arrived at `since` (its answer budget runs
    /// from then).
    pub(super) fn send_since(
        self: &Arc<Self>,
        key: &QueueKey,
        work: Work,
        reply: Option<oneshot::Sender<Result<super::Answer, super::CommitError>>>,
        since: Instant,
    ) {
        let mut pending = Pending {
            work,
            reply,
            since,
            waited: false,
        };
        loop {
            let queue = self.queue(key);
            match queue.tx.send(pending) {
                Ok(()) => return,
                // The queue stopped for idleness between lookup and send: start another.
                Err(mpsc::error::SendError(p)) => {
                    pending = p;
                    self.remove_queue(key, &queue.tx);
                }
            }
        }
    }

    fn queue(self: &Arc<Self>, key: &QueueKey) -> Queue {
        let mut queues = lock(&self.queues);
        if let Some(q) = queues.get(key).filter(|q| !q.tx.is_closed()) {
            return q.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let pool = Pool::new(
            self.holder.clone(),
            self.reserving.unwrap_or_default(),
            self.next_key.clone(),
        );
        let shared = Arc::new(Mutex::new(Shared::new(pool)));
        let queue = Queue { tx, shared };
        queues.insert(key.clone(), queue.clone());
        self.metrics.counter_queues.set(queues.len() as i64);
        tokio::spawn(self.clone().run_queue(key.clone(), queue.clone(), rx));
        queue
    }

    /// Removes `key`'s entry if it is still the queue of `tx` (a newer one stays).
    pub(super) fn remove_queue(&self, key: &QueueKey, tx: &mpsc::UnboundedSender<Pending>) {
        let mut queues = lock(&self.queues);
        if queues.get(key).is_some_and(|q| q.tx.same_channel(tx)) {
            queues.remove(key);
        }
        self.metrics.counter_queues.set(queues.len() as i64);
    }

    /// Gives back every unused placeholder and renames the handed ones (shutdown), waiting
    /// at most `within`: what is left is resolved by the next writer once stale
    /// (`docs/counter-protocol.md`), but until then it holds room other replicas wait for.
    pub async fn return_all(self: &Arc<Self>, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let mut writes = 0;
        // Rounds: a block whose write was in flight lands in the pool after the first.
        loop {
            let queues: Vec<(QueueKey, Queue)> = lock(&self.queues)
                .iter()
                .map(|(k, q)| (k.clone(), q.clone()))
                .collect();
            let mut waits = vec![];
            let mut quiet = true;
            for (key, queue) in queues {
                let (settles, returns) = {
                    let mut shared = lock(&queue.shared);
                    shared.pool.close();
                    quiet &= shared.pool.quiet();
                    (shared.pool.settles(), shared.pool.drain())
                };
                let settles = (!settles.is_empty()).then_some(Work::Settle(settles));
                for work in settles
                    .into_iter()
                    .chain(returns.into_iter().map(Work::Return))
                {
                    let (reply, done) = oneshot::channel();
                    self.send(&key, work, Some(reply));
                    waits.push(done);
                }
            }
            writes += waits.len();
            let all = futures::future::join_all(waits);
            if tokio::time::timeout_at(deadline, all).await.is_err() {
                tracing::warn!(
                    "reserved slots not all given back in {within:?}; they are resolved once stale"
                );
                return;
            }
            if quiet {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
        tracing::info!("reserved slots given back ({writes} pieces of work)");
    }

    pub(super) async fn run_queue(
        self: Arc<Self>,
        key: QueueKey,
        queue: Queue,
        mut rx: mpsc::UnboundedReceiver<Pending>,
    ) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.0, &self.resource);
        let mut carried: Vec<Pending> = vec![];
        let mut last_work = Instant::now();
        loop {
            let busy = !carried.is_empty() || !lock(&queue.shared).pool.is_idle();
            let wait = if busy { TICK } else { self.lifetimes.idle };
            let first = match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(p)) => Some(p),
                Ok(None) => break,
                Err(_) if !busy && last_work.elapsed() >= self.lifetimes.idle => break,
                Err(_) => None,
            };
            let mut batch = std::mem::take(&mut carried);
            batch.extend(self.maintenance(&queue));
            if let Some(first) = first {
                last_work = Instant::now();
                batch.extend(collect_batch(first, &mut rx, self.batching).await);
            }
            if !batch.is_empty() {
                carried = self.commit(&api, &key, &queue, batch).await;
            }
        }
        // Stop taking operations, give back what is held, finish what was queued.
        rx.close();
        let mut rest: Vec<Pending> = std::mem::take(&mut carried);
        while let Ok(p) = rx.try_recv() {
            rest.push(p);
        }
        let held = lock(&queue.shared).pool.drain();
        rest.extend(held.into_iter().map(|r| internal(Work::Return(r))));
        if !rest.is_empty() {
            // Waiting claims are placed now (no later attempt) or fail.
            for p in self.commit(&api, &key, &queue, rest).await {
                if let Some(reply) = p.reply {
                    let _ = reply.send(Err(super::CommitError::Stopped));
                }
            }
        }
        // Nothing of this WorkloadSpread stays behind (one deleted is never seen again).
        self.remove_queue(&key, &queue.tx);
    }

    /// The settle and return work due now.
    fn maintenance(&self, queue: &Queue) -> Vec<Pending> {
        let mut shared = lock(&queue.shared);
        let mut work = vec![];
        let settles = shared
            .pool
            .settles_due(Instant::now(), self.faults.settle_delay);
        if !settles.is_empty() {
            work.push(internal(Work::Settle(settles)));
        }
        for r in shared.pool.expired(Instant::now(), self.now()) {
            work.push(internal(Work::Return(r)));
        }
        work
    }
}

/// `first` plus what joins it under `policy`: operations arriving within the window,
/// then everything already queued (what arrived while the previous write was in
/// flight), up to `max_batch`.
pub(super) async fn collect_batch(
    first: Pending,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
    policy: super::BatchPolicy,
) -> Vec<Pending> {
    let mut batch = vec![first];
    if !policy.window.is_zero() {
        let deadline = tokio::time::Instant::now() + policy.window;
        while batch.len() < policy.max_batch {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(p)) => batch.push(p),
                _ => break,
            }
        }
    }
    while batch.len() < policy.max_batch {
        match rx.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
    batch
}

/// The operations whose waiter still waits, and how many were dropped. A waiter that
/// gave up (its webhook call timed out) gets no pod: applying its claim would hold a slot
/// for a pod that will not exist. The queue's own work has no waiter and is kept.
pub(super) fn still_awaited(batch: Vec<Pending>) -> (Vec<Pending>, usize) {
    let before = batch.len();
    let kept: Vec<Pending> = batch
        .into_iter()
        .filter(|p| p.reply.as_ref().is_none_or(|r| !r.is_closed()))
        .collect();
    let dropped = before - kept.len();
    (kept, dropped)
}

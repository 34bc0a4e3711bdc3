//! Exact subset counters on WorkloadSpread status: one in-process queue per
//! WorkloadSpread group-commits concurrent claims and releases into one status write
//! guarded by `resourceVersion`. A 409 re-reads the object and re-applies the whole
//! batch, so several host replicas (and the controller) stay exact through the API
//! server's optimistic concurrency, and no pod is rejected because of contention.
//!
//! Each attempt starts from the newer of the queue's own copy and the WorkloadSpread
//! reflector's: claims that write nothing (an unlimited subset) never refresh the copy,
//! and the controller's newer status must not be decided on from a stale one.
//!
//! With reserved slots on (`docs/counter-protocol.md`), the queue also reserves blocks of
//! placeholders ahead of the claims, renames the ones handed out (settle) and gives back
//! idle ones; a claim that finds one of this replica's placeholders in its subset is
//! answered at once, without waiting for a write.

use super::metrics::{CounterLabels, CounterOp, CounterResult, Metrics, ReservationEvent};
use super::reserve::{Handed, Pool, ReservePolicy, Return, SlotKey};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use workloadspread_core::admission::reserve::{
    drop_stale, held_by, place, reserve, settle, Claimant, Placement, PLACEHOLDER_TTL_SECONDS,
};
use workloadspread_core::admission::{unclaim, PodKey, Scale};
use workloadspread_core::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use workloadspread_core::counter::{
    apply_claim, apply_release, apply_unclaim, ClaimRequest, ClaimResponse, ReleaseRequest,
    ReleaseResponse, UnclaimRequest, WorkloadSpreadKey,
};
use workloadspread_core::Timestamp;

/// Write attempts per batch (409s and transient errors) before giving up.
const MAX_ATTEMPTS: u32 = 30;
/// A batch is answered (with an error if need be) within this long, below the
/// guest's 8 s wait and the API server's 10 s webhook timeout.
const COMMIT_DEADLINE: Duration = Duration::from_secs(6);
/// An idle queue stops after this long.
const IDLE: Duration = Duration::from_secs(60);
/// Longest wait for one status GET or PUT: a hung call is abandoned and the batch retried
/// from a fresh read (a write that did land is then found and not repeated).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a handed-out placeholder waits for its settle write: our controller counts
/// the pod through its annotation within milliseconds, after which the settle has nothing
/// to rename; other readers count the pod twice for at most this long.
const SETTLE_DELAY: Duration = Duration::from_secs(1);
/// How often a queue holding placeholders or waiting claims looks at them again.
const TICK: Duration = Duration::from_millis(50);
/// An operation is answered within this long of its arrival, whatever it waited for:
/// below the guest's 8 s wait, which would otherwise give up on a claim still written.
const ANSWER_BUDGET: Duration = Duration::from_secs(7);
/// Longest a claim waits for another replica's placeholders before it is placed without
/// them (a spill): past the other replica's idle return and past the life of a dead
/// replica's placeholders, below [`ANSWER_BUDGET`].
const MAX_WAIT: Duration = Duration::from_millis(5500);
const _: () = assert!(
    MAX_WAIT.as_millis() > PLACEHOLDER_TTL_SECONDS as u128 * 1000
        && MAX_WAIT.as_millis() < ANSWER_BUDGET.as_millis()
);

/// A counter operation from the policy.
#[derive(Clone, Debug)]
pub enum Op {
    Claim(ClaimRequest),
    Release(ReleaseRequest),
    Unclaim(UnclaimRequest),
}

/// The answer to an [`Op`].
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Claim(ClaimResponse),
    Release(ReleaseResponse),
}

/// The answer to the queue's own work when someone waits for it (shutdown).
const DONE: Answer = Answer::Release(ReleaseResponse { released: true });

/// What a queue applies: the policy's operations and its own reservation work.
#[derive(Clone, Debug)]
enum Work {
    Op(Op),
    Reserve {
        slot: SlotKey,
        keys: Vec<String>,
        scale: Scale,
        /// The object the block is for: none is reserved in a recreated one.
        uid: Option<String>,
    },
    Settle(Vec<Handed>),
    Return(Return),
}

/// How one piece of work came out of an attempt.
#[derive(Debug)]
enum Applied1 {
    /// Answered with the batch's write (or without one when nothing changed).
    Written(Result<Answer, String>),
    /// Answered already, whatever the write does (a placeholder taken or put back).
    Now(Answer),
    /// Another replica's placeholders hold the room: try again later.
    Wait,
    /// Reservation work, done with the write: the placeholders reserved.
    Reserved(Vec<String>),
    Done,
}

struct Pending {
    work: Work,
    /// `None` for the queue's own work.
    reply: Option<oneshot::Sender<Result<Answer, String>>>,
    since: Instant,
    /// Has waited for another replica's placeholders (counted once).
    waited: bool,
}

type QueueKey = (String, String);

/// How claims and releases of one WorkloadSpread are grouped into status writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPolicy {
    /// How long a batch keeps collecting after its first operation. Zero waits for
    /// nothing: an idle queue writes at once, and what arrives while a write is in
    /// flight forms the next batch.
    pub window: Duration,
    /// Most operations per write; 1 writes every operation alone (the reference
    /// algorithm's write pattern).
    pub max_batch: usize,
}

/// A queue's state shared with the claims answered without it.
struct Shared {
    /// The last copy the queue read or wrote.
    cached: Option<DynamicObject>,
    /// The newest copy decoded, by `resourceVersion`.
    decoded: Option<(String, Arc<WorkloadSpread>)>,
    pool: Pool,
}

#[derive(Clone)]
struct Queue {
    tx: mpsc::UnboundedSender<Pending>,
    shared: Arc<Mutex<Shared>>,
}

/// The group-commit queues of one host process.
pub struct Committer {
    client: Client,
    resource: ApiResource,
    batching: BatchPolicy,
    /// `None`: every claim is written before it is answered.
    reserving: Option<ReservePolicy>,
    /// This process's placeholder prefix.
    holder: String,
    next_key: Arc<AtomicU64>,
    queues: Mutex<HashMap<QueueKey, Queue>>,
    metrics: Arc<Metrics>,
    clock: fn() -> Timestamp,
    /// The WorkloadSpread reflector, once the capabilities have started it.
    reflector: OnceLock<Store<DynamicObject>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A placeholder prefix unique to this process: a restarted host never takes over
/// (or collides with) a dead one's placeholders; those expire.
fn holder_id() -> String {
    use std::hash::BuildHasher;
    let seed = (std::process::id(), std::time::SystemTime::now());
    let hash = std::collections::hash_map::RandomState::new().hash_one(seed);
    format!("{:08x}", hash as u32)
}

impl Committer {
    pub fn new(
        client: Client,
        batching: BatchPolicy,
        reserving: Option<ReservePolicy>,
        metrics: Arc<Metrics>,
        clock: fn() -> Timestamp,
    ) -> Arc<Self> {
        Arc::new(Committer {
            client,
            resource: workloadspread_resource(),
            batching,
            reserving: reserving.filter(|r| r.max_block > 0),
            holder: holder_id(),
            next_key: Arc::default(),
            queues: Mutex::new(HashMap::new()),
            metrics,
            clock,
            reflector: OnceLock::new(),
        })
    }

    /// Lets every attempt start from the reflector's copy when it is newer.
    pub fn use_reflector(&self, store: Store<DynamicObject>) {
        let _ = self.reflector.set(store);
    }

    /// The reflector's copy of `namespace/name`, if any.
    fn reflected(&self, namespace: &str, name: &str) -> Option<DynamicObject> {
        self.reflected_arc(namespace, name).map(|o| (*o).clone())
    }

    /// As [`Committer::reflected`], without copying the object.
    fn reflected_arc(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let store = self.reflector.get()?;
        let key = ObjectRef::new_with(name, self.resource.clone()).within(namespace);
        store.get(&key)
    }

    /// Answers `op` from a reserved slot when it can, else queues it on its
    /// WorkloadSpread's queue and waits for the committed answer.
    pub async fn submit(self: &Arc<Self>, op: Op) -> Result<Answer, String> {
        let key = op.key();
        let queue_key = (key.namespace.clone(), key.name.clone());
        if let Op::Claim(c) = &op {
            if let Some(answer) = self.from_reservation(&queue_key, c) {
                let answer = Answer::Claim(answer);
                self.record(&op, Some(&answer));
                return Ok(answer);
            }
        }
        let (reply, answer) = oneshot::channel();
        self.send(&queue_key, Work::Op(op), Some(reply));
        answer
            .await
            .map_err(|_| "the counter queue stopped before answering".to_string())?
    }

    fn send(
        self: &Arc<Self>,
        key: &QueueKey,
        work: Work,
        reply: Option<oneshot::Sender<Result<Answer, String>>>,
    ) {
        let mut pending = Pending {
            work,
            reply,
            since: Instant::now(),
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
        let shared = Arc::new(Mutex::new(Shared {
            cached: None,
            decoded: None,
            pool,
        }));
        let queue = Queue { tx, shared };
        queues.insert(key.clone(), queue.clone());
        tokio::spawn(self.clone().run_queue(key.clone(), queue.clone(), rx));
        queue
    }

    fn remove_queue(&self, key: &QueueKey, tx: &mpsc::UnboundedSender<Pending>) {
        let mut queues = lock(&self.queues);
        if queues.get(key).is_some_and(|q| q.tx.same_channel(tx)) {
            queues.remove(key);
        }
    }

    /// Gives back every unused placeholder and renames the handed ones (shutdown), waiting
    /// at most `within`: what is left expires (`docs/counter-protocol.md`), but until then
    /// it holds room other replicas would wait for.
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
                tracing::warn!("reserved slots not all given back in {within:?}; they expire");
                return;
            }
            if quiet {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
        tracing::info!("reserved slots given back ({writes} pieces of work)");
    }

    /// A claim answered from one of this replica's placeholders, without a write: only
    /// when the claim rules on the newest copy choose a subset where one is held.
    fn from_reservation(
        self: &Arc<Self>,
        key: &QueueKey,
        c: &ClaimRequest,
    ) -> Option<ClaimResponse> {
        self.reserving?;
        let queue = lock(&self.queues).get(key).cloned()?;
        let (answer, refill) = {
            let mut shared = lock(&queue.shared);
            if let Some(h) = shared.pool.handed(claim_key(c)) {
                return Some(h.answer.clone());
            }
            if shared.pool.unused(&c.pod.version).is_empty() {
                return None;
            }
            let ws = shared.newest(self.reflected_arc(&key.0, &key.1))?;
            if c.workload_spread.uid.is_some() && ws.metadata.uid != c.workload_spread.uid {
                return None;
            }
            shared.pool.track_uid(ws.metadata.uid.as_deref());
            let mut status = ws.status.clone().unwrap_or_default();
            let now = (self.clock)();
            let keep = |k: &str| shared.pool.is_handed(k);
            drop_stale(&mut status, &ws, &c.pod.version, scale_of(c), now, keep);
            // A block of ours this copy shows but the pool does not hold yet (the watch
            // saw its write first) would count as taken: leave the claim to the queue.
            if !own_placeholders_known(&status, &c.pod.version, &shared.pool) {
                return None;
            }
            let placed = place_claim(&ws, &status, c, &mut shared.pool, now);
            let Placed::Taken(answer) = placed else {
                return None;
            };
            let refill = self.claimed(&ws, &mut shared.pool, c, &answer);
            (answer, refill)
        };
        self.metrics.reservation(ReservationEvent::Taken, 1);
        if let Some(work) = refill {
            self.send(key, work, None);
        }
        Some(answer)
    }

    /// Records a claim answered into a tracked subset; the reserve work to queue if its
    /// block needs refilling.
    fn claimed(
        &self,
        ws: &WorkloadSpread,
        pool: &mut Pool,
        c: &ClaimRequest,
        answer: &ClaimResponse,
    ) -> Option<Work> {
        self.reserving?;
        refill(ws, pool, c, answer.subset.as_deref()?)
    }

    async fn run_queue(
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
            let wait = if busy { TICK } else { IDLE };
            let first = match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(p)) => Some(p),
                Ok(None) => break,
                Err(_) if !busy && last_work.elapsed() >= IDLE => break,
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
                    let _ = reply.send(Err("the counter queue stopped".into()));
                }
            }
        }
    }

    /// The settle and return work due now.
    fn maintenance(&self, queue: &Queue) -> Vec<Pending> {
        let mut shared = lock(&queue.shared);
        let mut work = vec![];
        let settles = shared.pool.settles_due(Instant::now(), SETTLE_DELAY);
        if !settles.is_empty() {
            work.push(internal(Work::Settle(settles)));
        }
        for r in shared.pool.expired(Instant::now()) {
            work.push(internal(Work::Return(r)));
        }
        work
    }

    /// Applies `batch` to the WorkloadSpread and writes the status once; on 409
    /// re-reads and re-applies. Answers every operation; returns what is carried to the
    /// next batch (claims waiting for another replica's placeholders, refills).
    async fn commit(
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
        let mut last_error = String::new();
        let deadline = answer_deadline(&batch);
        // Set when a copy's uid differs from an operation's: read the object live once
        // (a recreated WorkloadSpread) before answering "recreated".
        let (mut read_live, mut refreshed) = (false, false);
        for attempt in 0..MAX_ATTEMPTS {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                last_error = format!("{last_error} (gave up after {COMMIT_DEADLINE:?})");
                break;
            }
            let budget = left.min(CALL_TIMEOUT);
            let known = match std::mem::take(&mut read_live) {
                true => None,
                false => {
                    // A clone: claims answered without the queue read it meanwhile.
                    let cached = lock(&queue.shared).cached.clone();
                    newer(cached, self.reflected(&key.0, name))
                }
            };
            let object = match known {
                Some(o) => o,
                None => match read(api, name, budget).await {
                    Ok(o) => o,
                    Err(Read::Gone(e)) => {
                        last_error = e;
                        break;
                    }
                    Err(Read::Retry(e)) => {
                        last_error = e;
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
            // Decoded and encoded outside the lock claims answered without the queue take.
            let applied = decode(&object).and_then(|mut ws| {
                let (outcomes, changed) = {
                    let mut shared = lock(&queue.shared);
                    let reserving = self.reserving.is_some();
                    let pool = reserving.then_some(&mut shared.pool);
                    apply_decoded(&mut ws, &batch, (self.clock)(), pool)
                };
                Ok((updated_object(&object, &ws, changed)?, outcomes))
            });
            let (updated, outcomes) = match applied {
                Ok(r) => r,
                Err(e) => {
                    last_error = e;
                    break;
                }
            };
            batch = self.settle_early(queue, batch, outcomes.iter(), &mut carried);
            let outcomes: Vec<Applied1> = outcomes
                .into_iter()
                .filter(|o| !matches!(o, Applied1::Now(_) | Applied1::Wait))
                .collect();
            let Some(updated) = updated else {
                carried.extend(self.answer(queue, object, batch, outcomes));
                return carried;
            };
            self.metrics.status_writes.inc();
            // What the read left of the deadline, not the read's own budget.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let budget = left.min(CALL_TIMEOUT);
            let params = PostParams::default();
            let write = api.replace_status(name, &params, &updated);
            let Ok(written) = tokio::time::timeout(budget, write).await else {
                // It may have landed: the next attempt reads the object again.
                last_error =
                    format!("writing WorkloadSpread {name} status: no answer in {budget:?}");
                read_live = true;
                continue;
            };
            match written {
                Ok(written) => {
                    carried.extend(self.answer(queue, written, batch, outcomes));
                    return carried;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Someone wrote meanwhile; the reflector may not have seen it yet.
                    self.metrics.conflicts.inc();
                    last_error = format!("conflict writing WorkloadSpread {name} status");
                    read_live = true;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    last_error = format!("WorkloadSpread {name} was deleted");
                    break;
                }
                // Invalid, Forbidden, ...: retrying cannot help.
                Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                    last_error = format!("writing WorkloadSpread {name} status: {}", s.message);
                    break;
                }
                Err(e) => {
                    last_error = format!("writing WorkloadSpread {name} status: {e}");
                    read_live = true;
                    backoff(attempt).await;
                }
            }
        }
        tracing::warn!(workloadspread = name, "counter batch failed: {last_error}");
        self.failed(queue, batch, &last_error);
        carried
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
                        follow.extend(self.claimed(ws, &mut shared.pool, c, a).map(internal));
                    }
                    answer
                }
                (Work::Reserve { slot, .. }, Applied1::Reserved(keys)) => {
                    self.metrics
                        .reservation(ReservationEvent::Reserved, keys.len());
                    shared.pool.reserved(&slot, keys, Instant::now());
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
                    Err("internal error: counter work and outcome disagree".to_string())
                }
            };
            if let Some(reply) = reply {
                // The waiter may have given up (webhook deadline); nothing to do then.
                let _ = reply.send(answer);
            }
        }
        follow
    }

    /// The batch's write failed for good: operations get the error, reservation work is
    /// forgotten (unwritten placeholders are not held; a failed settle leaves the pod to
    /// the controller, which counts it through its reservation annotation).
    fn failed(&self, queue: &Queue, batch: Vec<Pending>, error: &str) {
        let mut shared = lock(&queue.shared);
        for p in batch {
            match &p.work {
                Work::Op(op) => self.record(op, None),
                Work::Reserve { slot, .. } => shared.pool.reserved(slot, vec![], Instant::now()),
                Work::Settle(done) => shared.pool.settled(done),
                Work::Return(r) => shared.pool.returned(r),
            }
            if let Some(reply) = p.reply {
                let _ = reply.send(Err(error.to_string()));
            }
        }
    }

    fn record(&self, op: &Op, answer: Option<&Answer>) {
        let result = match answer {
            None => CounterResult::Error,
            Some(Answer::Claim(c)) if c.subset.is_some() => CounterResult::Done,
            Some(Answer::Release(r)) if r.released => CounterResult::Done,
            Some(_) => CounterResult::Noop,
        };
        let op = match op {
            Op::Claim(_) => CounterOp::Claim,
            Op::Release(_) => CounterOp::Release,
            Op::Unclaim(_) => CounterOp::Unclaim,
        };
        self.metrics
            .counter_ops
            .get_or_create(&CounterLabels { op, result })
            .inc();
    }
}

impl Shared {
    /// The newer of the queue's copy and `reflected`, decoded (once per version).
    /// Copies nothing but the newer object when its version was not decoded yet (a
    /// claim answered without the queue runs this under the queue's lock).
    fn newest(&mut self, reflected: Option<Arc<DynamicObject>>) -> Option<Arc<WorkloadSpread>> {
        let own_version = self.cached.as_ref().and_then(resource_version);
        let reflected = reflected.filter(|r| match (resource_version(r), own_version) {
            (Some(theirs), Some(ours)) => theirs > ours,
            (_, None) => self.cached.is_none(),
            (None, Some(_)) => false,
        });
        let version = match &reflected {
            Some(r) => r.metadata.resource_version.clone(),
            None => self.cached.as_ref()?.metadata.resource_version.clone(),
        }
        .unwrap_or_default();
        if let Some((v, ws)) = &self.decoded {
            if *v == version && !version.is_empty() {
                return Some(ws.clone());
            }
        }
        let object: &DynamicObject = match &reflected {
            Some(r) => r,
            None => self.cached.as_ref()?,
        };
        let ws: WorkloadSpread = serde_json::from_value(to_json(object).ok()?).ok()?;
        let ws = Arc::new(ws);
        self.decoded = Some((version, ws.clone()));
        Some(ws)
    }
}

fn resource_version(o: &DynamicObject) -> Option<u64> {
    o.metadata.resource_version.as_deref()?.parse().ok()
}

/// When the batch must be answered: [`COMMIT_DEADLINE`] from now, or earlier when an
/// operation has already waited (for another replica's placeholders).
fn answer_deadline(batch: &[Pending]) -> tokio::time::Instant {
    let by_arrival = batch
        .iter()
        .filter(|p| p.reply.is_some())
        .map(|p| tokio::time::Instant::from_std(p.since + ANSWER_BUDGET))
        .min();
    let by_now = tokio::time::Instant::now() + COMMIT_DEADLINE;
    by_arrival.map_or(by_now, |t| t.min(by_now))
}

fn internal(work: Work) -> Pending {
    Pending {
        work,
        reply: None,
        since: Instant::now(),
        waited: false,
    }
}

/// The creatingPods key of a claim's pod: its name, or the generated id.
fn claim_key(c: &ClaimRequest) -> &str {
    match c.pod.name.is_empty() {
        true => &c.generated_uid,
        false => &c.pod.name,
    }
}

fn scale_of(c: &ClaimRequest) -> Scale {
    Scale::new(c.workload_replicas, c.rules)
}

/// Records a claim answered into `subset`; the reserve work to queue if the subset's
/// block needs refilling. Unlimited subsets are not tracked: nothing to reserve.
fn refill(ws: &WorkloadSpread, pool: &mut Pool, c: &ClaimRequest, subset: &str) -> Option<Work> {
    ws.subset(subset)?.max_replicas.as_ref()?;
    let slot = (c.pod.version.clone(), subset.to_string());
    let n = pool.claimed(&slot, scale_of(c), Instant::now())?;
    Some(Work::Reserve {
        keys: pool.new_keys(n),
        slot,
        scale: scale_of(c),
        uid: ws.metadata.uid.clone(),
    })
}

/// Whether every placeholder of this replica in `version` is one its pool knows.
fn own_placeholders_known(status: &WorkloadSpreadStatus, version: &str, pool: &Pool) -> bool {
    status
        .versioned_subset_statuses
        .get(version)
        .into_iter()
        .flatten()
        .flat_map(|s| s.creating_pods.keys())
        .filter(|k| held_by(k, pool.holder()))
        .all(|k| pool.knows(k))
}

/// What this replica's placeholders make of a claim.
enum Placed {
    Taken(ClaimResponse),
    Wait,
    Claim(Option<String>),
}

fn place_claim(
    ws: &WorkloadSpread,
    status: &WorkloadSpreadStatus,
    c: &ClaimRequest,
    pool: &mut Pool,
    now: Timestamp,
) -> Placed {
    let unused = pool.unused(&c.pod.version);
    let pairs: Vec<(&str, &str)> = unused
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
        scale: scale_of(c),
        now,
    };
    match place(status, ws, &claimant, pool.holder(), &pairs) {
        Placement::Take { subset, key } => {
            let answer = ClaimResponse {
                subset: Some(subset.clone()),
                generated_uid: c.pod.name.is_empty().then(|| c.generated_uid.clone()),
                reservation: None,
            };
            let slot = (c.pod.version.clone(), subset.clone());
            match pool.take(&slot, &key, claim_key(c), answer) {
                Some(a) => Placed::Taken(a),
                None => Placed::Claim(Some(subset)),
            }
        }
        Placement::Wait => Placed::Wait,
        Placement::Claim(subset) => Placed::Claim(subset),
    }
}

impl Op {
    fn key(&self) -> &WorkloadSpreadKey {
        match self {
            Op::Claim(c) => &c.workload_spread,
            Op::Release(r) => &r.workload_spread,
            Op::Unclaim(u) => &u.workload_spread,
        }
    }
}

/// The object to write (`None` when the status did not change) and one outcome per
/// piece of work.
#[cfg(test)]
type Applied = (Option<DynamicObject>, Vec<Applied1>);

/// Applies `batch` in order. With `pool` (reserved slots on), claims take this
/// replica's placeholders or wait for another's, and the queue's own work is applied.
#[cfg(test)]
fn apply_batch(
    object: &DynamicObject,
    batch: &[Pending],
    now: Timestamp,
    pool: Option<&mut Pool>,
) -> Result<Applied, String> {
    let mut ws = decode(object)?;
    let (outcomes, changed) = apply_decoded(&mut ws, batch, now, pool);
    Ok((updated_object(object, &ws, changed)?, outcomes))
}

fn decode(object: &DynamicObject) -> Result<WorkloadSpread, String> {
    serde_json::from_value(to_json(object)?).map_err(|e| format!("decoding WorkloadSpread: {e}"))
}

/// `object` with `ws`'s status when `changed`.
fn updated_object(
    object: &DynamicObject,
    ws: &WorkloadSpread,
    changed: bool,
) -> Result<Option<DynamicObject>, String> {
    if !changed {
        return Ok(None);
    }
    let mut updated = object.clone();
    let status = serde_json::to_value(&ws.status).map_err(|e| e.to_string())?;
    if let Some(map) = updated.data.as_object_mut() {
        map.insert("status".into(), status);
    }
    Ok(Some(updated))
}

/// [`apply_batch`] on a decoded object (the caller decodes and encodes outside the
/// queue's lock): the outcomes, and whether the status changed.
fn apply_decoded(
    ws: &mut WorkloadSpread,
    batch: &[Pending],
    now: Timestamp,
    mut pool: Option<&mut Pool>,
) -> (Vec<Applied1>, bool) {
    if let Some(pool) = pool.as_deref_mut() {
        pool.track_uid(ws.metadata.uid.as_deref());
    }
    let original = ws.status.clone();
    let mut outcomes: Vec<Option<Applied1>> = batch.iter().map(|_| None).collect();
    // Returns and settles first, then the policy's operations, then reservations: a
    // claim must see the room a return gives back (the returned placeholders have left
    // the pool already); a settle must rename its placeholder before a claim's stale
    // drop could free it for another pod, and before an unclaim of the same pod removes
    // its key; and a claim must not see a block reserved in this write (its placeholders
    // are not in the pool until the write lands, so it would count them as taken).
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
                Work::Op(op) => apply_op(ws, op, p.since, now, pool.as_deref_mut()),
                work => apply_own(ws, work, now, pool.as_deref()),
            });
        }
    }
    let outcomes: Vec<Applied1> = outcomes.into_iter().flatten().collect();
    let changed = ws.status != original;
    (outcomes, changed)
}

fn apply_op(
    ws: &mut WorkloadSpread,
    op: &Op,
    since: Instant,
    now: Timestamp,
    pool: Option<&mut Pool>,
) -> Applied1 {
    if let Some(uid) = &op.key().uid {
        if ws.metadata.uid.as_ref() != Some(uid) {
            return Applied1::Written(Err(format!(
                "WorkloadSpread {} was recreated (uid changed)",
                op.key().name
            )));
        }
    }
    let mut pool = pool;
    if let (Op::Unclaim(u), Some(pool)) = (op, pool.as_deref_mut()) {
        // A placeholder handed to the refused pod is simply unused again.
        if pool.untake(unclaim_key(u), Instant::now()) {
            return Applied1::Now(Answer::Release(ReleaseResponse { released: true }));
        }
    }
    let (status, answer) = match (op, pool) {
        (Op::Claim(c), Some(pool)) => return claim_reserving(ws, c, since, now, pool),
        (Op::Claim(c), None) => {
            let (s, a) = apply_claim(ws, c, now);
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

/// A claim with reserved slots on: dead holders' placeholders are dropped, then the
/// claim takes one of ours, waits for another replica's, or claims a slot with a write.
fn claim_reserving(
    ws: &mut WorkloadSpread,
    c: &ClaimRequest,
    since: Instant,
    now: Timestamp,
    pool: &mut Pool,
) -> Applied1 {
    // A retried request for a pod already given a placeholder gets the same answer.
    if let Some(h) = pool.handed(claim_key(c)) {
        return Applied1::Now(Answer::Claim(h.answer.clone()));
    }
    let mut status = ws.status.clone().unwrap_or_default();
    let keep = |k: &str| pool.is_handed(k);
    drop_stale(&mut status, ws, &c.pod.version, scale_of(c), now, keep);
    ws.status = Some(status.clone());
    let claim = |ws: &mut WorkloadSpread, c: &ClaimRequest| {
        let (s, a) = apply_claim(ws, c, now);
        ws.status = Some(s);
        Applied1::Written(Ok(Answer::Claim(a)))
    };
    match place_claim(ws, &status, c, pool, now) {
        Placed::Taken(answer) => Applied1::Now(Answer::Claim(answer)),
        Placed::Wait if since.elapsed() < MAX_WAIT => Applied1::Wait,
        Placed::Wait | Placed::Claim(None) => claim(ws, c),
        Placed::Claim(Some(subset)) => {
            // Our own unused placeholders are no room for a write: claim in the subset
            // the rules chose with them free, else as if there were none.
            let only = ClaimRequest {
                candidates: vec![subset],
                ..c.clone()
            };
            let (s, a) = apply_claim(ws, &only, now);
            match a.subset {
                Some(_) => {
                    ws.status = Some(s);
                    Applied1::Written(Ok(Answer::Claim(a)))
                }
                None => claim(ws, c),
            }
        }
    }
}

/// The queue's own work: reserve, settle, return.
fn apply_own(
    ws: &mut WorkloadSpread,
    work: &Work,
    now: Timestamp,
    pool: Option<&Pool>,
) -> Applied1 {
    let mut status = ws.status.clone().unwrap_or_default();
    let outcome = match work {
        Work::Reserve { uid, .. } if *uid != ws.metadata.uid => Applied1::Reserved(vec![]),
        Work::Reserve {
            slot, keys, scale, ..
        } => {
            let (version, subset) = slot;
            let keep = |k: &str| pool.is_some_and(|p| p.is_handed(k));
            drop_stale(&mut status, ws, version, *scale, now, keep);
            Applied1::Reserved(reserve(&mut status, ws, version, subset, keys, *scale, now))
        }
        Work::Settle(handed) => {
            for h in handed {
                let (version, subset) = &h.slot;
                settle(&mut status, version, subset, &h.placeholder, &h.key, now);
            }
            Applied1::Done
        }
        Work::Return(r) => {
            let (version, subset) = &r.slot;
            let pod = PodKey { name: "", version };
            for key in &r.keys {
                unclaim(&mut status, ws, pod, key, subset, r.scale);
            }
            Applied1::Done
        }
        Work::Op(_) => Applied1::Done,
    };
    ws.status = Some(status);
    outcome
}

/// The operations whose waiter still waits, and how many were dropped. A waiter that
/// gave up (its webhook call timed out) gets no pod: applying its claim would hold a slot
/// for a pod that will not exist. The queue's own work has no waiter and is kept.
fn still_awaited(batch: Vec<Pending>) -> (Vec<Pending>, usize) {
    let before = batch.len();
    let kept: Vec<Pending> = batch
        .into_iter()
        .filter(|p| p.reply.as_ref().is_none_or(|r| !r.is_closed()))
        .collect();
    let dropped = before - kept.len();
    (kept, dropped)
}

/// Why a live read gave no object.
enum Read {
    /// The WorkloadSpread does not exist.
    Gone(String),
    /// An error or no answer in time: worth another attempt.
    Retry(String),
}

/// One GET of the WorkloadSpread, abandoned after `budget`.
async fn read(
    api: &Api<DynamicObject>,
    name: &str,
    budget: Duration,
) -> Result<DynamicObject, Read> {
    match tokio::time::timeout(budget, api.get_opt(name)).await {
        Ok(Ok(Some(o))) => Ok(o),
        Ok(Ok(None)) => Err(Read::Gone(format!("WorkloadSpread {name} not found"))),
        Ok(Err(e)) => Err(Read::Retry(format!("reading WorkloadSpread {name}: {e}"))),
        Err(_) => Err(Read::Retry(format!(
            "reading WorkloadSpread {name}: no answer in {budget:?}"
        ))),
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
fn newer(own: Option<DynamicObject>, reflected: Option<DynamicObject>) -> Option<DynamicObject> {
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

/// `first` plus what joins it under `policy`: operations arriving within the window,
/// then everything already queued (what arrived while the previous write was in
/// flight), up to `max_batch`.
async fn collect_batch(
    first: Pending,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
    policy: BatchPolicy,
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

fn to_json(object: &DynamicObject) -> Result<serde_json::Value, String> {
    let mut v = serde_json::to_value(object).map_err(|e| e.to_string())?;
    v["apiVersion"] = "apps.kruise.io/v1beta1".into();
    v["kind"] = "WorkloadSpread".into();
    Ok(v)
}

async fn backoff(attempt: u32) {
    let ms = 20u64.saturating_mul(1 << attempt.min(5));
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// `apps.kruise.io/v1beta1` `workloadspreads`.
pub fn workloadspread_resource() -> ApiResource {
    ApiResource {
        group: "apps.kruise.io".into(),
        version: "v1beta1".into(),
        api_version: "apps.kruise.io/v1beta1".into(),
        kind: "WorkloadSpread".into(),
        plural: "workloadspreads".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use workloadspread_core::counter::{PodRef, WorkloadSpreadKey};

    fn object(uid: &str) -> DynamicObject {
        let statuses = serde_json::json!([
            {"name": "a", "missingReplicas": 1}, {"name": "b", "missingReplicas": -1}]);
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "subsets": [{"name": "a", "maxReplicas": 1}, {"name": "b"}]},
            "status": {"observedGeneration": 1, "subsetStatuses": statuses.clone(),
                "versionedSubsetStatuses": {"versionIgnored": statuses}}
        }))
        .unwrap()
    }

    /// The guest's unclaim of `pod`'s claim into a (it refused the pod).
    fn refusal(pod: &str) -> Op {
        Op::Unclaim(UnclaimRequest {
            workload_spread: WorkloadSpreadKey {
                namespace: "ns".into(),
                name: "ws".into(),
                uid: None,
            },
            pod: PodRef {
                name: pod.into(),
                version: "versionIgnored".into(),
            },
            subset: "a".into(),
            generated_uid: None,
            workload_replicas: 4,
            rules: Default::default(),
        })
    }

    fn claim_request(pod: &str) -> ClaimRequest {
        match claim(pod, None) {
            Op::Claim(c) => c,
            _ => unreachable!(),
        }
    }

    fn claim(pod: &str, uid: Option<&str>) -> Op {
        Op::Claim(ClaimRequest {
            workload_spread: WorkloadSpreadKey {
                namespace: "ns".into(),
                name: "ws".into(),
                uid: uid.map(Into::into),
            },
            pod: PodRef {
                name: pod.into(),
                version: "versionIgnored".into(),
            },
            candidates: vec!["a".into(), "b".into()],
            workload_replicas: 4,
            generated_uid: format!("gen-{pod}"),
            rules: Default::default(),
        })
    }

    fn subset(a: &Applied1) -> Option<String> {
        match a {
            Applied1::Written(Ok(Answer::Claim(c))) | Applied1::Now(Answer::Claim(c)) => {
                c.subset.clone()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// `ops` as a batch whose waiters wait.
    fn batch(ops: Vec<Op>) -> Vec<Pending> {
        ops.into_iter().map(|op| internal(Work::Op(op))).collect()
    }

    #[test]
    fn a_batch_fills_subsets_in_order_with_one_write() {
        let (p1, p2, p3) = (claim("p1", None), claim("p2", None), claim("p3", Some("u")));
        let (updated, answers) = apply_batch(
            &object("u"),
            &batch(vec![p1, p2, p3]),
            Timestamp::UNIX_EPOCH,
            None,
        )
        .unwrap();
        let subsets: Vec<_> = answers.iter().map(subset).collect();
        assert_eq!(
            subsets,
            [Some("a".into()), Some("b".into()), Some("b".into())]
        );
        let updated = updated.expect("status changed");
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
        let statuses = &updated.data["status"]["versionedSubsetStatuses"]["versionIgnored"];
        assert_eq!(statuses[0]["missingReplicas"], 0);
        assert_eq!(statuses[0]["creatingPods"]["p1"], "1970-01-01T00:00:00Z");
        // Unlimited subsets are not tracked (as the reference).
        assert!(statuses[1]["creatingPods"]["p3"].is_null());
    }

    fn pool() -> Pool {
        Pool::new("h1".into(), ReservePolicy::default(), Arc::default())
    }

    /// a (max `max`) then b (unlimited), `creating` in a.
    fn object_with(max: i64, creating: Value) -> DynamicObject {
        let mut o = object("u");
        o.data["spec"]["subsets"][0]["maxReplicas"] = max.into();
        let n = creating.as_object().map_or(0, |m| m.len()) as i64;
        for path in ["subsetStatuses", "versionedSubsetStatuses"] {
            let a = match path {
                "subsetStatuses" => &mut o.data["status"][path][0],
                _ => &mut o.data["status"][path]["versionIgnored"][0],
            };
            a["missingReplicas"] = (max - n).into();
            a["creatingPods"] = creating.clone();
        }
        o
    }

    fn creating(o: &DynamicObject) -> Vec<String> {
        let a = &o.data["status"]["versionedSubsetStatuses"]["versionIgnored"][0];
        let mut keys: Vec<String> = a["creatingPods"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    /// One replica's reserved-slot cycle on one status: a claim is written and asks
    /// for a block, the block is reserved (half the room), the next claims take
    /// placeholders without a write, a refused pod's placeholder is unused again, and the
    /// settle write renames the taken ones.
    #[test]
    fn claims_take_reserved_slots_without_a_write_and_settle_later() {
        let mut pool = pool();
        let t0 = Timestamp::UNIX_EPOCH;
        let (o, out) = apply_batch(
            &object_with(8, json!({})),
            &batch(vec![claim("p1", None)]),
            t0,
            Some(&mut pool),
        )
        .unwrap();
        let o = o.expect("p1 written");
        assert_eq!(subset(&out[0]), Some("a".into()));
        let ws: WorkloadSpread = serde_json::from_value(to_json(&o).unwrap()).unwrap();
        let Some(Work::Reserve {
            slot, keys, scale, ..
        }) = refill(&ws, &mut pool, &claim_request("p1"), "a")
        else {
            panic!("a first claim asks for a block");
        };
        let reserve_all = internal(Work::Reserve {
            slot: slot.clone(),
            keys: keys.clone(),
            scale,
            uid: Some("u".into()),
        });
        let (o, out) = apply_batch(&o, &[reserve_all], t0, Some(&mut pool)).unwrap();
        let o = o.expect("placeholders written");
        let Applied1::Reserved(got) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(got.len(), 1, "a block of 1 after one claim");
        pool.reserved(&slot, got.clone(), Instant::now());
        // p2 takes the placeholder: answered now, nothing to write.
        let (none, out) =
            apply_batch(&o, &batch(vec![claim("p2", None)]), t0, Some(&mut pool)).unwrap();
        assert!(none.is_none());
        let Applied1::Now(Answer::Claim(a)) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(a.reservation.as_ref(), got.first());
        // Refused by the guest: unused again, still nothing written.
        let refused = refusal("p2");
        let (none, out) = apply_batch(
            &o,
            &batch(vec![refused, claim("p3", None)]),
            t0,
            Some(&mut pool),
        )
        .unwrap();
        assert!(none.is_none());
        assert!(matches!(
            out[0],
            Applied1::Now(Answer::Release(ReleaseResponse { released: true }))
        ));
        assert!(matches!(&out[1], Applied1::Now(Answer::Claim(a)) if a.reservation.is_some()));
        let settle = internal(Work::Settle(pool.settles()));
        let (o, _) = apply_batch(&o, &[settle], t0, Some(&mut pool)).unwrap();
        assert_eq!(creating(&o.expect("settled")), ["p1", "p3"]);
    }

    /// A block reserved in the same write as claims comes after them: reserved first,
    /// its placeholders (not yet in the pool) would leave the last claim no room.
    #[test]
    fn a_batch_claims_before_it_reserves() {
        let mut pool = pool();
        let t0 = Timestamp::UNIX_EPOCH;
        let one = object_with(3, json!({"p0": "1970-01-01T00:00:00Z"}));
        let reserve = internal(Work::Reserve {
            slot: ("versionIgnored".into(), "a".into()),
            keys: pool.new_keys(2),
            scale: Scale::new(4, Default::default()),
            uid: Some("u".into()),
        });
        let mut work = vec![reserve];
        work.extend(batch(vec![claim("p1", None), claim("p2", None)]));
        let (o, out) = apply_batch(&one, &work, t0, Some(&mut pool)).unwrap();
        assert!(
            matches!(&out[0], Applied1::Reserved(k) if k.is_empty()),
            "{out:?}"
        );
        assert_eq!(subset(&out[1]), Some("a".into()));
        assert_eq!(subset(&out[2]), Some("a".into()));
        assert_eq!(creating(&o.expect("written")), ["p0", "p1", "p2"]);
    }

    /// A return in the same write as a claim comes first: the returned placeholder has
    /// left the pool, and the claim must find its room.
    #[test]
    fn a_batch_returns_before_it_claims() {
        let mut pool = pool();
        let t0 = Timestamp::UNIX_EPOCH;
        let full = object_with(
            2,
            json!({"p0": "1970-01-01T00:00:00Z", "~h1.9": "1970-01-01T00:00:00Z"}),
        );
        let giving_back = internal(Work::Return(Return {
            slot: ("versionIgnored".into(), "a".into()),
            keys: vec!["~h1.9".into()],
            scale: Scale::new(4, Default::default()),
        }));
        let mut work = batch(vec![claim("p1", None)]);
        work.push(giving_back);
        let (o, out) = apply_batch(&full, &work, t0, Some(&mut pool)).unwrap();
        assert_eq!(subset(&out[0]), Some("a".into()));
        assert_eq!(creating(&o.expect("written")), ["p0", "p1"]);
    }

    /// A placeholder handed to a pod is never dropped as stale by its own replica's
    /// writes (another pod would get its slot), and a pod refused while its settle is in
    /// the same write is settled first and then unclaimed: its slot is free, and the
    /// placeholder is not handed out again.
    #[test]
    fn a_handed_placeholder_survives_its_own_replicas_writes_until_settled() {
        let mut pool = pool();
        let slot: SlotKey = ("versionIgnored".into(), "a".into());
        let placed = object_with(2, json!({"~h1.5": "1970-01-01T00:00:00Z"}));
        pool.track_uid(Some("u"));
        pool.claimed(&slot, Scale::new(4, Default::default()), Instant::now());
        pool.reserved(&slot, vec!["~h1.5".into()], Instant::now());
        let handed = pool.take(&slot, "~h1.5", "p1", ClaimResponse::default());
        assert!(handed.is_some());
        let later = Timestamp::UNIX_EPOCH
            + std::time::Duration::from_secs(PLACEHOLDER_TTL_SECONDS as u64 + 1);
        let (o, out) = apply_batch(
            &placed,
            &batch(vec![claim("p2", None)]),
            later,
            Some(&mut pool),
        )
        .unwrap();
        assert_eq!(subset(&out[0]), Some("a".into()));
        let o = o.expect("p2 written");
        assert_eq!(creating(&o), ["p2", "~h1.5"]);
        let refused = refusal("p1");
        let mut work = batch(vec![refused]);
        work.push(internal(Work::Settle(pool.settles())));
        let (o, out) = apply_batch(&o, &work, later, Some(&mut pool)).unwrap();
        assert!(matches!(
            out[0],
            Applied1::Written(Ok(Answer::Release(ReleaseResponse { released: true })))
        ));
        assert_eq!(creating(&o.expect("written")), ["p2"]);
        assert!(pool.unused("versionIgnored").is_empty());
    }

    /// Another replica's placeholders hold a's last slots: the claim waits rather than
    /// spill into b, and only after MAX_WAIT is it placed without them.
    #[test]
    fn a_claim_waits_for_another_replicas_placeholders_then_spills() {
        let mut pool = pool();
        let t0 = Timestamp::UNIX_EPOCH;
        let full = object_with(
            2,
            json!({"p0": "1970-01-01T00:00:00Z", "~h2.1": "1970-01-01T00:00:00Z"}),
        );
        let (none, out) =
            apply_batch(&full, &batch(vec![claim("p1", None)]), t0, Some(&mut pool)).unwrap();
        assert!(
            none.is_none() && matches!(out[0], Applied1::Wait),
            "{out:?}"
        );
        let mut late = batch(vec![claim("p1", None)]);
        late[0].since = Instant::now() - MAX_WAIT;
        let (o, out) = apply_batch(&full, &late, t0, Some(&mut pool)).unwrap();
        assert_eq!(subset(&out[0]), Some("b".into()));
        assert!(o.is_none(), "b is unlimited: nothing written");
        // Past their TTL the other replica's placeholders are dead and dropped.
        let later = t0 + std::time::Duration::from_secs(PLACEHOLDER_TTL_SECONDS as u64 + 1);
        let (o, out) = apply_batch(
            &full,
            &batch(vec![claim("p1", None)]),
            later,
            Some(&mut pool),
        )
        .unwrap();
        assert_eq!(subset(&out[0]), Some("a".into()));
        assert_eq!(creating(&o.expect("written")), ["p0", "p1"]);
    }

    #[test]
    fn an_attempt_starts_from_the_newer_copy() {
        let with_version = |v: &str, missing: i64| {
            let mut o = object("u");
            o.metadata.resource_version = Some(v.into());
            o.data["status"]["subsetStatuses"][0]["missingReplicas"] = missing.into();
            o
        };
        let missing = |o: Option<DynamicObject>| {
            o.map(|o| o.data["status"]["subsetStatuses"][0]["missingReplicas"].clone())
        };
        // (own, reflected, chosen missingReplicas)
        let cases = [
            (Some(("7", 0)), Some(("9", 1)), Some(1)),
            (Some(("9", 0)), Some(("7", 1)), Some(0)),
            (Some(("9", 0)), Some(("9", 1)), Some(0)),
            (Some(("x", 0)), Some(("9", 1)), Some(0)),
            (None, Some(("9", 1)), Some(1)),
            (Some(("7", 0)), None, Some(0)),
            (None, None, None),
        ];
        for (own, reflected, want) in cases {
            let own = own.map(|(v, m)| with_version(v, m));
            let reflected = reflected.map(|(v, m)| with_version(v, m));
            assert_eq!(
                missing(newer(own, reflected)),
                want.map(serde_json::Value::from),
                "{want:?}"
            );
        }
    }

    #[test]
    fn a_recreated_workloadspread_fails_only_that_operation() {
        let (p1, p2) = (claim("p1", Some("old")), claim("p2", None));
        let (_, answers) = apply_batch(
            &object("new"),
            &batch(vec![p1, p2]),
            Timestamp::UNIX_EPOCH,
            None,
        )
        .unwrap();
        assert!(
            matches!(&answers[0], Applied1::Written(Err(e)) if e.contains("recreated")),
            "{answers:?}"
        );
        assert_eq!(subset(&answers[1]), Some("a".into()));
    }

    #[test]
    fn nothing_to_release_writes_nothing() {
        let release = Op::Release(ReleaseRequest {
            workload_spread: WorkloadSpreadKey {
                namespace: "ns".into(),
                name: "ws".into(),
                uid: None,
            },
            pod: PodRef {
                name: "gone".into(),
                version: "versionIgnored".into(),
            },
            subset: "nope".into(),
            workload_replicas: 4,
            rules: Default::default(),
        });
        let (updated, answers) = apply_batch(
            &object("u"),
            &batch(vec![release]),
            Timestamp::UNIX_EPOCH,
            None,
        )
        .unwrap();
        assert!(updated.is_none());
        assert!(matches!(
            answers[0],
            Applied1::Written(Ok(Answer::Release(ReleaseResponse { released: false })))
        ));
    }

    fn pending(pod: &str) -> Pending {
        let (reply, _answer) = oneshot::channel();
        Pending {
            work: Work::Op(claim(pod, None)),
            reply: Some(reply),
            since: Instant::now(),
            waited: false,
        }
    }

    fn pods(batch: &[Pending]) -> Vec<String> {
        let pod = |p: &Pending| match &p.work {
            Work::Op(Op::Claim(c)) => c.pod.name.clone(),
            Work::Op(Op::Release(r)) => r.pod.name.clone(),
            Work::Op(Op::Unclaim(u)) => u.pod.name.clone(),
            other => format!("{other:?}"),
        };
        batch.iter().map(pod).collect()
    }

    fn policy(window_ms: u64, max_batch: usize) -> BatchPolicy {
        BatchPolicy {
            window: Duration::from_millis(window_ms),
            max_batch,
        }
    }

    /// A queue holding `queued`, with a sender kept open (as a live queue has).
    fn queue(
        queued: &[&str],
    ) -> (
        mpsc::UnboundedSender<Pending>,
        mpsc::UnboundedReceiver<Pending>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        for pod in queued {
            tx.send(pending(pod)).unwrap();
        }
        (tx, rx)
    }

    #[test]
    fn operations_whose_waiter_gave_up_are_dropped() {
        let (reply, answer) = oneshot::channel();
        let waited = Pending {
            work: Work::Op(claim("waited", None)),
            reply: Some(reply),
            since: Instant::now(),
            waited: false,
        };
        let (reply, gone) = oneshot::channel();
        let abandoned = Pending {
            work: Work::Op(claim("abandoned", None)),
            reply: Some(reply),
            since: Instant::now(),
            waited: false,
        };
        drop(gone);
        let own = internal(Work::Settle(vec![]));
        let (kept, dropped) = still_awaited(vec![waited, abandoned, own]);
        assert_eq!(
            (pods(&kept), dropped),
            (vec!["waited".to_string(), "Settle([])".to_string()], 1)
        );
        drop(answer);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_window_a_batch_takes_what_is_queued_and_waits_for_nothing() {
        let (_tx, mut rx) = queue(&["p2", "p3"]);
        let started = tokio::time::Instant::now();
        let batch = collect_batch(pending("p1"), &mut rx, policy(0, 512)).await;
        assert_eq!(pods(&batch), ["p1", "p2", "p3"]);
        let (_tx, mut rx) = queue(&[]);
        let batch = collect_batch(pending("alone"), &mut rx, policy(0, 512)).await;
        assert_eq!(pods(&batch), ["alone"]);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn max_batch_caps_a_batch_and_one_writes_every_operation_alone() {
        let (_tx, mut rx) = queue(&["p2", "p3", "p4"]);
        assert_eq!(
            pods(&collect_batch(pending("p1"), &mut rx, policy(0, 1)).await),
            ["p1"]
        );
        assert_eq!(
            pods(&collect_batch(pending("p2'"), &mut rx, policy(5, 2)).await),
            ["p2'", "p2"]
        );
        assert_eq!(
            pods(&collect_batch(pending("p5"), &mut rx, policy(0, 512)).await),
            ["p5", "p3", "p4"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_collects_what_arrives_before_it_closes() {
        let (tx, mut rx) = queue(&[]);
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            tx.send(pending("in-window")).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            late.send(pending("next-batch")).unwrap();
        });
        let started = tokio::time::Instant::now();
        let batch = collect_batch(pending("p1"), &mut rx, policy(2, 512)).await;
        assert_eq!(pods(&batch), ["p1", "in-window"]);
        assert_eq!(started.elapsed(), Duration::from_millis(2));
        let next = rx.recv().await.unwrap();
        assert_eq!(pods(&[next]), ["next-batch"]);
    }
}

//! Exact subset counters on WorkloadSpread status: one in-process queue per
//! WorkloadSpread group-commits concurrent claims and releases into one status write
//! guarded by `resourceVersion`. A 409 re-reads the object and re-applies the whole
//! batch, so several host replicas (and the controller) stay exact through the API
//! server's optimistic concurrency, and no pod is rejected because of contention.
//!
//! With reserved slots on (`docs/counter-protocol.md`), the queue also reserves blocks of
//! placeholders ahead of the claims, renames the ones handed out (settle) and gives back
//! idle ones; a claim that finds one of this replica's placeholders in its subset is
//! answered at once, without waiting for a write ([`fast`]).
//!
//! Every decision is `workloadspread_core`'s ([`workloadspread_core::admission::reserve`]);
//! this module applies them:
//! * [`queue`] — one task per WorkloadSpread: batches, maintenance (settles, returns),
//!   stopping when idle;
//! * [`attempt`] — a batch's write: read the newest copy, resolve stale placeholders
//!   (listing the pods that may name them), apply, write, 409s and deadlines;
//! * [`apply`] — a batch applied to one decoded object;
//! * [`fast`] — a claim answered from a placeholder without the queue;
//! * [`fence`] — a hand-out answered only once a read shows its spec is the stored one.

mod apply;
mod attempt;
mod departed;
mod departures;
mod error;
mod fast;
mod fence;
mod overdue;
mod queue;
pub mod reserve;

pub use error::CommitError;

use self::reserve::{Handed, Pool, ReservePolicy, Return, SlotKey};
use crate::metrics::{CounterLabels, CounterOp, CounterResult, Metrics};
use k8s_openapi::jiff::SignedDuration;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Client;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use workloadspread_core::admission::reserve::stale::Sightings;
use workloadspread_core::admission::reserve::PLACEHOLDER_TTL_SECONDS;
use workloadspread_core::admission::Scale;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::counter::{
    ClaimRequest, ClaimResponse, ReleaseRequest, ReleaseResponse, UnclaimRequest, WorkloadSpreadKey,
};
use workloadspread_core::Timestamp;
use workloadspread_kube::status::StatusWriter;

/// Write attempts per batch (409s and transient errors) before giving up.
const MAX_ATTEMPTS: u32 = 30;
/// A batch is answered (with an error if need be) within this long, below the
/// guest's 8 s wait and the API server's 10 s webhook timeout.
const COMMIT_DEADLINE: Duration = Duration::from_secs(6);
/// Longest wait for one status GET or PUT, or one pod listing: a hung call is abandoned
/// and the batch retried from a fresh read (a write that did land is then found and not
/// repeated).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a handed-out placeholder waits for its settle write: our controller counts
/// the pod through its annotation within milliseconds, after which the settle has nothing
/// to rename; other readers count the pod twice for at most this long.
const SETTLE_DELAY: Duration = Duration::from_secs(1);
/// How long failed settles are retried; past that, whoever finds the placeholder stale
/// settles it to the pod that names it.
const SETTLE_GIVE_UP: Duration = Duration::from_secs(60);
/// The pods naming the same stale placeholders are listed at most this often.
const LIST_EVERY: Duration = Duration::from_secs(1);
/// How often a queue holding placeholders or waiting claims looks at them again.
const TICK: Duration = Duration::from_millis(50);
/// An operation is answered within this long of its arrival, whatever it waited for:
/// below the guest's 8 s wait, which would otherwise give up on a claim still written.
const ANSWER_BUDGET: Duration = Duration::from_secs(7);
/// Longest a claim waits for placeholders in its way before it is placed without them
/// (a spill): past the other replica's idle return and past the life of a dead
/// replica's placeholders (seen for the TTL, then resolved), below [`ANSWER_BUDGET`].
const MAX_WAIT: Duration = Duration::from_millis(5500);
const _: () = assert!(
    MAX_WAIT.as_millis() > PLACEHOLDER_TTL_SECONDS as u128 * 1000
        && MAX_WAIT.as_millis() < ANSWER_BUDGET.as_millis()
);

/// How late a reserve write's answer comes under [`Faults::late_reserve_answers`]: past
/// [`CALL_TIMEOUT`].
const LATE_ANSWER: Duration = Duration::from_millis(2100);

/// How one host process's counter works.
#[derive(Clone, Copy, Debug)]
pub struct CounterSettings {
    pub batching: BatchPolicy,
    /// `None`: every claim is written before it is answered.
    pub reserving: Option<ReservePolicy>,
    pub lifetimes: Lifetimes,
    pub faults: Faults,
}

/// Fault tests only (hidden `serve` flags): a slow or skewed host, deterministically.
/// [`Faults::default`] is production.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// `--clock-offset-seconds`: added to the wall clock the counter stamps with (a host
    /// whose clock is off).
    pub clock_offset: SignedDuration,
    /// `--settle-delay-ms`: how long handed-out placeholders wait for their settle write,
    /// [`SETTLE_DELAY`] in production (a slow host: a fault can surely land between a
    /// hand-out and its settle).
    pub settle_delay: Duration,
    /// `--late-reserve-answers N`: the first N status writes that reserve placeholders
    /// land, but their answers come [`LATE_ANSWER`] late, past the call timeout (a slow
    /// API server or network).
    pub late_reserve_answers: u32,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            clock_offset: SignedDuration::ZERO,
            settle_delay: SETTLE_DELAY,
            late_reserve_answers: 0,
        }
    }
}

/// A counter operation from the policy.
#[derive(Clone, Debug)]
pub enum Op {
    Claim(ClaimRequest),
    Release(ReleaseRequest),
    Unclaim(UnclaimRequest),
}

/// The answer to an [`Op`].
pub use workloadspread_core::counter::batch::Answer;

/// The answer to the queue's own work when someone waits for it (shutdown).
const DONE: Answer = Answer::Release(ReleaseResponse { released: true });

/// What a queue applies: the policy's operations and its own reservation work.
#[derive(Clone, Debug)]
enum Work {
    Op(Op),
    Reserve {
        slot: SlotKey,
        keys: Vec<String>,
        scale: Scale<'static>,
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
    Written(Result<Answer, CommitError>),
    /// Answered already, whatever the write does (a placeholder taken or put back).
    Now(Answer),
    /// Placeholders in the way: try again later.
    Wait,
    /// A placeholder taken and withdrawn (the copy's spec was not the stored one):
    /// decided again by the next batch, on the stored spec (`fence.rs`).
    Again,
    /// Reservation work, done with the write: the placeholders reserved, stamped.
    Reserved(Vec<(String, Timestamp)>),
    Done,
}

struct Pending {
    work: Work,
    /// `None` for the queue's own work.
    reply: Option<oneshot::Sender<Result<Answer, CommitError>>>,
    since: Instant,
    /// Has waited for placeholders in its way (counted once).
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

/// How long a queue and the entries it finds live.
#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    /// A queue without work this long stops.
    pub idle: Duration,
    /// Claims and deletions left in the status this long (by this replica's clock) are
    /// resolved by the host from the pods: the controller would have recounted them long
    /// before (its windows are 30 s and 15 s), so it is down (`overdue.rs`).
    pub expiry: Duration,
}

/// A queue's state shared with the claims answered without it.
struct Shared {
    /// The last copy the queue read or wrote.
    cached: Option<DynamicObject>,
    /// The newest copy decoded, by `resourceVersion`.
    decoded: Option<(String, Arc<WorkloadSpread>)>,
    pool: Pool,
    /// When this replica first saw each placeholder of the object (stale ones are
    /// resolved by the next write).
    sightings: Sightings,
    /// The scale of the last claim: stale placeholders dropped without one are judged
    /// with it.
    scale: Option<Scale<'static>>,
    /// The last listing of the pods naming stale placeholders.
    listed: Option<Listed>,
    /// When this replica first saw each claim and deletion (`overdue.rs`).
    entries: overdue::EntrySightings,
    /// The reads that confirm hand-outs, and the newest spec they found.
    fence: fence::Fence,
}

/// Which stale placeholders were listed when, and the pods found naming them.
struct Listed {
    at: Instant,
    keys: std::collections::BTreeSet<String>,
    named: Vec<workloadspread_core::admission::reserve::stale::Naming>,
}

#[derive(Clone)]
struct Queue {
    tx: mpsc::UnboundedSender<Pending>,
    shared: Arc<Mutex<Shared>>,
}

/// The group-commit queues of one host process.
pub struct Committer {
    client: Client,
    /// Every status write, each bounded by what is left of its batch's deadline.
    status: StatusWriter,
    resource: ApiResource,
    batching: BatchPolicy,
    /// `None`: every claim is written before it is answered.
    reserving: Option<ReservePolicy>,
    /// This process's placeholder prefix.
    holder: String,
    next_key: Arc<AtomicU64>,
    queues: Mutex<HashMap<QueueKey, Queue>>,
    /// How long an idle queue lives, and how long entries wait for the controller.
    lifetimes: Lifetimes,
    metrics: Arc<Metrics>,
    /// Wall time; [`Committer::now`] adds the fault tests' offset.
    clock: fn() -> Timestamp,
    faults: Faults,
    /// Reserve writes still to answer late ([`Faults::late_reserve_answers`]).
    late_answers_left: AtomicU32,
    /// The WorkloadSpread reflector, once the capabilities have started it.
    reflector: OnceLock<Store<DynamicObject>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A placeholder prefix unique to this process (64 bits: long-lived pods keep naming old
/// placeholders, and a new process must not draw a dead one's id): a restarted host
/// never takes over (or collides with) a dead one's placeholders; those are resolved
/// when stale.
fn holder_id() -> String {
    use std::hash::BuildHasher;
    let seed = (std::process::id(), std::time::SystemTime::now());
    let hash = std::collections::hash_map::RandomState::new().hash_one(seed);
    format!("{hash:016x}")
}

impl Committer {
    /// The queues of one host process; a queue without work for `lifetimes.idle` stops,
    /// and its entry and memory go.
    pub fn new(
        client: Client,
        settings: CounterSettings,
        metrics: Arc<Metrics>,
        clock: fn() -> Timestamp,
    ) -> Arc<Self> {
        let holder = holder_id();
        let labels = crate::metrics::HolderLabels {
            holder: holder.clone(),
        };
        metrics.holder.get_or_create(&labels).set(1);
        Arc::new(Committer {
            status: StatusWriter::new(client.clone(), CALL_TIMEOUT),
            client,
            resource: workloadspread_kube::resource::workloadspread_resource(),
            batching: settings.batching,
            reserving: settings.reserving.filter(|r| r.max_block > 0),
            holder,
            next_key: Arc::default(),
            queues: Mutex::new(HashMap::new()),
            lifetimes: settings.lifetimes,
            metrics,
            clock,
            faults: settings.faults,
            late_answers_left: AtomicU32::new(settings.faults.late_reserve_answers),
            reflector: OnceLock::new(),
        })
    }

    /// The clock the counter stamps with: wall time, moved by the fault tests' offset.
    fn now(&self) -> Timestamp {
        (self.clock)() + self.faults.clock_offset
    }

    /// Whether this reserve write's answer is to come late (takes one of the faults left).
    fn late_reserve_answer(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.late_answers_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Lets every attempt start from the reflector's copy when it is newer.
    pub fn use_reflector(&self, store: Store<DynamicObject>) {
        let _ = self.reflector.set(store);
    }

    /// The reflector's copy of `namespace/name`, if any (not copied).
    fn reflected_arc(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let store = self.reflector.get()?;
        let key = ObjectRef::new_with(name, self.resource.clone()).within(namespace);
        store.get(&key)
    }

    /// Answers `op` from a reserved slot when it can, else queues it on its
    /// WorkloadSpread's queue and waits for the committed answer.
    pub async fn submit(self: &Arc<Self>, op: Op) -> Result<Answer, CommitError> {
        let key = op.key();
        let queue_key = (key.namespace.clone(), key.name.clone());
        let arrived = Instant::now();
        if let Op::Claim(c) = &op {
            match self.from_reservation(&queue_key, c) {
                Some(fast::Reserved::Confirmed(answer)) => {
                    let answer = Answer::Claim(answer);
                    self.record(&op, Some(&answer));
                    return Ok(answer);
                }
                Some(fast::Reserved::Taken {
                    queue,
                    spec,
                    placeholder,
                }) => {
                    // Answered only once a read shows the copy's spec is the stored one;
                    // else withdrawn, and decided again on the stored spec below.
                    let pending = fence::Unconfirmed::new(queue.clone(), c.key(), placeholder);
                    let decided = Instant::now();
                    let same = self
                        .spec_unchanged(&queue_key, &queue, &spec, decided)
                        .await;
                    if let Some(answer) = pending.resolve(same) {
                        let answer = Answer::Claim(answer);
                        self.record(&op, Some(&answer));
                        return Ok(answer);
                    }
                }
                None => {}
            }
        }
        self.queued(&queue_key, op, arrived).await
    }

    /// Queues `op` on its WorkloadSpread's queue and waits for the committed answer.
    async fn queued(
        self: &Arc<Self>,
        queue_key: &QueueKey,
        op: Op,
        arrived: Instant,
    ) -> Result<Answer, CommitError> {
        let (reply, answer) = oneshot::channel();
        self.send_since(queue_key, Work::Op(op), Some(reply), arrived);
        answer.await.map_err(|_| CommitError::Stopped)?
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
    fn new(pool: Pool) -> Self {
        Shared {
            cached: None,
            decoded: None,
            pool,
            sightings: Sightings::default(),
            scale: None,
            listed: None,
            entries: Default::default(),
            fence: Default::default(),
        }
    }

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
        let ws = workloadspread_kube::resource::decode_workloadspread(object).ok()?;
        let ws = Arc::new(ws);
        self.decoded = Some((version, ws.clone()));
        Some(ws)
    }
}

fn resource_version(o: &DynamicObject) -> Option<u64> {
    o.metadata.resource_version.as_deref()?.parse().ok()
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
/// Records a claim answered into `subset`; the reserve work to queue if the subset's
/// block needs refilling. Unlimited subsets are not tracked: nothing to reserve.
fn refill(ws: &WorkloadSpread, pool: &mut Pool, c: &ClaimRequest, subset: &str) -> Option<Work> {
    ws.subset(subset)?.max_replicas.as_ref()?;
    let slot = (c.pod.version.clone(), subset.to_string());
    let n = pool.claimed(&slot, c.scale(), Instant::now())?;
    Some(Work::Reserve {
        keys: pool.new_keys(n),
        slot,
        scale: c.scale(),
        uid: ws.metadata.uid.clone(),
    })
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

#[cfg(test)]
mod tests;

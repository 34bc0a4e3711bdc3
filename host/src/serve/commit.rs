//! Exact subset counters on WorkloadSpread status: one in-process queue per
//! WorkloadSpread group-commits concurrent claims and releases into one status write
//! guarded by `resourceVersion`. A 409 re-reads the object and re-applies the whole
//! batch, so several host replicas (and the controller) stay exact through the API
//! server's optimistic concurrency, and no pod is rejected because of contention.
//!
//! Each attempt starts from the newer of the queue's own copy and the WorkloadSpread
//! reflector's: claims that write nothing (an unlimited subset) never refresh the copy,
//! and the controller's newer status must not be decided on from a stale one.

use super::metrics::{CounterLabels, CounterOp, CounterResult, Metrics};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use workloadspread_core::api::v1beta1::WorkloadSpread;
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

struct Pending {
    op: Op,
    reply: oneshot::Sender<Result<Answer, String>>,
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

/// The group-commit queues of one host process.
pub struct Committer {
    client: Client,
    resource: ApiResource,
    batching: BatchPolicy,
    queues: Mutex<HashMap<QueueKey, mpsc::UnboundedSender<Pending>>>,
    metrics: Arc<Metrics>,
    clock: fn() -> Timestamp,
    /// The WorkloadSpread reflector, once the capabilities have started it.
    reflector: OnceLock<Store<DynamicObject>>,
}

impl Committer {
    pub fn new(
        client: Client,
        batching: BatchPolicy,
        metrics: Arc<Metrics>,
        clock: fn() -> Timestamp,
    ) -> Arc<Self> {
        Arc::new(Committer {
            client,
            resource: workloadspread_resource(),
            batching,
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
        let store = self.reflector.get()?;
        let key = ObjectRef::new_with(name, self.resource.clone()).within(namespace);
        store.get(&key).map(|o| (*o).clone())
    }

    /// Queues `op` on its WorkloadSpread's queue and waits for the committed answer.
    pub async fn submit(self: &Arc<Self>, op: Op) -> Result<Answer, String> {
        let key = op.key();
        let queue_key = (key.namespace.clone(), key.name.clone());
        let (reply, answer) = oneshot::channel();
        let mut pending = Pending { op, reply };
        loop {
            let tx = self.queue(&queue_key);
            match tx.send(pending) {
                Ok(()) => break,
                // The queue stopped for idleness between lookup and send: start another.
                Err(mpsc::error::SendError(p)) => {
                    pending = p;
                    self.remove_queue(&queue_key, &tx);
                }
            }
        }
        answer
            .await
            .map_err(|_| "the counter queue stopped before answering".to_string())?
    }

    fn queue(self: &Arc<Self>, key: &QueueKey) -> mpsc::UnboundedSender<Pending> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = queues.get(key).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        queues.insert(key.clone(), tx.clone());
        tokio::spawn(self.clone().run_queue(key.clone(), rx));
        tx
    }

    fn remove_queue(&self, key: &QueueKey, tx: &mpsc::UnboundedSender<Pending>) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if queues.get(key).is_some_and(|t| t.same_channel(tx)) {
            queues.remove(key);
        }
    }

    async fn run_queue(self: Arc<Self>, key: QueueKey, mut rx: mpsc::UnboundedReceiver<Pending>) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.0, &self.resource);
        let mut cached: Option<DynamicObject> = None;
        loop {
            let first = match tokio::time::timeout(IDLE, rx.recv()).await {
                Ok(Some(p)) => p,
                _ => break,
            };
            let batch = collect_batch(first, &mut rx, self.batching).await;
            self.commit(&api, &key, &mut cached, batch).await;
        }
        // Stop taking operations, then finish whatever was queued meanwhile.
        rx.close();
        let mut rest = vec![];
        while let Ok(p) = rx.try_recv() {
            rest.push(p);
        }
        if !rest.is_empty() {
            self.commit(&api, &key, &mut cached, rest).await;
        }
    }

    /// Applies `batch` to the WorkloadSpread and writes the status once; on 409
    /// re-reads and re-applies. Answers every operation.
    async fn commit(
        &self,
        api: &Api<DynamicObject>,
        key: &QueueKey,
        cached: &mut Option<DynamicObject>,
        batch: Vec<Pending>,
    ) {
        let name = key.1.as_str();
        let (batch, abandoned) = still_awaited(batch);
        self.metrics.abandoned.inc_by(abandoned as u64);
        if batch.is_empty() {
            return;
        }
        self.metrics.batch_size.observe(batch.len() as f64);
        let ops: Vec<&Op> = batch.iter().map(|p| &p.op).collect();
        let mut last_error = String::new();
        let deadline = tokio::time::Instant::now() + COMMIT_DEADLINE;
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
                false => newer(cached.take(), self.reflected(&key.0, name)),
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
            if !refreshed && uid_differs(&object, &ops) {
                (read_live, refreshed) = (true, true);
                continue;
            }
            let (updated, answers) = match apply_batch(&object, &ops, (self.clock)()) {
                Ok(r) => r,
                Err(e) => {
                    last_error = e;
                    break;
                }
            };
            let Some(updated) = updated else {
                *cached = Some(object);
                return self.answer(batch, answers);
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
                    *cached = Some(written);
                    return self.answer(batch, answers);
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
        for p in batch {
            self.record(&p.op, None);
            let _ = p.reply.send(Err(last_error.clone()));
        }
    }

    fn answer(&self, batch: Vec<Pending>, answers: Vec<Result<Answer, String>>) {
        for (p, a) in batch.into_iter().zip(answers) {
            self.record(&p.op, a.as_ref().ok());
            // The waiter may have given up (webhook deadline); nothing to do then.
            let _ = p.reply.send(a);
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

impl Op {
    fn key(&self) -> &WorkloadSpreadKey {
        match self {
            Op::Claim(c) => &c.workload_spread,
            Op::Release(r) => &r.workload_spread,
            Op::Unclaim(u) => &u.workload_spread,
        }
    }
}

/// The object to write (`None` when the status did not change) and one answer per
/// operation.
type Applied = (Option<DynamicObject>, Vec<Result<Answer, String>>);

/// Applies `ops` in order.
fn apply_batch(object: &DynamicObject, ops: &[&Op], now: Timestamp) -> Result<Applied, String> {
    let mut ws: WorkloadSpread = serde_json::from_value(to_json(object)?)
        .map_err(|e| format!("decoding WorkloadSpread: {e}"))?;
    let original = ws.status.clone();
    let mut answers = Vec::with_capacity(ops.len());
    for op in ops {
        if let Some(uid) = &op.key().uid {
            if ws.metadata.uid.as_ref() != Some(uid) {
                answers.push(Err(format!(
                    "WorkloadSpread {} was recreated (uid changed)",
                    op.key().name
                )));
                continue;
            }
        }
        let (status, answer) = match op {
            Op::Claim(c) => {
                let (s, a) = apply_claim(&ws, c, now);
                (s, Answer::Claim(a))
            }
            Op::Release(r) => {
                let (s, a) = apply_release(&ws, r, now);
                (s, Answer::Release(a))
            }
            Op::Unclaim(u) => {
                let (s, a) = apply_unclaim(&ws, u);
                (s, Answer::Release(a))
            }
        };
        ws.status = Some(status);
        answers.push(Ok(answer));
    }
    if ws.status == original {
        return Ok((None, answers));
    }
    let mut updated = object.clone();
    let status = serde_json::to_value(&ws.status).map_err(|e| e.to_string())?;
    if let Some(map) = updated.data.as_object_mut() {
        map.insert("status".into(), status);
    }
    Ok((Some(updated), answers))
}

/// The operations whose waiter still waits, and how many were dropped. A waiter that
/// gave up (its webhook call timed out) gets no pod: applying its claim would hold a slot
/// for a pod that will not exist.
fn still_awaited(batch: Vec<Pending>) -> (Vec<Pending>, usize) {
    let before = batch.len();
    let kept: Vec<Pending> = batch.into_iter().filter(|p| !p.reply.is_closed()).collect();
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
fn uid_differs(object: &DynamicObject, ops: &[&Op]) -> bool {
    let uid = object.metadata.uid.as_deref();
    ops.iter().any(|op| {
        op.key()
            .uid
            .as_deref()
            .is_some_and(|want| Some(want) != uid)
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

    fn subset(a: &Result<Answer, String>) -> Option<String> {
        match a {
            Ok(Answer::Claim(c)) => c.subset.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_batch_fills_subsets_in_order_with_one_write() {
        let (p1, p2, p3) = (claim("p1", None), claim("p2", None), claim("p3", Some("u")));
        let (updated, answers) =
            apply_batch(&object("u"), &[&p1, &p2, &p3], Timestamp::UNIX_EPOCH).unwrap();
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
        let (_, answers) = apply_batch(&object("new"), &[&p1, &p2], Timestamp::UNIX_EPOCH).unwrap();
        assert!(answers[0].as_ref().unwrap_err().contains("recreated"));
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
        let (updated, answers) =
            apply_batch(&object("u"), &[&release], Timestamp::UNIX_EPOCH).unwrap();
        assert!(updated.is_none());
        assert_eq!(
            answers[0],
            Ok(Answer::Release(ReleaseResponse { released: false }))
        );
    }

    fn pending(pod: &str) -> Pending {
        let (reply, _answer) = oneshot::channel();
        Pending {
            op: claim(pod, None),
            reply,
        }
    }

    fn pods(batch: &[Pending]) -> Vec<String> {
        let pod = |p: &Pending| match &p.op {
            Op::Claim(c) => c.pod.name.clone(),
            Op::Release(r) => r.pod.name.clone(),
            Op::Unclaim(u) => u.pod.name.clone(),
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
            op: claim("waited", None),
            reply,
        };
        let (reply, gone) = oneshot::channel();
        let abandoned = Pending {
            op: claim("abandoned", None),
            reply,
        };
        drop(gone);
        let (kept, dropped) = still_awaited(vec![waited, abandoned]);
        assert_eq!((pods(&kept), dropped), (vec!["waited".to_string()], 1));
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

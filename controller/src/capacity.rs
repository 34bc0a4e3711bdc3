//! Elastic capacity, read (#42; `core::controller::capacity` decides): the provisioners'
//! events about the workload's stuck pods, and what the pods of each node a subset
//! selects request. Read only when they can matter — events for pods Pending and
//! Unschedulable in an Adaptive WorkloadSpread, nodes for a held subset or a rebalanced
//! WorkloadSpread — with every call bounded ([`READ_TIMEOUT`], [`READ_BUDGET`] per
//! reconcile), per-node results kept [`NODE_TTL`], and a failed read leaving the answer
//! unknown (the timers decide; rebalancing moves nothing into the subset).

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::jiff::SignedDuration;
use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::capacity::{
    add, amounts, believed_time, classify, is_pending_unschedulable, newest, pod_requests,
    subset_room, wait_bound, Capacity, Cause, NodeCapacity, Resources, Signal, SignalRule,
};
use workloadspread_core::controller::ReconcileOutput;
use workloadspread_core::pods::{is_active, matched, name};
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::Timestamp;

/// How long a node's requested amounts are reused.
pub const NODE_TTL: Duration = Duration::from_secs(3);
/// Stuck pods whose events one reconcile reads (the rest wait for the timers).
const MAX_SIGNAL_READS: usize = 32;
/// Nodes read per subset and reconcile before the room is left unknown.
const MAX_NODE_READS: usize = 16;
/// Bound of one read.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// What one reconcile spends on capacity reads at most; later reads are skipped (their
/// answers unknown: the timers decide, nothing is moved into the subset).
const READ_BUDGET: Duration = Duration::from_secs(5);

/// Why a capacity read gave no answer.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("the reconcile's capacity read budget is spent")]
    BudgetSpent,
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One read within [`READ_TIMEOUT`] and what is left of the reconcile's budget.
async fn read_within<T>(
    deadline: Instant,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReadError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ReadError::BudgetSpent);
    }
    let wait = left.min(READ_TIMEOUT);
    match tokio::time::timeout(wait, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(ReadError::Timeout(wait)),
    }
}

/// `--capacity-*` settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Read signals and room at all (`--no-capacity-signals` turns both off).
    pub enabled: bool,
    pub rules: Vec<SignalRule>,
    /// Default wait bound for coming capacity, seconds (0: none).
    pub wait_seconds: u64,
    /// How often waiting pods' events are read again.
    pub poll: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: false,
            rules: vec![],
            wait_seconds: 0,
            poll: Duration::from_secs(2),
        }
    }
}

/// The reader and its per-node cache.
pub struct Reader {
    pub settings: Settings,
    nodes: Mutex<HashMap<String, (Instant, Resources)>>,
    /// Pods waiting for coming capacity, per WorkloadSpread (namespace, name).
    waits: Mutex<HashMap<(String, String), Vec<String>>>,
    /// When each signal Event version (uid, resourceVersion) was first read.
    seen: Mutex<HashMap<(String, String), Timestamp>>,
}

/// Makes room in a full first-seen record: the older half goes (an Event seen again after
/// that counts as seen then — a forgery's date refreshed at most once per half a record's
/// worth of newer Events, never all at once).
fn forget_oldest(seen: &mut HashMap<(String, String), Timestamp>) {
    let mut times: Vec<Timestamp> = seen.values().copied().collect();
    times.sort_unstable();
    if let Some(&median) = times.get(times.len() / 2) {
        seen.retain(|_, at| *at > median);
    }
}

/// Signal Event versions remembered at most ([`Reader::first_seen`]).
const MAX_SEEN_EVENTS: usize = 10_000;

/// Tracked WorkloadSpreads with waiting pods at most; past it the record starts over
/// (some outcomes go uncounted, memory stays bounded).
const MAX_TRACKED_WAITS: usize = 10_000;

impl Reader {
    pub fn new(settings: Settings) -> Self {
        Reader {
            settings,
            nodes: Mutex::new(HashMap::new()),
            waits: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// How the waits for coming capacity of `ws` that ended since its last reconcile
    /// ended: `landed` (the pod was scheduled), `no_capacity` / `expired` (rescheduled:
    /// a provisioner said no, or the bound passed), `gone` (deleted otherwise).
    pub fn ended_waits(
        &self,
        ws: &WorkloadSpread,
        out: &ReconcileOutput,
        pods: &[Arc<Pod>],
    ) -> Vec<&'static str> {
        let key = (ws.namespace().to_string(), ws.name().to_string());
        let mut waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        let before = waits.remove(&key).unwrap_or_default();
        if !out.waiting_for_capacity.is_empty() {
            if waits.len() >= MAX_TRACKED_WAITS {
                waits.clear();
            }
            waits.insert(key, out.waiting_for_capacity.clone());
        }
        before
            .iter()
            .filter(|p| !out.waiting_for_capacity.contains(p))
            .map(|p| {
                let moved = out.pods_to_delete.iter().position(|d| d == p);
                match moved.and_then(|i| out.reschedule_causes.get(i)) {
                    Some(Cause::NoCapacity { .. }) => "no_capacity",
                    Some(_) => "expired",
                    None => {
                        let scheduled = pods.iter().any(|q| {
                            name(q) == p.as_str()
                                && q.spec
                                    .as_ref()
                                    .and_then(|s| s.node_name.as_deref())
                                    .is_some()
                        });
                        if scheduled {
                            "landed"
                        } else {
                            "gone"
                        }
                    }
                }
            })
            .collect()
    }

    /// What `core` needs about capacity for `ws` now.
    pub async fn read(
        &self,
        client: &Client,
        ws: &WorkloadSpread,
        pods: &[Arc<Pod>],
        nodes: &Store<Node>,
        rebalancing: bool,
        metrics: &Metrics,
    ) -> Capacity {
        if !self.settings.enabled {
            return Capacity::NONE;
        }
        let adaptive = ws.spec.schedule_strategy.reschedule_seconds().is_some();
        let deadline = Instant::now() + READ_BUDGET;
        let mut capacity = Capacity {
            wait_bound: wait_bound(ws, self.settings.wait_seconds),
            poll: SignedDuration::try_from(self.settings.poll).ok(),
            ..Default::default()
        };
        if adaptive {
            capacity.signals = self.signals(client, ws, pods, metrics, deadline).await;
        }
        let held: Vec<&str> = ws
            .status
            .as_ref()
            .map(|s| {
                s.subset_statuses
                    .iter()
                    .filter(|s| adaptive && s.is_unschedulable())
                    .map(|s| s.name.as_str())
                    .collect()
            })
            .unwrap_or_default();
        if held.is_empty() && !rebalancing {
            return capacity;
        }
        // The workload's pods are alike: any active one stands for the next.
        let Some(sample) = pods.iter().map(AsRef::as_ref).find(|p| is_active(p)) else {
            return capacity;
        };
        let Some(spec) = sample.spec.as_ref() else {
            return capacity;
        };
        let need = pod_requests(spec);
        let tolerations = spec.tolerations.clone().unwrap_or_default();
        let all_nodes: Vec<NodeCapacity> = nodes.state().iter().map(|n| node_capacity(n)).collect();
        for subset in &ws.spec.subsets {
            if !rebalancing && !held.contains(&subset.name.as_str()) {
                continue;
            }
            let mut candidates: Vec<NodeCapacity> = all_nodes
                .iter()
                .filter(|n| {
                    workloadspread_core::controller::capacity::selects(subset, &tolerations, n)
                })
                .cloned()
                .collect();
            candidates.sort_by(|a, b| a.node.name.cmp(&b.node.name));
            let mut reads = 0;
            let mut room = subset_room(subset, &tolerations, &candidates, &need);
            for i in 0..candidates.len() {
                if !matches!(
                    room,
                    workloadspread_core::controller::capacity::Room::Unknown
                ) {
                    break;
                }
                if candidates[i].requested.is_some() {
                    continue;
                }
                if reads >= MAX_NODE_READS {
                    break;
                }
                reads += 1;
                candidates[i].requested = self
                    .requested(client, &candidates[i].node.name, metrics, deadline)
                    .await;
                room = subset_room(subset, &tolerations, &candidates, &need);
            }
            capacity.rooms.insert(subset.name.clone(), room);
        }
        capacity
    }

    /// The newest provisioner signal per stuck pod of `ws` (those in its subsets but the
    /// last, which rescheduling moves out of).
    async fn signals(
        &self,
        client: &Client,
        ws: &WorkloadSpread,
        pods: &[Arc<Pod>],
        metrics: &Metrics,
        deadline: Instant,
    ) -> BTreeMap<String, Signal> {
        let last = ws.spec.subsets.last().map(|s| s.name.as_str());
        let stuck = pods
            .iter()
            .map(AsRef::as_ref)
            .filter(|p| is_pending_unschedulable(p))
            .filter(|p| {
                matched(p).is_some_and(|m| m.name == ws.name() && Some(m.subset.as_str()) != last)
            })
            .take(MAX_SIGNAL_READS);
        let events: Api<CoreEvent> = Api::namespaced(client.clone(), ws.namespace());
        let mut out = BTreeMap::new();
        for pod in stuck {
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            // From the watch cache (any version): a signal a moment late only delays.
            let params = ListParams::default()
                .fields(&format!("involvedObject.uid={uid}"))
                .match_any();
            match read_within(deadline, events.list(&params)).await {
                Ok(list) => {
                    metrics.capacity_read("events", true);
                    let signals = list.items.iter().filter_map(|e| self.signal(e));
                    if let Some(s) = newest(signals) {
                        out.insert(name(pod).to_string(), s);
                    }
                }
                Err(e) => {
                    metrics.capacity_read("events", false);
                    tracing::warn!(pod = %name(pod), "reading the pod's events: {e} (its timer decides)");
                }
            }
        }
        out
    }

    fn signal(&self, e: &CoreEvent) -> Option<Signal> {
        let signal = self.claimed_signal(e)?;
        let at = believed_time(signal.at, self.first_seen(e));
        Some(Signal { at, ..signal })
    }

    /// When this controller first saw this version of `e` (its own clock): a signal is
    /// not believed said later than that (`believed_time`).
    fn first_seen(&self, e: &CoreEvent) -> Timestamp {
        let now = Timestamp::now();
        let key = (
            e.metadata.uid.clone().unwrap_or_default(),
            e.metadata.resource_version.clone().unwrap_or_default(),
        );
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_SEEN_EVENTS && !seen.contains_key(&key) {
            forget_oldest(&mut seen);
        }
        *seen.entry(key).or_insert(now)
    }

    fn claimed_signal(&self, e: &CoreEvent) -> Option<Signal> {
        let reason = e.reason.as_deref()?;
        let source = e
            .reporting_component
            .as_deref()
            .filter(|s| !s.is_empty())
            .or_else(|| e.source.as_ref().and_then(|s| s.component.as_deref()))
            .unwrap_or_default();
        let kind = classify(&self.settings.rules, reason, source)?;
        let at = e
            .series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Some(Signal {
            kind,
            reason: reason.to_string(),
            source: source.to_string(),
            message: e.message.clone().unwrap_or_default(),
            at,
        })
    }

    /// What the non-terminal pods on `node` request (kept [`NODE_TTL`]).
    async fn requested(
        &self,
        client: &Client,
        node: &str,
        metrics: &Metrics,
        deadline: Instant,
    ) -> Option<Resources> {
        let now = Instant::now();
        {
            let mut cache = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            cache.retain(|_, (at, _)| now.duration_since(*at) < NODE_TTL);
            if let Some((_, r)) = cache.get(node) {
                return Some(r.clone());
            }
        }
        // From the watch cache, which indexes pods by node: no etcd read, no scan.
        let params = ListParams::default()
            .fields(&format!(
                "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
            ))
            .match_any();
        let pods: Api<Pod> = Api::all(client.clone());
        let list = match read_within(deadline, pods.list(&params)).await {
            Ok(list) => list,
            Err(e) => {
                metrics.capacity_read("node_pods", false);
                tracing::warn!(
                    node,
                    "reading the node's pods: {e} (its room stays unknown)"
                );
                return None;
            }
        };
        metrics.capacity_read("node_pods", true);
        let mut requested = Resources::new();
        for p in &list.items {
            if let Some(spec) = p.spec.as_ref() {
                add(&mut requested, &pod_requests(spec));
            }
        }
        let mut cache = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(node.to_string(), (now, requested.clone()));
        Some(requested)
    }
}

/// A cached node as the fit check sees it (its pods not read yet).
pub fn node_capacity(n: &Node) -> NodeCapacity {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let cordoned = n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    NodeCapacity {
        node: NodeInfo::from(n),
        schedulable: ready && !cordoned,
        allocatable: n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(amounts)
            .unwrap_or_default(),
        requested: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Security review R4: a future-dated signal Event counts as said when this reader first
    /// saw its version — and stays so when read again; a new version is seen anew.
    #[test]
    fn a_future_dated_event_counts_as_said_when_first_read() {
        let reader = Reader::new(Settings {
            enabled: true,
            rules: workloadspread_core::controller::capacity::default_rules(),
            ..Settings::default()
        });
        let event = |rv: &str| -> CoreEvent {
            serde_json::from_value(json!({
                "metadata": {"name": "e", "namespace": "ns", "uid": "e-uid", "resourceVersion": rv},
                "involvedObject": {"kind": "Pod", "name": "p", "uid": "p-uid"},
                "reason": "TriggeredScaleUp", "source": {"component": "cluster-autoscaler"},
                "lastTimestamp": "2099-01-01T00:00:00Z"}))
            .unwrap()
        };
        let before = Timestamp::now();
        let first = reader.signal(&event("1")).expect("a signal");
        assert!(
            first.at >= before && first.at <= Timestamp::now(),
            "{:?}",
            first.at
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let again = reader.signal(&event("1")).expect("a signal");
        assert_eq!(again.at, first.at, "the same version: the first sight");
        let updated = reader.signal(&event("2")).expect("a signal");
        assert!(updated.at > first.at, "a new version is seen anew");
    }

    #[test]
    fn a_full_first_seen_record_forgets_its_older_half() {
        let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        let mut seen: HashMap<(String, String), Timestamp> = (0..10)
            .map(|i| ((format!("u{i}"), "1".to_string()), at(i)))
            .collect();
        forget_oldest(&mut seen);
        let mut kept: Vec<i64> = seen
            .values()
            .map(|t| t.as_second() - 1_700_000_000)
            .collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![6, 7, 8, 9]);
    }

    #[test]
    fn ended_waits_are_counted_by_how_they_ended() {
        let reader = Reader::new(Settings::default());
        let ws: WorkloadSpread = serde_json::from_value(
            json!({"metadata": {"name": "w", "namespace": "ns"}, "spec": {}}),
        )
        .unwrap();
        let pod = |name: &str, node: Option<&str>| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": []}}))
                    .unwrap(),
            )
        };
        let out = |waiting: &[&str], moved: &[(&str, Cause)]| ReconcileOutput {
            waiting_for_capacity: waiting.iter().map(|s| s.to_string()).collect(),
            pods_to_delete: moved.iter().map(|(p, _)| p.to_string()).collect(),
            reschedule_causes: moved.iter().map(|(_, c)| c.clone()).collect(),
            ..Default::default()
        };
        let pods = [
            pod("a", None),
            pod("b", None),
            pod("c", None),
            pod("d", None),
        ];
        let first = out(&["a", "b", "c", "d"], &[]);
        assert!(reader.ended_waits(&ws, &first, &pods).is_empty());
        // a landed, b: the provisioner said no, c: the bound passed, d: deleted by someone.
        let pods = [pod("a", Some("n1")), pod("b", None), pod("c", None)];
        let no = Cause::NoCapacity {
            reason: "NotTriggerScaleUp".into(),
            source: "ca".into(),
        };
        let expired = Cause::WaitExpired {
            reason: "TriggeredScaleUp".into(),
        };
        let mut ended = reader.ended_waits(&ws, &out(&[], &[("b", no), ("c", expired)]), &pods);
        ended.sort();
        assert_eq!(ended, ["expired", "gone", "landed", "no_capacity"]);
        // Nothing is remembered once no pod waits.
        assert!(reader.ended_waits(&ws, &out(&[], &[]), &pods).is_empty());
    }

    #[test]
    fn nodes_are_schedulable_when_ready_and_not_cordoned() {
        let node = |ready: &str, cordoned: bool| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"},
                "spec": {"unschedulable": cordoned},
                "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": ready}]}}))
            .unwrap()
        };
        let n = node_capacity(&node("True", false));
        assert!(n.schedulable);
        assert_eq!(n.allocatable.get("cpu"), Some(&2000));
        assert_eq!(n.allocatable.get("pods"), Some(&110));
        assert!(!node_capacity(&node("False", false)).schedulable);
        assert!(!node_capacity(&node("True", true)).schedulable);
    }

    #[test]
    fn events_become_signals_by_reporter_and_latest_time() {
        let reader = Reader::new(Settings {
            enabled: true,
            rules: workloadspread_core::controller::capacity::default_rules(),
            ..Default::default()
        });
        let event = |reason: &str, source: Value, extra: Value| -> CoreEvent {
            let mut v = json!({"metadata": {"name": "e", "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "name": "p"}, "reason": reason,
                "message": "pod didn't trigger scale-up", "source": source,
                "lastTimestamp": "2026-01-01T00:00:05Z"});
            if let (Some(o), Some(x)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(x.clone());
            }
            serde_json::from_value(v).unwrap()
        };
        use serde_json::Value;
        let ca = reader
            .signal(&event(
                "NotTriggerScaleUp",
                json!({"component": "cluster-autoscaler"}),
                json!({}),
            ))
            .unwrap();
        assert_eq!(
            ca.kind,
            workloadspread_core::controller::capacity::SignalKind::NoCapacity
        );
        assert_eq!(ca.at.to_string(), "2026-01-01T00:00:05Z");
        // Karpenter reports through the new API (reportingComponent, eventTime).
        let karpenter = reader.signal(&event(
            "Nominated",
            json!(null),
            json!({"reportingComponent": "karpenter", "lastTimestamp": null,
                "eventTime": "2026-01-01T00:00:07.000000Z"}),
        ));
        assert_eq!(
            karpenter.map(|s| s.kind),
            Some(workloadspread_core::controller::capacity::SignalKind::CapacityComing)
        );
        // The scheduler's FailedScheduling is no provisioner's verdict.
        assert!(reader
            .signal(&event(
                "FailedScheduling",
                json!({"component": "default-scheduler"}),
                json!({})
            ))
            .is_none());
    }
}

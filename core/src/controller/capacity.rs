//! Elastic capacity (#42; a deliberate extension, `docs/semantics.md` E1–E4): Adaptive
//! rescheduling on the provisioner's facts instead of timers alone.
//!
//! - **Signals**: what a cluster provisioner said about a pod, from its events
//!   ([`default_rules`]: cluster-autoscaler's `NotTriggerScaleUp`, `FailedScaleUp`,
//!   `TriggeredScaleUp`; Karpenter's `FailedScheduling`, `Nominated`; more by
//!   configuration). The newest wins.
//! - **When a stuck pod moves** ([`decide_unschedulable`]): at once on "no capacity";
//!   past `rescheduleCriticalSeconds` while capacity is coming, up to an opt-in bound
//!   ([`CAPACITY_WAIT_ANNOTATION`] or the controller's default); else the critical timer
//!   (OpenKruise's behaviour).
//! - **Room** ([`subset_room`]): whether a Ready, schedulable node that the subset's
//!   required term and the pod's tolerations select has the pod's requests free
//!   (allocatable minus what its pods request, as the scheduler's fit check counts). A
//!   held subset comes back once one has; rebalancing never moves a pod into a subset
//!   without one.
//!
//! Quantities arrive parsed ([`parse_quantity`]); the controller reads the events and
//! the nodes' pods and passes them in.

use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadSubset};
use crate::selector::{node_matches_term, tolerates, NodeInfo};
use crate::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::SignedDuration;
use std::collections::BTreeMap;

mod quantity;
pub use quantity::parse_quantity;

/// On a WorkloadSpread: how long (seconds) a pod whose capacity is coming may wait in
/// its subset, past `rescheduleCriticalSeconds` (0: not past it).
pub const CAPACITY_WAIT_ANNOTATION: &str = "workloadspread.io/capacity-wait-seconds";

/// What a provisioner's event says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SignalKind {
    /// It will not add capacity for the pod.
    NoCapacity,
    /// It is adding capacity for the pod.
    CapacityComing,
}

/// An event reason (and optionally the component that must report it) with its meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalRule {
    pub reason: String,
    /// `source.component` / `reportingController` (`None`: any reporter).
    pub source: Option<String>,
    pub kind: SignalKind,
}

impl SignalRule {
    fn new(reason: &str, source: &str, kind: SignalKind) -> Self {
        SignalRule {
            reason: reason.to_string(),
            source: Some(source.to_string()),
            kind,
        }
    }
}

/// The provisioners' own pod events (docs/operations.md "Elastic capacity" names the
/// versions): cluster-autoscaler (`source.component` `cluster-autoscaler`) and
/// Karpenter (reporting controller `karpenter`; its `FailedScheduling` is told apart
/// from the scheduler's by the reporter).
pub fn default_rules() -> Vec<SignalRule> {
    use SignalKind::*;
    vec![
        SignalRule::new("NotTriggerScaleUp", "cluster-autoscaler", NoCapacity),
        SignalRule::new("FailedScaleUp", "cluster-autoscaler", NoCapacity),
        SignalRule::new("TriggeredScaleUp", "cluster-autoscaler", CapacityComing),
        SignalRule::new("FailedScheduling", "karpenter", NoCapacity),
        SignalRule::new("Nominated", "karpenter", CapacityComing),
    ]
}

/// `REASON[@SOURCE]=no-capacity|capacity-coming` (the controller's `--capacity-signal`).
pub fn parse_rule(text: &str) -> Result<SignalRule, String> {
    let usage = "want REASON[@SOURCE]=no-capacity|capacity-coming";
    let (left, kind) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: {usage}"))?;
    let kind = match kind {
        "no-capacity" => SignalKind::NoCapacity,
        "capacity-coming" => SignalKind::CapacityComing,
        other => return Err(format!("{text:?}: unknown meaning {other:?}; {usage}")),
    };
    let (reason, source) = match left.split_once('@') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (left, None),
    };
    if reason.is_empty() || source.as_deref() == Some("") {
        return Err(format!("{text:?}: {usage}"));
    }
    Ok(SignalRule {
        reason: reason.to_string(),
        source,
        kind,
    })
}

/// The meaning of an event of `reason` reported by `source`, if a rule names it.
pub fn classify(rules: &[SignalRule], reason: &str, source: &str) -> Option<SignalKind> {
    rules
        .iter()
        .find(|r| r.reason == reason && r.source.as_deref().is_none_or(|s| s == source))
        .map(|r| r.kind)
}

/// One provisioner statement about a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    pub kind: SignalKind,
    pub reason: String,
    pub source: String,
    pub message: String,
    /// When it was last said (the event's last time).
    pub at: Timestamp,
}

/// The newest of a pod's signals (a tie: "capacity coming" wins, the cautious reading).
pub fn newest(signals: impl IntoIterator<Item = Signal>) -> Option<Signal> {
    signals
        .into_iter()
        .max_by(|a, b| a.at.cmp(&b.at).then_with(|| a.kind.cmp(&b.kind)))
}

/// When a signal counts as said: its poster's word (`claimed`, the Event's own times), but
/// never later than when this controller first saw that version of the Event (`first_seen`,
/// its own clock). Security review R4: a future-dated Event outranked every real signal for
/// as long as its date was ahead; taken as said when it appeared, it loses to any real
/// signal posted after it. No two machines' clocks are compared: `first_seen` and the
/// times it is ranked against at the controller all come from the Events' posters except
/// this bound, which only ever moves a time earlier.
pub fn believed_time(claimed: Timestamp, first_seen: Timestamp) -> Timestamp {
    claimed.min(first_seen)
}

/// Why a stuck pod is rescheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `rescheduleCriticalSeconds` passed without a signal.
    Timer,
    /// The provisioner said it will not add capacity.
    NoCapacity { reason: String, source: String },
    /// Capacity was coming, but not within the wait bound.
    WaitExpired { reason: String },
}

impl Cause {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Cause::Timer => "timer",
            Cause::NoCapacity { .. } => "no_capacity",
            Cause::WaitExpired { .. } => "wait_expired",
        }
    }
}

/// What to do with a pod that is Pending and Unschedulable in its subset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// Leave it; look again after this long. `waiting` names the signal it waits on.
    Wait {
        left: SignedDuration,
        waiting: Option<String>,
    },
    Move(Cause),
}

/// The signals of a reconcile: per pod name, and the wait bound of its WorkloadSpread.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capacity {
    pub signals: BTreeMap<String, Signal>,
    /// Per subset name; a subset missing here was not evaluated (no restriction).
    pub rooms: BTreeMap<String, Room>,
    /// How long a pod whose capacity is coming may wait in all (`None`: no longer than
    /// `rescheduleCriticalSeconds`).
    pub wait_bound: Option<SignedDuration>,
    /// While pods wait, reconcile again this often to read new signals (`None`: signals
    /// are not read; only the timers requeue).
    pub poll: Option<SignedDuration>,
}

impl Capacity {
    /// No signals, no rooms: OpenKruise's timers.
    pub const NONE: Capacity = Capacity {
        signals: BTreeMap::new(),
        rooms: BTreeMap::new(),
        wait_bound: None,
        poll: None,
    };
}

/// The longest wait bound taken (a day): longer values are cut to it.
pub const MAX_WAIT_SECONDS: u64 = 86_400;

/// The wait bound of `ws`: its annotation, else the controller's default (0: none);
/// at most [`MAX_WAIT_SECONDS`].
pub fn wait_bound(ws: &WorkloadSpread, default_seconds: u64) -> Option<SignedDuration> {
    let seconds = ws
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CAPACITY_WAIT_ANNOTATION))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(default_seconds)
        .min(MAX_WAIT_SECONDS);
    let seconds = i64::try_from(seconds).ok().filter(|s| *s > 0)?;
    Some(SignedDuration::from_secs(seconds))
}

/// The decision for one stuck pod (module doc). `nominated`: the pod has a
/// `status.nominatedNodeName` (capacity is being made for it). A signal older than the
/// pod does not count (a pod recreated under the same name).
pub fn decide_unschedulable(
    created: Timestamp,
    now: Timestamp,
    critical: SignedDuration,
    signal: Option<&Signal>,
    nominated: bool,
    wait_bound: Option<SignedDuration>,
) -> Stuck {
    let signal = signal.filter(|s| s.at >= created);
    let age = now.duration_since(created);
    let coming = match signal {
        Some(s) if s.kind == SignalKind::NoCapacity => {
            return Stuck::Move(Cause::NoCapacity {
                reason: s.reason.clone(),
                source: s.source.clone(),
            })
        }
        Some(s) => Some(s.reason.clone()),
        None => nominated.then(|| "nominatedNodeName".to_string()),
    };
    let window = match (&coming, wait_bound) {
        (Some(_), Some(bound)) => critical.max(bound),
        _ => critical,
    };
    let left = window.checked_sub(age).unwrap_or(SignedDuration::ZERO);
    if left.is_positive() {
        return Stuck::Wait {
            left,
            waiting: coming.filter(|_| wait_bound.is_some()),
        };
    }
    match coming {
        Some(reason) if wait_bound.is_some() => Stuck::Move(Cause::WaitExpired { reason }),
        _ => Stuck::Move(Cause::Timer),
    }
}

/// Pending, not bound to a node, not being deleted, and marked `PodScheduled=False`
/// with reason `Unschedulable` by the scheduler: the pods rescheduling is about.
pub fn is_pending_unschedulable(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let unbound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
        .is_empty();
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Pending")
        && unbound
        && status.conditions.iter().flatten().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

/// Amounts per resource name in base units: `cpu` in millicores, everything else in
/// units (bytes, pods); `pods` counts 1 per pod.
pub type Resources = BTreeMap<String, i64>;

/// The scheduler's request of a pod: the containers' sum (restartable init containers
/// included), at least any regular init container with the restartable ones before it,
/// plus the overhead; `pods` 1. Unparseable quantities count 0.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    let requests_of = |c: &k8s_openapi::api::core::v1::Container| -> Resources {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .map(amounts)
            .unwrap_or_default()
    };
    let mut sum = Resources::new();
    for c in &spec.containers {
        add(&mut sum, &requests_of(c));
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let own = requests_of(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &own);
            add(&mut sum, &own);
        } else {
            let mut during = sidecars.clone();
            add(&mut during, &own);
            for (k, v) in during {
                let e = init_peak.entry(k).or_insert(0);
                *e = (*e).max(v);
            }
        }
    }
    for (k, v) in init_peak {
        let e = sum.entry(k).or_insert(0);
        *e = (*e).max(v);
    }
    // Pod-level requests (Kubernetes 1.32+) are the pod's own for what they name.
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        sum.extend(amounts(pod_level));
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        add(&mut sum, &amounts(overhead));
    }
    sum.insert("pods".to_string(), 1);
    sum
}

/// Parsed amounts of a resource list (unparseable ones left out).
pub fn amounts(list: &BTreeMap<String, Quantity>) -> Resources {
    list.iter()
        .filter_map(|(k, q)| Some((k.clone(), parse_quantity(&q.0, k == "cpu")?)))
        .collect()
}

/// `into += more`, saturating.
pub fn add(into: &mut Resources, more: &Resources) {
    for (k, v) in more {
        let e = into.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

/// A node with what its pods request.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCapacity {
    pub node: NodeInfo,
    /// `Ready=True` and not `spec.unschedulable`.
    pub schedulable: bool,
    pub allocatable: Resources,
    /// What its non-terminal pods request (`None`: not read this time).
    pub requested: Option<Resources>,
}

/// Whether a subset can run one more pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Room {
    /// This node has the pod's requests free.
    Fits { node: String },
    /// None of the nodes the subset selects (this many) has them free.
    Full { nodes: usize },
    /// Not known: some selected nodes were not read.
    Unknown,
}

impl Room {
    pub fn is_full(&self) -> bool {
        matches!(self, Room::Full { .. })
    }
}

/// Whether `subset`'s nodes can take the pod (`selects` first filters which do).
pub fn subset_room(
    subset: &WorkloadSpreadSubset,
    tolerations: &[Toleration],
    nodes: &[NodeCapacity],
    need: &Resources,
) -> Room {
    let mut unknown = false;
    let mut selected = 0;
    for n in nodes.iter().filter(|n| selects(subset, tolerations, n)) {
        selected += 1;
        match &n.requested {
            None => unknown = true,
            Some(requested) if fits(need, &n.allocatable, requested) => {
                return Room::Fits {
                    node: n.node.name.clone(),
                }
            }
            Some(_) => {}
        }
    }
    if unknown {
        Room::Unknown
    } else {
        Room::Full { nodes: selected }
    }
}

/// Whether the scheduler could place the pod on `node` as far as the subset goes:
/// schedulable, the subset's required term, every `NoSchedule`/`NoExecute` taint
/// tolerated by the pod's or the subset's tolerations.
pub fn selects(
    subset: &WorkloadSpreadSubset,
    tolerations: &[Toleration],
    n: &NodeCapacity,
) -> bool {
    let term_ok = subset
        .required_node_selector
        .as_ref()
        .is_none_or(|t| node_matches_term(&n.node, t));
    let taints_ok = n
        .node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|taint| {
            tolerations
                .iter()
                .chain(&subset.tolerations)
                .any(|t| tolerates(t, taint))
        });
    n.schedulable && term_ok && taints_ok
}

/// `need ≤ allocatable − requested` for every resource the pod requests (a resource
/// the node does not offer fits only a zero request).
pub fn fits(need: &Resources, allocatable: &Resources, requested: &Resources) -> bool {
    need.iter().all(|(k, &want)| {
        let free = allocatable
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(requested.get(k).copied().unwrap_or(0));
        want <= 0 || want <= free
    })
}

#[cfg(test)]
mod tests;

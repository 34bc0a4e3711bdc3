//! Rebalancing (opt-in; a deliberate extension, `docs/semantics.md`): which pods to
//! evict so that the workload's replacements land on the planned spread for its current
//! replicas. OpenKruise never moves a placed pod; this does, through the Eviction API
//! (PodDisruptionBudgets hold), for WorkloadSpreads annotated
//! [`REBALANCE_ANNOTATION`]` = "true"` (or every WorkloadSpread, by the controller's
//! default, unless annotated `"false"`).
//!
//! The target is [`planned_spread_holding`]: the planned spread for the workload's
//! replicas, with subsets marked unschedulable (Adaptive) held at what they run. The
//! pods above the target of their subset (or outside every subset, beyond the target's
//! unplaced count) are evicted lowest deletion cost first (the ReplicaSet's own order
//! among equals) — but only as many as the subsets below their target can take, and
//! only pods whose replacement the claim rule (the admission's own decision, applied to
//! the spread after the eviction) would place in a subset below its target. Nothing is
//! evicted while the workload rolls out, while its active pod count differs from its
//! replicas (a scale, or an evicted pod not replaced yet), while a pod that is not itself
//! surplus is not Ready (a replacement still starting), while the status holds
//! admissions in flight, or while pods are being adopted.
//! The controller applies the plan (at most `max_evictions` per interval).

use super::capacity::Room;
use super::cost::{kind_uses_deletion_cost, CostPatch};
use crate::admission::{claim_for_create, PodKey, Scale};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::api::{POD_DELETION_COST_ANNOTATION, REBALANCE_ANNOTATION, VERSION_IGNORED};
use crate::percent::scaled_value;
use crate::pods::{controller_of, deletion_order, is_active, matched, name};
use crate::rules::{planned_spread_holding, Rules, Spread};
use crate::version::{pod_version, VersionedKinds};
use crate::workload::is_pod_selected;
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether `ws` is rebalanced: its annotation (`"true"`/`"false"`) or else the default.
pub fn enabled(ws: &WorkloadSpread, default: bool) -> bool {
    match ws
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REBALANCE_ANNOTATION))
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => default,
    }
}

/// Everything the decision needs.
#[derive(Clone, Copy, Debug)]
pub struct RebalanceInput<'a, P = Pod> {
    pub ws: &'a WorkloadSpread,
    /// The status this reconcile computed (conditions, entries in flight).
    pub status: &'a WorkloadSpreadStatus,
    /// The workload's pods (as the reconcile got them; any borrowable pod).
    pub pods: &'a [P],
    /// The workload object (rollout state), `None` when missing.
    pub workload: Option<&'a Value>,
    pub workload_replicas: i32,
    pub latest_version: &'a str,
    pub versioned_kinds: &'a VersionedKinds,
    /// Deletion costs this reconcile writes (they win over the pods' annotations).
    pub costs: &'a [CostPatch],
    /// Adoptions this reconcile writes.
    pub adoptions: usize,
    pub rules: Rules,
    /// Most evictions to plan (what the interval still allows).
    pub max_evictions: usize,
    pub enabled: bool,
    pub now: Timestamp,
    /// Whether each subset can run one more pod (`capacity::subset_room`): no pod is
    /// moved into a subset known to be full (#42). A subset missing here: not known.
    pub rooms: &'a BTreeMap<String, Room>,
}

/// Why nothing is evicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Rebalancing is off for this WorkloadSpread.
    Off,
    /// The target kind's pods are not interchangeable (StatefulSet, Job, …).
    Unsupported(String),
    RollingOut(String),
    PodCount {
        active: usize,
        replicas: i32,
    },
    NotReady(String),
    InFlight(String),
    Adopting,
    /// Every subset holds its target.
    OnPlan,
    /// Off the plan, but no eviction would help (no replacement would land below a target).
    NoLanding,
    /// The replacement would go to a subset where no node has room for it.
    NoRoom(String),
    /// The interval's evictions are used up.
    RateLimited,
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::Off => write!(f, "rebalancing is off"),
            Hold::Unsupported(kind) => write!(f, "{kind} pods are not rebalanced"),
            Hold::RollingOut(why) => write!(f, "the workload is rolling out ({why})"),
            Hold::PodCount { active, replicas } => {
                write!(f, "{active} active pods for {replicas} replicas")
            }
            Hold::NotReady(pod) => write!(f, "pod {pod} is not ready"),
            Hold::InFlight(what) => write!(f, "{what} in flight"),
            Hold::Adopting => write!(f, "pods are being adopted"),
            Hold::OnPlan => write!(f, "on plan"),
            Hold::NoLanding => write!(f, "no replacement would land below its subset's target"),
            Hold::NoRoom(subset) => write!(
                f,
                "no node of subset {subset} has room for the replacement (waiting for capacity)"
            ),
            Hold::RateLimited => write!(f, "the interval's evictions are used up"),
        }
    }
}

/// One planned eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub pod: String,
    /// The subset it leaves (`None`: outside every subset).
    pub from: Option<String>,
    /// Where the claim rule places its replacement (`None`: unspread).
    pub to: Option<String>,
    pub cost: i64,
    /// For the event: why this pod.
    pub message: String,
}

/// The decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebalance {
    /// Active pods per spec subset and outside every subset.
    pub current: Spread,
    pub target: Spread,
    pub evictions: Vec<Eviction>,
    /// Why nothing (more) is evicted, when nothing is.
    pub hold: Option<Hold>,
}

impl Rebalance {
    fn held(hold: Hold) -> Self {
        Rebalance {
            hold: Some(hold),
            ..Default::default()
        }
    }
}

/// The pods to evict (module doc).
pub fn plan_rebalance<P: std::borrow::Borrow<Pod>>(input: &RebalanceInput<'_, P>) -> Rebalance {
    let ws = input.ws;
    if !input.enabled {
        return Rebalance::held(Hold::Off);
    }
    let kind = ws
        .spec
        .target_ref
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    if !kind_uses_deletion_cost(&kind) {
        return Rebalance::held(Hold::Unsupported(kind));
    }
    let no_labels = BTreeMap::new();
    let filter = ws.spec.target_filter.as_ref();
    let active: Vec<&Pod> = input
        .pods
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|p: &&Pod| is_active(p))
        .filter(|p| {
            is_pod_selected(filter, p.metadata.labels.as_ref().unwrap_or(&no_labels))
                .unwrap_or(false)
        })
        .collect();
    if let Some(hold) = guard(input, &active) {
        return Rebalance::held(hold);
    }
    let aggregate = &input.status.subset_statuses;
    let index_of = |p: &Pod| {
        matched(p)
            .filter(|m| m.name == ws.name())
            .and_then(|m| ws.spec.subsets.iter().position(|s| s.name == m.subset))
    };
    // Members per spec subset, then outside every subset (last).
    let n = ws.spec.subsets.len();
    let mut members: Vec<Vec<&Pod>> = vec![vec![]; n + 1];
    for p in &active {
        members[index_of(p).unwrap_or(n)].push(p);
    }
    let current = Spread {
        subsets: members[..n].iter().map(Vec::len).collect(),
        unplaced: members[n].len(),
    };
    let held: Vec<Option<usize>> = ws
        .spec
        .subsets
        .iter()
        .zip(&current.subsets)
        .map(|(s, &count)| {
            let unschedulable = aggregate
                .iter()
                .any(|st| st.name == s.name && st.is_unschedulable());
            unschedulable.then_some(count)
        })
        .collect();
    let replicas = usize::try_from(input.workload_replicas).unwrap_or(0);
    let target = planned_spread_holding(ws, replicas, &held);
    let mut plan = Rebalance {
        current: current.clone(),
        target: target.clone(),
        ..Default::default()
    };
    if current == target {
        plan.hold = Some(Hold::OnPlan);
        return plan;
    }
    let want = |g: usize| target.subsets.get(g).copied().unwrap_or(target.unplaced);
    let costs: BTreeMap<&str, i64> = input
        .costs
        .iter()
        .map(|c| (c.pod.as_str(), c.cost))
        .collect();
    let cost_of = |p: &Pod| {
        costs
            .get(name(p))
            .copied()
            .unwrap_or_else(|| annotated_cost(p))
    };
    // The surplus of every group, lowest cost first (the ReplicaSet's order among equals).
    let mut candidates: Vec<(usize, &Pod)> = vec![];
    for (g, group) in members.iter().enumerate() {
        let surplus = group.len().saturating_sub(want(g));
        let mut sorted = group.clone();
        sorted.sort_by(|a, b| {
            cost_of(a)
                .cmp(&cost_of(b))
                .then_with(|| deletion_order(a, b))
                .then_with(|| name(a).cmp(name(b)))
        });
        candidates.extend(sorted.into_iter().take(surplus).map(|p| (g, p)));
    }
    candidates.sort_by(|(_, a), (_, b)| {
        cost_of(a)
            .cmp(&cost_of(b))
            .then_with(|| deletion_order(a, b))
            .then_with(|| name(a).cmp(name(b)))
    });
    // A pod that is not Ready holds evictions back (a replacement still starting) —
    // unless it is itself surplus: evicting it costs no availability.
    let surplus = |p: &Pod| candidates.iter().any(|(_, c)| name(c) == name(p));
    if let Some(p) = active.iter().find(|p| !is_ready(p) && !surplus(p)) {
        plan.hold = Some(Hold::NotReady(name(p).to_string()));
        return plan;
    }
    let mut counts: Vec<usize> = members.iter().map(Vec::len).collect();
    let subset_name = |g: usize| ws.spec.subsets.get(g).map(|s| s.name.clone());
    // A subset whose room was read takes one replacement per plan, and only when a node
    // fits it (full or not known: none); a subset not read (checks off) is not limited.
    let mut landed = vec![0usize; counts.len()];
    let mut no_room = None;
    for (from, pod) in candidates {
        if plan.evictions.len() >= input.max_evictions {
            break;
        }
        counts[from] -= 1;
        let to = landing(input, &counts);
        let lands_below_target = counts[to] < want(to);
        let room = subset_name(to).and_then(|s| input.rooms.get(&s));
        let full = room.is_some_and(|r| !matches!(r, Room::Fits { .. }) || landed[to] > 0);
        if !lands_below_target || full {
            if lands_below_target {
                no_room = subset_name(to);
            }
            counts[from] += 1;
            continue;
        }
        counts[to] += 1;
        landed[to] += 1;
        plan.evictions.push(Eviction {
            pod: name(pod).to_string(),
            from: subset_name(from),
            to: subset_name(to),
            cost: cost_of(pod),
            message: format!(
                "{} holds {} pods, {} planned for {} replicas; the replacement goes to {} ({} pods, {} planned)",
                describe(subset_name(from)),
                current_of(&current, from),
                want(from),
                input.workload_replicas,
                describe(subset_name(to)),
                current_of(&current, to),
                want(to),
            ),
        });
    }
    if plan.evictions.is_empty() {
        plan.hold = Some(if input.max_evictions == 0 {
            Hold::RateLimited
        } else if let Some(subset) = no_room {
            Hold::NoRoom(subset)
        } else {
            Hold::NoLanding
        });
    }
    plan
}

fn describe(subset: Option<String>) -> String {
    subset.map_or("outside every subset".to_string(), |s| {
        format!("subset {s}")
    })
}

fn current_of(s: &Spread, g: usize) -> usize {
    s.subsets.get(g).copied().unwrap_or(s.unplaced)
}

/// Why the workload must not be disturbed now, if it must not.
fn guard<P>(input: &RebalanceInput<'_, P>, active: &[&Pod]) -> Option<Hold> {
    if let Some(why) = input.workload.and_then(rolling_out) {
        return Some(Hold::RollingOut(why));
    }
    let versioned = input.latest_version != VERSION_IGNORED && !input.latest_version.is_empty();
    if versioned {
        let other = active.iter().find(|p| {
            let owner = controller_of(p).map(|o| o.kind);
            pod_version(
                p.metadata.labels.as_ref(),
                owner.as_deref(),
                input.versioned_kinds,
            ) != input.latest_version
        });
        if let Some(p) = other {
            return Some(Hold::RollingOut(format!(
                "pod {} is not of version {}",
                name(p),
                input.latest_version
            )));
        }
    }
    let replicas = usize::try_from(input.workload_replicas).unwrap_or(0);
    if active.len() != replicas {
        return Some(Hold::PodCount {
            active: active.len(),
            replicas: input.workload_replicas,
        });
    }
    // Admissions the controller has not seen as pods yet: the counts may be stale.
    // (Deletions in flight are not: a pod being deleted is not active.)
    let in_flight = input
        .status
        .subset_statuses
        .iter()
        .chain(input.status.versioned_subset_statuses.values().flatten())
        .find(|s| !s.creating_pods.is_empty());
    if let Some(s) = in_flight {
        return Some(Hold::InFlight(format!(
            "subset {}: {} admissions",
            s.name,
            s.creating_pods.len()
        )));
    }
    if input.adoptions > 0 {
        return Some(Hold::Adopting);
    }
    None
}

/// Whether the workload object shows a rollout in progress, and why.
pub fn rolling_out(workload: &Value) -> Option<String> {
    let generation = workload["metadata"]["generation"].as_i64();
    let observed = workload["status"]["observedGeneration"].as_i64();
    if let (Some(g), Some(o)) = (generation, observed) {
        if o < g {
            return Some(format!("generation {g} observed as {o}"));
        }
    }
    let status = &workload["status"];
    if let (Some(updated), Some(total)) = (
        status["updatedReplicas"].as_i64(),
        status["replicas"].as_i64(),
    ) {
        if updated < total {
            return Some(format!("{updated} of {total} pods updated"));
        }
    }
    None
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn annotated_cost(pod: &Pod) -> i64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Where the claim rule places a new pod of the latest version when the subsets hold
/// `counts` (spec subsets, then outside every subset): the group index (`n` = unspread).
fn landing<P>(input: &RebalanceInput<'_, P>, counts: &[usize]) -> usize {
    let ws = input.ws;
    let n = ws.spec.subsets.len();
    let statuses: Vec<WorkloadSpreadSubsetStatus> = ws
        .spec
        .subsets
        .iter()
        .zip(counts)
        .map(|(s, &count)| {
            let count = i32::try_from(count).unwrap_or(i32::MAX);
            let missing = match &s.max_replicas {
                None => -1,
                Some(m) => (scaled_value(m, input.workload_replicas).unwrap_or(0) - count).max(0),
            };
            let conditions = input
                .status
                .subset_statuses
                .iter()
                .find(|st| st.name == s.name)
                .map(|st| st.conditions.clone())
                .unwrap_or_default();
            WorkloadSpreadSubsetStatus {
                name: s.name.clone(),
                replicas: count,
                missing_replicas: missing,
                conditions,
                ..Default::default()
            }
        })
        .collect();
    let version = if input.latest_version.is_empty() {
        VERSION_IGNORED
    } else {
        input.latest_version
    };
    let mut status = WorkloadSpreadStatus {
        subset_statuses: statuses.clone(),
        ..Default::default()
    };
    status
        .versioned_subset_statuses
        .insert(version.to_string(), statuses);
    let pod = PodKey {
        name: "~replacement",
        version,
    };
    let scale = Scale::new(input.workload_replicas, input.rules);
    let claim = claim_for_create(&mut status, ws, pod, scale, input.now, "");
    claim
        .subset
        .and_then(|s| ws.spec.subsets.iter().position(|x| x.name == s))
        .unwrap_or(n)
}

#[cfg(test)]
mod tests;

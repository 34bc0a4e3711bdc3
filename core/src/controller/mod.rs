//! Controller math (reference §4): one pure `reconcile` computing a WorkloadSpread's
//! status, the pods to adopt, deletion costs, pods to reschedule, events and the
//! requeue delay. The controller binary fetches the inputs and applies the outputs.

pub mod capacity;
pub mod cost;
pub mod creating;
pub mod grouping;
pub mod pending;
pub mod rebalance;
pub mod status;
pub mod view;

use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::pods::{controller_of, is_active};
use crate::rules::Rules;
use crate::selector::NodeInfo;
use crate::version::{pod_version, VersionedKinds};
use crate::workload::is_pod_selected;
use crate::Timestamp;
use cost::{deletion_costs, CostPatch};
use grouping::{group_pods, Adoption, SubsetPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use status::StatusCalc;
pub use status::{PlaceholderView, StampedPlaceholders};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// Timing knobs; the defaults are the reference's constants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// How long an admitted-but-unseen pod holds its slot (reference: 30 s).
    pub creating_window: SignedDuration,
    /// How long a deleted-but-still-present pod frees its slot (reference: 15 s).
    pub deleting_window: SignedDuration,
    /// How long a subset stays `Schedulable=False` (reference: 300 s, not configurable).
    pub reschedule_hold: SignedDuration,
    /// Which deletion costs to write (`Rules::Reference`: the reference's values).
    pub rules: Rules,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            creating_window: SignedDuration::from_secs(30),
            deleting_window: SignedDuration::from_secs(15),
            reschedule_hold: SignedDuration::from_secs(300),
            rules: Rules::default(),
        }
    }
}

/// An event to record on the WorkloadSpread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Event {
    pub fn warning(reason: &'static str, message: String) -> Self {
        Event {
            type_: "Warning",
            reason,
            message,
        }
    }
    pub fn normal(reason: &'static str, message: String) -> Self {
        Event {
            type_: "Normal",
            reason,
            message,
        }
    }
}

/// Everything a reconcile needs.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileInput<'a, P = Pod> {
    pub ws: &'a WorkloadSpread,
    /// Pods owned by the workload (inactive ones included). Like the reference, callers
    /// pass none when the workload's own replica field is 0; `targetFilter` is applied here.
    /// Any borrowable pod: the controller passes its cache's `Arc`s, copying none.
    pub pods: &'a [P],
    /// Replica count used for percentages (0 when the workload does not exist).
    pub workload_replicas: i32,
    /// `version::workload_version` of the workload ("" when unknown).
    pub latest_version: &'a str,
    /// Nodes by name (for adopting pods that carry no subset annotation).
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    pub versioned_kinds: &'a VersionedKinds,
    pub now: Timestamp,
    pub options: &'a ReconcileOptions,
    /// What the controller knows of the placeholders (`status::PlaceholderView`).
    pub placeholders: PlaceholderView<'a>,
    /// Provisioner signals and subset room (`capacity::Capacity::NONE`: timers only).
    pub capacity: &'a capacity::Capacity,
}

/// What the controller must do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReconcileOutput {
    pub status: WorkloadSpreadStatus,
    /// Metadata patches adopting pods into subsets (apply before the status).
    pub adoptions: Vec<Adoption>,
    /// Deletion-cost annotations to write.
    pub deletion_costs: Vec<CostPatch>,
    /// Pods to delete (unschedulable for longer than `rescheduleCriticalSeconds`, or
    /// with no capacity coming: `capacity::decide_unschedulable`).
    pub pods_to_delete: Vec<String>,
    /// Why each of `pods_to_delete` moves (same order).
    pub reschedule_causes: Vec<capacity::Cause>,
    /// The uid of each of `pods_to_delete` (same order): the delete's precondition, so
    /// that a successor of the same name (a StatefulSet's) is never deleted in its place.
    pub reschedule_uids: Vec<Option<String>>,
    /// Held subsets brought back early by a node with room.
    pub recovered_on_capacity: usize,
    /// Pods waiting past `rescheduleCriticalSeconds` for capacity a provisioner adds.
    pub waiting_for_capacity: Vec<String>,
    pub events: Vec<Event>,
    /// Reconcile again after this long (`None`: only on changes).
    pub requeue_after: Option<std::time::Duration>,
    /// Placeholders expired (a host died, or lost the API server, holding them).
    pub expired_placeholders: usize,
}

/// `syncWorkloadSpread`.
pub fn reconcile<P: Borrow<Pod>>(input: &ReconcileInput<'_, P>) -> ReconcileOutput {
    let ws = input.ws;
    let filter = ws.spec.target_filter.as_ref();
    let no_labels = BTreeMap::new();
    let pods: Vec<&Pod> = input
        .pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p: &&Pod| {
            is_pod_selected(filter, p.metadata.labels.as_ref().unwrap_or(&no_labels))
                .unwrap_or(false)
        })
        .collect();
    let mut adoptions = Vec::new();
    let (versioned, aggregate) = group_versioned(input, &pods, &mut adoptions);
    let cost_input = cost::CostInput {
        latest_version: input.latest_version,
        workload_replicas: input.workload_replicas,
        rules: input.options.rules,
        now: input.now,
        recent: input.options.creating_window,
    };
    let deletion_costs = deletion_costs(ws, &pods, &versioned, &cost_input);
    let mut calc = StatusCalc::new(
        ws,
        input.now,
        input.options,
        input.placeholders,
        input.capacity,
    );
    let status = calculate_status(&mut calc, input, &pods, &versioned, &aggregate);
    let mut pods_to_delete = Vec::new();
    let mut reschedule_causes = Vec::new();
    let mut reschedule_uids = Vec::new();
    for (pod, uid, cause) in calc.unschedulable_pods {
        pods_to_delete.push(pod);
        reschedule_uids.push(uid);
        reschedule_causes.push(cause);
    }
    ReconcileOutput {
        status,
        adoptions,
        deletion_costs,
        pods_to_delete,
        reschedule_causes,
        reschedule_uids,
        recovered_on_capacity: calc.recovered_on_capacity,
        waiting_for_capacity: calc.waiting_for_capacity,
        events: calc.events,
        expired_placeholders: calc.expired_placeholders,
        requeue_after: calc
            .requeue
            .and_then(|d| std::time::Duration::try_from(d).ok()),
    }
}

fn group_versioned<P>(
    input: &ReconcileInput<'_, P>,
    pods: &[&Pod],
    adoptions: &mut Vec<Adoption>,
) -> (BTreeMap<String, SubsetPods>, SubsetPods) {
    let mut by_version: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, pod) in pods.iter().enumerate() {
        let owner = controller_of(pod).map(|o| o.kind);
        let v = pod_version(
            pod.metadata.labels.as_ref(),
            owner.as_deref(),
            input.versioned_kinds,
        );
        by_version.entry(v).or_default().push(i);
    }
    let mut versioned = BTreeMap::new();
    let mut aggregate: SubsetPods = BTreeMap::new();
    for (version, indices) in by_version {
        let groups = group_pods(
            input.ws,
            pods,
            &indices,
            input.nodes,
            input.workload_replicas,
            adoptions,
        );
        for (subset, members) in &groups {
            aggregate.entry(subset.clone()).or_default().extend(members);
        }
        versioned.insert(version, groups);
    }
    (versioned, aggregate)
}

fn calculate_status<P>(
    calc: &mut StatusCalc<'_>,
    input: &ReconcileInput<'_, P>,
    pods: &[&Pod],
    versioned: &BTreeMap<String, SubsetPods>,
    aggregate: &SubsetPods,
) -> WorkloadSpreadStatus {
    let ws = input.ws;
    let old = ws.status.clone().unwrap_or_default();
    let replicas = input.workload_replicas;
    let mut status = WorkloadSpreadStatus {
        observed_generation: ws.metadata.generation.unwrap_or(0),
        subset_statuses: calc.subset_statuses(
            aggregate,
            pods,
            &old.subset_statuses,
            replicas,
            true,
        ),
        versioned_subset_statuses: BTreeMap::new(),
    };
    for (version, groups) in versioned {
        let old_v = old
            .versioned_subset_statuses
            .get(version)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let computed = calc.subset_statuses(groups, pods, old_v, replicas, false);
        status
            .versioned_subset_statuses
            .insert(version.clone(), computed);
    }
    let empty = SubsetPods::new();
    for (version, old_v) in &old.versioned_subset_statuses {
        if versioned.contains_key(version) {
            continue;
        }
        let computed = calc.subset_statuses(&empty, pods, old_v, replicas, false);
        if has_anything(&computed) {
            status
                .versioned_subset_statuses
                .insert(version.clone(), computed);
        }
    }
    status
}

fn has_anything(statuses: &[WorkloadSpreadSubsetStatus]) -> bool {
    statuses
        .iter()
        .any(|s| s.replicas > 0 || !s.creating_pods.is_empty() || !s.deleting_pods.is_empty())
}

/// Active pods per subset of a computed grouping (for metrics and the planner).
pub fn active_count(pods: &[&Pod], members: &[usize]) -> usize {
    members.iter().filter(|&&i| is_active(pods[i])).count()
}

#[cfg(test)]
mod tests;

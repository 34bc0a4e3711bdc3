//! Scale-in order through `controller.kubernetes.io/pod-deletion-cost`.
//!
//! [`Rules::Planned`] (default): the costs rank the whole scale-in path ([`path`]).
//! Going down one pod at a time from the pods that exist, removing the k lowest-cost
//! pods leaves, for every k, no subset above its maximum at that count wherever the
//! pods allow it (the least excess elsewhere), and the planned spread for that count
//! wherever it is one removal away and keeps the counts below as good; elsewhere the
//! closest state that does (issue #65). A pod's cost is `PLANNED_COST_BASE − level`, `level` being the number of
//! pods left when it is removed: costs depend neither on the workload's replica count
//! nor on the pods above, so adding or removing pods rewrites no other pod's cost
//! unless its place in the path changes; a pod whose cost lies anywhere in the band of
//! its run of steps (consecutive removals from its subset, `Planned`) keeps it. While
//! the pod count differs from the workload's replicas (a scale in flight) only pods
//! without a cost get one.
//!
//! [`Rules::Reference`]: reference §4.5 (100·(n−i) within the maximum, −100·(i+1) over
//! it, −100·(n+1) outside every subset), plus the `minReplicas` extension. Versions
//! other than the latest always use it (they scale down from the first subset).

use super::grouping::SubsetPods;
use crate::admission::room::occupancy;
use crate::admission::Scale;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::api::{FAKE_SUBSET_NAME, POD_DELETION_COST_ANNOTATION};
use crate::percent::scaled_value;
use crate::pods::{deletion_order, is_active, name};
use crate::rules::Rules;
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use std::collections::BTreeMap;

/// Planned costs are this minus the pod's level (1 for the last pod standing).
pub const PLANNED_COST_BASE: i64 = 1_000_000;

/// Kinds whose controllers honour the deletion-cost annotation.
pub fn kind_uses_deletion_cost(kind: &str) -> bool {
    matches!(kind, "ReplicaSet" | "Deployment" | "CloneSet")
}

/// A deletion-cost annotation value to write on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostPatch {
    pub pod: String,
    pub cost: i64,
}

/// What [`deletion_costs`] needs besides the pods and their grouping.
#[derive(Clone, Copy, Debug)]
pub struct CostInput<'a> {
    pub latest_version: &'a str,
    pub workload_replicas: i32,
    pub rules: Rules,
    pub now: Timestamp,
    /// How recently a pod must have been created to count as part of a scale-out in
    /// flight (the creating window).
    pub recent: SignedDuration,
}

/// Costs per pod for every version's grouping; only pods whose annotation changes are
/// returned. Versions other than `latest_version` scale down from the first subset.
pub fn deletion_costs(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    versioned: &BTreeMap<String, SubsetPods>,
    input: &CostInput<'_>,
) -> Vec<CostPatch> {
    let CostInput {
        latest_version,
        workload_replicas,
        rules,
        ..
    } = *input;
    let kind = ws
        .spec
        .target_ref
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default();
    if !kind_uses_deletion_cost(kind) {
        return vec![];
    }
    // While the workload is still creating or removing pods for a new replica count, the
    // planned costs of the pods it already has stay as they are: a ReplicaSet scaling in
    // is removing pods by those costs, and the intermediate states of a burst are not
    // points of the path. Pods without a cost get theirs at once; the rest is ranked
    // again once the pod count reaches the replica count (which rewrites nothing where
    // the path did not move).
    let settled = !scale_in_flight(pods, input);
    let mut costs: Vec<(usize, Planned, bool)> = Vec::new();
    for (version, groups) in versioned {
        let latest = version == latest_version;
        if latest && rules == Rules::Planned {
            let others = other_versions(ws, pods, versioned, version);
            let planned = planned_costs(ws, pods, groups, &others);
            costs.extend(planned.into_iter().map(|(i, c)| (i, c, !settled)));
        } else {
            let reference = version_costs(ws, pods, groups, !latest, workload_replicas);
            costs.extend(
                reference
                    .into_iter()
                    .map(|(i, c)| (i, Planned::exact(c), false)),
            );
        }
    }
    costs
        .into_iter()
        .filter(|&(i, _, keep_existing)| !keep_existing || current_cost(pods[i]).is_none())
        .filter(|(i, planned, _)| needs_patch(pods[*i], planned))
        .map(|(i, planned, _)| CostPatch {
            pod: name(pods[i]).to_string(),
            cost: planned.cost,
        })
        .collect()
}

/// Active pods per group (spec subsets in order, then the fake subset) of every version
/// but `version`.
fn other_versions(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    versioned: &BTreeMap<String, SubsetPods>,
    version: &str,
) -> Vec<usize> {
    let names = ws.spec.subsets.iter().map(|s| s.name.as_str());
    names
        .chain([FAKE_SUBSET_NAME])
        .map(|n| {
            versioned
                .iter()
                .filter(|(v, _)| v.as_str() != version)
                .filter_map(|(_, groups)| groups.get(n))
                .map(|members| members.iter().filter(|&&p| is_active(pods[p])).count())
                .sum()
        })
        .collect()
}

/// A pod's cost on the path, and the band of costs that keeps it in place: the costs of
/// the run of consecutive steps that remove pods from its subset. Any cost in the band
/// removes the same number of pods from each subset at every step (the runs' bands do
/// not overlap, and which pod of the run goes first does not change the spread), so a
/// pod whose cost is in its band is not patched (#28: a burst's admission costs, decided
/// on counts that lag — an unlimited subset's — stay where they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Planned {
    cost: i64,
    band: (i64, i64),
}

impl Planned {
    fn exact(cost: i64) -> Self {
        Planned {
            cost,
            band: (cost, cost),
        }
    }
}

/// Whether the workload is still creating or removing pods for a new replica count:
/// more pods than replicas (the ReplicaSet is about to choose victims), a pod being
/// deleted, or fewer pods than replicas with one created within the creating window. A
/// workload with fewer selected pods than replicas and nothing new (a `targetFilter`, a
/// quota) counts as settled.
fn scale_in_flight(pods: &[&Pod], input: &CostInput<'_>) -> bool {
    let active: Vec<&&Pod> = pods.iter().filter(|p| is_active(p)).collect();
    let replicas = usize::try_from(input.workload_replicas).unwrap_or(0);
    let deleting = pods.iter().any(|p| p.metadata.deletion_timestamp.is_some());
    let recent = active.iter().any(|p| {
        p.metadata
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| input.now.duration_since(t.0) < input.recent)
    });
    active.len() > replicas || deleting || (active.len() < replicas && recent)
}

fn current_cost(pod: &Pod) -> Option<&String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
}

fn needs_patch(pod: &Pod, planned: &Planned) -> bool {
    let (low, high) = planned.band;
    match current_cost(pod) {
        Some(v) => {
            // The canonical form of a number in the band (the ReplicaSet parses it so).
            let in_band = v
                .parse::<i64>()
                .is_ok_and(|c| c.to_string() == *v && (low..=high).contains(&c));
            !in_band
        }
        None => planned.cost != 0,
    }
}

/// [`Rules::Planned`] costs of one version's pods (module doc), with their bands;
/// `others`: the active pods of the other versions per group, which share the maxima.
fn planned_costs(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    groups: &SubsetPods,
    others: &[usize],
) -> Vec<(usize, Planned)> {
    // Spec subsets in order, then the fake subset; each a stack whose top is the pod
    // that subset gives up next (the ReplicaSet's own order within a subset).
    let names = ws.spec.subsets.iter().map(|s| s.name.as_str());
    let mut stacks: Vec<Vec<usize>> = names
        .chain([FAKE_SUBSET_NAME])
        .map(|n| removal_stack(pods, groups.get(n).map(Vec::as_slice).unwrap_or_default()))
        .collect();
    let sizes: Vec<usize> = stacks.iter().map(Vec::len).collect();
    let path: Vec<(usize, i64)> = planned_path(ws, &sizes, others).collect();
    // Each run of steps from one group and the band of its costs (the path's costs rise
    // step by step: the first of a run is its lowest).
    let mut bands: Vec<(i64, i64)> = Vec::with_capacity(path.len());
    for run in path.chunk_by(|a, b| a.0 == b.0) {
        let band = (run[0].1, run[run.len() - 1].1);
        bands.extend(std::iter::repeat_n(band, run.len()));
    }
    path.into_iter()
        .zip(bands)
        .filter_map(|((g, cost), band)| Some((stacks[g].pop()?, Planned { cost, band })))
        .collect()
}

/// The planned scale-in path over groups holding `sizes` pods (spec subsets in order,
/// then the fake subset), beside `others` pods of other versions per group: from the
/// most pods down to one, the group each step removes a pod from ([`path::ScaleIn`]:
/// never above a maximum where the pods allow it, on plan where the plan is one removal
/// away) and the cost of the pod removed at that step (`PLANNED_COST_BASE − level`).
/// The one rule both [`planned_costs`] (the controller, and so the planner and the
/// playground) and [`admission_cost`] (a pod's cost at admission) follow.
fn planned_path<'a>(
    ws: &'a WorkloadSpread,
    sizes: &[usize],
    others: &[usize],
) -> impl Iterator<Item = (usize, i64)> + 'a {
    let mut level: usize = sizes.iter().sum();
    path::ScaleIn::new(ws, sizes, others).map(move |g| {
        let cost =
            PLANNED_COST_BASE.saturating_sub(i64::try_from(level).unwrap_or(PLANNED_COST_BASE));
        level = level.saturating_sub(1);
        (g, cost)
    })
}

/// The planned deletion cost of a pod a claim placed in `subset`
/// ([`admission_cost`]), for the admission to write in its
/// patch: the pods of `version` per subset are the status's occupancy, less `unused`
/// (the subsets of placeholders held and not taken: slots, not pods), plus the pod
/// itself where the status does not record it under `key` (an unlimited subset, which
/// claims do not track, or a placeholder the pod is taking, then also in `unused`).
/// Deletions count as the claim's `scale` confirms them (`admission::room`).
pub fn claimed_pod_cost(
    ws: &WorkloadSpread,
    scale: Scale,
    status: &WorkloadSpreadStatus,
    version: &str,
    subset: &str,
    key: &str,
    unused: &[&str],
) -> Option<i64> {
    let statuses = status.versioned_subset_statuses.get(version);
    let counts: Vec<usize> = ws
        .spec
        .subsets
        .iter()
        .map(|spec| {
            let s = statuses.and_then(|v| v.iter().find(|s| s.name == spec.name));
            let mut n = s.map_or(0, |s| occupancy(s, scale.departed));
            n -= unused.iter().filter(|u| **u == spec.name).count() as i64;
            let recorded = s.is_some_and(|s| s.creating_pods.contains_key(key));
            if spec.name == subset && !recorded {
                n += 1;
            }
            usize::try_from(n).unwrap_or(0)
        })
        .collect();
    // The other versions' pods share the maxima (the controller counts them so).
    let others: Vec<usize> = ws
        .spec
        .subsets
        .iter()
        .map(|spec| {
            let n: i64 = status
                .versioned_subset_statuses
                .iter()
                .filter(|(v, _)| v.as_str() != version)
                .flat_map(|(_, subsets)| subsets.iter().filter(|s| s.name == spec.name))
                .map(|s| occupancy(s, scale.departed))
                .sum();
            usize::try_from(n).unwrap_or(0)
        })
        .collect();
    admission_cost(ws, scale.rules, &counts, &others, subset)
}

/// The planned cost of a pod being admitted into `subset` (issue #28: written in the
/// admission's patch, so the controller patches only pods whose place in the path
/// changes): the pod is the newest of its subset, so the top of its stack, and gets the
/// cost of the path's first step from that subset. `counts` are the pods of the pod's
/// version per spec subset, this one included, as the admission counts them (the
/// status's occupancy without placeholders nobody took), `others` those of the other
/// versions (empty: none). `None` where the controller
/// decides alone: [`Rules::Reference`], a kind that ignores deletion costs, a subset
/// not in the spec. Where the count is off (pods outside every subset, an unlimited
/// subset's pods the status does not count yet) the controller's ranking corrects it.
pub fn admission_cost(
    ws: &WorkloadSpread,
    rules: Rules,
    counts: &[usize],
    others: &[usize],
    subset: &str,
) -> Option<i64> {
    let kind = ws.spec.target_ref.as_ref()?.kind.as_str();
    if rules != Rules::Planned || !kind_uses_deletion_cost(kind) {
        return None;
    }
    let g = ws.spec.subsets.iter().position(|s| s.name == subset)?;
    let mut sizes: Vec<usize> = ws
        .spec
        .subsets
        .iter()
        .enumerate()
        .map(|(i, _)| counts.get(i).copied().unwrap_or(0))
        .collect();
    sizes[g] = sizes[g].max(1);
    sizes.push(0);
    planned_path(ws, &sizes, others)
        .find(|&(step, _)| step == g)
        .map(|(_, cost)| cost)
}

/// Active pods of a group, the one to remove first last (ties by name, for stability).
fn removal_stack(pods: &[&Pod], members: &[usize]) -> Vec<usize> {
    let mut stack: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&p| is_active(pods[p]))
        .collect();
    // Among pods the ReplicaSet cannot tell apart (same phase, readiness, restarts and
    // creation second: a burst), the cost each already has keeps its place, so a cost
    // the admission wrote (`admission_cost`) is not rewritten for a reordering nobody
    // needs; then the name, for stability.
    stack.sort_by(|&a, &b| {
        deletion_order(pods[b], pods[a])
            .then_with(|| cost_value(pods[b]).cmp(&cost_value(pods[a])))
            .then_with(|| name(pods[b]).cmp(name(pods[a])))
    });
    stack
}

/// A pod's deletion cost as the ReplicaSet reads it (0 when absent or invalid).
fn cost_value(pod: &Pod) -> i64 {
    current_cost(pod).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn version_costs(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    groups: &SubsetPods,
    reverse: bool,
    replicas: i32,
) -> Vec<(usize, i64)> {
    let n = ws.spec.subsets.len() as i64;
    let mut out = Vec::new();
    for (i, subset) in ws.spec.subsets.iter().enumerate() {
        let idx = if reverse { n - 1 - i as i64 } else { i as i64 };
        let members = groups
            .get(&subset.name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let active: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&p| is_active(pods[p]))
            .collect();
        let max = match &subset.max_replicas {
            None => None,
            Some(m) => match scaled_value(m, replicas) {
                Ok(v) if v >= 0 => Some(v as usize),
                _ => continue,
            },
        };
        let min = subset
            .min_replicas
            .as_ref()
            .and_then(|m| scaled_value(m, replicas).ok())
            .map_or(0, |v| v.max(0) as usize);
        out.extend(subset_costs(pods, active, max, min, idx, n));
    }
    let fake = groups
        .get(FAKE_SUBSET_NAME)
        .map(Vec::as_slice)
        .unwrap_or_default();
    out.extend(
        fake.iter()
            .filter(|&&p| is_active(pods[p]))
            .map(|&p| (p, -100 * (n + 1))),
    );
    out
}

/// Within one subset: pods beyond `max` (first in deletion order) get the negative cost,
/// the rest the positive one; with `min`, the last `min` kept pods get a protected cost
/// above every unprotected pod of any subset.
pub(crate) fn subset_costs(
    pods: &[&Pod],
    active: Vec<usize>,
    max: Option<usize>,
    min: usize,
    idx: i64,
    n: i64,
) -> Vec<(usize, i64)> {
    let positive = 100 * (n - idx);
    let negative = -100 * (idx + 1);
    let protected = 100 * (2 * n - idx);
    let over = max.map_or(0, |m| active.len().saturating_sub(m));
    if over == 0 && min == 0 {
        return active.into_iter().map(|p| (p, positive)).collect();
    }
    let mut sorted = active;
    sorted.sort_by(|&a, &b| deletion_order(pods[a], pods[b]));
    let kept = sorted.len() - over;
    let first_protected = sorted.len() - min.min(kept);
    sorted
        .into_iter()
        .enumerate()
        .map(|(rank, p)| {
            let cost = if rank < over {
                negative
            } else if rank >= first_protected {
                protected
            } else {
                positive
            };
            (p, cost)
        })
        .collect()
}

mod path;
#[cfg(test)]
mod tests;

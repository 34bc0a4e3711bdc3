//! Scale-in order through `controller.kubernetes.io/pod-deletion-cost` (reference §4.5),
//! plus the `minReplicas` extension.

use super::grouping::SubsetPods;
use crate::api::v1beta1::WorkloadSpread;
use crate::api::{FAKE_SUBSET_NAME, POD_DELETION_COST_ANNOTATION};
use crate::percent::scaled_value;
use crate::pods::{deletion_order, is_active, name};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

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

/// Costs per pod for every version's grouping; only pods whose annotation changes are
/// returned. Versions other than `latest_version` scale down from the first subset.
pub fn deletion_costs(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    versioned: &BTreeMap<String, SubsetPods>,
    latest_version: &str,
    workload_replicas: i32,
) -> Vec<CostPatch> {
    let kind = ws
        .spec
        .target_ref
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default();
    if !kind_uses_deletion_cost(kind) {
        return vec![];
    }
    let mut costs: Vec<(usize, i64)> = Vec::new();
    for (version, groups) in versioned {
        let reverse = version != latest_version;
        costs.extend(version_costs(ws, pods, groups, reverse, workload_replicas));
    }
    costs
        .into_iter()
        .filter(|&(i, cost)| needs_patch(pods[i], cost))
        .map(|(i, cost)| CostPatch {
            pod: name(pods[i]).to_string(),
            cost,
        })
        .collect()
}

fn needs_patch(pod: &Pod, cost: i64) -> bool {
    let current = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION));
    match current {
        Some(v) => *v != cost.to_string(),
        None => cost != 0,
    }
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

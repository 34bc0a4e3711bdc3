//! Reading what the system wrote on pods: the matched-workloadspread annotation and the
//! deletion cost.

use anyhow::{ensure, Result};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub const MATCHED: &str = "apps.kruise.io/matched-workloadspread";
pub const COST: &str = "controller.kubernetes.io/pod-deletion-cost";

pub fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a String> {
    p.metadata.annotations.as_ref()?.get(key)
}

/// The subset named in the pod's matched-workloadspread annotation.
pub fn subset_of(p: &Pod) -> Option<String> {
    let v: Value = serde_json::from_str(annotation(p, MATCHED)?).ok()?;
    v["subset"].as_str().map(str::to_string)
}

/// Pods per subset name ("" for pods without a matched annotation).
pub fn counts(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        *out.entry(subset_of(p).unwrap_or_default()).or_insert(0) += 1;
    }
    out
}

fn empty(v: &Value) -> bool {
    v.as_object().is_none_or(|o| o.is_empty())
}

/// Whether a WorkloadSpread `status` (either version) counts exactly `counts` per subset
/// with no pod in flight: no creating or deleting entry, per pod-template version too.
pub fn status_counts(status: &Value, counts: &BTreeMap<String, usize>) -> bool {
    let subsets = status["subsetStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let versioned = status["versionedSubsetStatuses"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        .all(|s| empty(&s["creatingPods"]) && empty(&s["deletingPods"]));
    !subsets.is_empty()
        && versioned
        && subsets.iter().all(|s| {
            let n = counts
                .get(s["name"].as_str().unwrap_or_default())
                .copied()
                .unwrap_or(0);
            s["replicas"].as_i64() == Some(n as i64)
                && empty(&s["creatingPods"])
                && empty(&s["deletingPods"])
        })
}

/// The pod-deletion-cost annotation as a number.
pub fn cost_of(p: &Pod) -> Option<i64> {
    annotation(p, COST)?.parse().ok()
}

/// Which pods a scale-in removed, checked against the deletion costs they carried: the
/// ReplicaSet controller removes the lowest-cost pods first, so every removed pod's cost
/// must be at most every kept pod's (costs as written before the step; no annotation
/// counts as 0, as for the ReplicaSet controller). Returns the removed pods' costs.
pub fn ensure_lowest_cost_removed(before: &[Pod], after: &[Pod]) -> Result<Vec<i64>> {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let kept: BTreeSet<String> = after.iter().map(name).collect();
    let (stayed, removed): (Vec<&Pod>, Vec<&Pod>) =
        before.iter().partition(|p| kept.contains(&name(p)));
    ensure!(
        stayed.len() == after.len(),
        "pods were created during a scale-in: {} kept of {} after",
        stayed.len(),
        after.len()
    );
    let cost = |p: &&Pod| cost_of(p).unwrap_or(0);
    let mut removed_costs: Vec<i64> = removed.iter().map(cost).collect();
    removed_costs.sort_unstable();
    let max_removed = removed_costs.last().copied();
    let min_kept = stayed.iter().map(cost).min();
    if let (Some(r), Some(k)) = (max_removed, min_kept) {
        ensure!(
            r <= k,
            "the ReplicaSet removed a pod with cost {r} but kept one with cost {k}: removed {:?}, kept {:?}",
            removed.iter().map(|p| (name(p), cost(p))).collect::<Vec<_>>(),
            stayed.iter().map(|p| (name(p), cost(p))).collect::<Vec<_>>()
        );
    }
    Ok(removed_costs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cost: Option<i64>) -> Pod {
        let annotations = match cost {
            Some(c) => json!({COST: c.to_string()}),
            None => json!({}),
        };
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}}))
            .expect("static pod")
    }

    #[test]
    fn lowest_cost_removal_is_accepted_and_anything_else_refused() {
        let before = [
            pod("a", Some(300)),
            pod("b", Some(-100)),
            pod("c", Some(100)),
            pod("d", None),
        ];
        let keep = |names: &[&str]| -> Vec<Pod> {
            before
                .iter()
                .filter(|p| names.contains(&p.metadata.name.as_deref().unwrap_or_default()))
                .cloned()
                .collect()
        };
        // (kept pods, accepted, removed costs)
        let cases: [(&[&str], bool, Vec<i64>); 5] = [
            (&["a", "c"], true, vec![-100, 0]),
            (&["a"], true, vec![-100, 0, 100]),
            (&["a", "c", "d", "b"], true, vec![]),
            (&["b", "a"], false, vec![]),
            (&["a", "d"], false, vec![]),
        ];
        for (kept, ok, removed) in cases {
            let got = ensure_lowest_cost_removed(&before, &keep(kept));
            assert_eq!(got.is_ok(), ok, "{kept:?}: {got:?}");
            if ok {
                assert_eq!(got.unwrap_or_default(), removed, "{kept:?}");
            }
        }
        let mut grown = keep(&["a"]);
        grown.push(pod("new", Some(500)));
        let err = ensure_lowest_cost_removed(&before, &grown).unwrap_err();
        assert!(
            err.to_string().contains("created during a scale-in"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod status_tests {
    use super::status_counts;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn a_status_counts_the_pods_only_with_nothing_in_flight() {
        let counts = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        let status = |a_creating: serde_json::Value, versioned: serde_json::Value| {
            json!({"subsetStatuses": [
                {"name": "a", "replicas": 2, "creatingPods": a_creating},
                {"name": "b", "replicas": 1}, {"name": "c", "replicas": 0}],
                "versionedSubsetStatuses": versioned})
        };
        let cases = [
            (status(json!({}), json!({})), true),
            (status(json!({"p": "t"}), json!({})), false),
            (
                status(
                    json!({}),
                    json!({"v1": [{"name": "a", "deletingPods": {"p": "t"}}]}),
                ),
                false,
            ),
            (
                json!({"subsetStatuses": [{"name": "a", "replicas": 1}]}),
                false,
            ),
            (json!({}), false),
        ];
        for (i, (s, want)) in cases.iter().enumerate() {
            assert_eq!(status_counts(s, &counts), *want, "case {i}: {s}");
        }
    }
}

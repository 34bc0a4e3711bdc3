//! Reading what the system wrote on pods: the matched-workloadspread annotation and the
//! deletion cost.

use anyhow::{ensure, Result};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::collections::BTreeSet;

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

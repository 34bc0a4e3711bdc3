//! A minimal scheduler for the planner: the node predicates that decide whether a
//! subset can hold a pod at all (nodeSelector, required node affinity, NoSchedule /
//! NoExecute taints) and a deterministic pick among the feasible nodes (preferred
//! affinity score, then the least loaded node, then the name). Capacity is not modelled.

use crate::selector::{node_matches_any_term, preferred_score, tolerates, NodeInfo};
use k8s_openapi::api::core::v1::{NodeAffinity, PodSpec, Taint, Toleration};
use std::collections::BTreeMap;

/// The node the pod would be bound to, or `None` when no node is feasible.
pub fn pick_node<'a>(
    spec: &PodSpec,
    nodes: &'a [NodeInfo],
    load: &BTreeMap<String, usize>,
) -> Option<&'a NodeInfo> {
    let affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let tolerations: Vec<&Toleration> = spec.tolerations.iter().flatten().collect();
    nodes
        .iter()
        .filter(|n| feasible(spec, affinity, &tolerations, n))
        .max_by(|a, b| {
            let score = |n: &NodeInfo| preferred(affinity, n);
            let pods = |n: &NodeInfo| load.get(&n.name).copied().unwrap_or(0);
            score(a)
                .cmp(&score(b))
                .then(pods(b).cmp(&pods(a)))
                .then(b.name.cmp(&a.name))
        })
}

fn feasible(
    spec: &PodSpec,
    affinity: Option<&NodeAffinity>,
    tolerations: &[&Toleration],
    node: &NodeInfo,
) -> bool {
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = affinity
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    let affinity_ok = required.is_none_or(|terms| node_matches_any_term(node, terms));
    selector_ok && affinity_ok && node.taints.iter().all(|t| tolerated(t, tolerations))
}

/// `PreferNoSchedule` never blocks scheduling.
fn tolerated(taint: &Taint, tolerations: &[&Toleration]) -> bool {
    taint.effect == "PreferNoSchedule" || tolerations.iter().any(|t| tolerates(t, taint))
}

fn preferred(affinity: Option<&NodeAffinity>, node: &NodeInfo) -> i64 {
    affinity
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .map_or(0, |terms| preferred_score(node, terms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str, taint: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            labels: [("zone".to_string(), zone.to_string())].into(),
            taints: taint
                .map(|k| Taint {
                    key: k.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
        }
    }

    fn spec(mut v: serde_json::Value) -> PodSpec {
        v["containers"] = json!([]);
        serde_json::from_value(v).unwrap()
    }

    fn zone_term(zone: &str) -> serde_json::Value {
        json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]})
    }

    #[test]
    fn predicates_and_choice() {
        let nodes = [
            node("a1", "a", None),
            node("a2", "a", None),
            node("b1", "b", Some("dedicated")),
        ];
        let load: BTreeMap<String, usize> = [("a1".to_string(), 2)].into();
        let pick =
            |s: serde_json::Value| pick_node(&spec(s), &nodes, &load).map(|n| n.name.clone());
        // Least loaded among equals; tainted nodes need a toleration.
        assert_eq!(pick(json!({})).as_deref(), Some("a2"));
        let to_b = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone_term("b")]}}}});
        assert_eq!(pick(to_b.clone()), None);
        let mut tolerant = to_b;
        tolerant["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
        assert_eq!(pick(tolerant).as_deref(), Some("b1"));
        // nodeSelector must match exactly; a missing zone is infeasible.
        assert_eq!(pick(json!({"nodeSelector": {"zone": "c"}})), None);
        assert_eq!(
            pick(json!({"nodeSelector": {"zone": "a"}})).as_deref(),
            Some("a2")
        );
        // A preferred term outweighs load.
        let prefer_a1 = json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a1"]}]}}]}}});
        assert_eq!(pick(prefer_a1).as_deref(), Some("a1"));
    }

    #[test]
    fn prefer_no_schedule_does_not_block() {
        let mut n = node("x", "a", None);
        n.taints.push(Taint {
            key: "soft".into(),
            effect: "PreferNoSchedule".into(),
            ..Default::default()
        });
        let nodes = [n];
        assert!(pick_node(&spec(json!({})), &nodes, &BTreeMap::new()).is_some());
    }
}

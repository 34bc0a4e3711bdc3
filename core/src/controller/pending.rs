//! The pending label's end (`docs/counter-protocol.md`, best-effort by size): once a
//! status write that counts a WorkloadSpread's pods has succeeded, the controller removes
//! [`PENDING_LABEL`] from them, in the same pod patch as a deletion cost when there is
//! one, so that best-effort admissions stop adding them on top of the status.

use super::cost::CostPatch;
use crate::api::{PENDING_LABEL, POD_DELETION_COST_ANNOTATION};
use crate::pods::{matched, name};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The pods of the namespace that carry the pending label and name `ws_name` in their
/// matched annotation: the status just written counts them (or, not being the
/// workload's or not active, never will), so admissions must stop counting them.
pub fn pending_of(ws_name: &str, namespace_pods: &[Pod]) -> Vec<String> {
    namespace_pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(PENDING_LABEL))
        })
        .filter(|p| matched(p).is_some_and(|m| m.name == ws_name))
        .map(|p| name(p).to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// One strategic-merge patch per pod: its new deletion cost and/or the pending label's
/// removal. Sorted by pod name.
pub fn pod_patches(costs: &[CostPatch], unlabel: &[String]) -> Vec<(String, Value)> {
    let mut patches: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for c in costs {
        patches.entry(&c.pod).or_default().insert(
            "annotations".into(),
            json!({ POD_DELETION_COST_ANNOTATION: c.cost.to_string() }),
        );
    }
    for pod in unlabel {
        patches
            .entry(pod)
            .or_default()
            .insert("labels".into(), json!({ PENDING_LABEL: null }));
    }
    patches
        .into_iter()
        .map(|(pod, metadata)| (pod.to_string(), json!({ "metadata": metadata })))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: Value, annotations: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {
            "name": name, "labels": labels, "annotations": annotations}}))
        .unwrap()
    }

    fn matched_to(ws: &str) -> Value {
        json!({"apps.kruise.io/matched-workloadspread":
            format!(r#"{{"name":"{ws}","subset":"a"}}"#)})
    }

    #[test]
    fn only_labelled_pods_of_this_workloadspread_are_unlabelled() {
        let pods = [
            pod("mine", json!({PENDING_LABEL: "true"}), matched_to("web")),
            pod("counted", json!({"app": "web"}), matched_to("web")),
            pod("other-ws", json!({PENDING_LABEL: "true"}), matched_to("db")),
            pod("no-annotation", json!({PENDING_LABEL: "true"}), json!({})),
            // Whatever the value: a user's edit must not pin a pod as pending.
            pod("odd-value", json!({PENDING_LABEL: "x"}), matched_to("web")),
        ];
        assert_eq!(pending_of("web", &pods), ["mine", "odd-value"]);
    }

    #[test]
    fn a_cost_and_an_unlabel_of_one_pod_make_one_patch() {
        let costs = [
            CostPatch {
                pod: "b".into(),
                cost: -100,
            },
            CostPatch {
                pod: "a".into(),
                cost: 200,
            },
        ];
        let patches = pod_patches(&costs, &["b".to_string(), "c".to_string()]);
        assert_eq!(
            patches,
            [
                (
                    "a".to_string(),
                    json!({"metadata": {"annotations": {POD_DELETION_COST_ANNOTATION: "200"}}})
                ),
                (
                    "b".to_string(),
                    json!({"metadata": {
                        "annotations": {POD_DELETION_COST_ANNOTATION: "-100"},
                        "labels": {PENDING_LABEL: null}}})
                ),
                (
                    "c".to_string(),
                    json!({"metadata": {"labels": {PENDING_LABEL: null}}})
                ),
            ]
        );
    }
}

//! Grouping a workload's pods into subsets, adopting pods that carry no (valid)
//! subset annotation by scoring the nodes they run on (reference §4.4).

use crate::annotation::MatchedWorkloadSpread;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadSubset};
use crate::api::{
    FAKE_SUBSET_NAME, IGNORE_PATCH_EXISTING_PODS_ANNOTATION, MATCHED_WORKLOADSPREAD_ANNOTATION,
};
use crate::percent::scaled_value;
use crate::pods::matched;
use crate::selector::{first_untolerated_taint, node_matches_any_term, preferred_score, NodeInfo};
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod, Toleration};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// A metadata patch adopting an existing pod into a subset.
#[derive(Clone, Debug, PartialEq)]
pub struct Adoption {
    pub pod: String,
    pub subset: String,
    /// Strategic merge patch for the pod (`{"metadata":{...}}`).
    pub patch: Value,
}

/// Pods per subset (indices into the input slice); includes `FAKE_SUBSET_NAME`.
pub type SubsetPods = BTreeMap<String, Vec<usize>>;

/// `groupPodBySubset` for one version's pods. `nodes` resolves node names.
pub fn group_pods(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    indices: &[usize],
    nodes: &BTreeMap<String, NodeInfo>,
    workload_replicas: i32,
    adoptions: &mut Vec<Adoption>,
) -> SubsetPods {
    let mut groups: SubsetPods = ws
        .spec
        .subsets
        .iter()
        .map(|s| (s.name.clone(), vec![]))
        .collect();
    groups.insert(FAKE_SUBSET_NAME.to_string(), vec![]);
    let mut missing: BTreeMap<&str, i64> = ws
        .spec
        .subsets
        .iter()
        .map(|s| {
            let max = s.max_replicas.clone().unwrap_or(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::MAX),
            );
            (
                s.name.as_str(),
                i64::from(scaled_value(&max, workload_replicas).unwrap_or(0)),
            )
        })
        .collect();
    for &i in indices {
        if let Some(m) = own_annotation(ws, pods[i]) {
            if let Some(left) = missing.get_mut(m.subset.as_str()) {
                *left -= 1;
            }
        }
    }
    for &i in indices {
        let pod = pods[i];
        let subset = match own_annotation(ws, pod) {
            Some(m) => Some(m.subset),
            None => adopt(ws, pod, nodes, &mut missing, adoptions),
        };
        let key = subset
            .filter(|s| ws.subset(s).is_some())
            .unwrap_or_else(|| FAKE_SUBSET_NAME.to_string());
        groups.entry(key).or_default().push(i);
    }
    groups
}

/// The pod's annotation when it names this WorkloadSpread and a non-empty subset.
fn own_annotation(ws: &WorkloadSpread, pod: &Pod) -> Option<MatchedWorkloadSpread> {
    matched(pod).filter(|m| m.name == ws.name() && !m.subset.is_empty())
}

fn adopt(
    ws: &WorkloadSpread,
    pod: &Pod,
    nodes: &BTreeMap<String, NodeInfo>,
    missing: &mut BTreeMap<&str, i64>,
    adoptions: &mut Vec<Adoption>,
) -> Option<String> {
    let node_name = pod
        .spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let node = nodes.get(node_name)?;
    let mut best: Option<(&WorkloadSpreadSubset, i64)> = None;
    for subset in &ws.spec.subsets {
        let left = missing.get(subset.name.as_str()).copied().unwrap_or(0);
        if let Some(score) = subset_score(pod, node, subset, left) {
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((subset, score));
            }
        }
    }
    let (subset, _) = best?;
    if let Some(left) = missing.get_mut(subset.name.as_str()) {
        *left -= 1;
    }
    adoptions.push(Adoption {
        pod: crate::pods::name(pod).to_string(),
        subset: subset.name.clone(),
        patch: adoption_patch(ws, subset),
    });
    Some(subset.name.clone())
}

fn adoption_patch(ws: &WorkloadSpread, subset: &WorkloadSpreadSubset) -> Value {
    let ignore = ws
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(IGNORE_PATCH_EXISTING_PODS_ANNOTATION))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut metadata = Map::new();
    let mut annotations = Map::new();
    if !ignore {
        let subset_meta = subset.patch.as_ref().map(|p| &p["metadata"]);
        if let Some(labels) = subset_meta.and_then(|m| m["labels"].as_object()) {
            metadata.insert("labels".into(), Value::Object(labels.clone()));
        }
        if let Some(a) = subset_meta.and_then(|m| m["annotations"].as_object()) {
            annotations = a.clone();
        }
    }
    let value = MatchedWorkloadSpread {
        name: ws.name().to_string(),
        subset: subset.name.clone(),
        uid: None,
    };
    annotations.insert(
        MATCHED_WORKLOADSPREAD_ANNOTATION.into(),
        Value::String(value.to_annotation()),
    );
    metadata.insert("annotations".into(), Value::Object(annotations));
    json!({ "metadata": metadata })
}

/// `matchesSubset`: `None` when the pod could not run there (untolerated taint or the
/// required term fails), else `preferredNode*100 + preferredPod*10 + quota`.
pub fn subset_score(
    pod: &Pod,
    node: &NodeInfo,
    subset: &WorkloadSpreadSubset,
    missing: i64,
) -> Option<i64> {
    let spec = pod.spec.as_ref();
    let pod_tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let tolerations: Vec<&Toleration> = pod_tolerations.iter().chain(&subset.tolerations).collect();
    if first_untolerated_taint(&node.taints, &tolerations).is_some() {
        return None;
    }
    if let Some(term) = &subset.required_node_selector {
        let pod_terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|r| r.node_selector_terms.clone())
            .unwrap_or_default();
        if !node_matches_any_term(node, &and_terms(pod_terms, term)) {
            return None;
        }
    }
    let node_score = preferred_score(node, &subset.preferred_node_selector);
    let pod_score = i64::from(subset.patch.as_ref().is_some_and(|p| patch_is_noop(pod, p)));
    let quota = i64::from(missing > 0);
    Some(node_score * 100 + pod_score * 10 + quota)
}

fn and_terms(mut terms: Vec<NodeSelectorTerm>, term: &NodeSelectorTerm) -> Vec<NodeSelectorTerm> {
    if terms.is_empty() {
        return vec![term.clone()];
    }
    for t in &mut terms {
        if let Some(extra) = term.match_expressions.as_ref().filter(|e| !e.is_empty()) {
            t.match_expressions
                .get_or_insert_with(Vec::new)
                .extend(extra.iter().cloned());
        }
        if let Some(extra) = term.match_fields.as_ref().filter(|e| !e.is_empty()) {
            t.match_fields
                .get_or_insert_with(Vec::new)
                .extend(extra.iter().cloned());
        }
    }
    terms
}

/// True when the subset patch, annotations aside, would not change the pod.
fn patch_is_noop(pod: &Pod, patch: &Value) -> bool {
    let Ok(original) = serde_json::to_value(pod) else {
        return false;
    };
    let Ok(patched) = crate::smp::patch_pod(&original, patch) else {
        return false;
    };
    let Ok(mut patched) = serde_json::from_value::<Pod>(patched) else {
        return false;
    };
    patched.metadata.annotations = pod.metadata.annotations.clone();
    patched == *pod
}

//! Injection of a subset into a pod being created (reference §3.6), on the pod's JSON so
//! that fields unknown to this crate's types survive.

use crate::annotation::MatchedWorkloadSpread;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadSubset};
use crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION;
use crate::smp::{patch_pod, SmpError};
use serde_json::{json, Map, Value};
use thiserror::Error;

/// Injection failed; the pod must not be admitted with a half-applied subset.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InjectError {
    #[error("pod is not a JSON object")]
    NotAnObject,
    #[error("subset {subset:?} of WorkloadSpread {ws:?}: failed to apply patch: {source}")]
    Patch {
        ws: String,
        subset: String,
        #[source]
        source: SmpError,
    },
}

/// The object under `key`, created (or replacing a non-object) when needed.
fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let slot = parent.entry(key.to_string()).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut()
}

/// The array under `key`, created (or replacing a non-array) when needed.
fn array_at<'a>(parent: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Vec<Value>> {
    let slot = parent.entry(key.to_string()).or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    slot.as_array_mut()
}

fn non_empty(v: &Value) -> Option<&Vec<Value>> {
    v.as_array().filter(|a| !a.is_empty())
}

/// Injects subset `subset_name` of `ws` into `pod`: tolerations appended, node affinity
/// materialised (required term ANDed into every existing term, preferred terms
/// appended), the subset patch applied (strategic merge; `spec.priority` cleared when
/// `priorityClassName` changes), then the matched-workloadspread annotation.
pub fn inject(
    pod: &mut Value,
    ws: &WorkloadSpread,
    subset_name: &str,
    uid: Option<&str>,
) -> Result<(), InjectError> {
    if !pod.is_object() {
        return Err(InjectError::NotAnObject);
    }
    if let Some(subset) = ws.subset(subset_name) {
        add_scheduling(pod, subset).ok_or(InjectError::NotAnObject)?;
        if let Some(patch) = &subset.patch {
            apply_patch(pod, patch).map_err(|source| InjectError::Patch {
                ws: ws.name().to_string(),
                subset: subset_name.to_string(),
                source,
            })?;
        }
    }
    let annotation = MatchedWorkloadSpread {
        name: ws.name().to_string(),
        subset: subset_name.to_string(),
        uid: uid.map(str::to_owned),
    };
    set_annotation(pod, &annotation.to_annotation()).ok_or(InjectError::NotAnObject)
}

fn add_scheduling(pod: &mut Value, subset: &WorkloadSpreadSubset) -> Option<()> {
    let spec = object_at(pod.as_object_mut()?, "spec")?;
    for t in &subset.tolerations {
        array_at(spec, "tolerations")?.push(serde_json::to_value(t).ok()?);
    }
    let node_affinity = object_at(object_at(spec, "affinity")?, "nodeAffinity")?;
    for t in &subset.preferred_node_selector {
        let v = serde_json::to_value(t).ok()?;
        array_at(
            node_affinity,
            "preferredDuringSchedulingIgnoredDuringExecution",
        )?
        .push(v);
    }
    if let Some(term) = &subset.required_node_selector {
        let term = serde_json::to_value(term).ok()?;
        let required = object_at(
            node_affinity,
            "requiredDuringSchedulingIgnoredDuringExecution",
        )?;
        and_into_terms(array_at(required, "nodeSelectorTerms")?, &term)?;
    }
    Some(())
}

fn set_annotation(pod: &mut Value, value: &str) -> Option<()> {
    let metadata = object_at(pod.as_object_mut()?, "metadata")?;
    object_at(metadata, "labels")?;
    let annotations = object_at(metadata, "annotations")?;
    annotations.insert(
        MATCHED_WORKLOADSPREAD_ANNOTATION.to_string(),
        Value::String(value.to_string()),
    );
    Some(())
}

/// Terms are ORed, so the subset term is ANDed into each; no terms → just the subset term.
fn and_into_terms(terms: &mut Vec<Value>, subset_term: &Value) -> Option<()> {
    if terms.is_empty() {
        terms.push(subset_term.clone());
        return Some(());
    }
    for term in terms.iter_mut() {
        let Value::Object(t) = term else { continue };
        for key in ["matchExpressions", "matchFields"] {
            if let Some(extra) = non_empty(&subset_term[key]) {
                array_at(t, key)?.extend(extra.iter().cloned());
            }
        }
    }
    Some(())
}

fn apply_patch(pod: &mut Value, patch: &Value) -> Result<(), SmpError> {
    let before = pod["spec"]["priorityClassName"].clone();
    let mut patched = patch_pod(pod, patch)?;
    if patched["spec"]["priorityClassName"] != before {
        if let Some(spec) = patched.get_mut("spec").and_then(Value::as_object_mut) {
            // Let the Priority admission plugin recompute it from the new class.
            spec.remove("priority");
        }
    }
    *pod = patched;
    Ok(())
}

#[cfg(test)]
mod tests;

//! `ValidateNodeSelectorTerm`, `ValidatePreferredSchedulingTerms` and
//! `ValidateTolerations` of `pkg/apis/core/validation`.

use crate::field::{FieldError, Path};
use crate::names::{is_dns1123_subdomain, is_qualified_name, is_valid_label_value};
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, Toleration,
};
use serde_json::Value;

fn label_name(key: &str, path: &Path) -> Vec<FieldError> {
    is_qualified_name(key)
        .into_iter()
        .map(|m| FieldError::invalid(path.as_str(), key, m))
        .collect()
}

fn requirement(rq: &NodeSelectorRequirement, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let n = rq.values.as_ref().map_or(0, Vec::len);
    let values = path.child("values");
    match rq.operator.as_str() {
        "In" | "NotIn" if n == 0 => errs.push(FieldError::required(
            values.as_str(),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        "Exists" | "DoesNotExist" if n > 0 => errs.push(FieldError::forbidden(
            values.as_str(),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        "Gt" | "Lt" if n != 1 => errs.push(FieldError::required(
            values.as_str(),
            "must be specified single value when `operator` is 'Lt' or 'Gt'",
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
        op => errs.push(FieldError::invalid(
            path.child("operator").as_str(),
            op,
            "not a valid selector operator",
        )),
    }
    errs.extend(label_name(&rq.key, &path.child("key")));
    errs
}

fn field_requirement(rq: &NodeSelectorRequirement, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let values = rq.values.as_deref().unwrap_or_default();
    match rq.operator.as_str() {
        "In" | "NotIn" if values.len() != 1 => errs.push(FieldError::required(
            path.child("values").as_str(),
            "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
        )),
        "In" | "NotIn" => {}
        op => errs.push(FieldError::invalid(
            path.child("operator").as_str(),
            op,
            "not a valid selector operator",
        )),
    }
    if rq.key != "metadata.name" {
        errs.push(FieldError::invalid(
            path.child("key").as_str(),
            rq.key.as_str(),
            "not a valid field selector key",
        ));
    } else {
        for (i, v) in values.iter().enumerate() {
            for m in is_dns1123_subdomain(v) {
                errs.push(FieldError::invalid(
                    path.child("values").index(i).as_str(),
                    v.as_str(),
                    m,
                ));
            }
        }
    }
    errs
}

/// `ValidateNodeSelectorTerm`.
pub fn validate_node_selector_term(term: &NodeSelectorTerm, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (j, rq) in term.match_expressions.iter().flatten().enumerate() {
        errs.extend(requirement(rq, &path.child("matchExpressions").index(j)));
    }
    for (j, rq) in term.match_fields.iter().flatten().enumerate() {
        errs.extend(field_requirement(rq, &path.child("matchFields").index(j)));
    }
    errs
}

/// `ValidatePreferredSchedulingTerms`.
pub fn validate_preferred_terms(terms: &[PreferredSchedulingTerm], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        if term.weight <= 0 || term.weight > 100 {
            errs.push(FieldError::invalid(
                path.index(i).child("weight").as_str(),
                term.weight,
                "must be in the range 1-100",
            ));
        }
        errs.extend(validate_node_selector_term(
            &term.preference,
            &path.index(i).child("preference"),
        ));
    }
    errs
}

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `ValidateTolerations`.
pub fn validate_tolerations(tolerations: &[Toleration], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        let key = t.key.as_deref().unwrap_or_default();
        let operator = t.operator.as_deref().unwrap_or_default();
        let effect = t.effect.as_deref().unwrap_or_default();
        let value = t.value.as_deref().unwrap_or_default();
        if !key.is_empty() {
            errs.extend(label_name(key, &p.child("key")));
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(FieldError::invalid(
                p.child("operator").as_str(),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                p.child("effect").as_str(),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let msgs = is_valid_label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        p.child("operator").as_str(),
                        value,
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" if !value.is_empty() => errs.push(FieldError::invalid(
                p.child("operator").as_str(),
                serde_json::to_value(t).unwrap_or(Value::Null),
                "value must be empty when `operator` is 'Exists'",
            )),
            "Exists" => {}
            op => errs.push(FieldError::not_supported(
                p.child("operator").as_str(),
                op,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            errs.push(FieldError::not_supported(
                p.child("effect").as_str(),
                effect,
                &TAINT_EFFECTS,
            ));
        }
    }
    errs
}

//! WorkloadSpread CREATE and UPDATE: validation with every field error in one message.

use crate::host::Host;
use crate::lookup::{candidate_answers, merged_targets};
use crate::outcome::Outcome;
use crate::settings::{Settings, SpreadLookup};
use serde_json::Value;
use workloadspread_core::api::{decode_workloadspread_as, v1beta1};
use workloadspread_core::field::{aggregate, FieldError};
use workloadspread_core::masks::WORKLOAD_NAME_FIELDS;
use workloadspread_core::validation::{validate_create, validate_update, ValidationContext};
use workloadspread_core::workload::pod_template_for_validation;

/// Validates a create (`old` = None) or an update.
pub fn validate(
    settings: &Settings,
    host: &dyn Host,
    version: &str,
    object: &Value,
    old: Option<&Value>,
) -> Outcome {
    if version == "v1alpha1" && !settings.conversion_webhook {
        if let Some(refusal) = alpha_terms_would_be_pruned(object) {
            return refusal;
        }
    }
    let ws = match decode_workloadspread_as(object, version) {
        Ok(ws) => ws,
        Err(e) => return Outcome::reject(format!("invalid WorkloadSpread: {e}"), 400),
    };
    let old = match old
        .map(|o| decode_workloadspread_as(o, version))
        .transpose()
    {
        Ok(o) => o,
        Err(e) => return Outcome::reject(format!("invalid old WorkloadSpread: {e}"), 400),
    };
    let namespace = ws.namespace().to_string();
    // Only spreads targeting a workload of the same name can conflict with this one.
    let target: Vec<&str> = ws.spec.target_ref.iter().map(|t| t.name.as_str()).collect();
    let answers = match candidate_answers(host, &namespace, &target, settings.spread_lookup) {
        Ok(answers) => answers,
        Err(e) => return Outcome::reject(FieldError::internal("", e.to_string()).to_string(), 500),
    };
    let others = match merged_targets(&answers) {
        Ok(others) => others,
        Err(e) => return Outcome::reject(FieldError::internal("", e).to_string(), 500),
    };
    let template = workload_template(host, &ws, &namespace, settings.spread_lookup);
    let kinds = settings.workload_kinds();
    let ctx = ValidationContext {
        workload_template: template.as_ref(),
        others: &others,
        kinds: &kinds,
    };
    let errors = match &old {
        Some(old) => validate_update(&ws, old, &ctx),
        None => validate_create(&ws, &ctx),
    };
    if errors.is_empty() {
        Outcome::accept()
    } else {
        Outcome::reject(aggregate(&errors), 400)
    }
}

/// Without a conversion webhook the API server stores a v1alpha1 object as v1beta1 by
/// relabelling it, and prunes the fields v1beta1 names differently: refuse instead of
/// keeping an emptied WorkloadSpread.
fn alpha_terms_would_be_pruned(object: &Value) -> Option<Outcome> {
    let subsets = object["spec"]["subsets"].as_array()?;
    let names: Vec<String> = subsets
        .iter()
        .filter(|s| {
            !s["requiredNodeSelectorTerm"].is_null() || !s["preferredNodeSelectorTerms"].is_null()
        })
        .map(|s| s["name"].as_str().unwrap_or_default().to_string())
        .collect();
    (!names.is_empty()).then(|| {
        Outcome::reject(
            format!(
                "WorkloadSpread {}: this cluster has no conversion webhook for apps.kruise.io/v1alpha1, \
                 so the API server would drop requiredNodeSelectorTerm/preferredNodeSelectorTerms of \
                 subsets {}; write it as apps.kruise.io/v1beta1 (requiredNodeSelector, \
                 preferredNodeSelector), or serve the CRD's conversion (the bundled host's /convert) \
                 and set conversionWebhook: true",
                object["metadata"]["name"].as_str().unwrap_or_default(),
                names.join(", ")
            ),
            400,
        )
    })
}

/// The target's pod template for patch validation; absent workloads skip it.
fn workload_template(
    host: &dyn Host,
    ws: &v1beta1::WorkloadSpread,
    namespace: &str,
    lookup: SpreadLookup,
) -> Option<Value> {
    let target = ws.spec.target_ref.as_ref()?;
    if target.kind.is_empty() || target.name.is_empty() {
        return None;
    }
    // Advanced StatefulSets are read as native ones, like the reference.
    let api_version = if target.kind == "StatefulSet" {
        "apps/v1"
    } else {
        target.api_version.as_str()
    };
    // A list first, then a GET of the one found: a WorkloadSpread may be created before
    // its workload, and Kubewarden's policy-server logs every GET of a missing object as
    // an error (with a backtrace). One list per kind and namespace is one long-lived
    // cache there; its items are pruned to their names, so a namespace of a thousand
    // workloads is not copied to find one. A host answering field selectors from its
    // cache (`target-name`) answers a missing object with a code, not a log line: a GET.
    let exists = lookup == SpreadLookup::TargetName
        || host
            .list_fields(
                api_version,
                &target.kind,
                namespace,
                None,
                WORKLOAD_NAME_FIELDS,
            )
            .ok()?
            .iter()
            .any(|o| o["metadata"]["name"] == target.name.as_str());
    if !exists {
        return None;
    }
    let workload = host
        .get(api_version, &target.kind, Some(namespace), &target.name)
        .ok()?;
    pod_template_for_validation(&target.kind, &workload)
}

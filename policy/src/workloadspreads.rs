//! WorkloadSpread CREATE and UPDATE: validation with every field error in one message.

use crate::host::Host;
use crate::outcome::Outcome;
use crate::settings::Settings;
use serde_json::Value;
use workloadspread_core::api::{v1alpha1, v1beta1, KIND};
use workloadspread_core::field::{aggregate, FieldError};
use workloadspread_core::validation::{validate_create, validate_update, ValidationContext};
use workloadspread_core::workload::pod_template_for_validation;

/// Decodes a WorkloadSpread of either version into the storage version.
pub fn decode(object: &Value, version: &str) -> Result<v1beta1::WorkloadSpread, String> {
    if version == "v1alpha1" {
        serde_json::from_value::<v1alpha1::WorkloadSpread>(object.clone())
            .map(Into::into)
            .map_err(|e| e.to_string())
    } else {
        serde_json::from_value(object.clone()).map_err(|e| e.to_string())
    }
}

/// Validates a create (`old` = None) or an update.
pub fn validate(
    settings: &Settings,
    host: &dyn Host,
    version: &str,
    object: &Value,
    old: Option<&Value>,
) -> Outcome {
    let ws = match decode(object, version) {
        Ok(ws) => ws,
        Err(e) => return Outcome::reject(format!("invalid WorkloadSpread: {e}"), 400),
    };
    let old = match old.map(|o| decode(o, version)).transpose() {
        Ok(o) => o,
        Err(e) => return Outcome::reject(format!("invalid old WorkloadSpread: {e}"), 400),
    };
    let namespace = ws.namespace().to_string();
    let others: Vec<v1beta1::WorkloadSpread> =
        match host.list(v1beta1::API_VERSION, KIND, &namespace, None) {
            Ok(items) => items
                .into_iter()
                .filter_map(|i| serde_json::from_value(i).ok())
                .collect(),
            Err(e) => {
                return Outcome::reject(FieldError::internal("", e.to_string()).to_string(), 500)
            }
        };
    let template = workload_template(host, &ws, &namespace);
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

/// The target's pod template for patch validation; absent workloads skip it.
fn workload_template(
    host: &dyn Host,
    ws: &v1beta1::WorkloadSpread,
    namespace: &str,
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
    let workload = host
        .get(api_version, &target.kind, Some(namespace), &target.name)
        .ok()?;
    pod_template_for_validation(&target.kind, &workload)
}

//! Validation of a WorkloadSpread on create and update (reference §2), with the same
//! field paths and messages. Deliberate differences: a string `maxReplicas` without `%`
//! is rejected (reference quirk 13), and `rescheduleCriticalSeconds` has no upper bound
//! (#1088). `minReplicas` (extension) is validated too.

use crate::api::v1beta1::{ScheduleStrategy, WorkloadSpread, WorkloadSpreadSubset};
use crate::api::{STRATEGY_ADAPTIVE, STRATEGY_FIXED};
use crate::field::{FieldError, Path};
use crate::percent::{parse_percent, PercentError};
use crate::selector::Selector;
use crate::workload::{parse_group, SpreadTarget, Targeting, WorkloadKinds};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;

mod podspec;
mod scheduling;

pub use podspec::validate_pod_spec;
pub use scheduling::{validate_node_selector_term, validate_preferred_terms, validate_tolerations};

/// What validation needs besides the object.
#[derive(Clone, Copy, Debug)]
pub struct ValidationContext<'a> {
    /// Pod template of the target workload (see `workload::pod_template_for_validation`);
    /// `None` when the workload does not exist yet, which skips patch validation.
    pub workload_template: Option<&'a Value>,
    /// The other WorkloadSpreads of the namespace (for the conflict check), as far as
    /// it reads them (`SpreadTarget::of` a whole one).
    pub others: &'a [SpreadTarget<'a>],
    /// Allowed custom workload kinds.
    pub kinds: &'a WorkloadKinds,
}

/// Errors for a WorkloadSpread being created.
pub fn validate_create(ws: &WorkloadSpread, ctx: &ValidationContext<'_>) -> Vec<FieldError> {
    let mut errs = validate_spec(ws, ctx);
    errs.extend(validate_conflict(ws, ctx.others));
    errs
}

/// Errors for an update from `old` to `new`.
pub fn validate_update(
    new: &WorkloadSpread,
    old: &WorkloadSpread,
    ctx: &ValidationContext<'_>,
) -> Vec<FieldError> {
    let mut errs = validate_create(new, ctx);
    if let (Some(n), Some(o)) = (&new.spec.target_ref, &old.spec.target_ref) {
        let group = |v: &str| {
            parse_group(v)
                .map(str::to_owned)
                .unwrap_or_else(|_| v.to_owned())
        };
        if group(&n.api_version) != group(&o.api_version) || n.kind != o.kind || n.name != o.name {
            errs.push(FieldError::invalid(
                "spec.targetRef",
                to_json(n),
                "change TargetReference is not permitted for WorkloadSpread",
            ));
        }
    }
    errs
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn validate_spec(ws: &WorkloadSpread, ctx: &ValidationContext<'_>) -> Vec<FieldError> {
    let spec = Path::new("spec");
    let mut errs = validate_target_ref(ws, ctx.kinds);
    errs.extend(validate_subsets(
        ws,
        ctx.workload_template,
        &spec.child("subsets"),
    ));
    errs.extend(validate_schedule_strategy(
        ws,
        &spec.child("scheduleStrategy"),
    ));
    if let Some(filter) = &ws.spec.target_filter {
        if let Some(sel) = &filter.selector {
            if let Err(e) = Selector::from_label_selector(sel) {
                errs.push(FieldError::invalid("spec.targetFilter", to_json(filter), e));
            }
        }
    }
    errs
}

fn validate_target_ref(ws: &WorkloadSpread, kinds: &WorkloadKinds) -> Vec<FieldError> {
    const PATH: &str = "spec.targetRef";
    let Some(t) = &ws.spec.target_ref else {
        return vec![FieldError::required(
            PATH,
            "no targetRef defined in WorkloadSpread",
        )];
    };
    if t.api_version.is_empty() || t.name.is_empty() || t.kind.is_empty() {
        return vec![FieldError::invalid(
            PATH,
            to_json(t),
            "empty TargetReference is not valid for WorkloadSpread.",
        )];
    }
    let group = parse_group(&t.api_version);
    let allowed: &[&str] = match t.kind.as_str() {
        "CloneSet" => &["apps.kruise.io"],
        "Deployment" | "ReplicaSet" => &["apps"],
        "Job" => &["batch"],
        "StatefulSet" => &["apps", "apps.kruise.io"],
        _ => {
            let permitted = group.is_ok_and(|g| kinds.custom(g, &t.kind).is_some());
            if permitted {
                return vec![];
            }
            return vec![FieldError::invalid(
                PATH,
                to_json(t),
                "TargetReference's GroupKind is not permitted.",
            )];
        }
    };
    if group.is_ok_and(|g| allowed.contains(&g)) {
        return vec![];
    }
    let msg = format!("TargetReference is not valid for {}.", t.kind);
    vec![FieldError::invalid(PATH, to_json(t), msg)]
}

/// Running state of the maxReplicas checks across subsets.
#[derive(Default)]
struct MaxReplicasSum {
    first_is_percent: Option<bool>,
    percent_sum: i64,
    min_percent_sum: i64,
}

fn validate_subsets(ws: &WorkloadSpread, template: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let subsets = &ws.spec.subsets;
    if subsets.is_empty() {
        return vec![FieldError::required(
            path.as_str(),
            "subsets number must >= 1 in WorkloadSpread",
        )];
    }
    let is_sts = ws
        .spec
        .target_ref
        .as_ref()
        .is_some_and(|t| t.kind == "StatefulSet");
    let mut errs = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    let mut sum = MaxReplicasSum::default();
    for (i, subset) in subsets.iter().enumerate() {
        let p = path.index(i);
        let name_path = p.child("name");
        if subset.name.is_empty() {
            errs.push(FieldError::invalid(name_path.as_str(), "", ""));
        } else if !names.insert(subset.name.as_str()) {
            let msg = format!("duplicated subset name {}", subset.name);
            errs.push(FieldError::invalid(
                name_path.as_str(),
                subset.name.as_str(),
                msg,
            ));
        }
        errs.extend(validate_scheduling(subset, &p));
        if let (Some(patch), Some(template)) = (&subset.patch, template) {
            errs.extend(validate_patch(template, patch, &p.child("patch")));
        }
        match check_max_replicas(subset, is_sts, &mut sum, &p) {
            Ok(()) => {}
            Err(e) => {
                errs.push(e);
                return errs;
            }
        }
        if let Err(e) = check_min_replicas(subset, is_sts, &mut sum, &p) {
            errs.push(e);
        }
    }
    let last_has_max = subsets.last().is_some_and(|s| s.max_replicas.is_some());
    if sum.first_is_percent == Some(true) && sum.percent_sum < 100 && last_has_max {
        let first = subsets[0]
            .max_replicas
            .as_ref()
            .map(to_json)
            .unwrap_or(Value::Null);
        errs.push(FieldError::invalid(
            path.index(0).child("maxReplicas").as_str(),
            first,
            "maxReplicas sum of all subsets must equal 100% when type is specified as percent",
        ));
    }
    errs
}

fn validate_scheduling(subset: &WorkloadSpreadSubset, p: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(term) = &subset.required_node_selector {
        errs.extend(validate_node_selector_term(
            term,
            &p.child("requiredNodeSelector"),
        ));
    }
    errs.extend(validate_preferred_terms(
        &subset.preferred_node_selector,
        &p.child("preferredNodeSelector"),
    ));
    errs.extend(validate_tolerations(
        &subset.tolerations,
        &p.child("tolerations"),
    ));
    errs
}

fn validate_patch(template: &Value, patch: &Value, path: &Path) -> Vec<FieldError> {
    let raw = patch.to_string();
    let merged = match crate::smp::patch_pod(template, patch) {
        Ok(m) => m,
        Err(e) => {
            return vec![FieldError::invalid(
                path.as_str(),
                raw,
                format!("failed to merge patch: {e}"),
            )]
        }
    };
    if let Err(e) = k8s_openapi::api::core::v1::PodTemplateSpec::deserialize(&merged) {
        return vec![FieldError::invalid(
            path.as_str(),
            raw,
            format!("failed to unmarshal: {e}"),
        )];
    }
    validate_pod_spec(&merged["spec"], path)
}

/// Parses an int-or-string for validation: strings must be integer percentages.
fn value_of(v: &IntOrString) -> Result<i64, PercentError> {
    match v {
        IntOrString::Int(i) => Ok(i64::from(*i)),
        IntOrString::String(s) => parse_percent(s),
    }
}

fn invalid_max(path: &Path, v: &IntOrString, err: Option<PercentError>) -> FieldError {
    let msg = match err {
        Some(PercentError::NotPercent(_)) => {
            "maxReplicas is not valid for subset: a string maxReplicas must end with '%' (e.g. \"50%\")".to_string()
        }
        _ => "maxReplicas is not valid for subset".to_string(),
    };
    FieldError::invalid(path.as_str(), to_json(v), msg)
}

fn check_max_replicas(
    subset: &WorkloadSpreadSubset,
    is_sts: bool,
    sum: &mut MaxReplicasSum,
    p: &Path,
) -> Result<(), FieldError> {
    let Some(max) = &subset.max_replicas else {
        return Ok(());
    };
    let path = p.child("maxReplicas");
    let is_percent = matches!(max, IntOrString::String(_));
    match sum.first_is_percent {
        None => sum.first_is_percent = Some(is_percent),
        Some(first) if first != is_percent => {
            return Err(FieldError::invalid(
                path.as_str(),
                to_json(max),
                "the maxReplicas type of all subsets must be the same",
            ));
        }
        Some(_) => {}
    }
    if is_sts && is_percent {
        return Err(FieldError::invalid(
            path.as_str(),
            to_json(max),
            "the maxReplicas type must be Int for StatefulSet",
        ));
    }
    let value = match value_of(max) {
        Ok(v) if v >= 0 => v,
        Ok(_) => return Err(invalid_max(&path, max, None)),
        Err(e) => return Err(invalid_max(&path, max, Some(e))),
    };
    if is_percent {
        sum.percent_sum = sum.percent_sum.saturating_add(value);
        if sum.percent_sum > 100 {
            return Err(FieldError::invalid(
                path.as_str(),
                to_json(max),
                "the sum of all subset's maxReplicas exceeds 100% is no permitted",
            ));
        }
    }
    Ok(())
}

/// Extension: `minReplicas` is a non-negative int or percentage of the same type as
/// `maxReplicas` and not above it; percentages sum to at most 100%.
fn check_min_replicas(
    subset: &WorkloadSpreadSubset,
    is_sts: bool,
    sum: &mut MaxReplicasSum,
    p: &Path,
) -> Result<(), FieldError> {
    let Some(min) = &subset.min_replicas else {
        return Ok(());
    };
    let path = p.child("minReplicas");
    let invalid = |msg: &str| {
        Err(FieldError::invalid(
            path.as_str(),
            to_json(min),
            msg.to_string(),
        ))
    };
    let is_percent = matches!(min, IntOrString::String(_));
    if is_sts && is_percent {
        return invalid("the minReplicas type must be Int for StatefulSet");
    }
    let Ok(value) = value_of(min)
        .map_err(|_| ())
        .and_then(|v| if v >= 0 { Ok(v) } else { Err(()) })
    else {
        return invalid(
            "minReplicas must be a non-negative integer or a percentage such as \"20%\"",
        );
    };
    if let Some(max) = &subset.max_replicas {
        if matches!(max, IntOrString::String(_)) != is_percent {
            return invalid("minReplicas and maxReplicas must be of the same type");
        }
        if value_of(max).is_ok_and(|m| value > m) {
            return invalid("minReplicas must not exceed maxReplicas");
        }
    }
    if is_percent {
        sum.min_percent_sum = sum.min_percent_sum.saturating_add(value);
        if sum.min_percent_sum > 100 {
            return invalid("the sum of all subsets' minReplicas exceeds 100%");
        }
    }
    Ok(())
}

fn validate_schedule_strategy(ws: &WorkloadSpread, path: &Path) -> Vec<FieldError> {
    let ScheduleStrategy { type_, adaptive } = &ws.spec.schedule_strategy;
    let type_path = path.child("type");
    let mut errs = Vec::new();
    if !matches!(type_.as_str(), "" | STRATEGY_FIXED | STRATEGY_ADAPTIVE) {
        errs.push(FieldError::invalid(
            type_path.as_str(),
            type_.as_str(),
            "ScheduleStrategy's type is not valid",
        ));
    }
    let Some(adaptive) = adaptive else {
        return errs;
    };
    let seconds = adaptive.reschedule_critical_seconds;
    let seconds_value = seconds.map_or(Value::Null, Value::from);
    if type_ != STRATEGY_ADAPTIVE {
        errs.push(FieldError::invalid(
            type_path.as_str(),
            seconds_value.clone(),
            "the scheduleStrategy's type must be adaptive when using adaptive scheduleStrategy",
        ));
    }
    let subsets = &ws.spec.subsets;
    if subsets.len() > 1 && subsets.last().is_some_and(|s| s.max_replicas.is_some()) {
        errs.push(FieldError::invalid(
            path.child("adaptive").as_str(),
            to_json(adaptive),
            "the last subset's maxReplicas must be not specified when using adaptive scheduleStrategy",
        ));
    }
    // Deliberate difference: no upper bound tied to the 300 s hold (the reference
    // allowed at most (300-5)/(n-1) seconds, too short for node autoscaling, #1088).
    if let Some(s) = seconds.filter(|s| *s < 0) {
        errs.push(FieldError::invalid(
            path.child("adaptive")
                .child("rescheduleCriticalSeconds")
                .as_str(),
            s,
            "rescheduleCriticalSeconds < 0 is not permitted",
        ));
    }
    errs
}

fn validate_conflict(ws: &WorkloadSpread, others: &[SpreadTarget<'_>]) -> Vec<FieldError> {
    let Some(t) = &ws.spec.target_ref else {
        return vec![];
    };
    let group = |v: &str| parse_group(v).map(str::to_owned).ok();
    for other in others.iter().filter(|o| o.name() != ws.name()) {
        let Some(o) = other.target() else {
            continue;
        };
        if group(o.api_version) == group(&t.api_version) && o.kind == t.kind && o.name == t.name {
            let msg = format!(
                "ws.spec.targetRef is in conflict with other WorkloadSpread {}",
                other.name()
            );
            return vec![FieldError::invalid("spec.targetRef", to_json(t), msg)];
        }
    }
    vec![]
}

#[cfg(test)]
mod tests;

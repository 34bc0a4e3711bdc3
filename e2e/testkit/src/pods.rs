//! Reading what the system wrote on pods: the matched-workloadspread annotation and the
//! deletion cost.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

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

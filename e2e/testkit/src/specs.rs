//! Pieces of WorkloadSpread specs the suites share: the API resource and zone subsets
//! over the local cluster's KWOK nodes (`topology.kubernetes.io/zone` = zone-a/b/c).

use kube::api::ApiResource;
use serde_json::{json, Value};

/// The node label the local cluster's zones are told apart by.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// `apps.kruise.io/v1beta1` WorkloadSpread, for dynamic APIs.
pub fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

/// A subset `name` requiring nodes of `zone`, with `max` as its `maxReplicas` (none
/// when null).
pub fn zone(name: &str, zone: &str, max: Value) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": ZONE, "operator": "In", "values": [zone]}]}});
    if !max.is_null() {
        s["maxReplicas"] = max;
    }
    s
}

/// A v1beta1 spec as OpenKruise v1.9.0's users write it in v1alpha1 (the subsets'
/// `requiredNodeSelector` is `requiredNodeSelectorTerm` there).
pub fn alpha_spec(beta: &Value) -> Value {
    let mut alpha = beta.clone();
    for s in alpha["subsets"].as_array_mut().into_iter().flatten() {
        if let Some(term) = s
            .as_object_mut()
            .and_then(|o| o.remove("requiredNodeSelector"))
        {
            s["requiredNodeSelectorTerm"] = term;
        }
    }
    alpha
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_subsets_carry_a_maximum_only_when_given() {
        assert_eq!(zone("a", "zone-a", json!(3))["maxReplicas"], json!(3));
        assert!(zone("c", "zone-c", Value::Null)
            .get("maxReplicas")
            .is_none());
        let expr =
            &zone("b", "zone-b", json!("50%"))["requiredNodeSelector"]["matchExpressions"][0];
        assert_eq!(expr["key"], ZONE);
        assert_eq!(expr["values"], json!(["zone-b"]));
        assert_eq!(ws_resource().kind, "WorkloadSpread");
        let alpha = alpha_spec(&json!({"subsets": [zone("a", "zone-a", json!(3))]}));
        assert_eq!(
            alpha["subsets"][0]["requiredNodeSelectorTerm"]["matchExpressions"][0]["key"],
            ZONE
        );
        assert!(alpha["subsets"][0].get("requiredNodeSelector").is_none());
    }
}

//! The WorkloadSpread as both binaries read and write it through the dynamic API:
//! `apps.kruise.io/v1beta1`, decoded into `core`'s type.

use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;
use workloadspread_core::api::v1beta1::{WorkloadSpread, API_VERSION};
use workloadspread_core::api::KIND;

/// `apps.kruise.io/v1beta1` `workloadspreads`.
pub fn workloadspread_resource() -> ApiResource {
    ApiResource {
        group: "apps.kruise.io".into(),
        version: "v1beta1".into(),
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        plural: "workloadspreads".into(),
    }
}

/// `object` as JSON with its type: objects from a list or watch carry no
/// apiVersion/kind, which `core`'s type requires.
fn typed_json(object: &DynamicObject) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(object)?;
    v["apiVersion"] = API_VERSION.into();
    v["kind"] = KIND.into();
    Ok(v)
}

/// A stored WorkloadSpread as `core`'s v1beta1 type.
pub fn decode_workloadspread(object: &DynamicObject) -> Result<WorkloadSpread, serde_json::Error> {
    serde_json::from_value(typed_json(object)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_object_decodes_without_its_type() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a", "maxReplicas": 2}]},
        }))
        .unwrap();
        let ws = decode_workloadspread(&object).unwrap();
        assert_eq!(ws.metadata.name.as_deref(), Some("web"));
        assert_eq!(ws.spec.subsets[0].name, "a");
        assert_eq!(typed_json(&object).unwrap()["kind"], "WorkloadSpread");
        let resource = workloadspread_resource();
        assert_eq!(resource.api_version, "apps.kruise.io/v1beta1");
        assert_eq!(resource.plural, "workloadspreads");
    }
}

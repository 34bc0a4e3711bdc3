//! One WorkloadSpread object converted between the served versions (v1alpha1 ⇄ v1beta1)
//! through the lossless typed conversions, its metadata kept as sent: what the host's CRD
//! conversion webhook answers (`/convert`) and what offline `run` stores.

use super::{v1alpha1, v1beta1};
use serde_json::{json, Value};

/// Why a WorkloadSpread could not be converted (the `ConversionReview`'s failure message).
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("converting WorkloadSpread {name} from {from}: {source}")]
    Invalid {
        name: String,
        from: String,
        source: serde_json::Error,
    },
    #[error("cannot convert WorkloadSpread {name} from {from:?} to {desired:?}")]
    Unsupported {
        name: String,
        from: String,
        desired: String,
    },
}

const V1ALPHA1: &str = v1alpha1::API_VERSION;
const V1BETA1: &str = v1beta1::API_VERSION;

/// Converts one WorkloadSpread to `desired`; metadata is kept as sent.
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConvertError> {
    let from = object["apiVersion"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or("<unnamed>");
    let fail = |source| ConvertError::Invalid {
        name: name.into(),
        from: from.into(),
        source,
    };
    let mut out = match (from, desired) {
        (a, b) if a == b => return Ok(object.clone()),
        (V1ALPHA1, V1BETA1) => {
            let alpha: v1alpha1::WorkloadSpread =
                serde_json::from_value(object.clone()).map_err(fail)?;
            serde_json::to_value(v1beta1::WorkloadSpread::from(alpha)).map_err(fail)?
        }
        (V1BETA1, V1ALPHA1) => {
            let beta: v1beta1::WorkloadSpread =
                serde_json::from_value(object.clone()).map_err(fail)?;
            serde_json::to_value(v1alpha1::WorkloadSpread::from(beta)).map_err(fail)?
        }
        _ => {
            return Err(ConvertError::Unsupported {
                name: name.into(),
                from: from.into(),
                desired: desired.into(),
            })
        }
    };
    // The API server requires the metadata back unchanged (typed decoding drops fields).
    out["metadata"] = object["metadata"].clone();
    out["apiVersion"] = json!(desired);
    out["kind"] = object["kind"].clone();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alpha() -> Value {
        json!({"apiVersion": V1ALPHA1, "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "n", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a", "maxReplicas": 3,
                    "requiredNodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    "preferredNodeSelectorTerms": [{"weight": 5, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}]}]},
            "status": {"observedGeneration": 2, "subsetStatuses": [{"name": "a", "replicas": 1, "missingReplicas": 2}]}})
    }

    #[test]
    fn round_trip_keeps_fields_and_metadata() {
        let beta = convert(&alpha(), V1BETA1).unwrap();
        assert_eq!(beta["apiVersion"], V1BETA1);
        assert_eq!(beta["metadata"], alpha()["metadata"]);
        let subset = &beta["spec"]["subsets"][0];
        assert_eq!(
            subset["requiredNodeSelector"]["matchExpressions"][0]["key"],
            "zone"
        );
        assert_eq!(subset["preferredNodeSelector"][0]["weight"], 5);
        assert!(subset.get("requiredNodeSelectorTerm").is_none());
        let back = convert(&beta, V1ALPHA1).unwrap();
        assert_eq!(back["spec"], alpha()["spec"]);
        assert_eq!(
            back["status"]["subsetStatuses"],
            alpha()["status"]["subsetStatuses"]
        );
    }

    #[test]
    fn other_versions_are_named_in_the_error() {
        let err = convert(&alpha(), "apps.kruise.io/v9").unwrap_err();
        assert!(err.to_string().contains("v9"), "{err}");
    }
}

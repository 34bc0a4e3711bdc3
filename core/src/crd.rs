//! The CustomResourceDefinition for WorkloadSpread (both versions, v1beta1 stored),
//! generated from this crate's types. Enabled by the `crd` feature.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, SelectableField,
};
use kube::core::crd::merge_crds;
use kube::CustomResourceExt;
use serde_json::Value;

macro_rules! crd_version {
    ($module:ident, $version:literal, $spec:path, $status:literal) => {
        mod $module {
            use serde::{Deserialize, Serialize};

            /// Wrapper giving the derive a spec type; the fields are the real spec's.
            #[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, kube::CustomResource)]
            #[kube(
                group = "apps.kruise.io",
                version = $version,
                kind = "WorkloadSpread",
                namespaced,
                shortname = "ws",
                status = $status,
                doc = "WorkloadSpread spreads the pods of one workload over ordered subsets of nodes.",
                printcolumn(name = "WorkloadName", type_ = "string", json_path = ".spec.targetRef.name"),
                printcolumn(name = "WorkloadKind", type_ = "string", json_path = ".spec.targetRef.kind"),
                printcolumn(name = "Adaptive", type_ = "boolean", json_path = ".spec.scheduleStrategy.type[?(@ == \"Adaptive\")]"),
                printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
            )]
            pub struct Spec {
                #[serde(flatten)]
                pub inner: $spec,
            }
        }
    };
}

crd_version!(
    alpha,
    "v1alpha1",
    crate::api::v1alpha1::WorkloadSpreadSpec,
    "crate::api::v1alpha1::WorkloadSpreadStatus"
);
crd_version!(
    beta,
    "v1beta1",
    crate::api::v1beta1::WorkloadSpreadSpec,
    "crate::api::v1beta1::WorkloadSpreadStatus"
);

/// The merged CRD: v1alpha1 served, v1beta1 served and stored.
pub fn workloadspread_crd() -> Result<CustomResourceDefinition, String> {
    let mut crd = merge_crds(
        vec![alpha::WorkloadSpread::crd(), beta::WorkloadSpread::crd()],
        "v1beta1",
    )
    .map_err(|e| e.to_string())?;
    crd.metadata.annotations = Some(
        [(
            crate::api::CRD_PROVIDER_ANNOTATION.to_string(),
            crate::api::CRD_PROVIDER.to_string(),
        )]
        .into(),
    );
    // Same order as the reference CRD (oldest first).
    crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
    for version in &mut crd.spec.versions {
        // v1beta1 WorkloadSpreads can be listed by their target's name (`fieldSelector=
        // spec.targetRef.name=web`): how the policy finds a pod's candidates without
        // listing every spread of the namespace (`spreadLookup: target-name`). Only on the
        // version the policy reads: the same list on every version is moved to the spec's
        // top level by the API server, where it is refused without a top-level schema.
        if version.name == "v1beta1" {
            version.selectable_fields = Some(vec![SelectableField {
                json_path: format!(".{}", crate::workload::TARGET_NAME_FIELD),
            }]);
        }
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*schema).map_err(|e| e.to_string())?;
        finalize_schema(&mut value);
        *schema = serde_json::from_value(value).map_err(|e| e.to_string())?;
    }
    Ok(crd)
}

/// Like the reference CRD: no OpenAPI defaults (serde defaults are Rust-side only), and
/// the required fields the Go types declare.
fn finalize_schema(schema: &mut Value) {
    strip_defaults(schema);
    let spec = &mut schema["properties"]["spec"];
    require(spec, &["subsets", "targetRef"]);
    require(
        &mut spec["properties"]["targetRef"],
        &["apiVersion", "kind", "name"],
    );
    require(&mut spec["properties"]["subsets"]["items"], &["name"]);
    let status = &mut schema["properties"]["status"]["properties"];
    require(
        &mut status["subsetStatuses"]["items"],
        &["missingReplicas", "name", "replicas"],
    );
    require(
        &mut status["versionedSubsetStatuses"]["additionalProperties"]["items"],
        &["missingReplicas", "name", "replicas"],
    );
}

fn strip_defaults(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("default");
            m.values_mut().for_each(strip_defaults);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}

fn require(schema: &mut Value, fields: &[&str]) {
    if let Value::Object(m) = schema {
        m.insert("required".into(), Value::from(fields.to_vec()));
    }
}

//! The CRD conversion webhook (`/convert`): WorkloadSpread v1alpha1 ⇄ v1beta1 through
//! `core`'s lossless conversions (`workloadspread_core::api::convert`). Without it the API server (strategy `None`) only
//! relabels the apiVersion, and v1alpha1's `requiredNodeSelectorTerm` /
//! `preferredNodeSelectorTerms` are pruned from the stored v1beta1 object.

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use workloadspread_core::api::convert::{convert, ConvertError};
use workloadspread_core::api::{CRD_PROVIDER, CRD_PROVIDER_ANNOTATION, GROUP};

/// Answers a `ConversionReview` (apiextensions.k8s.io/v1).
pub fn review(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let objects = request["objects"].as_array().cloned().unwrap_or_default();
    let converted: Result<Vec<Value>, ConvertError> =
        objects.iter().map(|o| convert(o, desired)).collect();
    let response = match converted {
        Ok(objects) => {
            json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}})
        }
        Err(e) => json!({"uid": uid, "convertedObjects": [],
            "result": {"status": "Failure", "message": e.to_string()}}),
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

/// Where the API server reaches `/convert`.
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

/// Points CRD `crd`'s conversion at this host with `ca_pem` as the trusted CA; with
/// `injection_from` (NAMESPACE/CERTIFICATE, cert-manager mode) also asks cert-manager's
/// cainjector to keep that CA current. Only the CRD this project ships (it carries
/// `CRD_PROVIDER_ANNOTATION`): OpenKruise's has the same name.
pub async fn enable_on_crd(
    client: &Client,
    crd: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
    injection_from: Option<&str>,
) -> Result<()> {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let client_config = match endpoint {
        Endpoint::Url(url) => json!({"url": url, "caBundle": ca}),
        Endpoint::Service {
            namespace,
            name,
            port,
        } => json!({"caBundle": ca,
            "service": {"namespace": namespace, "name": name, "path": "/convert", "port": port}}),
    };
    let mut patch = json!({"spec": {"conversion": {"strategy": "Webhook",
        "webhook": {"clientConfig": client_config, "conversionReviewVersions": ["v1"]}}}});
    if let Some(from) = injection_from {
        patch["metadata"] = json!({"annotations": {"cert-manager.io/inject-ca-from": from}});
    }
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let current = api
        .get(crd)
        .await
        .with_context(|| format!("reading CRD {crd}"))?;
    anyhow::ensure!(
        current.spec.group == GROUP,
        "CRD {crd} is not in group {GROUP}; refusing to point its conversion at this host"
    );
    ensure_ours(&current)?;
    api.patch(crd, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("enabling the conversion webhook on CRD {crd}"))?;
    Ok(())
}

/// Refuses a CRD this project did not ship (OpenKruise's has the same name and group:
/// pointing its conversion here would break OpenKruise).
pub fn ensure_ours(crd: &CustomResourceDefinition) -> Result<()> {
    let provider = crd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CRD_PROVIDER_ANNOTATION));
    anyhow::ensure!(
        provider.map(String::as_str) == Some(CRD_PROVIDER),
        "CRD {} lacks the annotation {CRD_PROVIDER_ANNOTATION}: {CRD_PROVIDER} (is it \
         OpenKruise's?); refusing to point its conversion at this host. Install the CRD \
         from charts/workloadspread/crds, or run without --conversion-crd",
        crd.metadata.name.as_deref().unwrap_or_default()
    );
    Ok(())
}

/// What `uninstall` does to the CRD: its conversion back to `None` when it points at
/// `service` (NAMESPACE/NAME) — the CRD stays, the host does not.
pub async fn disable_on_crd(
    client: &Client,
    crd: &str,
    namespace: &str,
    name: &str,
) -> Result<bool> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(current) = api
        .get_opt(crd)
        .await
        .with_context(|| format!("reading CRD {crd}"))?
    else {
        return Ok(false);
    };
    let ours = current
        .spec
        .conversion
        .as_ref()
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref())
        .and_then(|c| c.service.as_ref())
        .is_some_and(|s| s.namespace == namespace && s.name == name);
    if !ours {
        return Ok(false);
    }
    let patch = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    api.patch(crd, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("resetting the conversion of CRD {crd}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloadspread_core::api::{
        v1alpha1::API_VERSION as V1ALPHA1, v1beta1::API_VERSION as V1BETA1,
    };

    #[test]
    fn only_our_crd_is_patched() {
        let ours = workloadspread_core::crd::workloadspread_crd().unwrap();
        ensure_ours(&ours).unwrap();
        let mut kruise = ours.clone();
        kruise.metadata.annotations = Some(
            [(
                "controller-gen.kubebuilder.io/version".to_string(),
                "v0.14.0".to_string(),
            )]
            .into(),
        );
        let err = ensure_ours(&kruise).unwrap_err().to_string();
        assert!(
            err.contains("OpenKruise") && err.contains("--conversion-crd"),
            "{err}"
        );
    }

    fn alpha() -> Value {
        json!({"apiVersion": V1ALPHA1, "kind": "WorkloadSpread", "metadata": {"name": "ws"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a", "maxReplicas": 3}]}})
    }

    #[test]
    fn reviews_answer_success_or_a_reason() {
        let ok = review(
            &json!({"request": {"uid": "r1", "desiredAPIVersion": V1BETA1, "objects": [alpha()]}}),
        );
        assert_eq!(ok["response"]["uid"], "r1");
        assert_eq!(ok["response"]["result"]["status"], "Success");
        assert_eq!(ok["response"]["convertedObjects"][0]["apiVersion"], V1BETA1);
        let bad = review(
            &json!({"request": {"uid": "r2", "desiredAPIVersion": "apps.kruise.io/v9", "objects": [alpha()]}}),
        );
        assert_eq!(bad["response"]["result"]["status"], "Failure");
        assert!(bad["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("v9"));
    }
}

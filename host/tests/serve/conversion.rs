//! The CRD conversion the host serves (v1alpha1 <-> v1beta1).

use crate::support::{host_bin, ws_crd};
use anyhow::{ensure, Result};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::json;
use std::time::Duration;
use workloadspread_testkit::webhook::{policy_wasm, HostProcess};
use workloadspread_testkit::{cluster, wait_for};

/// v1alpha1 manifests keep their node selectors: the host serves the CRD's conversion
/// (`--conversion-crd`), so an object written as v1alpha1 reads back as v1beta1 with
/// `requiredNodeSelector` and as v1alpha1 with `requiredNodeSelectorTerm`.
#[tokio::test]
async fn v1alpha1_objects_convert_through_the_host() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = cluster.namespace("convert").await?;
    let client = ns.client();
    ws_crd(&client).await?;
    let crd = "workloadspreads.apps.kruise.io";
    let port = workloadspread_testkit::webhook::free_port()?;
    let args: Vec<String> = [
        "--policy",
        &policy.display().to_string(),
        "--conversion-crd",
        crd,
        "--conversion-url",
        &format!("https://127.0.0.1:{port}/convert"),
    ]
    .map(str::to_string)
    .to_vec();
    let _host = HostProcess::start_on(host_bin(), cluster.kubeconfig(), port, &args).await?;
    let gvk = |v: &str| {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "apps.kruise.io",
            v,
            "WorkloadSpread",
        ))
    };
    let alpha: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &gvk("v1alpha1"));
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns.name(), &gvk("v1beta1"));
    let term = json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]});
    let object = |name: &str| -> Result<DynamicObject> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "WorkloadSpread", "metadata": {"name": name},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": 2, "requiredNodeSelectorTerm": term}]}}),
        )?)
    };
    // The API server picks up the CRD's new conversion strategy asynchronously; until then
    // a v1alpha1 object is stored unconverted (its term pruned). Retry until one converts.
    let attempt = std::sync::atomic::AtomicUsize::new(0);
    let created = wait_for(
        "the API server to convert through the host",
        Duration::from_secs(30),
        || async {
            let name = format!(
                "probe-{}",
                attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            if alpha
                .create(&PostParams::default(), &object(&name)?)
                .await
                .is_err()
            {
                return Ok(None);
            }
            let stored = beta.get(&name).await;
            let _ = alpha.delete(&name, &Default::default()).await;
            let converted = stored?.data["spec"]["subsets"][0]["requiredNodeSelector"] == term;
            Ok(converted.then_some(()))
        },
    )
    .await;
    let result = async {
        created?;
        alpha
            .create(&PostParams::default(), &object("legacy")?)
            .await?;
        let as_beta = beta.get("legacy").await?;
        ensure!(
            as_beta.data["spec"]["subsets"][0]["requiredNodeSelector"] == term,
            "{:?}",
            as_beta.data
        );
        let as_alpha = alpha.get("legacy").await?;
        ensure!(
            as_alpha.data["spec"]["subsets"][0]["requiredNodeSelectorTerm"] == term,
            "{:?}",
            as_alpha.data
        );
        Ok(())
    }
    .await;
    // Other tests share the CRD: hand conversion back before the host goes away.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let none = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    crds.patch(
        crd,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&none),
    )
    .await?;
    result
}

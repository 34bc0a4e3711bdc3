//! The CRD conversion the host serves (v1alpha1 <-> v1beta1).

use crate::support::{host_bin, ws_crd};
use anyhow::{ensure, Result};
use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use std::time::Duration;
use workloadspread_testkit::webhook::{policy_wasm, HostProcess};
use workloadspread_testkit::{cluster, wait_for};

/// v1alpha1 manifests keep their node selectors: the host serves the CRD's conversion
/// (`--conversion-crd`), so an object written as v1alpha1 reads back as v1beta1 with
/// `requiredNodeSelector` and as v1alpha1 with `requiredNodeSelectorTerm`. The CRD asks
/// cert-manager's cainjector for its CA (`--crd-ca-injection-from`), and a CA bundle
/// overwritten by a re-applied CRD (issue #30 item 4) is written back by the host:
/// conversion works again without a restart.
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
    let injection = format!("{}/workloadspread-serving", ns.name());
    let args: Vec<String> = [
        "--policy",
        &policy.display().to_string(),
        "--conversion-crd",
        crd,
        "--conversion-url",
        &format!("https://127.0.0.1:{port}/convert"),
        "--crd-ca-injection-from",
        &injection,
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
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let result = async {
        created?;
        let annotated = crds.get(crd).await?.metadata.annotations.unwrap_or_default();
        ensure!(
            annotated.get("cert-manager.io/inject-ca-from") == Some(&injection),
            "no cert-manager injection annotation on the CRD: {annotated:?}"
        );
        // A GitOps tool re-applies the CRD with a stale CA bundle (a valid one: the API
        // server's own CA, which signed no certificate of the host) and no generation.
        let stale_bundle = api_server_ca(cluster.kubeconfig())?;
        let stale = json!({"metadata": {"annotations": {"workloadspread.io/ca-bundle-generation": null}},
            "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": stale_bundle}}}}});
        let broken_at = std::time::Instant::now();
        crds.patch(crd, &PatchParams::default(), &Patch::Merge(&stale))
            .await?;
        let restored = wait_for("the CRD's CA bundle written back", Duration::from_secs(30), || async {
            let now = crds.get(crd).await?;
            let bundle = now
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
                .and_then(|c| c.ca_bundle)
                .map(|b| b.0)
                .unwrap_or_default();
            let stale = base64::engine::general_purpose::STANDARD.encode(&bundle) == stale_bundle;
            Ok((!bundle.is_empty() && !stale).then_some(broken_at.elapsed()))
        })
        .await?;
        eprintln!("re-applied CRD: CA bundle written back after {restored:?}");
        // The API server reloads the CRD's conversion client asynchronously: until it has
        // the written-back bundle, a conversion still fails TLS. Bounded retry, then the
        // time it took is reported.
        let working = wait_for(
            "conversion to work again with the written-back bundle",
            Duration::from_secs(30),
            || async {
                match alpha.create(&PostParams::default(), &object("legacy")?).await {
                    Ok(_) => Ok(Some(broken_at.elapsed())),
                    Err(kube::Error::Api(e)) if e.code == 500 => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await?;
        eprintln!("re-applied CRD: conversion works again after {working:?}");
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
    let none = json!({"metadata": {"annotations": {"cert-manager.io/inject-ca-from": null}},
        "spec": {"conversion": {"strategy": "None", "webhook": null}}});
    crds.patch(crd, &PatchParams::default(), &Patch::Merge(&none))
        .await?;
    result
}

/// The API server's CA (base64 PEM, as a caBundle) from a kubeconfig: its
/// `certificate-authority-data`, or the file `certificate-authority` names.
fn api_server_ca(kubeconfig: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    if let Some(data) = field("certificate-authority-data:") {
        return Ok(data);
    }
    let path = field("certificate-authority:")
        .ok_or_else(|| anyhow::anyhow!("no certificate authority in {}", kubeconfig.display()))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(path)?))
}

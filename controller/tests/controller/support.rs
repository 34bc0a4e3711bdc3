//! Helpers shared by the modules: the controller binary, a namespace with the CRD,
//! creating the WorkloadSpread and the Deployment, the replicas the status counts.

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::Path;
use workloadspread_testkit::webhook::apply_crd;
use workloadspread_testkit::{cluster, TestNamespace};

pub fn controller_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-controller"))
}

pub fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

pub async fn setup(hint: &str) -> Result<TestNamespace> {
    let ns = cluster()?.namespace(hint).await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&ns.client(), &serde_json::to_value(&crd)?).await?;
    Ok(ns)
}

pub fn zone(name: &str, zone: &str, max: Option<i32>) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}});
    if let Some(m) = max {
        s["maxReplicas"] = json!(m);
    }
    s
}

pub async fn create_ws(ns: &TestNamespace, spec: Value) -> Result<Api<DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ws_resource());
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec}))?;
    api.create(&PostParams::default(), &ws).await?;
    Ok(api)
}

pub async fn create_deployment(ns: &TestNamespace, replicas: i32) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

/// Pods the status counts over all subsets (`subsetStatuses[].replicas`).
pub fn counted_replicas(status: &Value) -> i64 {
    status["subsetStatuses"]
        .as_array()
        .map(|a| a.iter().map(|x| x["replicas"].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

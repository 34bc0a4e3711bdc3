//! Percentage subsets following the workload's replicas as it scales.

use crate::support::{controller_bin, setup, ws_resource};
use anyhow::{Context, Result};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::time::Duration;
use workloadspread_testkit::webhook::{apply_crd, ControllerProcess};
use workloadspread_testkit::{cluster, unique_name, wait_for};

fn workload_crd(group: &str, kind: &str, plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                "listKind": format!("{kind}List")},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

/// Issue #17 (8): a WorkloadSpread's percentages follow its workload when only the
/// workload changes — for OpenKruise's CloneSet and for a custom kind from
/// `--custom-workloads` whose CRD appears after the controller started (the controller
/// used to watch neither: the status kept the old replica count).
#[tokio::test]
async fn percentages_follow_a_cloneset_and_a_custom_workload_when_they_scale() -> Result<()> {
    let ns = setup("ctl-kinds").await?;
    let client = ns.client();
    apply_crd(
        &client,
        &workload_crd("apps.kruise.io", "CloneSet", "clonesets"),
    )
    .await?;
    let custom_group = "pools.workloadspread.test";
    let custom = std::env::temp_dir().join(format!("{}.yaml", unique_name("custom")));
    std::fs::write(
        &custom,
        format!("- group: {custom_group}\n  kind: Pool\n  replicasPath: spec.size\n"),
    )?;
    let args: Vec<String> = [
        "--namespace",
        ns.name(),
        "--custom-workloads",
        custom.to_str().context("temp path")?,
    ]
    .map(str::to_string)
    .to_vec();
    let controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    apply_crd(&client, &workload_crd(custom_group, "Pool", "pools")).await?;

    let ws_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &ws_resource());
    let cases = [
        ("apps.kruise.io", "CloneSet", "clonesets", "replicas"),
        (custom_group, "Pool", "pools", "size"),
    ];
    for (group, kind, plural, field) in cases {
        let resource = ApiResource {
            group: group.into(),
            version: "v1alpha1".into(),
            api_version: format!("{group}/v1alpha1"),
            kind: kind.into(),
            plural: plural.into(),
        };
        let workloads: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns.name(), &resource);
        let name = kind.to_lowercase();
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": resource.api_version, "kind": kind,
            "metadata": {"name": name}, "spec": {field: 10}}))?;
        workloads.create(&PostParams::default(), &object).await?;
        let ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": resource.api_version, "kind": kind, "name": name},
                "subsets": [
                    {"name": "a", "maxReplicas": "50%", "requiredNodeSelector": {"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}},
                    {"name": "b"}]}}))?;
        ws_api.create(&PostParams::default(), &ws).await?;
        let missing_in_a = |want: i64| {
            let ws_api = ws_api.clone();
            let name = name.clone();
            move || {
                let ws_api = ws_api.clone();
                let name = name.clone();
                async move {
                    let s = ws_api.get(&name).await?.data["status"].clone();
                    let a = s["subsetStatuses"]
                        .as_array()
                        .and_then(|a| a.iter().find(|x| x["name"] == "a"))
                        .map(|x| x["missingReplicas"].clone());
                    Ok((a == Some(json!(want))).then_some(()))
                }
            }
        };
        wait_for(
            &format!("{kind}: 5 missing in a at 10 replicas"),
            Duration::from_secs(30),
            missing_in_a(5),
        )
        .await
        .with_context(|| controller.log_text())?;
        let scale = json!({"spec": {field: 4}});
        workloads
            .patch(&name, &PatchParams::default(), &Patch::Merge(&scale))
            .await?;
        wait_for(
            &format!("{kind}: 2 missing in a once scaled to 4"),
            Duration::from_secs(30),
            missing_in_a(2),
        )
        .await
        .with_context(|| controller.log_text())?;
    }
    drop(controller);
    std::fs::remove_file(&custom)?;
    Ok(())
}

//! Smoke test of the local control plane: the API semantics the project relies on
//! (CRD with status subresource, optimistic concurrency, watches) and a working
//! Deployment → ReplicaSet → Pod → scheduler chain on the KWOK nodes.

use anyhow::{bail, ensure, Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::GroupVersionKind;
use kube::{Api, Error};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use workloadspread_testkit::pods::{ensure_lowest_cost_removed, COST};
use workloadspread_testkit::{cluster, wait_for};

const CRD_NAME: &str = "widgets.smoke.workloadspread.test";

fn widget_crd() -> Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "smoke.workloadspread.test",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"count": {"type": "integer"}}}
                }}}
            }]
        }
    }))?)
}

async fn apply_crd(client: kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.patch(
        CRD_NAME,
        &PatchParams::apply("workloadspread-smoke").force(),
        &Patch::Apply(widget_crd()?),
    )
    .await?;
    wait_for("CRD Established", Duration::from_secs(30), || {
        let crds = crds.clone();
        async move {
            let crd = crds.get(CRD_NAME).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await
}

#[tokio::test]
async fn crd_status_subresource_conflict_and_watch() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("smoke-crd").await?;
    apply_crd(ns.client()).await?;
    let gvk = GroupVersionKind::gvk("smoke.workloadspread.test", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk(&gvk));

    let mut w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "smoke.workloadspread.test/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}
    }))?;
    // The CRD may be Established a moment before its endpoint serves.
    let created = wait_for("widget created", Duration::from_secs(20), || {
        let (widgets, w) = (widgets.clone(), w.clone());
        async move { Ok(Some(widgets.create(&PostParams::default(), &w).await?)) }
    })
    .await?;
    let stale_rv = created.metadata.resource_version.clone();

    // Watch from the creation's resourceVersion, then change the status.
    let wp = WatchParams::default().fields("metadata.name=w1");
    let mut events = widgets
        .watch(&wp, stale_rv.as_deref().unwrap_or("0"))
        .await?
        .boxed();
    w.metadata = created.metadata.clone();
    w.data["status"] = json!({"count": 1});
    let updated = widgets
        .replace_status("w1", &PostParams::default(), &w)
        .await?;
    ensure!(
        updated.data["status"]["count"] == 1,
        "status not written: {updated:?}"
    );
    ensure!(
        updated.metadata.resource_version != stale_rv,
        "resourceVersion did not move"
    );

    // Same write again with the stale resourceVersion: the API server must answer 409.
    w.data["status"] = json!({"count": 2});
    match widgets
        .replace_status("w1", &PostParams::default(), &w)
        .await
    {
        Err(Error::Api(status)) if status.code == 409 => {
            println!("stale status update rejected: 409 {}", status.reason)
        }
        other => bail!("expected 409 Conflict, got {other:?}"),
    }

    let event = tokio::time::timeout(Duration::from_secs(20), events.try_next())
        .await
        .context("no watch event within 20s")??;
    match event {
        Some(WatchEvent::Modified(obj)) => {
            ensure!(
                obj.data["status"]["count"] == 1,
                "unexpected object {obj:?}"
            );
            println!("watch saw MODIFIED w1 status.count=1");
        }
        other => bail!("expected MODIFIED, got {other:?}"),
    }
    Ok(())
}

fn deployment(name: &str, replicas: i32) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/pause:3"}]}
            }
        }
    }))?)
}

/// The platform the suites stand on: pods bound to KWOK nodes become Running/Ready with a
/// pod IP, and on scale-in the ReplicaSet controller removes the pods with the lowest
/// `controller.kubernetes.io/pod-deletion-cost` (which KWOK then deletes for good).
#[tokio::test]
async fn kwok_runs_pods_and_scale_in_follows_the_deletion_cost() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("smoke-deploy").await?;
    let nodes: BTreeSet<String> = Api::<Node>::all(ns.client())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    ensure!(!nodes.is_empty(), "the cluster has no nodes");

    let deployments = ns.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &deployment("web", 6)?)
        .await?;
    let pods_api = ns.api::<Pod>();
    let running = wait_for("6 pods Running and Ready", Duration::from_secs(60), || {
        let pods_api = pods_api.clone();
        async move {
            let pods = live(&pods_api).await?;
            let ready = pods.iter().filter(|p| is_ready(p)).count();
            Ok((pods.len() == 6 && ready == 6).then_some(pods))
        }
    })
    .await?;
    for p in &running {
        let name = p.metadata.name.clone().unwrap_or_default();
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let node = node.context("running pod without a node")?;
        ensure!(
            nodes.contains(&node),
            "pod {name} bound to unknown node {node}"
        );
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
        ensure!(ip.is_some(), "pod {name} has no IP");
        let owner = p.metadata.owner_references.clone().unwrap_or_default();
        ensure!(
            owner
                .iter()
                .any(|o| o.kind == "ReplicaSet" && o.controller == Some(true)),
            "pod {name} is not controlled by a ReplicaSet: {owner:?}"
        );
    }

    // Costs 600, 500, ... 100 in name order: the last three by name must go.
    let mut costed = vec![];
    for (i, p) in running.iter().enumerate() {
        let name = p.metadata.name.clone().unwrap_or_default();
        let cost = (600 - 100 * i).to_string();
        let patch = json!({"metadata": {"annotations": {COST: cost}}});
        costed.push(
            pods_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?,
        );
    }
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    let left = wait_for("3 pods left", Duration::from_secs(60), || {
        let pods_api = pods_api.clone();
        async move {
            let all = pods_api.list(&ListParams::default()).await?.items;
            Ok((all.len() == 3).then_some(all))
        }
    })
    .await?;
    let removed = ensure_lowest_cost_removed(&costed, &left)?;
    ensure!(removed == vec![100, 200, 300], "removed costs {removed:?}");
    Ok(())
}

async fn live(api: &Api<Pod>) -> Result<Vec<Pod>> {
    let mut pods = api.list(&ListParams::default()).await?.items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(pods)
}

fn is_ready(p: &Pod) -> bool {
    let status = p.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

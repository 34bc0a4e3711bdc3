//! Smoke test of the local control plane: the API semantics the project relies on
//! (CRD with status subresource, optimistic concurrency, watches) and a working
//! Deployment → ReplicaSet → Pod → scheduler chain on the fake nodes.

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

#[tokio::test]
async fn deployment_pods_are_scheduled_onto_fake_nodes() -> Result<()> {
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

    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", 3)?)
        .await?;
    let pods_api = ns.api::<Pod>();
    let placed = wait_for("3 pods bound to nodes", Duration::from_secs(60), || {
        let pods_api = pods_api.clone();
        async move {
            let pods = pods_api
                .list(&ListParams::default().labels("app=web"))
                .await?;
            let bound: Vec<(String, String)> = pods
                .items
                .iter()
                .filter_map(|p| {
                    let node = p.spec.as_ref()?.node_name.clone()?;
                    Some((p.metadata.name.clone()?, node))
                })
                .collect();
            Ok((bound.len() == 3).then_some(bound))
        }
    })
    .await?;
    for (pod, node) in &placed {
        ensure!(
            nodes.contains(node),
            "pod {pod} bound to unknown node {node}"
        );
        let owner = pods_api
            .get(pod)
            .await?
            .metadata
            .owner_references
            .unwrap_or_default();
        ensure!(
            owner
                .iter()
                .any(|o| o.kind == "ReplicaSet" && o.controller == Some(true)),
            "pod {pod} is not controlled by a ReplicaSet: {owner:?}"
        );
        println!("pod {pod} -> {node}");
    }
    Ok(())
}

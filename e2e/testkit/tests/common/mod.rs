//! Helpers shared by the scenario suites (each file under `tests/` is its own crate).
#![allow(dead_code)]

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use workloadspread_testkit::pods::{cost_of, status_counts, subset_of};
use workloadspread_testkit::{wait_for, TestNamespace};

#[allow(unused_imports)] // each suite uses a part
pub use workloadspread_testkit::specs::{ws_resource, zone, ZONE};
pub const SETTLE: Duration = Duration::from_secs(90);

pub fn target(kind: &str) -> Value {
    let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    json!({"apiVersion": api_version, "kind": kind, "name": "web"})
}

pub fn pod_template(extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "web", "image": "nginx:1"}],
        "terminationGracePeriodSeconds": 0});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"metadata": {"labels": {"app": "web"}}, "spec": spec})
}

/// Deployment `web` (pods labelled app=web, [`pod_template`]) with `replicas`.
pub async fn create_web_deployment(ns: &TestNamespace, replicas: i32) -> Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template(json!({}))}}))?;
    ns.api::<Deployment>()
        .create(&kube::api::PostParams::default(), &d)
        .await?;
    Ok(())
}

pub async fn scale<K>(api: &Api<K>, replicas: i32) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"spec": {"replicas": replicas}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Live pods (not being deleted).
pub async fn live_pods(ns: &TestNamespace) -> Result<Vec<Pod>> {
    let mut pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(pods)
}

/// Pods per subset ("" = admitted without a subset).
pub fn counts(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        *out.entry(subset_of(p).unwrap_or_default()).or_insert(0) += 1;
    }
    out
}

/// Waits until `total` live pods are Running with deletion costs set on the placed ones.
pub async fn settled(ns: &TestNamespace, total: usize) -> Result<Vec<Pod>> {
    settled_with(ns, total, true).await
}

/// As [`settled`]; `costs` = false for kinds the controller sets no deletion cost on
/// (StatefulSet, Job: their controllers ignore it).
pub async fn settled_with(ns: &TestNamespace, total: usize, costs: bool) -> Result<Vec<Pod>> {
    let what = format!("{total} running pods with deletion costs");
    let result = wait_for(&what, SETTLE, || async {
        let pods = live_pods(ns).await?;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        let costed = pods
            .iter()
            .all(|p| !costs || subset_of(p).is_none() || cost_of(p).is_some());
        Ok((pods.len() == total && running == total && costed).then_some(pods))
    })
    .await;
    match result {
        Ok(p) => Ok(p),
        Err(e) => {
            let pods = live_pods(ns).await.unwrap_or_default();
            Err(e.context(format!("pods per subset {:?}", counts(&pods))))
        }
    }
}

/// Waits until the status counts exactly the live pods of each subset and holds no
/// creating/deleting entries (in the versioned counters too); returns the status.
pub async fn status_matches(
    ws: &Api<DynamicObject>,
    want: &BTreeMap<String, usize>,
) -> Result<Value> {
    let last = std::cell::RefCell::new(Value::Null);
    let got = wait_for("status equal to the pods", SETTLE, || {
        let last = &last;
        async move {
            let status = ws.get("web").await?.data["status"].clone();
            *last.borrow_mut() = status.clone();
            Ok(status_counts(&status, want).then_some(status))
        }
    })
    .await;
    got.with_context(|| format!("want {want:?}, last status {}", last.borrow()))
}

pub fn empty(v: &Value) -> bool {
    v.as_object().is_none_or(|o| o.is_empty())
}

pub async fn wait_pods(ns: &TestNamespace, at_least: usize) -> Result<()> {
    wait_for(&format!("{at_least} pods"), SETTLE, || async {
        Ok((live_pods(ns).await?.len() >= at_least).then_some(()))
    })
    .await
}

/// `FailedCreate` events of the namespace (pods the webhook or the API refused; the
/// ReplicaSet retried them).
pub async fn failed_creates(ns: &TestNamespace) -> Result<i32> {
    let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
        .map(|e| e.count.unwrap_or(1))
        .sum())
}

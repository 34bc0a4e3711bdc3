//! Helpers of the rebalancing tests: objects, waits on the spread and the status, the
//! controller's eviction counters, and a zone whose nodes a test opens.

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::api::REBALANCE_ANNOTATION;
use workloadspread_core::rules::planned_spread;
use workloadspread_testkit::convergence::SpreadWatch;
use workloadspread_testkit::measure::sum_metric_with;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

pub use workloadspread_testkit::specs::{ws_resource, zone, ZONE};
/// Bound of every convergence wait (a loaded 2-core machine).
pub const CONVERGE: Duration = Duration::from_secs(240);
pub const EVICTIONS: &str = "workloadspread_controller_rebalance_evictions_total";

pub fn target(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name})
}

/// WorkloadSpread `name` over Deployment `name`, annotated for rebalancing when `on`.
pub async fn create_ws(
    stack: &Stack,
    name: &str,
    spec: &Value,
    on: bool,
) -> Result<Api<DynamicObject>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(stack.ns.client(), stack.ns.name(), &ws_resource());
    let mut spec = spec.clone();
    spec["targetRef"] = target(name);
    let mut object = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": name}, "spec": spec});
    if on {
        object["metadata"]["annotations"] = json!({REBALANCE_ANNOTATION: "true"});
    }
    api.create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), name, &target(name))
        .await?;
    Ok(api)
}

pub async fn create_deployment(ns: &TestNamespace, name: &str, replicas: i32) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}],
                    "terminationGracePeriodSeconds": 0}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

pub async fn scale(ns: &TestNamespace, name: &str, replicas: i32) -> Result<()> {
    let patch = json!({"spec": {"replicas": replicas}});
    ns.api::<Deployment>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The spread `planned_spread` gives `spec` at `replicas`, as counts by subset name
/// ("" = outside every subset), zeros left out.
pub fn plan(spec: &Value, replicas: usize) -> Result<BTreeMap<String, usize>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let spread = planned_spread(&ws, replicas);
    let mut out: BTreeMap<String, usize> = ws
        .spec
        .subsets
        .iter()
        .zip(spread.subsets)
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.name.clone(), n))
        .collect();
    if spread.unplaced > 0 {
        out.insert(String::new(), spread.unplaced);
    }
    Ok(out)
}

/// The bounded subsets' maxima at `replicas`.
pub fn maxima(spec: &Value, replicas: usize) -> Result<BTreeMap<String, usize>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let total = i32::try_from(replicas)?;
    Ok(ws
        .spec
        .subsets
        .iter()
        .filter_map(|s| {
            let m = s.max_replicas.as_ref()?;
            let v = workloadspread_core::percent::scaled_value(m, total).ok()?;
            Some((s.name.clone(), usize::try_from(v).ok()?))
        })
        .collect())
}

/// "a / b / c" of `counts` in the order of `names` (plus "/ n unplaced" when any).
pub fn shape(counts: &BTreeMap<String, usize>, names: &[&str]) -> String {
    let mut out = names
        .iter()
        .map(|n| counts.get(*n).copied().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join("/");
    if let Some(n) = counts.get("").filter(|n| **n > 0) {
        out.push_str(&format!(" +{n} unplaced"));
    }
    out
}

/// Live pods of app `name` (not being deleted), by name.
pub async fn pod_names(ns: &TestNamespace, name: &str) -> Result<BTreeSet<String>> {
    let lp = ListParams::default().labels(&format!("app={name}"));
    Ok(ns
        .api::<Pod>()
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Whether the status of `name` counts exactly `want` per subset, with no admission or
/// deletion in flight.
pub async fn status_is(
    api: &Api<DynamicObject>,
    name: &str,
    want: &BTreeMap<String, usize>,
) -> Result<bool> {
    let status = api.get(name).await?.data["status"].clone();
    Ok(workloadspread_testkit::pods::status_counts(&status, want))
}

/// Waits until the watch shows `want` with every pod healthy and the status agrees.
pub async fn converged(
    watch: &SpreadWatch,
    api: &Api<DynamicObject>,
    name: &str,
    want: &BTreeMap<String, usize>,
    stack: &Stack,
) -> Result<Duration> {
    let started = Instant::now();
    wait_for(&format!("{name} on {want:?}"), CONVERGE, || async {
        let on = watch.counts() == *want && status_is(api, name, want).await?;
        Ok(on.then_some(()))
    })
    .await
    .with_context(|| {
        format!(
            "{name}: pods per subset {:?}; controller log:\n{}",
            watch.counts(),
            tail(&stack.controller.log_text(), 40)
        )
    })?;
    Ok(started.elapsed())
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Rebalancing evictions the controller made (and refused ones).
pub async fn evictions(stack: &Stack) -> Result<(u64, u64)> {
    let text = stack.controller.get("/metrics").await?;
    let count = |result: &str| {
        sum_metric_with(&text, EVICTIONS, &format!("result=\"{result}\"")).max(0.0) as u64
    };
    Ok((count("evicted"), count("refused")))
}

/// Occurrences of events with `reason` recorded on WorkloadSpread `name`: repeats are
/// folded into one Event's series by the recorder, so each counts its series' count.
pub async fn events(ns: &TestNamespace, name: &str, reason: &str) -> Result<usize> {
    let list = ns.api::<Event>().list(&ListParams::default()).await?.items;
    Ok(list
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let series = e.series.as_ref().and_then(|s| s.count);
            usize::try_from(series.unwrap_or(1)).unwrap_or(1).max(1)
        })
        .sum())
}

/// The twin was left alone: the same pods as when it settled, still where they were,
/// and no rebalancing event.
pub async fn left_alone(
    stack: &Stack,
    settled: &BTreeSet<String>,
    watch: &SpreadWatch,
    spread: &BTreeMap<String, usize>,
) -> Result<()> {
    let now = pod_names(&stack.ns, "twin").await?;
    ensure!(
        now == *settled,
        "the unannotated twin's pods changed: {:?} gone, {:?} new",
        settled.difference(&now).collect::<Vec<_>>(),
        now.difference(settled).collect::<Vec<_>>()
    );
    ensure!(
        watch.counts() == *spread,
        "twin moved: {:?} vs {spread:?}",
        watch.counts()
    );
    let evicted = events(&stack.ns, "twin", "RebalanceEvicted").await?;
    ensure!(evicted == 0, "{evicted} rebalancing events on the twin");
    Ok(())
}

pub fn controller_args(max_evictions: usize, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--rebalance-max-evictions".to_string(),
        max_evictions.to_string(),
        "--rebalance-interval-seconds".into(),
        "1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Labels every zone-a node with `key=open` on creation, removes it on drop: zone-a
/// becomes schedulable for subsets requiring that label, for this test only.
pub struct OpenZone {
    key: String,
    nodes: Vec<String>,
}

impl OpenZone {
    pub async fn open(key: &str) -> Result<Self> {
        let client = cluster()?.client().await?;
        let api: Api<Node> = Api::all(client);
        let lp = ListParams::default().labels(&format!("{ZONE}=zone-a"));
        let nodes: Vec<String> = api
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        ensure!(!nodes.is_empty(), "no zone-a node");
        for n in &nodes {
            let patch = json!({"metadata": {"labels": {key: "open"}}});
            api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(OpenZone {
            key: key.to_string(),
            nodes,
        })
    }
}

impl Drop for OpenZone {
    fn drop(&mut self) {
        let (key, nodes) = (self.key.clone(), std::mem::take(&mut self.nodes));
        let Ok(c) = cluster() else { return };
        workloadspread_testkit::clean_up_blocking(c.clone(), |client| async move {
            let api: Api<Node> = Api::all(client);
            for n in nodes {
                let patch = json!({"metadata": {"labels": {key.as_str(): null}}});
                let _ = api
                    .patch(&n, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        });
    }
}

//! Helpers shared by the scenario modules: creating the WorkloadSpread and the
//! Deployment, the planner's expected spreads and costs, scale-in steps, the monitor.

use crate::common::*;
use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_testkit::monitor::Monitor;
use workloadspread_testkit::pods::{cost_of, ensure_lowest_cost_removed, subset_of};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{wait_for, TestNamespace};

pub async fn create_ws(stack: &Stack, spec: Value) -> Result<Api<DynamicObject>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(stack.ns.client(), stack.ns.name(), &ws_resource());
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec.clone()}))?;
    api.create(&PostParams::default(), &ws).await?;
    // Pods created before the webhook's cache holds the WorkloadSpread are admitted
    // unspread (its watch lags the API server by milliseconds): wait for it.
    if let Some(target) = spec.get("targetRef") {
        stack
            .host
            .wait_sees_workloadspread(stack.ns.name(), "web", target)
            .await?;
    }
    Ok(api)
}

pub async fn create_deployment(stack: &Stack, replicas: i32, pod_spec: Value) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template(pod_spec)}}))?;
    stack
        .ns
        .api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

pub fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.to_string(), *n))
        .collect()
}

pub fn missing(status: &Value, subset: &str) -> Option<i64> {
    status["subsetStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == subset)?["missingReplicas"]
        .as_i64()
}

/// `core`'s planner for the same spec: the pods per subset after each scale-out step.
pub fn planned(spec: &Value, steps: &[i32]) -> Result<Vec<BTreeMap<String, usize>>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    Ok(workloadspread_core::plan::plan(&ws, steps)
        .iter()
        .map(planned_counts)
        .collect())
}

/// `core`'s planner's deletion costs per subset after the last of `steps` (sorted).
pub fn planned_costs(spec: &Value, steps: &[i32]) -> Result<BTreeMap<String, Vec<i64>>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let plan = workloadspread_core::plan::plan(&ws, steps);
    let last = plan.last().context("no steps")?;
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for p in &last.pods {
        out.entry(p.subset.clone().unwrap_or_default())
            .or_default()
            .push(p.deletion_cost.unwrap_or(i64::MIN));
    }
    out.values_mut().for_each(|v| v.sort_unstable());
    Ok(out)
}

pub fn planned_counts(step: &workloadspread_core::plan::PlanStep) -> BTreeMap<String, usize> {
    let mut m: BTreeMap<String, usize> = step
        .subsets
        .iter()
        .filter(|s| s.pods > 0)
        .map(|s| (s.name.clone(), s.pods))
        .collect();
    if step.unplaced > 0 {
        m.insert(String::new(), step.unplaced);
    }
    m
}

/// The subsets pods leave in, lowest cost first; ties between subsets broken by subset
/// name, ascending or descending (the two extremes of a ReplicaSet's tie order).
fn removal_order(costs: &BTreeMap<String, Vec<i64>>, ascending: bool) -> Vec<&String> {
    let mut v: Vec<(i64, &String)> = costs
        .iter()
        .flat_map(|(s, cs)| cs.iter().map(move |c| (*c, s)))
        .collect();
    v.sort_by(|a, b| {
        let by_subset = if ascending {
            a.1.cmp(b.1)
        } else {
            b.1.cmp(a.1)
        };
        a.0.cmp(&b.0).then(by_subset)
    });
    v.into_iter().map(|(_, s)| s).collect()
}

/// Whether `have` (costs per subset) makes every scale-in — the k lowest-cost pods
/// removed, for every k, ties in any order — remove as many pods from each subset as
/// `want` (the planner's costs) does. The controller keeps a cost anywhere in the band
/// of its run of steps (`core::controller::cost`), so costs need not be equal.
pub fn same_scale_in(have: &BTreeMap<String, Vec<i64>>, want: &BTreeMap<String, Vec<i64>>) -> bool {
    let sizes = |m: &BTreeMap<String, Vec<i64>>| -> Vec<(String, usize)> {
        m.iter().map(|(s, v)| (s.clone(), v.len())).collect()
    };
    if sizes(have) != sizes(want) {
        return false;
    }
    let reference = removal_order(want, true);
    [true, false].into_iter().all(|ascending| {
        let order = removal_order(have, ascending);
        let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
        order.iter().zip(&reference).all(|(x, y)| {
            *a.entry(*x).or_insert(0) += 1;
            *b.entry(*y).or_insert(0) += 1;
            a == b
        })
    })
}

/// Waits until the live pods' costs per subset remove pods as `want` (the planner's
/// costs) does at every scale-in ([`same_scale_in`]; the controller writes them pod by
/// pod, after the count settles); returns the pods.
pub async fn costs_settle(
    ns: &TestNamespace,
    want: BTreeMap<String, Vec<i64>>,
) -> Result<Vec<Pod>> {
    let last = std::cell::RefCell::new(BTreeMap::new());
    let pods = wait_for("costs ranking pods as the planner's do", SETTLE, || async {
        let pods = live_pods(ns).await?;
        *last.borrow_mut() = costs_by_subset(&pods);
        Ok(same_scale_in(&last.borrow(), &want).then_some(pods))
    })
    .await;
    pods.with_context(|| format!("costs {:?}, planner {want:?}", last.borrow()))
}

pub fn costs_by_subset(pods: &[Pod]) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for p in pods {
        let key = subset_of(p).unwrap_or_default();
        out.entry(key)
            .or_default()
            .push(cost_of(p).unwrap_or(i64::MIN));
    }
    out.values_mut().for_each(|v| v.sort_unstable());
    out
}

/// Scales the Deployment in from the settled pods `before` to `replicas`, waits until it
/// settles and checks which pods were removed ([`ensure_lowest_cost_removed`]).
pub async fn scale_in(stack: &Stack, before: &[Pod], replicas: usize) -> Result<Vec<Pod>> {
    scale(&stack.ns.api::<Deployment>(), replicas as i32).await?;
    let after = settled(&stack.ns, replicas).await?;
    let removed = ensure_lowest_cost_removed(before, &after)?;
    eprintln!(
        "scale-in {} → {replicas}: removed costs {removed:?}, now {:?}",
        before.len(),
        counts(&after)
    );
    Ok(after)
}

/// The invariant monitor on WorkloadSpread `web` and Deployment `web`.
pub async fn monitor(ns: &TestNamespace) -> Result<Monitor> {
    monitor_of::<Deployment>(ns).await
}

/// The invariant monitor on WorkloadSpread `web` and the workload of kind `K` named
/// `web` (which may not exist yet).
pub async fn monitor_of<K>(ns: &TestNamespace) -> Result<Monitor>
where
    K: kube::Resource<DynamicType = ()>,
{
    let workload = ApiResource::erase::<K>(&());
    Monitor::start(ns.client(), ns.name(), "web", workload, "web").await
}

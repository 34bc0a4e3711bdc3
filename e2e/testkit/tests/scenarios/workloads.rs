//! The reference scenarios per workload kind: a Deployment over two zones through a
//! rolling update, elastic subsets, a priority-class patch, a StatefulSet, a Job.

use crate::common::*;
use crate::support::{
    costs_settle, create_deployment, create_ws, expect, missing, monitor, monitor_of, planned,
    planned_costs, scale_in,
};
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use workloadspread_testkit::pods::{annotation, cost_of, subset_of, MATCHED};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{unique_name, wait_for};

/// §5.7 (1): two zones 3/3 → costs 200/100, each pod bound in its zone with the
/// subset's term in its affinity; a rolling update (image change) ends 3/3 again with
/// versioned statuses while both versions coexist.
#[tokio::test]
async fn two_zones_three_each_then_a_rolling_update() -> Result<()> {
    let Some(stack) = Stack::start("scn-two-zones", &[]).await? else {
        return Ok(());
    };
    let spec = json!({"targetRef": target("Deployment"),
        "subsets": [zone("a", "zone-a", json!(3)), zone("b", "zone-b", json!(3))]});
    let ws = create_ws(&stack, spec.clone()).await?;
    let monitor = monitor(&stack.ns).await?;
    create_deployment(&stack, 6, json!({})).await?;
    let pods = settled(&stack.ns, 6).await?;
    ensure!(
        counts(&pods) == planned(&spec, &[6])?[0],
        "{:?}",
        counts(&pods)
    );
    let pods = costs_settle(&stack.ns, planned_costs(&spec, &[6])?).await?;
    for p in &pods {
        let subset = subset_of(p).unwrap_or_default();
        let node = node_of(p).unwrap_or_default();
        ensure!(
            node.starts_with(&format!("node-{subset}-")),
            "{subset} pod on {node}"
        );
        let terms = &p
            .spec
            .as_ref()
            .and_then(|s| s.affinity.clone())
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .map(|r| r.node_selector_terms)
            .unwrap_or_default();
        ensure!(
            serde_json::to_value(terms)?[0]["matchExpressions"][0]["values"][0]
                == format!("zone-{subset}")
        );
    }
    let status = status_matches(&ws, &counts(&pods)).await?;
    ensure!(
        missing(&status, "a") == Some(0) && missing(&status, "b") == Some(0),
        "{status}"
    );

    ensure!(
        versions_in(&status) == 1,
        "one version before the rollout: {status}"
    );

    // Rolling update: every status the controller writes is watched, so a status with
    // both versions side by side cannot be missed between two polls.
    let most_versions = watch_versions(ws.clone()).await?;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}});
    stack
        .ns
        .api::<Deployment>()
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    let rolled = wait_for("rollout to nginx:2 with 3/3", SETTLE, || {
        let stack = &stack;
        async move {
            let pods = live_pods(&stack.ns).await?;
            let new = pods.iter().all(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers[0].image.as_deref() == Some("nginx:2"))
            });
            Ok(
                (new && pods.len() == 6 && counts(&pods) == expect(&[("a", 3), ("b", 3)]))
                    .then_some(pods),
            )
        }
    })
    .await?;
    let status = status_matches(&ws, &counts(&rolled)).await?;
    let seen = most_versions.stop();
    ensure!(
        seen >= 2,
        "no status with both versions during the rollout (at most {seen})"
    );
    wait_for("only the new version left", SETTLE, || async {
        let status = ws.get("web").await?.data["status"].clone();
        Ok((versions_in(&status) == 1).then_some(()))
    })
    .await
    .with_context(|| format!("last status {status}"))?;
    monitor.finish()?;
    stack.finish().await
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn versions_in(status: &Value) -> usize {
    status["versionedSubsetStatuses"]
        .as_object()
        .map_or(0, |m| m.len())
}

/// The largest number of versions in `versionedSubsetStatuses` over every status
/// revision of WorkloadSpread `web` while it runs.
struct VersionWatch {
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl VersionWatch {
    fn stop(self) -> usize {
        self.task.abort();
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Returns once the watch has delivered the object (so no later status is missed).
async fn watch_versions(api: Api<DynamicObject>) -> Result<VersionWatch> {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = most.clone();
    let (listed, first) = tokio::sync::oneshot::channel();
    let config = watcher::Config::default().fields("metadata.name=web");
    let task = tokio::spawn(async move {
        let stream = watcher(api, config).applied_objects();
        futures::pin_mut!(stream);
        let mut listed = Some(listed);
        while let Some(item) = stream.next().await {
            if let Ok(ws) = item {
                let n = versions_in(&ws.data["status"]);
                seen.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    tokio::time::timeout(SETTLE, first)
        .await
        .context("the WorkloadSpread watch delivered nothing")??;
    Ok(VersionWatch { most, task })
}

/// §5.7 (2)/(10): elastic a=2, b unlimited: 2 → 2/0 (b missing −1); 6 → 2/4 with b's
/// pods cheapest to delete; back to 2 and up to 6 again without a exceeding 2.
#[tokio::test]
async fn elastic_two_then_unlimited() -> Result<()> {
    let Some(stack) = Stack::start("scn-elastic", &[]).await? else {
        return Ok(());
    };
    let spec = json!({"targetRef": target("Deployment"),
        "subsets": [zone("a", "zone-a", json!(2)), zone("b", "zone-b", Value::Null)]});
    let ws = create_ws(&stack, spec.clone()).await?;
    let monitor = monitor(&stack.ns).await?;
    let plan = planned(&spec, &[2, 6])?;
    create_deployment(&stack, 2, json!({})).await?;
    let pods = settled(&stack.ns, 2).await?;
    ensure!(counts(&pods) == plan[0]);
    let status = status_matches(&ws, &counts(&pods)).await?;
    ensure!(missing(&status, "b") == Some(-1), "{status}");
    let deployments = stack.ns.api::<Deployment>();
    scale(&deployments, 6).await?;
    let pods = settled(&stack.ns, 6).await?;
    ensure!(counts(&pods) == plan[1], "{:?}", counts(&pods));
    let pods = costs_settle(&stack.ns, planned_costs(&spec, &[2, 6])?).await?;
    let pods = scale_in(&stack, &pods, 2).await?;
    ensure!(counts(&pods) == expect(&[("a", 2)]), "{:?}", counts(&pods));
    status_matches(&ws, &counts(&pods)).await?;
    scale(&deployments, 6).await?;
    let pods = settled(&stack.ns, 6).await?;
    ensure!(
        counts(&pods).get("a").copied().unwrap_or(0) <= 2,
        "{:?}",
        counts(&pods)
    );
    status_matches(&ws, &counts(&pods)).await?;
    monitor.finish()?;
    stack.finish().await
}

/// §5.7 (5)/(6): one subset with max 2 and a `priorityClassName` patch: 2 pods are
/// admitted into it with the class; at 6 replicas the other 4 are admitted unchanged.
/// The controller then adopts them (§4.4: no required term, so every node matches)
/// without patching their spec; with 6 pods over a maximum of 2, the planned costs rank
/// all six (levels 1..6), so a scale-in to 2 keeps two of them. (§5.7 (6) expects the
/// unchanged pods left without a cost; §4.4 is followed.)
#[tokio::test]
async fn single_subset_with_a_priority_class_patch() -> Result<()> {
    let Some(stack) = Stack::start("scn-single", &[]).await? else {
        return Ok(());
    };
    let class = unique_name("test-priority");
    let pc: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": class}, "value": 100}))?;
    let classes: Api<PriorityClass> = Api::all(stack.ns.client());
    classes.create(&PostParams::default(), &pc).await?;
    let spec = json!({"targetRef": target("Deployment"), "subsets": [{"name": "only", "maxReplicas": 2,
        "patch": {"spec": {"priorityClassName": class}}}]});
    // No invariant monitor here: the controller adopts the 4 pods admitted outside the
    // subset into it (§4.4), so it holds 6 over its maximum of 2 by design.
    let ws = create_ws(&stack, spec.clone()).await?;
    create_deployment(&stack, 6, json!({})).await?;
    let pods = settled(&stack.ns, 6).await?;
    let admitted = |p: &Pod| annotation(p, MATCHED).is_some_and(|a| a.contains("\"uid\""));
    let injected: Vec<&Pod> = pods.iter().filter(|p| admitted(p)).collect();
    ensure!(
        injected.len() == planned(&spec, &[6])?[0]["only"],
        "{} admitted into the subset",
        injected.len()
    );
    for p in &pods {
        let class_of = p.spec.as_ref().and_then(|s| s.priority_class_name.clone());
        let want = admitted(p).then_some(class.as_str());
        ensure!(class_of.as_deref() == want, "{:?}", p.metadata.name);
    }
    // Adoption follows; then the subset holds 6 pods over a maximum of 2, ranked by
    // level (the ranking decides which two are kept, not how they were admitted).
    let base = workloadspread_core::controller::cost::PLANNED_COST_BASE;
    let pods = wait_for("adoption and costs of levels 1..6", SETTLE, || async {
        let pods = live_pods(&stack.ns).await?;
        let mut costs: Vec<Option<i64>> = pods.iter().map(cost_of).collect();
        costs.sort_unstable();
        let want: Vec<Option<i64>> = (1..=6).rev().map(|level| Some(base - level)).collect();
        Ok((costs == want && pods.iter().all(|p| subset_of(p).is_some())).then_some(pods))
    })
    .await?;
    status_matches(&ws, &counts(&pods)).await?;
    let _ = classes.delete(&class, &Default::default()).await;
    stack.finish().await
}

/// §5.7 (8): a StatefulSet with max 2/2/unlimited and 5 replicas fills by ordinal.
#[tokio::test]
async fn statefulset_fills_subsets_by_ordinal() -> Result<()> {
    let Some(stack) = Stack::start("scn-sts", &[]).await? else {
        return Ok(());
    };
    let spec = json!({"targetRef": target("StatefulSet"), "subsets": [
        zone("a", "zone-a", json!(2)), zone("b", "zone-b", json!(2)), zone("c", "zone-c", Value::Null)]});
    let ws = create_ws(&stack, spec).await?;
    let monitor = monitor_of::<StatefulSet>(&stack.ns).await?;
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 5, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template(json!({}))}}))?;
    stack
        .ns
        .api::<StatefulSet>()
        .create(&PostParams::default(), &sts)
        .await?;
    let pods = settled_with(&stack.ns, 5, false).await?;
    let by_pod: BTreeMap<String, String> = pods
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                subset_of(p).unwrap_or_default(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = [
        ("web-0", "a"),
        ("web-1", "a"),
        ("web-2", "b"),
        ("web-3", "b"),
        ("web-4", "c"),
    ]
    .map(|(p, s)| (p.to_string(), s.to_string()))
    .into();
    ensure!(by_pod == want, "{by_pod:?}");
    status_matches(&ws, &counts(&pods)).await?;
    monitor.finish()?;
    stack.finish().await
}

/// A Job with parallelism 4 over a=1 / b unlimited.
#[tokio::test]
async fn job_pods_are_spread() -> Result<()> {
    let Some(stack) = Stack::start("scn-job", &[]).await? else {
        return Ok(());
    };
    let spec = json!({"targetRef": target("Job"),
        "subsets": [zone("a", "zone-a", json!(1)), zone("b", "zone-b", Value::Null)]});
    let ws = create_ws(&stack, spec).await?;
    let monitor = monitor_of::<Job>(&stack.ns).await?;
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"parallelism": 4, "completions": 4, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "web", "image": "busybox"}]}}}}))?;
    stack
        .ns
        .api::<Job>()
        .create(&PostParams::default(), &job)
        .await?;
    let pods = settled_with(&stack.ns, 4, false).await?;
    ensure!(
        counts(&pods) == expect(&[("a", 1), ("b", 3)]),
        "{:?}",
        counts(&pods)
    );
    status_matches(&ws, &counts(&pods)).await?;
    monitor.finish()?;
    stack.finish().await
}

//! Issue #42: elastic subsets that follow real capacity, on the API server with the
//! scheduler and KWOK nodes of small allocatable (2 pods each), host + controller, the
//! invariant monitor on every scenario. The provisioner's signals are posted as pod
//! events exactly as cluster-autoscaler posts them (core/v1 Event, `source.component`
//! cluster-autoscaler, reason `NotTriggerScaleUp` / `TriggeredScaleUp`).

use crate::support::{create_deployment, create_ws};
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use workloadspread_testkit::monitor::Monitor;
use workloadspread_testkit::pods::subset_of;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{cluster, unique_name, wait_for};

const ZONE: &str = "topology.kubernetes.io/zone";
const TAINT: &str = "workloadspread.test/capacity";

/// KWOK nodes of one test's own zone, tainted so that no other test's pod lands there;
/// removed on drop.
struct Pool {
    zone: String,
    nodes: Vec<String>,
    client: Client,
}

impl Pool {
    /// A pool of one node with room for 2 pods.
    async fn new(hint: &str) -> Result<Self> {
        let mut pool = Pool {
            zone: unique_name(hint),
            nodes: vec![],
            client: cluster()?.client().await?,
        };
        pool.add(2).await?;
        Ok(pool)
    }

    /// A node with room for `pods` pods, Ready.
    async fn add(&mut self, pods: u32) -> Result<String> {
        let name = format!("{}-{}", self.zone, self.nodes.len() + 1);
        let room = json!({"cpu": "4", "memory": "8Gi", "pods": pods.to_string()});
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {ZONE: self.zone, "kubernetes.io/hostname": name, "type": "kwok"}},
            "spec": {"taints": [{"key": TAINT, "value": self.zone, "effect": "NoSchedule"}]},
            "status": {"allocatable": room, "capacity": room}}))?;
        let api: Api<Node> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &node).await?;
        self.nodes.push(name.clone());
        wait_for("the new node Ready", Duration::from_secs(30), || async {
            let n = api.get(&name).await?;
            let ready = n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(ready.then_some(()))
        })
        .await?;
        Ok(name)
    }

    /// The subset of this pool (its zone, tolerating its taint).
    fn subset(&self, name: &str, max: Option<i32>) -> Value {
        let mut s = json!({"name": name,
            "requiredNodeSelector": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [self.zone]}]},
            "tolerations": [{"key": TAINT, "operator": "Equal", "value": self.zone, "effect": "NoSchedule"}]});
        if let Some(m) = max {
            s["maxReplicas"] = json!(m);
        }
        s
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let nodes = std::mem::take(&mut self.nodes);
        let Ok(c) = cluster() else { return };
        workloadspread_testkit::clean_up_blocking(c.clone(), |client| async move {
            let api: Api<Node> = Api::all(client);
            for n in nodes {
                let _ = api.delete(&n, &DeleteParams::default()).await;
            }
        });
    }
}

/// One scenario: host + controller, the own pool (one node of 2 pods) and zone-b as the
/// elastic subset, the WorkloadSpread (Adaptive, `critical` seconds, `annotations`), the
/// monitor, then the Deployment at `replicas`.
struct Scenario {
    stack: Stack,
    own: Pool,
    api: Api<kube::api::DynamicObject>,
    pods: Api<Pod>,
    monitor: Monitor,
}

impl Scenario {
    async fn start(
        hint: &str,
        controller_args: &[&str],
        critical: i32,
        own_max: Option<i32>,
        annotations: Value,
        replicas: i32,
    ) -> Result<Option<Self>> {
        let Some(stack) = Stack::start(hint, controller_args).await? else {
            return Ok(None);
        };
        let own = Pool::new(hint).await?;
        let api = create_ws(
            &stack.ns,
            json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": critical}},
                "subsets": [own.subset("own", own_max), elastic()]}),
        )
        .await?;
        api.patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await?;
        let deployment = kube::api::ApiResource::erase::<Deployment>(&());
        let (client, ns) = (stack.ns.client(), stack.ns.name().to_string());
        let monitor = Monitor::start(client, &ns, "web", deployment, "web").await?;
        create_deployment(&stack.ns, replicas).await?;
        let pods = stack.ns.api();
        Ok(Some(Scenario {
            stack,
            own,
            api,
            pods,
            monitor,
        }))
    }

    async fn metric(&self, name: &str, label: &str) -> Result<f64> {
        let text = self.stack.controller.get("/metrics").await?;
        Ok(workloadspread_testkit::measure::sum_metric_with(
            &text, name, label,
        ))
    }

    async fn finish(self) -> Result<()> {
        self.monitor.finish()?;
        self.stack.finish().await
    }
}

/// The elastic subset: zone-b's KWOK nodes (no pod limit).
fn elastic() -> Value {
    json!({"name": "elastic", "requiredNodeSelector": {"matchExpressions": [
        {"key": ZONE, "operator": "In", "values": ["zone-b"]}]}})
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn pending(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && node_of(p).is_none()
}

/// Running pods per subset.
async fn running_in(pods: &Api<Pod>, subset: &str) -> Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| running(p) && subset_of(p).as_deref() == Some(subset))
        .collect())
}

/// The pod event cluster-autoscaler records (legacy recorder: `source.component`).
async fn post_autoscaler_event(
    client: &Client,
    pod: &Pod,
    reason: &str,
    message: &str,
) -> Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{}", unique_name("ca")), "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns,
            "uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version},
        "reason": reason, "message": message, "type": "Normal",
        "source": {"component": "cluster-autoscaler"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1}))?;
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await?;
    Ok(())
}

async fn one_pending(pods: &Api<Pod>, subset: &str) -> Result<Pod> {
    wait_for(
        "a pod Pending and Unschedulable in its subset",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|p| {
                pending(p)
                    && subset_of(p).as_deref() == Some(subset)
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
            }))
        },
    )
    .await
}

/// Own pool full (one node, 2 pods) and cluster-autoscaler says it will not scale up: the
/// third pod is running in the elastic subset within seconds, not after the 30 s
/// critical timer.
#[tokio::test]
async fn no_capacity_falls_back_at_once() -> Result<()> {
    let Some(s) = Scenario::start("cap-fallback", &[], 30, None, json!({}), 3).await? else {
        return Ok(());
    };
    let stuck = one_pending(&s.pods, "own").await?;
    wait_for("2 pods running in own", Duration::from_secs(60), || async {
        Ok((running_in(&s.pods, "own").await?.len() == 2).then_some(()))
    })
    .await?;
    let posted = Instant::now();
    let created = stuck.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.unwrap_or_default());
    let message = "pod didn't trigger scale-up: 1 max node group size reached";
    post_autoscaler_event(&s.stack.ns.client(), &stuck, "NotTriggerScaleUp", message).await?;
    wait_for(
        "the third pod running in elastic",
        Duration::from_secs(25),
        || async { Ok((running_in(&s.pods, "elastic").await?.len() == 1).then_some(())) },
    )
    .await
    .with_context(|| s.stack.controller.log_text())?;
    let fallback = posted.elapsed();
    eprintln!(
        "[capacity] NotTriggerScaleUp → running in the elastic subset {:.1} s after the event \
         (pod {:.1} s old at the event; critical timer 30 s)",
        fallback.as_secs_f64(),
        age.as_secs_f64()
    );
    ensure!(
        fallback < Duration::from_secs(20),
        "fell back after {fallback:?}"
    );
    let by_signal = s
        .metric(
            "workloadspread_controller_fallbacks_total",
            "cause=\"no_capacity\"",
        )
        .await?;
    ensure!(by_signal == 1.0, "{by_signal} fallbacks on the signal");
    s.finish().await
}

/// cluster-autoscaler triggered a scale-up for the pod (`TriggeredScaleUp`), the
/// WorkloadSpread allows a 120 s wait: the pod waits past the 10 s critical timer and
/// runs in its own subset on the node that arrives 25 s later; nothing is rescheduled.
#[tokio::test]
async fn coming_capacity_is_waited_for() -> Result<()> {
    use workloadspread_core::controller::capacity::CAPACITY_WAIT_ANNOTATION;
    let wait = json!({ CAPACITY_WAIT_ANNOTATION: "120" });
    let Some(mut s) = Scenario::start("cap-wait", &[], 10, None, wait, 3).await? else {
        return Ok(());
    };
    let stuck = one_pending(&s.pods, "own").await?;
    let message = "pod triggered scale-up: [{own-pool 1->2 (max: 3)}]";
    post_autoscaler_event(&s.stack.ns.client(), &stuck, "TriggeredScaleUp", message).await?;
    let started = Instant::now();
    // Past the critical timer, still waiting, the status saying for what.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let still = s
        .pods
        .get(stuck.metadata.name.as_deref().unwrap_or_default())
        .await?;
    ensure!(pending(&still), "the pod did not wait: {:?}", still.status);
    let status = s.api.get("web").await?.data["status"].clone();
    let condition = status["subsetStatuses"][0]["conditions"][0]["message"].as_str();
    ensure!(
        condition.is_some_and(|m| m.contains("waiting for capacity: TriggeredScaleUp")),
        "status: {status}"
    );
    s.own.add(2).await?;
    wait_for("3 pods running in own", Duration::from_secs(60), || async {
        Ok((running_in(&s.pods, "own").await?.len() == 3).then_some(()))
    })
    .await
    .with_context(|| s.stack.controller.log_text())?;
    eprintln!(
        "[capacity] TriggeredScaleUp: the pod waited {:.1} s and runs in its own subset",
        started.elapsed().as_secs_f64()
    );
    let moved = s
        .metric("workloadspread_controller_pods_rescheduled_total", "")
        .await?;
    ensure!(moved == 0.0, "{moved} pods rescheduled");
    let landed = s
        .metric(
            "workloadspread_controller_capacity_waits_total",
            "outcome=\"landed\"",
        )
        .await?;
    ensure!(landed == 1.0, "{landed} waits counted as landed");
    s.finish().await
}

/// Rebalancing on, own pool full for more than three hold periods: no eviction (before
/// this, each hold period evicted a Ready pod into the full subset). Then a node with
/// room arrives: the subset comes back on that fact, and the pods above the elastic
/// subset's plan move back one at a time, each replacement Running in its own subset,
/// never over a maximum.
#[tokio::test]
async fn rebalancing_waits_for_room_and_then_moves_pods_back() -> Result<()> {
    let controller = [
        "--reschedule-hold-seconds",
        "4",
        "--rebalance-interval-seconds",
        "2",
    ];
    let on = json!({ workloadspread_core::api::REBALANCE_ANNOTATION: "true" });
    let Some(mut s) = Scenario::start("cap-rebalance", &controller, 3, Some(4), on, 5).await?
    else {
        return Ok(());
    };
    let spread = |own: usize, elastic: usize| {
        let pods = s.pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let a = running_in(&pods, "own").await?.len();
                let b = running_in(&pods, "elastic").await?.len();
                Ok((a == own && b == elastic).then_some(()))
            }
        }
    };
    // 2 in own (full), the other 3 rescheduled to elastic by the timer.
    wait_for("own 2, elastic 3", Duration::from_secs(90), spread(2, 3))
        .await
        .with_context(|| s.stack.controller.log_text())?;
    let evictions = "workloadspread_controller_rebalance_evictions_total";
    let evicted = "result=\"evicted\"";
    // Three hold periods (hold = max(4 s, 2 subsets × 3 s) = 6 s) and more.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let while_full = s.metric(evictions, evicted).await?;
    eprintln!("[capacity] own pool full for 20 s (3+ hold periods): {while_full} evictions");
    ensure!(
        while_full == 0.0,
        "{while_full} evictions into a full subset"
    );
    let added = Instant::now();
    s.own.add(2).await?;
    wait_for("own 4, elastic 1", Duration::from_secs(90), spread(4, 1))
        .await
        .with_context(|| s.stack.controller.log_text())?;
    let after = s.metric(evictions, evicted).await?;
    eprintln!(
        "[capacity] a node with room: own 4 / elastic 1 after {:.1} s, {after} evictions",
        added.elapsed().as_secs_f64()
    );
    ensure!(after == 2.0, "{after} evictions for 2 pods moved back");
    // And it stays there.
    tokio::time::sleep(Duration::from_secs(6)).await;
    ensure!(
        s.metric(evictions, evicted).await? == 2.0,
        "evictions after the spread was on plan"
    );
    s.finish().await
}

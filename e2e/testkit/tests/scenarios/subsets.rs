//! Subset options: `minReplicas` served first, preferred-only subsets adopting pods.

use crate::common::*;
use crate::support::{create_deployment, create_ws, expect, monitor, planned};
use anyhow::{ensure, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};
use workloadspread_testkit::pods::{cost_of, subset_of};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::wait_for;

/// `minReplicas` (extension): each zone gets its minimum before the rest is spread;
/// the cluster's shapes equal the planner's.
#[tokio::test]
async fn min_replicas_are_served_first() -> Result<()> {
    let Some(stack) = Stack::start("scn-min", &[]).await? else {
        return Ok(());
    };
    let mut a = zone("a", "zone-a", json!(4));
    a["minReplicas"] = json!(2);
    let mut b = zone("b", "zone-b", json!(5));
    b["minReplicas"] = json!(2);
    let spec = json!({"targetRef": target("Deployment"), "subsets": [a, b, zone("c", "zone-c", Value::Null)]});
    let ws = create_ws(&stack, spec.clone()).await?;
    let monitor = monitor(&stack.ns).await?;
    let plan = planned(&spec, &[4, 10])?;
    ensure!(
        plan[0] == expect(&[("a", 2), ("b", 2)]),
        "planner: {:?}",
        plan[0]
    );
    create_deployment(&stack, 4, json!({})).await?;
    let pods = settled(&stack.ns, 4).await?;
    ensure!(counts(&pods) == plan[0], "{:?}", counts(&pods));
    scale(&stack.ns.api::<Deployment>(), 10).await?;
    let pods = settled(&stack.ns, 10).await?;
    ensure!(
        counts(&pods) == plan[1],
        "{:?} vs {:?}",
        counts(&pods),
        plan[1]
    );
    status_matches(&ws, &counts(&pods)).await?;
    monitor.finish()?;
    stack.finish().await
}

/// §5.7 (7): preferred-only subsets and existing pods: 3 pods already on zone-b are
/// adopted into b (cost 100); after subset b is removed they fall into the fake subset
/// (cost −200). The reference's cost values: the controller runs `--rules reference`.
#[tokio::test]
async fn preferred_only_subsets_adopt_existing_pods() -> Result<()> {
    let Some(stack) = Stack::start("scn-preferred", &["--rules", "reference"]).await? else {
        return Ok(());
    };
    create_deployment(&stack, 3, json!({"nodeSelector": {ZONE: "zone-b"}})).await?;
    settled(&stack.ns, 3).await?;
    let pref = |name: &str, wa: i32, wb: i32, max: Value| {
        let term = |z: &str, w: i32| json!({"weight": w, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [z]}]}});
        let mut s = json!({"name": name, "preferredNodeSelector": [term("zone-a", wa), term("zone-b", wb)]});
        if !max.is_null() {
            s["maxReplicas"] = max;
        }
        s
    };
    let spec = json!({"targetRef": target("Deployment"),
        "subsets": [pref("a", 20, 10, json!(3)), pref("b", 10, 20, Value::Null)]});
    let ws = create_ws(&stack, spec).await?;
    let monitor = monitor(&stack.ns).await?;
    let adopted = wait_for("3 pods adopted into b with cost 100", SETTLE, || async {
        let pods = live_pods(&stack.ns).await?;
        let ok = pods.len() == 3
            && pods
                .iter()
                .all(|p| subset_of(p).as_deref() == Some("b") && cost_of(p) == Some(100));
        Ok(ok.then_some(pods))
    })
    .await?;
    status_matches(&ws, &counts(&adopted)).await?;
    let drop_b = json!({"spec": {"subsets": [pref("a", 20, 10, json!(3))]}});
    ws.patch("web", &PatchParams::default(), &Patch::Merge(&drop_b))
        .await?;
    wait_for("fake-subset cost −200", SETTLE, || async {
        let pods = live_pods(&stack.ns).await?;
        Ok(pods.iter().all(|p| cost_of(p) == Some(-200)).then_some(()))
    })
    .await?;
    monitor.finish()?;
    stack.finish().await
}

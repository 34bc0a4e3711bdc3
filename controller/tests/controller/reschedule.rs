//! Adaptive rescheduling together with the admission host.

use crate::support::{controller_bin, create_deployment, create_ws, setup, zone};
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};
use std::time::Duration;
use workloadspread_testkit::pods::subset_of;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::webhook::{
    policy_wasm, workspace_binary, ControllerProcess, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for};

#[tokio::test]
async fn unschedulable_subset_is_rescheduled_and_recovers() -> Result<()> {
    let (Some(policy), Some(host_bin)) = (policy_wasm()?, workspace_binary("workloadspread-host")?)
    else {
        return Ok(());
    };
    let ns = setup("ctl-resched").await?;
    let client = ns.client();
    let kubeconfig = cluster()?.kubeconfig();
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-resched");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let _host = HostProcess::start_on(
        &host_bin,
        kubeconfig,
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    let controller = ControllerProcess::start(
        controller_bin(),
        kubeconfig,
        &[
            "--reschedule-hold-seconds".into(),
            "6".into(),
            "--namespace".into(),
            ns.name().into(),
        ],
    )
    .await?;
    // Subset "x" has no nodes: its pods stay Pending/Unschedulable.
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 2}},
            "subsets": [zone("x", "zone-x", Some(2)), zone("b", "zone-b", None)]}),
    )
    .await?;
    create_deployment(&ns, 2).await?;
    let pods: Api<Pod> = ns.api();
    let condition = |s: &Value| -> Option<String> {
        s["subsetStatuses"][0]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Schedulable")
            .and_then(|c| c["status"].as_str().map(str::to_string))
    };
    wait_for(
        "subset x marked unschedulable",
        Duration::from_secs(60),
        || async {
            let s = ws_api.get("web").await?.data["status"].clone();
            Ok((condition(&s).as_deref() == Some("False")).then_some(()))
        },
    )
    .await
    .with_context(|| controller.log_text())?;
    let placed = wait_for(
        "2 pods scheduled in zone-b",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let in_b: Vec<&Pod> = list
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| subset_of(p).as_deref() == Some("b"))
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| n.starts_with("node-b-"))
                })
                .collect();
            Ok((in_b.len() == 2).then_some(in_b.len()))
        },
    )
    .await;
    let placed = match placed {
        Ok(n) => n,
        Err(e) => {
            let list: Vec<Value> = pods.list(&ListParams::default()).await?.items.iter()
                .map(|p| json!({"name": p.metadata.name, "subset": subset_of(p), "deleting": p.metadata.deletion_timestamp.is_some(),
                    "node": p.spec.as_ref().and_then(|s| s.node_name.clone())})).collect();
            let status = ws_api.get("web").await?.data["status"].clone();
            return Err(e.context(format!("pods {}\nstatus {status}", json!(list))));
        }
    };
    ensure!(placed == 2);
    ensure!(
        controller
            .metric("workloadspread_controller_pods_rescheduled_total")
            .await?
            >= 1.0
    );
    wait_for(
        "subset x recovered after the hold",
        Duration::from_secs(60),
        || async {
            let s = ws_api.get("web").await?.data["status"].clone();
            Ok((condition(&s).as_deref() == Some("True")).then_some(()))
        },
    )
    .await?;
    // The controller publishes a reconcile's events after its status write: the event
    // may follow the condition it reports by a moment.
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let reasons = || async {
        let list = events.list(&ListParams::default()).await?.items;
        anyhow::Ok(
            list.iter()
                .filter_map(|e| e.reason.clone())
                .collect::<Vec<_>>(),
        )
    };
    let recovered = wait_for(
        "the RecoverSchedulable event",
        Duration::from_secs(30),
        || async {
            Ok(reasons()
                .await?
                .iter()
                .any(|r| r == "RecoverSchedulable")
                .then_some(()))
        },
    )
    .await;
    if let Err(e) = recovered {
        return Err(e.context(format!("events: {:?}", reasons().await?)));
    }
    // Scale-in afterwards: one pod left in b, and the recovered subset x counts none.
    ns.api::<Deployment>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    wait_for("status x 0 / b 1", Duration::from_secs(60), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        let replicas = |i: usize| s["subsetStatuses"][i]["replicas"].as_i64();
        Ok((replicas(0) == Some(0) && replicas(1) == Some(1)).then_some(()))
    })
    .await?;
    configs.delete().await
}

/// Issue #17 (5): three subsets, the first two without nodes, `rescheduleCriticalSeconds`
/// (4 s) above the configured hold (3 s). The hold is stretched to 3 × 4 s, so subset x is
/// still unschedulable when the pods give up on y: both pods reach b after two moves
/// each and stay there (with the configured 3 s they bounced between x and y for ever).
#[tokio::test]
async fn rescheduling_through_three_subsets_reaches_the_last_one() -> Result<()> {
    let controller_args = ["--reschedule-hold-seconds", "3"];
    let Some(stack) = Stack::start_with("ctl-resched3", &[], &controller_args).await? else {
        return Ok(());
    };
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    create_ws(
        &stack.ns,
        json!({"targetRef": target,
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 4}},
            "subsets": [zone("x", "zone-x", Some(2)), zone("y", "zone-y", Some(2)), zone("b", "zone-b", None)]}),
    )
    .await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), "web", &target)
        .await?;
    create_deployment(&stack.ns, 2).await?;
    let pods: Api<Pod> = stack.ns.api();
    wait_for(
        "both pods running in b",
        Duration::from_secs(90),
        || async {
            let mut list = pods.list(&ListParams::default()).await?.items;
            list.retain(|p| p.metadata.deletion_timestamp.is_none());
            let in_b = list.iter().filter(|p| {
                subset_of(p).as_deref() == Some("b")
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            });
            Ok((list.len() == 2 && in_b.count() == 2).then_some(()))
        },
    )
    .await
    .with_context(|| stack.controller.log_text())?;
    let moved = stack
        .controller
        .metric("workloadspread_controller_pods_rescheduled_total")
        .await?;
    ensure!(moved == 4.0, "{moved} reschedules (want 2 pods × 2 moves)");
    stack.finish().await
}

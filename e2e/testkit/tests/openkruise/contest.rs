//! Refusing to fight: once another manager (here a client naming itself
//! `kruise-manager`, writing a `creatingPods` entry as OpenKruise's pod webhook does)
//! writes a spread's status after host and controller started, neither writes it any
//! more — no status write, no deletion cost, new pods admitted unchanged, none refused —
//! and both say so: the controller's `/readyz` (503, naming the manager and what to do),
//! a Warning event on the spread, a gauge in each. A restart after the rival is gone
//! (the documented way out) makes the controller ready and writing again.

use crate::common::*;
use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::time::Duration;
use workloadspread_testkit::pods::{cost_of, subset_of};
use workloadspread_testkit::stack::{Binaries, Stack};
use workloadspread_testkit::webhook::ControllerProcess;
use workloadspread_testkit::{cluster, wait_for};

const RIVAL: &str = "kruise-manager";
const RIVAL_COUNT: i64 = 5;

fn spec() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(1)), zone("b", "zone-b", json!(1)), zone("c", "zone-c", Value::Null)]})
}

/// Writes the status as another manager would: one more `creatingPods` entry and a count
/// of its own in the last subset (a change: an identical write is not stored, so it is no
/// write; a count the pods disagree with, which a controller that did not stand back
/// would correct).
async fn rival_writes_status(api: &Api<DynamicObject>) -> Result<()> {
    let mut status = api.get("web").await?.data["status"].clone();
    let subsets = status["subsetStatuses"]
        .as_array_mut()
        .context("no subsetStatuses")?;
    let last = subsets.last_mut().context("no subset status")?;
    last["creatingPods"] = json!({"rival-pod": "2026-11-28T08:00:00Z"});
    last["replicas"] = json!(RIVAL_COUNT);
    let params = PatchParams {
        field_manager: Some(RIVAL.into()),
        ..Default::default()
    };
    api.patch_status("web", &params, &Patch::Merge(json!({"status": status})))
        .await?;
    Ok(())
}

/// Host (with `host_args`) + controller, and the spread `web` the host has seen.
async fn with_spread(
    hint: &str,
    host_args: &[&str],
) -> Result<Option<(Stack, Api<DynamicObject>)>> {
    let Some(stack) = Stack::start_with(hint, host_args, &[]).await? else {
        return Ok(None);
    };
    let ws: Api<DynamicObject> =
        Api::namespaced_with(stack.ns.client(), stack.ns.name(), &ws_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec()}))?;
    ws.create(&PostParams::default(), &object).await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), "web", &target("Deployment"))
        .await?;
    Ok(Some((stack, ws)))
}

#[tokio::test]
async fn a_rival_status_writer_makes_host_and_controller_stand_back() -> Result<()> {
    let Some((mut stack, ws)) = with_spread("contest", &[]).await? else {
        return Ok(());
    };
    create_web_deployment(&stack.ns, 2).await?;
    let pods = settled(&stack.ns, 2).await?;
    status_matches(&ws, &counts(&pods)).await?;
    let (ready, body) = stack.controller.readiness().await?;
    assert!(ready, "ready before any rival write: {body}");

    rival_writes_status(&ws).await?;
    let reason = wait_for(
        "the controller not ready, naming the rival",
        Duration::from_secs(30),
        || async {
            let (ready, body) = stack.controller.readiness().await?;
            Ok((!ready && body.contains(RIVAL)).then_some(body))
        },
    )
    .await?;
    assert!(
        reason.contains("WorkloadSpread=false") && reason.contains("docs/operations.md"),
        "says what to do: {reason}"
    );
    wait_for("both gauges at 1", Duration::from_secs(30), || async {
        let controller = stack
            .controller
            .metric("workloadspread_controller_contested_workloadspreads")
            .await?;
        let host = stack
            .host
            .metric("workloadspread_host_contested_workloadspreads")
            .await?;
        Ok((controller == 1.0 && host == 1.0).then_some(()))
    })
    .await?;
    // The event is recorded after the gauge and /readyz changed: wait for it.
    let events: Api<Event> = stack.ns.api();
    let contested = wait_for("the Contested event", SETTLE, || async {
        let found: Vec<Event> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Contested"))
            .collect();
        Ok((!found.is_empty()).then_some(found))
    })
    .await?;
    assert_eq!(contested.len(), 1, "one event: {contested:?}");
    assert_eq!(contested[0].type_.as_deref(), Some("Warning"));

    // Two more pods: admitted as they come, nothing written for them.
    let before = ws.get("web").await?.metadata.resource_version;
    let reconciles = |text: String| {
        workloadspread_testkit::measure::sum_metric(
            &text,
            "workloadspread_controller_reconcile_duration_seconds_count",
        )
    };
    let reconciled = reconciles(stack.controller.get("/metrics").await?);
    scale(&stack.ns.api::<Deployment>(), 4).await?;
    let pods = settled_with(&stack.ns, 4, false).await?;
    wait_for("the controller to see the new pods", SETTLE, || async {
        let now = reconciles(stack.controller.get("/metrics").await?);
        Ok((now > reconciled).then_some(()))
    })
    .await?;
    assert_eq!(
        counts(&pods).get("").copied(),
        Some(2),
        "the two new pods admitted unchanged: {:?}",
        counts(&pods)
    );
    assert!(
        pods.iter()
            .filter(|p| subset_of(p).is_none())
            .all(|p| cost_of(p).is_none()),
        "no deletion cost written on the new pods"
    );
    let now = ws.get("web").await?;
    assert_eq!(now.metadata.resource_version, before, "no status write");
    assert_eq!(
        now.data["status"]["subsetStatuses"][2]["replicas"],
        json!(RIVAL_COUNT),
        "the rival's count stands: {}",
        now.data["status"]
    );
    assert_eq!(failed_creates(&stack.ns).await?, 0, "no create refused");
    // Left out of the pods' reads, the contested spread still counts for validation: a
    // second spread of the same Deployment is refused as a conflict.
    let second: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web-again"}, "spec": spec()}))?;
    match ws.create(&PostParams::default(), &second).await {
        Err(kube::Error::Api(e)) => assert!(
            e.message
                .contains("in conflict with other WorkloadSpread web"),
            "refused for the conflict: {}",
            e.message
        ),
        other => anyhow::bail!("a second spread of a contested spread's workload: {other:?}"),
    }

    // The way out once the rival is gone: a restart takes a new first sight.
    let bins = Binaries::find()?.context("binaries")?;
    stack.controller.kill();
    stack.controller = ControllerProcess::start(
        &bins.controller,
        cluster()?.kubeconfig(),
        &["--namespace".to_string(), stack.ns.name().to_string()],
    )
    .await?;
    wait_for("the restarted controller ready", SETTLE, || async {
        Ok(stack.controller.readiness().await?.0.then_some(()))
    })
    .await?;
    // And writing again: the rival's count gives way to the pods'.
    wait_for("the restarted controller to recount", SETTLE, || async {
        let status = ws.get("web").await?.data["status"].clone();
        Ok((status["subsetStatuses"][2]["replicas"] != json!(RIVAL_COUNT)).then_some(()))
    })
    .await?;
    // The host was not restarted: it still counts the rival's spread as contested.
    stack.finish_contested().await
}

/// A pod another webhook spread reaches ours with that webhook's annotation, after its
/// status write: the host, its watch of WorkloadSpreads 4 s behind, reads the spread live,
/// finds the write and stands back from this very pod — the annotation kept, no token of
/// ours. A caller's own copy of the annotation, with no such write, is stripped as ever.
#[tokio::test]
async fn a_pod_spread_by_another_webhook_is_found_by_a_live_read() -> Result<()> {
    let Some((stack, ws)) = with_spread("contest-pod", &["--watch-delay-ms", "4000"]).await? else {
        return Ok(());
    };
    let pods: Api<k8s_openapi::api::core::v1::Pod> = stack.ns.api();
    let placed = r#"{"name":"web","subset":"c"}"#;
    let pod = |name: &str| -> Result<k8s_openapi::api::core::v1::Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {MATCHED: placed}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        }))?)
    };
    let created = pods.create(&PostParams::default(), &pod("forged")?).await?;
    assert!(
        workloadspread_testkit::pods::annotation(&created, MATCHED).is_none(),
        "a caller's own placement stripped: {:?}",
        created.metadata.annotations
    );
    rival_writes_status(&ws).await?;
    let created = pods.create(&PostParams::default(), &pod("theirs")?).await?;
    assert_eq!(
        workloadspread_testkit::pods::annotation(&created, MATCHED).map(String::as_str),
        Some(placed),
        "the other webhook's placement kept: {:?}",
        created.metadata.annotations
    );
    assert!(
        workloadspread_testkit::pods::annotation(&created, ADMISSION_TOKEN).is_none(),
        "no token of ours"
    );
    let host = stack
        .host
        .metric("workloadspread_host_contested_workloadspreads")
        .await?;
    assert_eq!(host, 1.0, "the host stands back from the spread at once");
    stack.finish_contested().await
}

const MATCHED: &str = "apps.kruise.io/matched-workloadspread";
const ADMISSION_TOKEN: &str = "workloadspread.io/admission-token";

//! A host started before the WorkloadSpread CRD exists.

use crate::support::{
    fleet_resource, host_bin, subsets_of, ws_crd, ws_resource, zone_subset, FleetSetup,
};
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use workloadspread_testkit::webhook::{apply_crd, policy_wasm, HostProcess, WebhookConfigs};
use workloadspread_testkit::{unique_name, wait_for};

/// Issue #17 (6): a host started before the WorkloadSpread CRD exists (on a control
/// plane of the test's own: the shared one must keep serving the kind) is not ready and
/// says why, in `/readyz` and a metric; once the CRD is applied it finds the kind, becomes
/// ready and spreads pods. It used to skip the kind for good, report ready and admit every
/// pod unspread.
#[tokio::test]
async fn a_host_started_before_the_crd_waits_for_it() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let separate = workloadspread_testkit::SeparateCluster::up("no-crd")?;
    let cluster = separate.cluster();
    let client = cluster.client().await?;
    let ns = cluster.namespace("no-crd").await?;
    apply_crd(&client, &workloadspread_testkit::webhook::fleet_crd()).await?;
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-no-crd");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let settings = workloadspread_testkit::webhook::fleet_settings().to_string();
    let args: Vec<String> = [
        "--policy",
        &policy.display().to_string(),
        "--settings-json",
        &settings,
        "--webhook-config",
        &name,
    ]
    .map(str::to_string)
    .to_vec();
    let mut host = HostProcess::spawn_on(host_bin(), cluster.kubeconfig(), port, &args)?;
    let why = wait_for(
        "/readyz naming the missing kind",
        Duration::from_secs(60),
        || async {
            let body = host.get("/readyz").await.unwrap_or_default();
            Ok(body.contains("WorkloadSpread").then_some(body))
        },
    )
    .await
    .with_context(|| std::fs::read_to_string(&host.log).unwrap_or_default())?;
    let flagged = workloadspread_not_served(&host).await?;
    ensure!(flagged == 1.0, "kind_not_served {flagged}; readyz {why}");
    ws_crd(&client).await?;
    host.wait_ready().await?;
    ensure!(workloadspread_not_served(&host).await? == 0.0);
    configs.enroll(ns.name()).await?;
    let fleets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &fleet_resource());
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
        "metadata": {"name": "fleet"}, "spec": {"replicas": 2}}))?;
    let fleet = fleets.create(&PostParams::default(), &fleet).await?;
    let target = FleetSetup::target();
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "spread"},
        "spec": {"targetRef": target, "subsets": [zone_subset("a", "zone-a", json!(1)),
            zone_subset("b", "zone-b", Value::Null)]}}))?;
    Api::<DynamicObject>::namespaced_with(client.clone(), ns.name(), &ws_resource())
        .create(&PostParams::default(), &ws)
        .await?;
    host.wait_sees_workloadspread(ns.name(), "spread", &target)
        .await?;
    let uid = fleet.metadata.uid.context("fleet uid")?;
    let pod = workloadspread_testkit::webhook::fleet_pod("fleet-0", &uid);
    let pod = ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    let spread = subsets_of(std::slice::from_ref(&pod));
    ensure!(
        spread == BTreeMap::from([("a".to_string(), 1)]),
        "{spread:?}"
    );
    configs.delete().await
}

/// The host's `kind_not_served` gauge for WorkloadSpread.
async fn workloadspread_not_served(host: &HostProcess) -> Result<f64> {
    let text = host.get("/metrics").await?;
    Ok(workloadspread_testkit::measure::sum_metric_with(
        &text,
        "workloadspread_host_kind_not_served",
        "kind=\"WorkloadSpread\"",
    ))
}

//! Webhook admissions per second through the real API server, exact mode, at
//! concurrency 1 / 8 / 64, with group commit (`--batch-window-ms 2`) and with one
//! status write per pod (`--batch-window-ms 0`, the reference algorithm).
//! Needs the local control plane (`make bench` starts it) and `make policy`.

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use workloadspread_testkit::webhook::{
    apply_crd, fleet_crd, fleet_pod, fleet_settings, policy_wasm, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name};

const PODS: usize = 256;

struct Row {
    window_ms: u64,
    concurrency: usize,
    per_second: f64,
    writes: f64,
    conflicts: f64,
}

async fn measure(policy: &Path, window_ms: u64, concurrency: usize) -> Result<Row> {
    let cluster = cluster()?;
    let ns = cluster.namespace("bench-admission").await?;
    let client = ns.client();
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-bench");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let host = HostProcess::start_on(
        Path::new(env!("CARGO_BIN_EXE_workloadspread-host")),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--settings-json".into(),
            fleet_settings().to_string(),
            "--batch-window-ms".into(),
            window_ms.to_string(),
            "--webhook-config".into(),
            name.clone(),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    let fleets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns.name(),
        &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "burst.workloadspread.test",
            "v1",
            "Fleet",
        )),
    );
    let fleet = fleets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
                "metadata": {"name": "fleet"}, "spec": {"replicas": PODS}}),
            )?,
        )
        .await?;
    let spreads: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns.name(),
        &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "apps.kruise.io",
            "v1beta1",
            "WorkloadSpread",
        )),
    );
    spreads
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
                "metadata": {"name": "bench"},
                "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"},
                    "subsets": [{"name": "a", "maxReplicas": PODS / 3}, {"name": "b", "maxReplicas": PODS / 3}, {"name": "c"}]}}))?,
        )
        .await?;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let uid = fleet.metadata.uid.context("fleet uid")?;
    let pods: Api<Pod> = ns.api();
    let started = Instant::now();
    let failures = futures::stream::iter(0..PODS)
        .map(|i| {
            let (pods, pod) = (pods.clone(), fleet_pod(&format!("fleet-{i}"), &uid));
            async move { pods.create(&PostParams::default(), &pod).await.is_err() }
        })
        .buffer_unordered(concurrency)
        .filter(|failed| futures::future::ready(*failed))
        .count()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(failures == 0, "{failures} pods rejected");
    let row = Row {
        window_ms,
        concurrency,
        per_second: PODS as f64 / elapsed,
        writes: host
            .metric("workloadspread_host_counter_status_writes_total")
            .await?,
        conflicts: host
            .metric("workloadspread_host_counter_conflicts_total")
            .await?,
    };
    configs.delete().await?;
    Ok(row)
}

#[tokio::main]
async fn main() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let client = cluster()?.client().await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&client, &serde_json::to_value(&crd)?).await?;
    apply_crd(&client, &fleet_crd()).await?;
    println!("| batch window | concurrency | pods/s | status writes | conflicts |");
    println!("|---|---|---|---|---|");
    for window_ms in [2, 0] {
        for concurrency in [1, 8, 64] {
            let r = measure(&policy, window_ms, concurrency).await?;
            println!(
                "| {} ms | {} | {:.0} | {} | {} |",
                r.window_ms, r.concurrency, r.per_second, r.writes, r.conflicts
            );
        }
    }
    Ok(())
}

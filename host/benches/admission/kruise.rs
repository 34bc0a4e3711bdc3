//! OpenKruise v1.9.0 as rows of the admission bench: its own `kruise-manager` (webhook
//! and controller in one process, `workloadspread_testkit::kruise`) spreading the same
//! Fleet's pods with the same WorkloadSpread (as `apps.kruise.io/v1alpha1`, the version
//! v1.9.0 serves), once with its defaults and once with its client's rate limits lifted.
//! Built and pointed at by `make bench` (`WS_KRUISE_MANAGER`, `WS_KRUISE_MANIFESTS`).
//!
//! Its CRD and ours cannot both be installed: each OpenKruise series swaps the
//! WorkloadSpread CRD to OpenKruise's, and the next series of ours swaps it back
//! ([`ours`]); a swap deletes only the WorkloadSpreads of earlier series.

use anyhow::{Context, Result};
use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use std::sync::OnceLock;
use std::time::Duration;
use workloadspread_testkit::kruise::{
    ensure_workloadspread_crd, KruiseBuild, KruiseManager, KruiseOptions,
};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

/// The OpenKruise build `make bench` made, read once at start.
static BUILD: OnceLock<Option<KruiseBuild>> = OnceLock::new();

/// `--rest-config-qps` / `--rest-config-burst` of the "lifted" rows (defaults 30 / 50).
pub const LIFTED: (u32, u32) = (1000, 2000);

/// Reads `WS_KRUISE_MANAGER` / `WS_KRUISE_MANIFESTS`; `false` when unset (the rows are
/// then left out, and the bench says so).
pub fn read_build() -> Result<bool> {
    let build = KruiseBuild::from_env()?;
    let present = build.is_some();
    let _ = BUILD.set(build);
    Ok(present)
}

fn build() -> Result<&'static KruiseBuild> {
    BUILD
        .get()
        .and_then(Option::as_ref)
        .context("OpenKruise rows need WS_KRUISE_MANAGER and WS_KRUISE_MANIFESTS (make bench)")
}

/// The Fleet kind, as OpenKruise's custom-workload whitelist names it.
fn fleet_whitelist() -> serde_json::Value {
    json!({"Group": "burst.workloadspread.test", "Version": "v1", "Kind": "Fleet",
        "replicasPath": "spec.replicas"})
}

/// Makes our WorkloadSpread CRD the cluster's again after an OpenKruise series.
pub async fn ours(client: &kube::Client) -> Result<()> {
    if BUILD.get().is_some_and(Option::is_some)
        && workloadspread_testkit::kruise::workloadspread_crd_is_kruise(client).await?
    {
        let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
        ensure_workloadspread_crd(client, &serde_json::to_value(&crd)?).await?;
    }
    Ok(())
}

/// Installs OpenKruise (its CRDs replacing our WorkloadSpread CRD) and starts its manager
/// knowing the Fleet kind; `lifted`: with [`LIFTED`] client limits.
pub async fn start_manager(lifted: bool) -> Result<KruiseManager> {
    let options = KruiseOptions {
        qps_burst: lifted.then_some(LIFTED),
        custom_workloads: vec![fleet_whitelist()],
        ..Default::default()
    };
    KruiseManager::start(build()?, cluster()?, &options).await
}

/// Starts the manager ([`start_manager`]), then creates the series' Fleet and
/// its WorkloadSpread and waits until OpenKruise's controller has written the
/// WorkloadSpread's status (its cache, which its pod webhook reads, holds it). Returns
/// the Fleet's uid and the manager.
pub async fn start(ns: &TestNamespace, lifted: bool) -> Result<(String, KruiseManager)> {
    let manager = start_manager(lifted).await?;
    let uid = super::create_fleet(ns).await?;
    let per_subset = super::pods_per_series() / 3;
    let spread: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
        "metadata": {"name": "bench"},
        "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"},
            "subsets": [{"name": "a", "maxReplicas": per_subset}, {"name": "b", "maxReplicas": per_subset}, {"name": "c"}]}}))?;
    let api = super::dynamic_api(
        &ns.client(),
        ns.name(),
        "apps.kruise.io",
        "v1alpha1",
        "WorkloadSpread",
    );
    api.create(&PostParams::default(), &spread).await?;
    wait_for(
        "OpenKruise's status of the bench WorkloadSpread",
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let ws = api.get("bench").await?;
                Ok(ws.data["status"]["subsetStatuses"]
                    .as_array()
                    .is_some_and(|s| s.len() == 3)
                    .then_some(()))
            }
        },
    )
    .await
    .with_context(|| manager.log_tail())?;
    Ok((uid, manager))
}

/// The row's webhook figures for OpenKruise, from the API server alone: its pod
/// webhook's mean call, and its WorkloadSpread status writes and their 409s.
pub async fn figures(client: &kube::Client, before: &str) -> Result<super::WebhookFigures> {
    use workloadspread_testkit::measure::HistogramReading;
    let after = super::apiserver_metrics(client).await?;
    let name = "name=\"mpod.kb.io\"";
    let calls =
        |text: &str| HistogramReading::from_text(text, super::APISERVER_WEBHOOK_SECONDS, name);
    let (calls_before, calls_after) = (calls(before), calls(&after));
    anyhow::ensure!(
        calls_after.count - calls_before.count >= super::pods_per_series() as f64,
        "OpenKruise's pod webhook (mpod.kb.io) was called {} times for {} pods",
        calls_after.count - calls_before.count,
        super::pods_per_series()
    );
    use workloadspread_testkit::api_writes::{answered, Writes};
    let writes = |text: &str| Writes::from_metrics(text).get("PUT", "workloadspreads", "status");
    let conflicts = |text: &str| answered(text, "PUT", "workloadspreads", "status", "409");
    Ok(super::WebhookFigures {
        call_mean: calls_after.mean_since(calls_before),
        evaluation_mean: None,
        spec_reads: None,
        status_writes: writes(&after) - writes(before),
        conflicts: conflicts(&after) - conflicts(before),
    })
}

/// Lines under the table: OpenKruise against host + controller per concurrency (latency,
/// throughput, API server CPU and writes per pod, its status conflicts), or why the
/// OpenKruise rows are missing.
pub fn print_summary(rows: &[super::Row], repeated: &[(super::Webhook, Duration)], present: bool) {
    use super::{find, ms, ms_places, Webhook, CONCURRENCY};
    if !present {
        println!("* OpenKruise rows: not measured (WS_KRUISE_MANAGER / WS_KRUISE_MANIFESTS unset; `make bench` builds OpenKruise {} and sets them).", workloadspread_testkit::kruise::VERSION);
        return;
    }
    let ours = Webhook::HostAndController;
    for kruise in [
        Webhook::Kruise { lifted: false },
        Webhook::Kruise { lifted: true },
    ] {
        let per_concurrency: Vec<String> = CONCURRENCY
            .iter()
            .filter_map(|&c| {
                let (k, o) = (find(rows, kruise, c)?, find(rows, ours, c)?);
                let conflicts = k.figures.as_ref().map_or(0.0, |f| f.conflicts);
                Some(format!(
                    "concurrency {c}: p50 {} vs {}, {:.0} vs {:.0} pods/s, API server CPU per pod {} vs {}, writes per pod {:.2} vs {:.2}, {conflicts:.0} status conflicts",
                    ms(k.create.p50),
                    ms(o.create.p50),
                    k.per_second,
                    o.per_second,
                    ms_places(k.cpu.apiserver, 2),
                    ms_places(o.cpu.apiserver, 2),
                    k.writes_per_pod,
                    o.writes_per_pod,
                ))
            })
            .collect();
        let median = |w: Webhook| repeated.iter().find(|(x, _)| *x == w).map(|(_, d)| *d);
        let at_1 = match (median(kruise), median(ours)) {
            (Some(k), Some(o)) => format!(
                "; concurrency 1, median p50 of the interleaved series {} vs {} ({:+.1} ms)",
                ms(k),
                ms(o),
                (k.as_secs_f64() - o.as_secs_f64()) * 1e3
            ),
            _ => String::new(),
        };
        if !per_concurrency.is_empty() {
            println!(
                "* {} vs host + controller: {}{at_1}.",
                kruise.label(),
                per_concurrency.join("; ")
            );
        }
    }
}

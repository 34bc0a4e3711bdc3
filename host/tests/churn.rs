//! #26 item 6: bounded memory under WorkloadSpread churn. 1 000 uniquely named
//! WorkloadSpreads (two rounds of 10 namespaces × 50) are created, each gets a claim
//! (a counter queue), and all are deleted: the host's counter queues go back to none
//! and its memory stays where the first round left it.

use anyhow::{ensure, Context, Result};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use workloadspread_testkit::webhook::{
    apply_crd, fleet_crd, fleet_pod, fleet_settings, policy_wasm, HostProcess,
};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

const NAMESPACES: usize = 10;
const PER_NAMESPACE: usize = 50;

fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-host"))
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind))
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")
}

/// One round: `PER_NAMESPACE` Fleets and WorkloadSpreads per namespace (named after
/// `round`), one pod CREATE review per WorkloadSpread posted to the host, then every
/// WorkloadSpread deleted.
async fn round(host: &HostProcess, namespaces: &[TestNamespace], round: usize) -> Result<()> {
    let fleets = resource("burst.workloadspread.test", "v1", "Fleet");
    let spreads = resource("apps.kruise.io", "v1beta1", "WorkloadSpread");
    let mut work = vec![];
    for ns in namespaces {
        for i in 0..PER_NAMESPACE {
            work.push((ns, format!("r{round}-{i}")));
        }
    }
    // Fleets and WorkloadSpreads, 16 creates at a time; the pods' owners by uid.
    let uids: Vec<String> = futures::stream::iter(work.iter().map(|(ns, name)| {
        let (fleets, spreads) = (fleets.clone(), spreads.clone());
        async move {
            let f: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &fleets);
            let fleet: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
                "metadata": {"name": name}, "spec": {"replicas": 5}}))?;
            let fleet = f.create(&PostParams::default(), &fleet).await?;
            let s: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &spreads);
            let ws: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
                "metadata": {"name": name},
                "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": name},
                    "subsets": [{"name": "a", "maxReplicas": 3}, {"name": "b"}]}}))?;
            s.create(&PostParams::default(), &ws).await?;
            anyhow::Ok(fleet.metadata.uid.unwrap_or_default())
        }
    }))
    .buffered(16)
    .try_collect()
    .await?;
    for ns in namespaces {
        let last = format!("r{round}-{}", PER_NAMESPACE - 1);
        let target =
            json!({"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": last});
        host.wait_sees_workloadspread(ns.name(), &last, &target)
            .await?;
    }
    // One claim per WorkloadSpread: a pod CREATE review of its Fleet.
    futures::stream::iter(work.iter().zip(&uids).map(|((ns, name), uid)| async move {
        let mut pod = serde_json::to_value(fleet_pod(&format!("{name}-pod"), uid))?;
        pod["metadata"]["ownerReferences"][0]["name"] = json!(name);
        pod["metadata"]["namespace"] = json!(ns.name());
        let review = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": format!("{}-{name}", ns.name()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": ns.name(), "name": pod["metadata"]["name"], "operation": "CREATE",
                "userInfo": {"username": "churn"}, "object": pod}}))?;
        let (code, body) = host.post("/mutate", &review).await?;
        ensure!(code == 200 && body.contains("\"patch\""), "{name}: {code} {body}");
        anyhow::Ok(())
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    futures::stream::iter(work.iter().map(|(ns, name)| {
        let spreads = spreads.clone();
        async move {
            let s: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &spreads);
            s.delete(name, &DeleteParams::default()).await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

async fn queues_gone(host: &HostProcess) -> Result<()> {
    wait_for(
        "no counter queue left",
        Duration::from_secs(120),
        || async {
            let queues = host.metric("workloadspread_host_counter_queues").await?;
            Ok((queues == 0.0).then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn memory_and_queues_return_after_a_thousand_workloadspreads_come_and_go() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&client, &serde_json::to_value(&crd)?).await?;
    apply_crd(&client, &fleet_crd()).await?;
    let mut namespaces = vec![];
    for i in 0..NAMESPACES {
        namespaces.push(cluster.namespace(&format!("churn-{i}")).await?);
    }
    let settings = fleet_settings().to_string();
    let args: Vec<String> = [
        "--policy",
        &policy.display().to_string(),
        "--settings-json",
        &settings,
        "--counter-idle-seconds",
        "2",
        "--namespace-cache-grace-seconds",
        "1",
    ]
    .map(str::to_string)
    .to_vec();
    let host = HostProcess::start(host_bin(), cluster.kubeconfig(), &args).await?;
    let baseline = rss_kib(host.pid())?;
    round(&host, &namespaces, 1).await?;
    let peak = rss_kib(host.pid())?;
    queues_gone(&host).await?;
    let after_one = rss_kib(host.pid())?;
    round(&host, &namespaces, 2).await?;
    queues_gone(&host).await?;
    let after_two = rss_kib(host.pid())?;
    let cached: Value = json!(host.metric("workloadspread_host_cached_objects").await?);
    eprintln!(
        "churn: {} WorkloadSpreads created, claimed and deleted; host RSS baseline {} MiB, \
         after 500 {} MiB (peak {} MiB), after 1000 {} MiB; counter queues 0; cached objects {cached}",
        2 * NAMESPACES * PER_NAMESPACE,
        baseline / 1024,
        after_one / 1024,
        peak / 1024,
        after_two / 1024
    );
    // The second round reuses what the first one freed: no growth per WorkloadSpread.
    ensure!(
        after_two <= after_one + 8 * 1024,
        "host memory grew by {} KiB over the second round of 500",
        after_two.saturating_sub(after_one)
    );
    Ok(())
}

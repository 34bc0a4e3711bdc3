//! #26 item 6: bounded memory under WorkloadSpread churn. 1 500 uniquely named
//! WorkloadSpreads (three rounds of 10 namespaces × 50) are created, each gets a claim
//! (a counter queue), and all are deleted: the host's counter queues go back to none,
//! nothing stays cached, and the last round's memory stays where the one before left it.

use anyhow::{ensure, Context, Result};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::Api;
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use workloadspread_testkit::webhook::{
    apply_crd, fleet_crd, fleet_pod, fleet_settings, policy_wasm, HostProcess,
};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

const NAMESPACES: usize = 10;
const PER_NAMESPACE: usize = 50;
const ROUNDS: usize = 3;

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
/// WorkloadSpread and Fleet deleted.
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
    // Every WorkloadSpread and its Fleet deleted: nothing of the round stays in the cluster.
    futures::stream::iter(work.iter().map(|(ns, name)| {
        let (fleets, spreads) = (fleets.clone(), spreads.clone());
        async move {
            let s: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &spreads);
            s.delete(name, &DeleteParams::default()).await?;
            let f: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &fleets);
            f.delete(name, &DeleteParams::default()).await?;
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
async fn memory_and_queues_return_after_workloadspreads_come_and_go() -> Result<()> {
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
    // RSS after each round, once its counter queues are gone. The first rounds fill the
    // allocator's arenas and the runtime's pools; a leak shows as the same growth round
    // after round, so the last round is the one judged.
    let mut after = vec![];
    for r in 1..=ROUNDS {
        round(&host, &namespaces, r).await?;
        queues_gone(&host).await?;
        after.push(rss_kib(host.pid())?);
    }
    // Nothing of the deleted WorkloadSpreads stays cached once the namespace caches'
    // grace (1 s here) has passed.
    let cached = wait_for(
        "the namespace caches dropped",
        Duration::from_secs(60),
        || async {
            let cached = host.metric("workloadspread_host_cached_objects").await?;
            Ok((cached == 0.0).then_some(cached))
        },
    )
    .await?;
    let rounds: Vec<String> = after
        .iter()
        .map(|kib| format!("{} MiB", kib / 1024))
        .collect();
    eprintln!(
        "churn: {} WorkloadSpreads created, claimed and deleted in {ROUNDS} rounds; host RSS \
         baseline {} MiB, after each round {}; counter queues 0; cached objects {cached}",
        ROUNDS * NAMESPACES * PER_NAMESPACE,
        baseline / 1024,
        rounds.join(", "),
    );
    let (before_last, last) = (after[ROUNDS - 2], after[ROUNDS - 1]);
    // The last round reuses what the earlier ones freed: no growth per WorkloadSpread
    // (a leak of 16 KiB per WorkloadSpread would add 8 MiB per round).
    ensure!(
        last <= before_last + 8 * 1024,
        "host memory grew by {} KiB over the last round of {} (after each round: {})",
        last.saturating_sub(before_last),
        NAMESPACES * PER_NAMESPACE,
        rounds.join(", ")
    );
    Ok(())
}

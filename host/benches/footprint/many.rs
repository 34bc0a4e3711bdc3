//! The "many spreads" rows (#31): WorkloadSpreads in one namespace, each spreading its
//! own Fleet of [`PODS_PER_SPREAD`] pods over three subsets, admitted by the host (exact
//! mode) and counted by the controller: memory of both, and CPU per admission and per
//! reconcile.

use super::{create_all, dynamic_api, running, CONCURRENCY, SETTLE};
use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;
use workloadspread_testkit::webhook::fleet_pod_of;
use workloadspread_testkit::{wait_for, TestNamespace};

pub const PODS_PER_SPREAD: usize = 10;
const DEFAULT_SPREADS: usize = 1_000;

/// How many WorkloadSpreads: `WS_FOOTPRINT_SPREADS` (a smaller run on a slow
/// machine), else 1 000.
pub fn spreads() -> Result<usize> {
    match std::env::var("WS_FOOTPRINT_SPREADS") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("WS_FOOTPRINT_SPREADS={v:?} is not a number")),
        Err(_) => Ok(DEFAULT_SPREADS),
    }
}

fn fleet(i: usize) -> String {
    format!("fleet-{i:04}")
}

/// Creates `n` Fleets and a WorkloadSpread for each, `CONCURRENCY` at a time; returns
/// the Fleets' uids in order.
pub async fn create_spreads(ns: &TestNamespace, n: usize) -> Result<Vec<String>> {
    let fleets = dynamic_api(ns, "burst.workloadspread.test", "v1", "Fleet");
    let spreads = dynamic_api(ns, "apps.kruise.io", "v1beta1", "WorkloadSpread");
    let per = PODS_PER_SPREAD;
    let created: Vec<Result<String>> = futures::stream::iter(0..n)
        .map(|i| {
            let (fleets, spreads) = (fleets.clone(), spreads.clone());
            async move {
                let name = fleet(i);
                let f = serde_json::from_value(json!({
                    "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
                    "metadata": {"name": name}, "spec": {"replicas": per}}))?;
                let f = fleets.create(&PostParams::default(), &f).await?;
                let ws = serde_json::from_value(json!({
                    "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
                    "metadata": {"name": format!("{name}-spread")},
                    "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": name},
                        "subsets": [{"name": "a", "maxReplicas": 3}, {"name": "b", "maxReplicas": 3}, {"name": "c"}]}}))?;
                spreads.create(&PostParams::default(), &ws).await?;
                f.metadata
                    .uid
                    .with_context(|| format!("Fleet {name} has no uid"))
            }
        })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    created.into_iter().collect()
}

/// Creates every Fleet's pods and waits until they run and every WorkloadSpread
/// counts its Fleet's pods.
pub async fn admit_pods(ns: &TestNamespace, uids: &[String]) -> Result<()> {
    let api: Api<Pod> = ns.api();
    let pods = uids
        .iter()
        .enumerate()
        .flat_map(|(i, uid)| {
            let api = api.clone();
            (0..PODS_PER_SPREAD).map(move |j| {
                let pod = fleet_pod_of(&format!("{}-{j}", fleet(i)), &fleet(i), uid);
                (api.clone(), pod)
            })
        })
        .collect();
    create_all(pods).await?;
    running(ns, uids.len() * PODS_PER_SPREAD).await?;
    all_counted(ns, uids.len(), PODS_PER_SPREAD as i64).await
}

/// Waits until each of the `n` WorkloadSpreads of `ns` counts `want` pods.
async fn all_counted(ns: &TestNamespace, n: usize, want: i64) -> Result<()> {
    let api = dynamic_api(ns, "apps.kruise.io", "v1beta1", "WorkloadSpread");
    let what = format!("{n} WorkloadSpreads to count {want} pods each");
    wait_for(&what, SETTLE, || {
        let api = api.clone();
        async move {
            let listed = api.list(&ListParams::default()).await?.items;
            let done = listed
                .iter()
                .filter(|ws| {
                    let counted: i64 = ws.data["status"]["subsetStatuses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| s["replicas"].as_i64().unwrap_or(0))
                        .sum();
                    counted == want
                })
                .count();
            Ok((done == n).then_some(()))
        }
    })
    .await
}

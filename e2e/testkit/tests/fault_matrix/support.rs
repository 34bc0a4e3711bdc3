//! Helpers of the fault matrix: the WorkloadSpread and Deployment every scenario uses,
//! two replicas' options, what the status holds (placeholders, claims of pods that never
//! appeared), hand-outs, the final checks, and AdmissionReviews sent by hand.

use crate::common::*;
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use workloadspread_core::admission::reserve::{holder_of, RESERVATION_ANNOTATION};
use workloadspread_testkit::faults::Faults;
use workloadspread_testkit::monitor::{Monitor, Report};
use workloadspread_testkit::stack::{Replicated, ReplicatedOptions};
use workloadspread_testkit::{wait_for, TestNamespace};

pub fn spec() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(10)), zone("b", "zone-b", json!(10)), zone("c", "zone-c", Value::Null)]})
}

/// A fault proxy that passes everything through until a fault is switched on.
pub fn quiet() -> Faults {
    Faults {
        delay: Duration::ZERO,
        reset_every: 0,
        reset_after: Duration::ZERO,
        ..Faults::default()
    }
}

pub fn deployment_resource() -> ApiResource {
    ApiResource::erase::<Deployment>(&())
}

/// The WorkloadSpread and an empty Deployment, both seen by every host; the monitor
/// watching them.
pub async fn setup(r: &Replicated) -> Result<(Api<DynamicObject>, Monitor)> {
    let api: Api<DynamicObject> = Api::namespaced_with(r.ns.client(), r.ns.name(), &ws_resource());
    create_ws(&api).await?;
    create_web_deployment(&r.ns, 0).await?;
    for host in &r.hosts {
        host.wait_sees_workloadspread(r.ns.name(), "web", &target("Deployment"))
            .await?;
    }
    let monitor = Monitor::start(
        r.ns.client(),
        r.ns.name(),
        "web",
        deployment_resource(),
        "web",
    )
    .await?;
    Ok((api, monitor))
}

pub async fn create_ws(api: &Api<DynamicObject>) -> Result<DynamicObject> {
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": spec()}))?;
    Ok(api.create(&PostParams::default(), &ws).await?)
}

pub fn options<'a>(
    kubeconfigs: [&'a Path; 2],
    args: [Vec<String>; 2],
    controller: bool,
) -> ReplicatedOptions<'a> {
    ReplicatedOptions {
        host_kubeconfigs: kubeconfigs,
        host_args: args,
        controller,
    }
}

/// Placeholders in the status, with their stamps.
pub async fn placeholders(api: &Api<DynamicObject>) -> Result<Vec<(String, String)>> {
    let status = api.get("web").await?.data["status"].clone();
    let mut out = vec![];
    for subsets in status["versionedSubsetStatuses"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        for s in subsets.as_array().into_iter().flatten() {
            for (k, at) in s["creatingPods"].as_object().into_iter().flatten() {
                if k.starts_with('~') {
                    out.push((k.clone(), at.as_str().unwrap_or_default().to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// Claims in the status (not placeholders) naming no live pod (by name, or by the id a
/// pod created with `generateName` carries in its matched-workloadspread annotation).
pub async fn ghost_claims(api: &Api<DynamicObject>, ns: &TestNamespace) -> Result<usize> {
    let status = api.get("web").await?.data["status"].clone();
    let live: Vec<String> = live_pods(ns)
        .await?
        .into_iter()
        .flat_map(|p| {
            let generated = workloadspread_core::pods::matched(&p).and_then(|m| m.uid);
            [p.metadata.name, generated]
        })
        .flatten()
        .collect();
    let versioned = status["versionedSubsetStatuses"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values());
    let ghosts: BTreeSet<String> = versioned
        .chain([&status["subsetStatuses"]])
        .flat_map(|subsets| subsets.as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["creatingPods"].as_object().cloned().unwrap_or_default())
        .map(|(k, _)| k)
        .filter(|k| !k.starts_with('~') && !live.contains(k))
        .collect();
    if !ghosts.is_empty() {
        eprintln!("  claims of pods that never appeared: {ghosts:?}");
    }
    Ok(ghosts.len())
}

/// Arguments for a replica whose settles come [`SLOW_SETTLE_MS`] after a hand-out (the
/// host's hidden fault flag; 1 s by default): a fault switched on at its first hand-out
/// then lands before the settle even on a loaded machine. (At 1 s, CI once saw the settle
/// land before the test's metric poll switched the fault on.)
pub fn slow_settles() -> Vec<String> {
    vec!["--settle-delay-ms".to_string(), SLOW_SETTLE_MS.to_string()]
}
pub const SLOW_SETTLE_MS: u64 = 3000;

/// Waits until host `i` has handed a placeholder to a pod (a claim answered without a
/// write).
pub async fn first_hand_out(r: &Replicated, i: usize) -> Result<()> {
    let host = &r.hosts[i];
    wait_for("a placeholder handed out", SETTLE, || async {
        let taken = host
            .metric_with("workloadspread_host_reservations_total", "event=\"Taken\"")
            .await?;
        Ok((taken > 0.0).then_some(()))
    })
    .await
}

/// Placeholders of `holder` that a pod names (it was admitted into one) while the status
/// still holds them under the placeholder's key: handed out, not settled.
pub async fn unsettled_hand_outs(
    api: &Api<DynamicObject>,
    ns: &TestNamespace,
    holder: &str,
) -> Result<Vec<String>> {
    let in_status: BTreeSet<String> = placeholders(api)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    Ok(live_pods(ns)
        .await?
        .iter()
        .filter_map(|p| workloadspread_testkit::pods::annotation(p, RESERVATION_ANNOTATION))
        .filter(|k| holder_of(k) == Some(holder) && in_status.contains(*k))
        .cloned()
        .collect())
}

/// Waits until every placeholder in the status is older than `seconds` by its stamp:
/// past the TTL, any replica would find it stale; past the drop time, any replica would
/// drop it if no pod names it.
pub async fn placeholders_older_than(api: &Api<DynamicObject>, seconds: i64) -> Result<()> {
    wait_for(
        "placeholders old enough",
        Duration::from_secs(120),
        || async {
            let now = workloadspread_core::Timestamp::now();
            let old = placeholders(api).await?.iter().all(|(_, at)| {
                at.parse::<workloadspread_core::Timestamp>()
                    .is_ok_and(|t| now.duration_since(t).as_secs() > seconds)
            });
            Ok(old.then_some(()))
        },
    )
    .await
}

/// Final checks: `total` pods Running, a and b at most 10 and full (nothing spilled past
/// them while they had room), no pod unspread; the controller's status equal to the pods
/// (every pod counted once); the monitor's verdict.
pub async fn finish(
    r: &Replicated,
    api: &Api<DynamicObject>,
    monitor: Monitor,
    total: usize,
    what: &str,
) -> Result<Report> {
    finish_spilling(r, api, monitor, total, what, 0).await
}

/// As [`finish`], where up to `spill` pods may have gone past a and b while slots there
/// were held by claims of pods that never appeared (only the controller drops those).
pub async fn finish_spilling(
    r: &Replicated,
    api: &Api<DynamicObject>,
    monitor: Monitor,
    total: usize,
    what: &str,
    spill: usize,
) -> Result<Report> {
    let pods = settled(&r.ns, total).await?;
    let c = counts(&pods);
    let n = |s: &str| c.get(s).copied().unwrap_or(0);
    let full = n("a") <= 10 && n("b") <= 10 && n("a") + n("b") + spill >= 20;
    ensure!(
        full && n("a") + n("b") + n("c") == total,
        "{what}: pods per subset {c:?}, want a = b = 10 (at most {spill} spilled to c)"
    );
    status_matches(api, &c).await?;
    let report = monitor.finish().with_context(|| what.to_string())?;
    eprintln!(
        "{what}: {c:?}; FailedCreate events {}; monitor: {report}",
        failed_creates(&r.ns).await?
    );
    Ok(report)
}

/// The AdmissionReview of a pod CREATE of the Deployment's ReplicaSet (request uid
/// `uid`), as the API server sends it.
pub async fn pod_review(r: &Replicated, uid: &str) -> Result<Vec<u8>> {
    let sets =
        r.ns.api::<ReplicaSet>()
            .list(&ListParams::default())
            .await?;
    let rs = sets.items.first().context("the Deployment's ReplicaSet")?;
    let labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .context("the ReplicaSet's pod labels")?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-retried-", "namespace": r.ns.name(), "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": true,
                "name": rs.metadata.name, "uid": rs.metadata.uid}]},
        "spec": pod_template(json!({}))["spec"]});
    Ok(serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": r.ns.name(), "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod}}),
    )?)
}

/// The subset a host's answer injects and the placeholder it took: the annotations its
/// JSON patch adds (whole, or one by one).
pub fn answer_of(body: &str) -> Result<(Option<String>, Option<String>)> {
    use base64::Engine as _;
    let v: Value = serde_json::from_str(body)?;
    let response = &v["response"];
    ensure!(response["allowed"] == true, "refused: {body}");
    let Some(patch) = response["patch"].as_str() else {
        return Ok((None, None));
    };
    let ops: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    let mut annotations = serde_json::Map::new();
    for op in ops.as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or_default();
        match path.strip_prefix("/metadata/annotations") {
            Some("") => annotations.extend(op["value"].as_object().cloned().unwrap_or_default()),
            Some(key) => {
                let key = key
                    .trim_start_matches('/')
                    .replace("~1", "/")
                    .replace("~0", "~");
                annotations.insert(key, op["value"].clone());
            }
            None => {}
        }
    }
    let text = |k: &str| {
        annotations
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let subset = text("apps.kruise.io/matched-workloadspread")
        .and_then(|m| serde_json::from_str::<Value>(&m).ok())
        .and_then(|m| m["subset"].as_str().map(str::to_string));
    Ok((subset, text("workloadspread.io/reservation")))
}

/// `key`'s entries across every subset's creatingPods.
pub async fn entries_of(api: &Api<DynamicObject>, key: &str) -> Result<usize> {
    let status = api.get("web").await?.data["status"].clone();
    Ok(status["versionedSubsetStatuses"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|s| s.as_array().cloned().unwrap_or_default())
        .filter(|s| s["creatingPods"].get(key).is_some())
        .count())
}

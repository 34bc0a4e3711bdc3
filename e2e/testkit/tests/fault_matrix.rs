//! Issue #26: the exact host under faults, with the invariant monitor
//! (`workloadspread_testkit::monitor`) watching every status write and pod event of
//! each scenario: no subset over its maximum at any observed moment, every pod counted
//! once at the end. Two host replicas behind a round-robin proxy (as a Service spreads
//! the API server's calls), subsets a (max 10), b (max 10), c (the rest), a Deployment
//! scaled out in bursts. Each scenario prints its report (the highest occupancy seen).

mod common;

use anyhow::{ensure, Context, Result};
use common::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use workloadspread_core::admission::reserve::{
    holder_of, PLACEHOLDER_DROP_SECONDS, PLACEHOLDER_TTL_SECONDS, RESERVATION_ANNOTATION,
};
use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via, Faults};
use workloadspread_testkit::monitor::{Monitor, Report};
use workloadspread_testkit::stack::{Replicated, ReplicatedOptions};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

fn spec() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(10)), zone("b", "zone-b", json!(10)), zone("c", "zone-c", Value::Null)]})
}

/// A fault proxy that passes everything through until a fault is switched on.
fn quiet() -> Faults {
    Faults {
        delay: Duration::ZERO,
        reset_every: 0,
        reset_after: Duration::ZERO,
        ..Faults::default()
    }
}

fn deployment_resource() -> ApiResource {
    ApiResource::erase::<Deployment>(&())
}

/// The WorkloadSpread and an empty Deployment, both seen by every host; the monitor
/// watching them.
async fn setup(r: &Replicated) -> Result<(Api<DynamicObject>, Monitor)> {
    let api: Api<DynamicObject> = Api::namespaced_with(r.ns.client(), r.ns.name(), &ws_resource());
    create_ws(&api).await?;
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({}))}}))?;
    r.ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
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

async fn create_ws(api: &Api<DynamicObject>) -> Result<DynamicObject> {
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": spec()}))?;
    Ok(api.create(&PostParams::default(), &ws).await?)
}

fn options<'a>(
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
async fn placeholders(api: &Api<DynamicObject>) -> Result<Vec<(String, String)>> {
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
async fn ghost_claims(api: &Api<DynamicObject>, ns: &TestNamespace) -> Result<usize> {
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

/// Waits until host `i` has handed a placeholder to a pod (a claim answered without a
/// write).
async fn first_hand_out(r: &Replicated, i: usize) -> Result<()> {
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
async fn unsettled_hand_outs(
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
async fn placeholders_older_than(api: &Api<DynamicObject>, seconds: i64) -> Result<()> {
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
async fn finish(
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
async fn finish_spilling(
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

/// #26 item 1a: a host is SIGKILLed right after it hands placeholders to pods, before
/// its settle, while no controller runs. The other replica finds the dead holder's
/// placeholders stale and settles each to the pod naming it (its slot stays taken), and
/// drops the unused ones past the drop time, so the next burst cannot put more pods into
/// a full subset. (Dropping them all, as before, freed slots whose pods exist: a went
/// over 10.)
///
/// So that the kill surely lands before a settle, the doomed replica is cut off from the
/// API server (its connections hang) from its first hand-out on: it keeps answering
/// claims from its placeholders, none of which can be settled, and is killed once a pod
/// names a placeholder the status still holds — the fault is checked to have happened.
#[tokio::test]
async fn a_killed_hosts_handed_out_placeholders_keep_their_pods_slots() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let (via, stats) = fault_proxy(api_server_addr(kubeconfig)?, quiet()).await?;
    let faulty = kubeconfig_via(kubeconfig, via)?;
    let o = options([&faulty, kubeconfig], [vec![], vec![]], false);
    let Some(mut r) = Replicated::start("fault-kill-handed", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 15).await?;
    let dead = r.hosts[0].holder().await?;
    first_hand_out(&r, 0).await?;
    stats.hang.store(true, Ordering::SeqCst);
    let unsettled = wait_for(
        "a pod admitted into an unsettled placeholder",
        SETTLE,
        || async {
            let keys = unsettled_hand_outs(&api, &r.ns, &dead).await?;
            Ok((!keys.is_empty()).then_some(keys))
        },
    )
    .await?;
    r.hosts[0].kill();
    stats.hang.store(false, Ordering::SeqCst);
    eprintln!(
        "  killed holding {} handed-out, unsettled placeholders: {unsettled:?}",
        unsettled.len()
    );
    wait_pods(&r.ns, 15).await?;
    // The dead holder's unused placeholders are dropped only past the drop time (a pod
    // admitted into one may still be on its way); its handed-out ones are settled to
    // their pods from the TTL on.
    placeholders_older_than(&api, PLACEHOLDER_DROP_SECONDS + 2).await?;
    // A claim the dead host wrote for a pod whose create then failed (the host died before
    // answering) holds its slot until the controller drops it: the next burst may spill
    // that many pods past a full-looking subset, never over it.
    let ghosts = ghost_claims(&api, &r.ns).await?;
    scale(&deployments, 40).await?;
    wait_pods(&r.ns, 40).await?;
    let left = placeholders(&api).await?;
    ensure!(
        left.iter()
            .all(|(k, _)| holder_of(k) != Some(dead.as_str())),
        "the dead holder's placeholders are still there: {left:?}"
    );
    r.start_controller().await?;
    let report = finish_spilling(
        &r,
        &api,
        monitor,
        40,
        "host killed after hand-outs, no controller",
        ghosts,
    )
    .await?;
    let settled = r.hosts[1]
        .metric_with(
            "workloadspread_host_reservations_total",
            "event=\"StaleSettled\"",
        )
        .await?;
    eprintln!("  stale placeholders settled to their pods by the survivor: {settled}");
    ensure!(
        settled >= 1.0,
        "the survivor settled none of the dead holder's handed-out placeholders {unsettled:?}"
    );
    ensure!(report.max_pods["a"] <= 10);
    r.configs.delete().await
}

/// #26 item 1b: the API server is out of reach for 8 s for one replica right after it
/// hands placeholders out (its settle write fails), with no controller. The settle is
/// retried when the API is back, and the other replica settles what it finds stale:
/// the pods keep their slots.
#[tokio::test]
async fn an_api_outage_after_hand_outs_keeps_the_pods_slots() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let (via, stats) = fault_proxy(api_server_addr(kubeconfig)?, quiet()).await?;
    let faulty = kubeconfig_via(kubeconfig, via)?;
    let o = options([&faulty, kubeconfig], [vec![], vec![]], false);
    let Some(mut r) = Replicated::start("fault-outage", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 15).await?;
    first_hand_out(&r, 0).await?;
    stats.hang.store(true, Ordering::SeqCst);
    // The fault's length, not a wait for a condition: 8 s without the API server.
    tokio::time::sleep(Duration::from_secs(8)).await;
    stats.hang.store(false, Ordering::SeqCst);
    // The fault happened: a settle write of the cut-off replica failed.
    let failed = r.hosts[0]
        .metric_with(
            "workloadspread_host_reservations_total",
            "event=\"SettleFailed\"",
        )
        .await?;
    ensure!(
        failed >= 1.0,
        "no settle of the cut-off replica failed: the outage did not hit a settle"
    );
    wait_pods(&r.ns, 15).await?;
    placeholders_older_than(&api, PLACEHOLDER_TTL_SECONDS + 2).await?;
    scale(&deployments, 40).await?;
    wait_pods(&r.ns, 40).await?;
    r.start_controller().await?;
    finish(
        &r,
        &api,
        monitor,
        40,
        "API outage of 8 s after hand-outs, no controller",
    )
    .await?;
    eprintln!(
        "  proxy: {} connections hung; placeholders whose settle failed: {failed}",
        stats.hung.load(Ordering::Relaxed)
    );
    r.configs.delete().await
}

/// #26 item 3: one replica's first write that reserves placeholders lands, but its answer
/// comes 2.1 s late, past the 2 s call timeout (`--late-reserve-answers 1`: the fault
/// injected where it is meant to be; a proxy cannot tell a reserve write in TLS). The block
/// it then finds landed is aged by its stamp in the status: handed out while young, given
/// back when not — never held unusable while claims spill past it. The burst ends exactly
/// on a = 10, b = 10.
#[tokio::test]
async fn slow_writes_leave_reserved_slots_usable() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let late = vec!["--late-reserve-answers".to_string(), "1".to_string()];
    let o = options([kubeconfig, kubeconfig], [late, vec![]], true);
    let Some(r) = Replicated::start("fault-slow-write", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    scale(&r.ns.api::<Deployment>(), 40).await?;
    finish(&r, &api, monitor, 40, "a reserve write answered 2.1 s late").await?;
    let reserved = r.hosts[0]
        .metric_with(
            "workloadspread_host_reservations_total",
            "event=\"Reserved\"",
        )
        .await?;
    let unanswered = r.hosts[0]
        .metric("workloadspread_host_counter_unanswered_writes_total")
        .await?;
    eprintln!(
        "  reserve writes answered too late: {unanswered}; placeholders the slowed replica \
         reserved: {reserved}"
    );
    // The fault happened: the replica's reserve write was answered past its timeout.
    ensure!(
        unanswered >= 1.0,
        "no reserve write of the slowed replica timed out (it reserved {reserved})"
    );
    r.configs.delete().await
}

/// #26 item 4: the two replicas' clocks are 8 s apart (+4 s and −4 s), and no controller
/// repairs the status meanwhile. Placeholders are aged by when each reader first saw them,
/// never by another machine's stamp, so neither replica frees the other's fresh
/// placeholders while they are being handed out. (Aged by stamps, the replica ahead found
/// the other's placeholders 8 s old at once and freed slots whose pods were on their way.)
#[tokio::test]
async fn replicas_with_skewed_clocks_never_overfill() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let skew = |s: &str| vec!["--clock-offset-seconds".to_string(), s.to_string()];
    let o = options([kubeconfig, kubeconfig], [skew("4"), skew("-4")], false);
    let Some(mut r) = Replicated::start("fault-skew", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 20).await?;
    wait_pods(&r.ns, 20).await?;
    scale(&deployments, 40).await?;
    wait_pods(&r.ns, 40).await?;
    r.start_controller().await?;
    finish(
        &r,
        &api,
        monitor,
        40,
        "host clocks +4 s and -4 s, no controller",
    )
    .await?;
    r.configs.delete().await
}

/// The AdmissionReview of a pod CREATE of the Deployment's ReplicaSet (request uid
/// `uid`), as the API server sends it.
async fn pod_review(r: &Replicated, uid: &str) -> Result<Vec<u8>> {
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
fn answer_of(body: &str) -> Result<(Option<String>, Option<String>)> {
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
async fn entries_of(api: &Api<DynamicObject>, key: &str) -> Result<usize> {
    let status = api.get("web").await?.data["status"].clone();
    Ok(status["versionedSubsetStatuses"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|s| s.as_array().cloned().unwrap_or_default())
        .filter(|s| s["creatingPods"].get(key).is_some())
        .count())
}

/// #26 item 5: the API server retries a webhook call on the other replica (the first
/// one's answer was lost). Both replicas answer the same request uid; once their
/// settles are written the pod holds one slot, whichever answer the API server used.
#[tokio::test]
async fn one_admission_review_sent_to_two_replicas_holds_one_slot() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let o = options([kubeconfig, kubeconfig], [vec![], vec![]], true);
    let Some(r) = Replicated::start("fault-retried-review", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    // Both replicas hold blocks: the duplicate can be answered from a placeholder.
    scale(&r.ns.api::<Deployment>(), 6).await?;
    settled(&r.ns, 6).await?;
    let review = pod_review(&r, "retried-review-1").await?;
    let mut answers = vec![];
    for host in &r.hosts {
        let (code, body) = host.post("/mutate", &review).await?;
        ensure!(code == 200, "{code}: {body}");
        answers.push(answer_of(&body)?);
    }
    let placeholders_taken: Vec<String> = answers.iter().filter_map(|(_, p)| p.clone()).collect();
    wait_for("one slot for the retried request", SETTLE, || async {
        let once = entries_of(&api, "retried-review-1").await? == 1;
        let left = placeholders(&api).await?;
        let none_left = placeholders_taken
            .iter()
            .all(|p| left.iter().all(|(k, _)| k != p));
        Ok((once && none_left).then_some(()))
    })
    .await
    .with_context(|| format!("answers {answers:?}"))?;
    eprintln!("retried review: answers (subset, placeholder) {answers:?}; one creatingPods entry");
    // Whichever answer the API server uses, the pod lands where its slot is held.
    ensure!(
        answers[0].0.is_some() && answers[0].0 == answers[1].0,
        "the replicas answered different subsets: {answers:?}"
    );
    let report = monitor.finish()?;
    eprintln!("  monitor: {report}");
    r.configs.delete().await
}

/// #26 item 8: a WorkloadSpread deleted and created again under the same name while the
/// replicas hold blocks of the old one: nothing of the old object is handed out in the
/// new one, and the next burst fills a and b exactly.
#[tokio::test]
async fn a_workloadspread_recreated_during_reservations() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let o = options([kubeconfig, kubeconfig], [vec![], vec![]], true);
    let Some(r) = Replicated::start("fault-recreated", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 15).await?;
    wait_pods(&r.ns, 15).await?;
    api.delete("web", &DeleteParams::default()).await?;
    wait_for("the old object gone", SETTLE, || async {
        Ok(api.get_opt("web").await?.is_none().then_some(()))
    })
    .await?;
    let recreated = create_ws(&api).await?;
    for host in &r.hosts {
        host.wait_sees_workloadspread(r.ns.name(), "web", &target("Deployment"))
            .await?;
    }
    // The controller counts the pods that exist into the new object first (the
    // adoption a new object needs), then the burst goes on.
    let pods = settled(&r.ns, 15).await?;
    status_matches(&api, &counts(&pods)).await?;
    scale(&deployments, 40).await?;
    let report = finish(
        &r,
        &api,
        monitor,
        40,
        "WorkloadSpread recreated during reservations",
    )
    .await?;
    let now = api.get("web").await?;
    ensure!(now.metadata.uid == recreated.metadata.uid);
    ensure!(report.max_pods["a"] <= 10);
    r.configs.delete().await
}

/// A release that reaches the status after the controller has recounted without its pod
/// (the same DELETE admitted twice, or answered late) must not free the pod's slot a
/// second time. Here: a pod of the full subset a is deleted and replaced (a = 10 again,
/// recounted), the controller is stopped, and the pod's DELETE review is sent to a host
/// once more; the next pod must not go to a. (Before the host checked that a release's
/// pod still runs, it recorded the pod as deleting again and a went to 11 — what the
/// sequence scenarios hit now and then after a scale-in.)
#[tokio::test]
async fn a_late_release_does_not_free_a_slot_twice() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let o = options([kubeconfig, kubeconfig], [vec![], vec![]], true);
    let Some(mut r) = Replicated::start("fault-late-release", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 20).await?;
    let pods = settled(&r.ns, 20).await?;
    status_matches(&api, &counts(&pods)).await?;
    // One pod of a deleted as users and controllers delete it; its replacement takes the
    // freed slot, and the controller recounts.
    let gone = pods
        .iter()
        .find(|p| workloadspread_testkit::pods::subset_of(p).as_deref() == Some("a"))
        .context("a pod in a")?
        .clone();
    let gone_name = gone.metadata.name.clone().unwrap_or_default();
    r.ns.api::<k8s_openapi::api::core::v1::Pod>()
        .delete(&gone_name, &DeleteParams::default())
        .await?;
    wait_for("the pod gone", SETTLE, || async {
        let names: Vec<String> =
            r.ns.api::<k8s_openapi::api::core::v1::Pod>()
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
        Ok((!names.contains(&gone_name)).then_some(()))
    })
    .await?;
    let pods = settled(&r.ns, 20).await?;
    ensure!(
        counts(&pods)["a"] == 10,
        "after the replacement: {:?}",
        counts(&pods)
    );
    status_matches(&api, &counts(&pods)).await?;
    // No recount from here on: the late release is all the status sees.
    if let Some(mut c) = r.controller.take() {
        c.kill();
    }
    let review = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "late-delete", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": r.ns.name(), "name": gone_name, "operation": "DELETE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "oldObject": gone, "object": null}}))?;
    let (code, body) = r.hosts[0].post("/mutate", &review).await?;
    ensure!(
        code == 200 && body.contains("\"allowed\":true"),
        "{code} {body}"
    );
    scale(&deployments, 21).await?;
    wait_pods(&r.ns, 21).await?;
    r.start_controller().await?;
    finish(&r, &api, monitor, 21, "a late duplicate release").await?;
    r.configs.delete().await
}

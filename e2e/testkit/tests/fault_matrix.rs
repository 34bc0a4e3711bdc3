//! Issue #26: the exact host under faults, with the invariant monitor
//! (`workloadspread_testkit::monitor`) watching every status write and pod event of
//! each scenario: no subset over its maximum at any observed moment, every pod counted
//! once at the end. Two host replicas behind a round-robin proxy (as a Service spreads
//! the API server's calls), subsets a (max 10), b (max 10), c (the rest), a Deployment
//! scaled out in bursts. Each scenario prints its report (the highest occupancy seen).

mod common;
#[path = "fault_matrix/forged.rs"]
mod forged;
#[path = "fault_matrix/ordinary.rs"]
mod ordinary;
#[path = "fault_matrix/ordinary_scenarios.rs"]
mod ordinary_scenarios;
#[path = "fault_matrix/support.rs"]
mod support;

use anyhow::{ensure, Context, Result};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::*;
use workloadspread_core::admission::reserve::{
    holder_of, PLACEHOLDER_DROP_SECONDS, PLACEHOLDER_TTL_SECONDS,
};
use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via};
use workloadspread_testkit::stack::Replicated;
use workloadspread_testkit::{cluster, wait_for};

/// #26 item 1a: a host is SIGKILLed right after it hands placeholders to pods, before
/// its settle, while no controller runs. The other replica finds the dead holder's
/// placeholders stale and settles each to the pod naming it (its slot stays taken), and
/// drops the unused ones past the drop time, so the next burst cannot put more pods into
/// a full subset. (Dropping them all, as before, freed slots whose pods exist: a went
/// over 10.)
///
/// So that the kill surely lands before a settle, the doomed replica settles 3 s after
/// a hand-out, is cut off from the API server (its connections hang) once a pod names a
/// placeholder the status still holds — the fault is checked to have happened — and
/// killed at once. (It is no longer cut off from its first hand-out on: a cut-off host
/// answers no claim from a placeholder, as the read that confirms a hand-out's spec
/// hangs too.)
#[tokio::test]
async fn a_killed_hosts_handed_out_placeholders_keep_their_pods_slots() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let (via, stats) = fault_proxy(api_server_addr(kubeconfig)?, quiet()).await?;
    let faulty = kubeconfig_via(kubeconfig, via)?;
    let o = options([&faulty, kubeconfig], [slow_settles(), vec![]], false);
    let Some(mut r) = Replicated::start("fault-kill-handed", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 15).await?;
    let dead = r.hosts[0].holder().await?;
    first_hand_out(&r, 0).await?;
    // Before the API server is cut off: a hand-out is answered only once a read confirms
    // its spec (`fence.rs`), so a host cut off hands out nothing. The cut keeps its
    // settles (3 s after the hand-outs) from landing before it is killed.
    let unsettled = wait_for(
        "a pod admitted into an unsettled placeholder",
        SETTLE,
        || async {
            let keys = unsettled_hand_outs(&api, &r.ns, &dead).await?;
            Ok((!keys.is_empty()).then_some(keys))
        },
    )
    .await?;
    stats.hang.store(true, Ordering::SeqCst);
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
    r.finish().await
}

/// #26 item 1b: the API server is out of reach for one replica from its first hand-out
/// until its settle write has failed (at least 8 s), with no controller. The settle is
/// retried when the API is back, and the other replica settles what it finds stale:
/// the pods keep their slots.
#[tokio::test]
async fn an_api_outage_after_hand_outs_keeps_the_pods_slots() -> Result<()> {
    let kubeconfig = cluster()?.kubeconfig();
    let (via, stats) = fault_proxy(api_server_addr(kubeconfig)?, quiet()).await?;
    let faulty = kubeconfig_via(kubeconfig, via)?;
    let o = options([&faulty, kubeconfig], [slow_settles(), vec![]], false);
    let Some(mut r) = Replicated::start("fault-outage", o).await? else {
        return Ok(());
    };
    let (api, monitor) = setup(&r).await?;
    let deployments = r.ns.api::<Deployment>();
    scale(&deployments, 15).await?;
    let cut = r.hosts[0].holder().await?;
    first_hand_out(&r, 0).await?;
    // The outage begins once a pod holds an unsettled placeholder of the replica (a
    // hand-out is answered only once a read confirms its spec: none while cut off).
    let unsettled = wait_for("a pod in an unsettled placeholder", SETTLE, || async {
        let keys = unsettled_hand_outs(&api, &r.ns, &cut).await?;
        Ok((!keys.is_empty()).then_some(keys))
    })
    .await?;
    let outage = std::time::Instant::now();
    stats.hang.store(true, Ordering::SeqCst);
    // The outage lasts until the cut-off replica's settle write has failed (it comes
    // SLOW_SETTLE_MS after the hand-out, inside the outage), and at least 8 s.
    let failed = wait_for(
        "a settle write of the cut-off replica to fail",
        Duration::from_secs(30),
        || async {
            let failed = r.hosts[0]
                .metric_with(
                    "workloadspread_host_reservations_total",
                    "event=\"SettleFailed\"",
                )
                .await?;
            Ok((failed >= 1.0).then_some(failed))
        },
    )
    .await
    .with_context(|| {
        format!("the outage hit no settle (handed out, unsettled when it began: {unsettled:?})")
    })?;
    if let Some(rest) = Duration::from_secs(8).checked_sub(outage.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    stats.hang.store(false, Ordering::SeqCst);
    eprintln!(
        "  outage of {:?}; handed out, unsettled when it began: {unsettled:?}",
        outage.elapsed()
    );
    wait_pods(&r.ns, 15).await?;
    placeholders_older_than(&api, PLACEHOLDER_TTL_SECONDS + 2).await?;
    // What the outage may leave holding slots until the controller (started last) or the
    // drop time frees them, so the next burst may spill that many pods past a full-looking
    // subset, never over it: claims written just before the outage whose answers it
    // swallowed (their pods were refused, as when a host dies), and placeholders of the
    // cut-off replica no pod names (a return the outage failed).
    let ghosts = ghost_claims(&api, &r.ns).await?;
    let named = unsettled_hand_outs(&api, &r.ns, &cut).await?;
    let unused = placeholders(&api)
        .await?
        .into_iter()
        .filter(|(k, _)| holder_of(k) == Some(cut.as_str()) && !named.contains(k))
        .count();
    scale(&deployments, 40).await?;
    wait_pods(&r.ns, 40).await?;
    r.start_controller().await?;
    eprintln!("  after the outage: {ghosts} unanswered claims, {unused} unused placeholders held");
    finish_spilling(
        &r,
        &api,
        monitor,
        40,
        "API outage of 8 s after hand-outs, no controller",
        ghosts + unused,
    )
    .await?;
    eprintln!(
        "  proxy: {} connections hung; placeholders whose settle failed: {failed}",
        stats.hung.load(Ordering::Relaxed)
    );
    r.finish().await
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
    r.finish().await
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
    r.finish().await
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
    r.finish().await
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
    r.finish().await
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
    r.finish().await
}

//! Security review R13: an evaluation holds its slot until it ends. The slot was a permit
//! borrowed by the request's handler: when a client went away mid-evaluation, hyper
//! dropped the handler and gave the slot back while the evaluation went on on its
//! blocking thread — so `--max-concurrency` bounded requests, not evaluations.

use super::security_support::*;
use anyhow::{ensure, Result};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use workloadspread_testkit::stack::namespace_with_crd;
use workloadspread_testkit::{unique_name, wait_for};

const RUNNING: &str = "workloadspread_host_evaluations_running";

/// A pod CREATE review of `name`, owned by the spread ReplicaSet, as the API server sends it.
fn pod_create_review(namespace: &str, rs_uid: &str, name: &str) -> Result<Vec<u8>> {
    let mut pod = serde_json::to_value(owned_pod(name, rs_uid)?)?;
    pod["metadata"]["namespace"] = json!(namespace);
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    Ok(serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": unique_name("left"), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "name": name, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}
    }))?)
}

/// One slot; the first status write that reserves is answered 2.1 s late, so the first
/// admission evaluates for over 2 s. Its client leaves while it runs; a pod created through
/// the API server meanwhile must wait for the slot: never two evaluations at once.
#[tokio::test]
async fn an_evaluation_whose_client_left_keeps_its_slot_until_it_ends() -> Result<()> {
    let _machine = beside_others().await;
    let ns = namespace_with_crd("slot").await?;
    let rs_uid = spread_over_replicaset(&ns, 100_000).await?;
    let args = [
        "--max-concurrency=1",
        "--reuse-instances=1",
        "--late-reserve-answers=3",
    ];
    let Some((host, configs, ca)) = host_with(&args.map(String::from)).await? else {
        return Ok(());
    };
    let port = host.port;
    configs.enroll(ns.name()).await?;
    host.wait_sees_workloadspread(ns.name(), "web", &target())
        .await?;
    let tls = tls_client(&ca)?;

    // The first admission, straight to the host; its client leaves once it is seen
    // evaluating. An evaluation that ended before it was seen (its write not the late one)
    // proves nothing: another pod, up to three times.
    let mut left_at = None;
    for attempt in 0..3 {
        let before = host.metric("workloadspread_host_evaluations_total").await?;
        let body = pod_create_review(ns.name(), &rs_uid, &format!("left-{attempt}"))?;
        let mut first = connect(&tls, port).await?;
        let head = format!(
            "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        first.write_all(head.as_bytes()).await?;
        first.write_all(&body).await?;
        let (running, done) = wait_for(
            "the first admission to evaluate or be answered",
            Duration::from_secs(10),
            || async {
                let running = host.metric(RUNNING).await?;
                let done = host.metric("workloadspread_host_evaluations_total").await?;
                Ok((running >= 1.0 || done > before).then_some((running, done)))
            },
        )
        .await?;
        eprintln!(
            "attempt {attempt}: evaluations running {running}, answered {}",
            done - before
        );
        if running >= 1.0 {
            left_at = Some(Instant::now());
            drop(first);
            break;
        }
    }
    let Some(left_at) = left_at else {
        anyhow::bail!("in 3 attempts no first admission was seen evaluating: nothing to judge");
    };

    // A pod through the API server while the first evaluation still waits on its write,
    // the evaluations running sampled until it is admitted.
    let admitted = std::sync::atomic::AtomicBool::new(false);
    let second = async {
        let answer = admit(&ns, &rs_uid, "after").await;
        admitted.store(true, std::sync::atomic::Ordering::SeqCst);
        answer
    };
    let sampling = async {
        let (mut peak, mut samples) = (0.0f64, 0u32);
        while !admitted.load(std::sync::atomic::Ordering::SeqCst) {
            peak = peak.max(host.metric(RUNNING).await?);
            samples += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::Ok((peak, samples))
    };
    let (answer, sampled) = tokio::join!(second, sampling);
    let ((took, placed), (peak, samples)) = (answer?, sampled?);
    eprintln!(
        "the second admission, sent as the first one's client left, took {took:?} (placed: \
         {placed}, answered {:?} after the client left); evaluations running at most {peak} \
         in {samples} samples",
        left_at.elapsed()
    );
    ensure!(
        peak <= 1.0,
        "{peak} evaluations ran at once with --max-concurrency=1: the first one's slot was \
         given back when its client left"
    );
    ensure!(placed, "the second pod was not placed");
    // The scenario happened: the first evaluation was seen running while the second was
    // asked, and the second waited for its slot (the first's write answers 2.1 s late).
    ensure!(
        peak >= 1.0 && took >= Duration::from_secs(1),
        "the two admissions did not overlap (peak {peak}, the second took {took:?}): the test \
         proved nothing"
    );
    configs.delete().await?;
    Ok(())
}

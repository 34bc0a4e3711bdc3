//! Leader election: a paused or partitioned leader is replaced and never writes again.

use crate::support::{controller_bin, counted_replicas, create_deployment, create_ws, setup, zone};
use anyhow::{ensure, Context, Result};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;
use std::time::Duration;
use workloadspread_testkit::webhook::ControllerProcess;
use workloadspread_testkit::{cluster, unique_name, wait_for};

/// Issue #17 (9): two replicas with leader election (6 s lease: renew deadline 4 s, retry
/// 0.8 s). The leader is paused (SIGSTOP: a hung or cut-off process); the standby takes
/// over by its own clock once the Lease stopped changing for a lease duration, and keeps
/// the status up to date. When the old leader resumes it steps down without writing
/// anything: its last renewal is past the deadline, which fences every write. (It used to
/// keep leading for a whole lease duration after a failed renewal, and compared the
/// holder's clock with its own.)
#[tokio::test]
async fn a_paused_leader_is_replaced_and_never_writes_again() -> Result<()> {
    let ns = setup("ctl-leader").await?;
    let lease = unique_name("lease");
    let args = |identity: &str| leader_args(ns.name(), &lease, identity);
    let kubeconfig = cluster()?.kubeconfig();
    let mut a = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("a"), "debug")?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let holder = || async {
        let l = leases.get_opt(&lease).await?;
        anyhow::Ok(l.and_then(|l| l.spec?.holder_identity))
    };
    wait_for("a leads", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("a")).then_some(()))
    })
    .await?;
    let b = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("b"), "debug")?;
    // A standby passes its readiness probe (else two replicas never become available).
    let standby = wait_for("b ready as a standby", Duration::from_secs(30), || async {
        Ok(Some(b.readiness().await?).filter(|(ok, _)| *ok))
    })
    .await?;
    ensure!(standby.1.starts_with("standby"), "b's /readyz: {standby:?}");
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            // The last subset matches every node: without a webhook the scheduler may put a
            // pod in any zone (zone-c too), and the status must count both pods wherever.
            "subsets": [zone("a", "zone-a", Some(1)), {"name": "rest"}]}),
    )
    .await?;
    create_deployment(&ns, 2).await?;
    let replicas = |want: i64| {
        let ws_api = ws_api.clone();
        move || {
            let ws_api = ws_api.clone();
            async move {
                let s = ws_api.get("web").await?.data["status"].clone();
                let n = counted_replicas(&s);
                Ok((n == want).then_some(()))
            }
        }
    };
    wait_for(
        "status of 2 pods by a",
        Duration::from_secs(60),
        replicas(2),
    )
    .await
    .with_context(|| a.log_text())?;

    let signal = |sig: &str, pid: u32| {
        std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
    };
    signal("-STOP", a.pid())?;
    let paused = std::time::Instant::now();
    wait_for("b takes over", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("b")).then_some(()))
    })
    .await
    .with_context(|| b.log_text())?;
    let takeover = paused.elapsed();
    // A spec change only a leader acts on: b writes the status of generation 2.
    let spec = json!({"spec": {"subsets": [zone("a", "zone-a", Some(2)), {"name": "rest"}]}});
    ws_api
        .patch("web", &PatchParams::default(), &Patch::Merge(&spec))
        .await?;
    wait_for("b writes generation 2", Duration::from_secs(60), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        Ok((s["observedGeneration"] == 2).then_some(()))
    })
    .await
    .with_context(|| b.log_text())?;

    // Writes a *sent*: kube's "requesting" line comes before the request leaves, so one
    // sent before the pause is counted here even if its answer (and "status written") is
    // logged only after the resume (seen in CI: a PUT sent 7 s before the pause, its
    // "status written" logged after it).
    let written_before = writes_sent(&a.log_text());
    signal("-CONT", a.pid())?;
    let resumed = std::time::Instant::now();
    wait_for("a steps down and exits", Duration::from_secs(20), || {
        let exited = a.exited();
        async move { Ok(exited.then_some(())) }
    })
    .await
    .with_context(|| a.log_text())?;
    let log = a.log_text();
    eprintln!(
        "failover: b leads {:.1} s after a was paused; a stepped down {:.1} s after it resumed",
        takeover.as_secs_f64(),
        resumed.elapsed().as_secs_f64()
    );
    ensure!(
        writes_sent(&log) == written_before,
        "a wrote after it resumed:\n{log}"
    );
    ensure!(
        log.contains("stepping down") || log.contains("leadership lost"),
        "{log}"
    );
    ensure!(holder().await?.as_deref() == Some("b"));
    drop(b);
    Ok(())
}

/// A replica `identity` electing on Lease `lease` (6 s) and reconciling only `namespace`.
fn leader_args(namespace: &str, lease: &str, identity: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        namespace,
        "--lease-name",
        lease,
        "--identity",
        identity,
        "--lease-duration-seconds",
        "6",
        "--namespace",
        namespace,
    ]
    .map(str::to_string)
    .to_vec()
}

/// Issue #17 (9), the network side: the leader's connection to the API server hangs (a
/// partition: bytes swallowed, socket open). It must stop acting at its renew deadline,
/// before the standby may take the Lease (a whole lease duration after it last saw it
/// change): never two leaders at once.
#[tokio::test]
async fn a_partitioned_leader_stops_before_the_standby_leads() -> Result<()> {
    use std::sync::atomic::Ordering;
    use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via, Faults};
    let ns = setup("ctl-partition").await?;
    let lease = unique_name("lease");
    let args = |identity: &str| leader_args(ns.name(), &lease, identity);
    let kubeconfig = cluster()?.kubeconfig();
    let faults = Faults {
        delay: Duration::ZERO,
        reset_every: 0,
        reset_after: Duration::ZERO,
        ..Faults::default()
    };
    let (via, proxy) = fault_proxy(api_server_addr(kubeconfig)?, faults).await?;
    let partitioned = kubeconfig_via(kubeconfig, via)?;
    let mut a = ControllerProcess::spawn(controller_bin(), &partitioned, &args("a"), "debug")?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let holder = || async {
        let l = leases.get_opt(&lease).await?;
        anyhow::Ok(l.and_then(|l| l.spec?.holder_identity))
    };
    wait_for("a leads", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("a")).then_some(()))
    })
    .await?;
    let b = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("b"), "debug")?;
    // b is a standby that has seen a's Lease renewed before the partition starts.
    wait_for("b is waiting", Duration::from_secs(30), || async {
        Ok(b.log_text()
            .contains("waiting for leadership")
            .then_some(()))
    })
    .await?;

    proxy.hang.store(true, Ordering::SeqCst);
    let cut = std::time::Instant::now();
    let (mut a_stopped, mut b_leads) = (None, None);
    while (a_stopped.is_none() || b_leads.is_none()) && cut.elapsed() < Duration::from_secs(40) {
        let stepped_down = a.log_text().contains("stepping down") || a.exited();
        if a_stopped.is_none() && stepped_down {
            a_stopped = Some(cut.elapsed());
        }
        if b_leads.is_none() && holder().await?.as_deref() == Some("b") {
            b_leads = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.hang.store(false, Ordering::SeqCst);
    eprintln!("partition: a stopped after {a_stopped:?}, b leads after {b_leads:?}");
    let a_stopped =
        a_stopped.with_context(|| format!("a never stepped down:\n{}", a.log_text()))?;
    let b_leads = b_leads.with_context(|| format!("b never took over:\n{}", b.log_text()))?;
    ensure!(
        a_stopped < b_leads,
        "two leaders: b led after {b_leads:?}, a stepped down only after {a_stopped:?}\n{}",
        a.log_text()
    );
    Ok(())
}

/// Write requests (POST, PUT, PATCH, DELETE) a controller's debug log shows it sending,
/// Lease renewals aside (a renewal is fenced by the Lease's resourceVersion).
fn writes_sent(log: &str) -> usize {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.contains("kube_client::client::builder: requesting"))
        .filter(|l| !l.contains("coordination.k8s.io"))
        .filter(|l| {
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|m| l.contains(&format!("http.method={m} ")))
        })
        .count()
}

/// `line` without its terminal colour sequences (ESC [ … m).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn writes_are_counted_when_sent_not_when_answered() {
    let log = "\u{1b}[2mt\u{1b}[0m DEBUG HTTP{\u{1b}[3mhttp.method\u{1b}[0m=PUT http.url=https://x/apis/apps.kruise.io/v1beta1/namespaces/n/workloadspreads/web/status}: kube_client::client::builder: requesting
t DEBUG HTTP{http.method=PUT http.url=https://x/apis/coordination.k8s.io/v1/namespaces/n/leases/l}: kube_client::client::builder: requesting
t DEBUG HTTP{http.method=GET http.url=https://x/api/v1/pods}: kube_client::client::builder: requesting
t DEBUG reconciler: status written";
    assert_eq!(writes_sent(log), 1);
}

//! Security review R9: the controller's metrics and probe port under the probe limits the
//! host's health port has (`workloadspread_kube::serve`). Served with a plain
//! `axum::serve` it held every connection a pod opened, for good once it had asked one
//! question: no cap, no idle or first-request deadline.

use super::support::*;
use anyhow::{ensure, Result};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use workloadspread_testkit::cluster;
use workloadspread_testkit::probes::{ask_once_then_idle, probe};
use workloadspread_testkit::webhook::ControllerProcess;

/// 300 connections from 127.0.0.2 ask `/healthz` once and then stay silent, reconnecting
/// when closed; meanwhile 20 probes from the kubelet's address are each answered within
/// 1 s, and the controller holds no more of the attacker's connections than its cap.
#[tokio::test]
async fn a_peer_that_asks_once_and_idles_leaves_the_probes_answered() -> Result<()> {
    let ns = setup("ctl-probes").await?;
    let args = vec![
        "--namespace".to_string(),
        ns.name().to_string(),
        "--max-connections=64".into(),
    ];
    let controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    let port = controller.port();
    let hold = Duration::from_secs(12);
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let connections: Vec<_> = (0..300)
        .map(|_| {
            tokio::spawn(async move {
                let until = Instant::now() + hold;
                let mut longest = Duration::ZERO;
                // Reconnect whenever closed, as an attacker would.
                while Instant::now() < until {
                    match ask_once_then_idle(attacker, port, until - Instant::now()).await {
                        Ok(held) => longest = longest.max(held),
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                longest
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut answered, mut missed) = (vec![], 0);
    for _ in 0..20 {
        match probe(port).await? {
            Some(took) => answered.push(took),
            None => missed += 1,
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let shed = controller
        .metric("workloadspread_controller_connections_shed_total")
        .await?;
    let mut held_whole = 0;
    for c in connections {
        // Held to the end of the attack: never closed by the controller.
        if c.await? + Duration::from_millis(500) >= hold {
            held_whole += 1;
        }
    }
    let slowest = answered.iter().max().copied().unwrap_or_default();
    eprintln!(
        "300 connections that asked once and idled: {held_whole} held for the whole {hold:?}, \
         {shed} shed; probes: {} of 20 answered within 1 s (slowest {slowest:?})",
        answered.len()
    );
    ensure!(missed == 0, "{missed} of 20 probes unanswered within 1 s");
    ensure!(
        held_whole <= 64,
        "{held_whole} idle connections held for the whole attack: more than the cap of 64"
    );
    ensure!(shed > 0.0, "nothing shed at the cap");
    Ok(())
}

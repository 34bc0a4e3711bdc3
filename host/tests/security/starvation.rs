//! Issue #41 (3): slow and idle clients cannot starve admissions. A body is read before
//! its request may take an evaluation slot (a slow sender holds none, and is cut at the
//! body deadline); a connection that asks nothing is closed at the first-request
//! timeout, or shed at the connection limit once it waited a second (`shedding.rs`).

use super::security_support::*;
use anyhow::{ensure, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workloadspread_testkit::measure::Percentiles;
use workloadspread_testkit::stack::namespace_with_crd;
use workloadspread_testkit::webhook::{free_port, policy_wasm, HostProcess, WebhookConfigs};
use workloadspread_testkit::{cluster, unique_name};

/// A TCP connection to the host from loopback address `from` (another peer than the API
/// server, which connects from 127.0.0.1).
async fn tcp_from(from: Ipv4Addr, port: u16) -> Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    Ok(socket
        .connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await?)
}

/// A request whose headers arrive at once and whose body (4 KiB declared) one byte a
/// second: the HTTP status the host answers (0: closed without one) and when.
async fn slow_body(
    tls: tokio_rustls::TlsConnector,
    port: u16,
    cap: Duration,
) -> Result<(u16, Duration)> {
    let started = Instant::now();
    let tcp = tcp_from(Ipv4Addr::new(127, 0, 0, 2), port).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
    let mut stream = tls.connect(name, tcp).await?;
    stream
        .write_all(
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 4096\r\n\r\n{",
        )
        .await?;
    let mut buf = [0u8; 256];
    while started.elapsed() < cap {
        tokio::select! {
            read = stream.read(&mut buf) => {
                let text = match read {
                    Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
                    Err(_) => String::new(),
                };
                let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
                return Ok((code.unwrap_or(0), started.elapsed()));
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if stream.write_all(b" ").await.is_err() {
                    return Ok((0, started.elapsed()));
                }
            }
        }
    }
    Ok((0, cap))
}

/// A fresh connection from 127.0.0.1 (the API server's address here) asking `/healthz`:
/// how long until it is answered — what each admission the API server sends beyond the
/// connections it keeps alive waits first.
async fn fresh_connection(tls: &tokio_rustls::TlsConnector, port: u16) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = connect(tls, port).await?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    ensure!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    Ok(started.elapsed())
}

/// A connection that never sends a byte: how long the host kept it open once connected
/// (capped).
async fn idle(port: u16, cap: Duration) -> Result<Duration> {
    let mut tcp = tcp_from(Ipv4Addr::new(127, 0, 0, 3), port).await?;
    let started = Instant::now();
    let mut buf = [0u8; 16];
    match tokio::time::timeout(cap, tcp.read(&mut buf)).await {
        Ok(_) => Ok(started.elapsed()),
        Err(_) => Ok(cap),
    }
}

#[tokio::test]
async fn slow_bodies_and_idle_connections_leave_admissions_answered() -> Result<()> {
    let _machine = attack_alone().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = namespace_with_crd("starve").await?;
    let client = ns.client();
    let rs_uid = spread_over_replicaset(&ns, 100_000).await?;
    let port = free_port()?;
    let name = unique_name("ws-starve");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let ca_file = std::env::temp_dir().join(format!("{}.pem", unique_name("ca")));
    // The chart's limits.
    let (body_timeout, first_request) = (Duration::from_secs(3), Duration::from_secs(5));
    let host = HostProcess::start_on(
        host_bin(),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
            "--ca-bundle-out".into(),
            ca_file.display().to_string(),
            "--max-concurrency=16".into(),
            "--max-memory-mib=32".into(),
            "--max-connections=512".into(),
            format!("--body-timeout-seconds={}", body_timeout.as_secs()),
            format!(
                "--first-request-timeout-seconds={}",
                first_request.as_secs()
            ),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    host.wait_sees_workloadspread(ns.name(), "web", &target())
        .await?;
    let tls = tls_client(&std::fs::read_to_string(&ca_file)?)?;

    let cap = Duration::from_secs(30);
    let slow: Vec<_> = (0..48)
        .map(|_| tokio::spawn(slow_body(tls.clone(), port, cap)))
        .collect();
    let idle: Vec<_> = (0..1000).map(|_| tokio::spawn(idle(port, cap))).collect();
    // The attack is in place: 48 bodies started, 1000 connections opened.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut fresh = Duration::ZERO;
    for _ in 0..5 {
        fresh = fresh.max(fresh_connection(&tls, port).await?);
    }
    // Three waves of 10 concurrent creates: the API server needs connections beyond the
    // ones it keeps alive, which must not wait behind the attackers'.
    let mut during = vec![];
    for wave in 0..3 {
        let names: Vec<String> = (0..10).map(|i| format!("during-{wave}-{i}")).collect();
        let creates = names.iter().map(|n| admit(&ns, &rs_uid, n));
        for (i, result) in futures::future::join_all(creates)
            .await
            .into_iter()
            .enumerate()
        {
            let (took, placed) = result?;
            ensure!(placed, "pod during-{wave}-{i} was not placed");
            during.push(took);
        }
    }
    let mut answered = std::collections::BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for task in slow {
        let (code, took) = task.await??;
        *answered.entry(code).or_insert(0) += 1;
        slowest = slowest.max(took);
    }
    let mut held = vec![];
    for task in idle {
        held.push(task.await??);
    }
    held.sort();
    let longest = held.last().copied().unwrap_or_default();
    let beyond_a_second = held.iter().filter(|d| **d > Duration::from_secs(1)).count();
    let attacked = Percentiles::of(during.clone());
    eprintln!(
        "admissions under attack p50/p99 {:?}/{:?} (max {:?}); a fresh connection served \
         within {fresh:?}; 48 slow bodies answered {answered:?}, the last after {slowest:?}; \
         1000 idle connections: {beyond_a_second} held over 1 s, the longest {longest:?}",
        attacked.p50,
        attacked.p99,
        during.iter().max()
    );
    ensure!(
        attacked.p99 < Duration::from_secs(5),
        "admissions under attack: p99 {:?}",
        attacked.p99
    );
    ensure!(
        fresh < Duration::from_secs(2),
        "a new connection waited {fresh:?} behind the attackers' to be served"
    );
    ensure!(
        answered.get(&408) == Some(&48),
        "every slow body is cut with 408 at the body deadline: {answered:?}"
    );
    ensure!(
        slowest < body_timeout + Duration::from_secs(3),
        "a slow body held its connection {slowest:?}"
    );
    // At the cap (512, the slow bodies' 48 included) the idle peer is the heaviest: its
    // connections are shed once they waited a second, oldest first; one accepted while the
    // host is at its cap waits for room at most the request-read timeout (10 s, then it is
    // closed) and, once served, the first-request timeout: none is held longer (how many
    // passed a second is only printed).
    let bound = Duration::from_secs(10) + first_request + Duration::from_secs(3);
    ensure!(
        longest < bound,
        "an idle connection was held {longest:?} (waiting for room, then the first-request timeout {first_request:?}: at most {bound:?})"
    );
    configs.delete().await?;
    Ok(())
}

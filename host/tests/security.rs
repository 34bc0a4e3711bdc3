//! Issue #30 on the local control plane: what a caller who can reach the host can make it
//! do. Slow and large requests do not stop real admissions (answered, p99 reported) nor
//! push the host past its memory limit; with client certificates only the API server is
//! answered; a namespace's flood of claims is rate-limited; claims whose pods never appear
//! are dropped long before the creating window; generated certificates rotate while pods
//! are admitted, and a re-applied webhook configuration gets its CA bundle back; the
//! uninstall step removes what points at the host; a CRD that is not ours is left alone.

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_testkit::measure::Percentiles;
use workloadspread_testkit::stack::{namespace_with_crd, Stack};
use workloadspread_testkit::webhook::{
    free_port, policy_wasm, round_robin_proxy, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for};

mod security_support;
use security_support::*;
#[path = "security/ca_rotation.rs"]
mod ca_rotation;
#[path = "security/shedding.rs"]
mod shedding;
#[path = "security/slots.rs"]
mod slots;
#[path = "security/starvation.rs"]
mod starvation;

/// Issue #30 (3): 200 slowloris connections and 20 concurrent senders of 8 MiB bodies
/// against a host sized as the chart sizes it (16 slots × 32 MiB guests under 1 GiB):
/// pods keep being admitted within the webhook timeout, the slow connections are cut at
/// the header timeout, and the host's peak memory stays under its limit.
#[tokio::test]
async fn slow_and_large_requests_leave_admissions_answered() -> Result<()> {
    let _machine = attack_alone().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = namespace_with_crd("dos").await?;
    let client = ns.client();
    let rs_uid = spread_over_replicaset(&ns, 100_000).await?;
    let port = free_port()?;
    let name = unique_name("ws-dos");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let ca_file = std::env::temp_dir().join(format!("{}.pem", unique_name("ca")));
    let header_timeout = Duration::from_secs(5);
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
            "--memory-limit-mib=1024".into(),
            format!(
                "--request-read-timeout-seconds={}",
                header_timeout.as_secs()
            ),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    host.wait_sees_workloadspread(ns.name(), "web", &target())
        .await?;
    let tls = tls_client(&std::fs::read_to_string(&ca_file)?)?;

    let mut baseline = vec![];
    for i in 0..10 {
        let (took, placed) = admit(&ns, &rs_uid, &format!("before-{i}")).await?;
        ensure!(placed, "pod before-{i} was not placed");
        baseline.push(took);
    }

    let cap = Duration::from_secs(40);
    let slow: Vec<_> = (0..200)
        .map(|_| tokio::spawn(slowloris(tls.clone(), host.port, cap)))
        .collect();
    let body = Arc::new(big_review(ns.name(), 8 << 20));
    let big: Vec<_> = (0..20)
        .map(|_| {
            let (tls, body) = (tls.clone(), body.clone());
            tokio::spawn(async move {
                let mut codes = vec![];
                for _ in 0..3 {
                    codes.push(post_body(tls.clone(), port, body.clone()).await?);
                }
                anyhow::Ok(codes)
            })
        })
        .collect();
    let mut during = vec![];
    for i in 0..40 {
        let (took, placed) = admit(&ns, &rs_uid, &format!("during-{i}")).await?;
        ensure!(placed, "pod during-{i} was not placed");
        during.push(took);
    }
    let mut codes = std::collections::BTreeMap::new();
    for task in big {
        for code in task.await?? {
            *codes.entry(code).or_insert(0) += 1;
        }
    }
    let mut held = vec![];
    for task in slow {
        held.push(task.await??);
    }
    let peak = high_water_mib(host.pid())?;
    let (before, attacked) = (Percentiles::of(baseline), Percentiles::of(during.clone()));
    let longest_slow = held.iter().max().copied().unwrap_or_default();
    eprintln!(
        "admissions p50/p99: before {:?}/{:?}, under attack {:?}/{:?} (max {:?}); \
         slowloris connections held at most {longest_slow:?}; 8 MiB bodies answered {codes:?}; \
         host peak RSS {peak:.0} MiB",
        before.p50,
        before.p99,
        attacked.p50,
        attacked.p99,
        during.iter().max()
    );
    ensure!(
        attacked.p99 < Duration::from_secs(10),
        "admissions under attack: p99 {:?} is past the webhook timeout",
        attacked.p99
    );
    ensure!(
        longest_slow < header_timeout + Duration::from_secs(10),
        "a slowloris connection was held {longest_slow:?} (header timeout {header_timeout:?})"
    );
    // The bodies themselves may be answered (200), refused while every slot is busy (503,
    // or the connection closed unread: 0), or cut at the read timeout (408): never hung.
    ensure!(
        codes.keys().all(|c| [0, 200, 408, 503].contains(c)),
        "8 MiB reviews answered {codes:?}"
    );
    ensure!(
        peak < 1024.0,
        "peak RSS {peak:.0} MiB is past the 1024 MiB limit"
    );
    configs.delete().await?;
    Ok(())
}

/// Issue #30 (1): with --client-ca-file the webhook answers the API server (which
/// presents the cluster's webhook client certificate) and refuses everyone else.
#[tokio::test]
async fn with_client_certificates_only_the_api_server_is_answered() -> Result<()> {
    let _machine = beside_others().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = namespace_with_crd("client-cert").await?;
    let client = ns.client();
    let rs_uid = spread_over_replicaset(&ns, 10).await?;
    let port = free_port()?;
    let name = unique_name("ws-mtls");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let host = HostProcess::start_on(
        host_bin(),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
            "--client-ca-file".into(),
            pki("webhook-client-ca.crt")?.display().to_string(),
            // The common name the local control plane's API server presents.
            "--client-cert-identity".into(),
            "kube-apiserver-webhook-client".into(),
        ],
    )
    .await?;
    // The enrolment probe is refused by /validate: the API server got through.
    configs.enroll(ns.name()).await?;
    let (_, placed) = admit(&ns, &rs_uid, "through-the-api-server").await?;
    ensure!(placed, "the API server's admission was not answered");
    let review = big_review(ns.name(), 4096);
    let file = std::env::temp_dir().join(format!("{}.json", unique_name("review")));
    std::fs::write(&file, &review)?;
    let curl = |cert: Option<(&str, &str)>| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args([
            "-sk",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["-H", "Content-Type: application/json"])
        .arg("--data-binary")
        .arg(format!("@{}", file.display()));
        if let Some((crt, key)) = cert {
            cmd.args(["--cert", crt, "--key", key]);
        }
        cmd.arg(format!("https://127.0.0.1:{port}/mutate"));
        let out = cmd.output()?;
        anyhow::Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    let (webhook_crt, webhook_key) = (pki("webhook-client.crt")?, pki("webhook-client.key")?);
    let (admin_crt, admin_key) = (pki("admin.crt")?, pki("admin.key")?);
    // Issue #41: a certificate of the same CA for another identity.
    let (intruder_crt, intruder_key) = sign_client("intruder", "webhook-client-ca")?;
    let intruder = curl(Some((
        intruder_crt.to_str().unwrap_or_default(),
        intruder_key.to_str().unwrap_or_default(),
    )))?;
    let anonymous = curl(None)?;
    let other_ca = curl(Some((
        admin_crt.to_str().unwrap_or_default(),
        admin_key.to_str().unwrap_or_default(),
    )))?;
    let api_server = curl(Some((
        webhook_crt.to_str().unwrap_or_default(),
        webhook_key.to_str().unwrap_or_default(),
    )))?;
    let probes = host.get_over_tls("/healthz").await?;
    eprintln!(
        "no certificate: {anonymous:?}; another CA's: {other_ca:?}; the CA's for another \
         identity: {intruder:?}; the API server's: {api_server:?}; /healthz without one: \
         {probes:?}"
    );
    ensure!(
        intruder == (true, "403".into()),
        "a certificate of the CA naming another identity: {intruder:?}"
    );
    ensure!(
        anonymous == (true, "403".into()),
        "anonymous caller: {anonymous:?}"
    );
    ensure!(
        !other_ca.0,
        "a certificate of another CA passed the handshake: {other_ca:?}"
    );
    ensure!(
        api_server == (true, "200".into()),
        "the API server's certificate: {api_server:?}"
    );
    ensure!(probes == "ok", "probes need no certificate: {probes}");
    configs.delete().await?;
    Ok(())
}

/// Issue #30 (1): one namespace's pod creations that may claim a slot are limited
/// (burst 5, then 0.5/s). The refusal is HTTP 429 with what to do — clients retry it
/// with backoff (kube's client does, as the ReplicaSet controller requeues), so 8 creations
/// take the burst plus the rate; a forged request past the limit is refused outright.
#[tokio::test]
async fn a_namespace_flood_of_claims_is_rate_limited() -> Result<()> {
    let _machine = beside_others().await;
    let Some(stack) =
        Stack::start_with("claim-rate", &["--claim-rate=0.5", "--claim-burst=5"], &[]).await?
    else {
        return Ok(());
    };
    let rs_uid = spread_over_replicaset(&stack.ns, 100).await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), "web", &target())
        .await?;
    let started = Instant::now();
    for i in 0..8 {
        let (_, placed) = admit(&stack.ns, &rs_uid, &format!("flood-{i}")).await?;
        ensure!(placed, "flood-{i} was not placed");
    }
    let took = started.elapsed();
    let limited = stack
        .host
        .metric("workloadspread_host_claims_rate_limited_total")
        .await?;
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": unique_name("flood"), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": stack.ns.name(), "operation": "CREATE", "userInfo": {"username": "x"},
            "object": serde_json::to_value(owned_pod("flood-x", &rs_uid)?)?}});
    let (code, body) = stack
        .host
        .post("/mutate", &serde_json::to_vec(&review)?)
        .await?;
    eprintln!(
        "8 creations (burst 5, 0.5/s) took {took:?}; {limited} refusals counted; \
         a further one: {code} {body}"
    );
    ensure!(
        took >= Duration::from_secs(4),
        "8 creations in {took:?}: the limit did not hold"
    );
    ensure!(limited >= 3.0, "claims_rate_limited_total {limited}");
    ensure!(
        body.contains("\"allowed\":false")
            && body.contains("\"code\":429")
            && body.contains("--claim-rate")
            && body.contains("retries"),
        "the refusal must be a 429 saying what to do: {body}"
    );
    stack.finish().await
}

/// Issue #30 (1): a forged pod CREATE sent straight to /mutate (random uid, owner reference
/// to the namespace's workload) claims a slot; the controller drops it after
/// --creating-drop-seconds once a live read shows no such pod — not after the 30 s
/// window — and counts it. A real pod's claim is kept.
#[tokio::test]
async fn claims_whose_pods_never_appear_are_dropped_early() -> Result<()> {
    let _machine = beside_others().await;
    let Some(stack) = Stack::start_with("early-drop", &[], &["--creating-drop-seconds=3"]).await?
    else {
        return Ok(());
    };
    let ns = &stack.ns;
    let rs_uid = spread_over_replicas(ns, 100, 2).await?;
    stack
        .host
        .wait_sees_workloadspread(ns.name(), "web", &target())
        .await?;
    let forged_uid = unique_name("forged");
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": forged_uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns.name(), "operation": "CREATE", "userInfo": {"username": "attacker"},
            "object": serde_json::to_value(owned_pod("", &rs_uid)?)?}});
    let forged_at = Instant::now();
    let (code, body) = stack
        .host
        .post("/mutate", &serde_json::to_vec(&review)?)
        .await?;
    ensure!(
        code == 200 && body.contains("\"allowed\":true"),
        "forged claim: {code} {body}"
    );
    // Every creatingPods key of the status, versioned statuses included.
    let creating = |ws: &DynamicObject| -> Vec<String> {
        let status = &ws.data["status"];
        let versioned = status["versionedSubsetStatuses"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .flat_map(|v| v.as_array().into_iter().flatten());
        status["subsetStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(versioned)
            .flat_map(|s| {
                s["creatingPods"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.keys())
            })
            .cloned()
            .collect()
    };
    let api = ws_api(ns);
    wait_for(
        "the forged claim in the status",
        Duration::from_secs(15),
        || async {
            Ok(creating(&api.get("web").await?)
                .contains(&forged_uid)
                .then_some(()))
        },
    )
    .await?;
    let gone = wait_for(
        "the forged claim dropped",
        Duration::from_secs(25),
        || async {
            Ok((!creating(&api.get("web").await?).contains(&forged_uid))
                .then_some(forged_at.elapsed()))
        },
    )
    .await?;
    let dropped = stack
        .controller
        .metric("workloadspread_controller_creating_dropped_early_total")
        .await?;
    eprintln!("forged claim dropped {gone:?} after it was made; metric {dropped}");
    ensure!(
        gone < Duration::from_secs(25),
        "dropped after {gone:?}: the creating window, not early"
    );
    ensure!(dropped >= 1.0, "creating_dropped_early_total {dropped}");
    // A real pod keeps its slot until counted.
    let (_, placed) = admit(ns, &rs_uid, "real").await?;
    ensure!(placed, "the real pod was not placed");
    stack.finish().await
}

/// Issue #30 (4): two replicas share a Secret whose certificates live seconds (serving 8 s,
/// CA 24 s, grace 2 s); for 40 s pods are admitted through both without one failure while
/// the serving certificate is renewed and the CA replaced. Then re-applied mutating and
/// validating configurations with a stale CA bundle get the current one back within
/// seconds.
#[tokio::test]
async fn generated_certificates_rotate_without_refusing_admissions() -> Result<()> {
    let _machine = beside_others().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = namespace_with_crd("rotation").await?;
    let client = ns.client();
    let rs_uid = spread_over_replicaset(&ns, 100_000).await?;
    let ports = [free_port()?, free_port()?];
    let proxy =
        round_robin_proxy(ports.iter().map(|p| ([127, 0, 0, 1], *p).into()).collect()).await?;
    let name = unique_name("ws-rotate");
    let configs = WebhookConfigs::create(&client, &name, &format!("https://{proxy}")).await?;
    let secret = unique_name("tls");
    let args = |_: usize| -> Vec<String> {
        vec![
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
            format!("--tls-secret={}/{secret}", ns.name()),
            "--tls-cert-validity=8s".into(),
            "--tls-ca-validity=24s".into(),
            "--tls-rotation-grace=2s".into(),
            "--tls-reload-seconds=1".into(),
        ]
    };
    let mut hosts = vec![];
    for (i, port) in ports.iter().enumerate() {
        hosts.push(HostProcess::start_on(host_bin(), cluster.kubeconfig(), *port, &args(i)).await?);
    }
    configs.enroll(ns.name()).await?;
    for h in &hosts {
        h.wait_sees_workloadspread(ns.name(), "web", &target())
            .await?;
    }
    let secrets = ns.api::<Secret>();
    let started = Instant::now();
    let (mut admitted, mut generations, mut serving) = (
        0,
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    while started.elapsed() < Duration::from_secs(40) {
        let (_, placed) = admit(&ns, &rs_uid, &format!("r-{admitted}"))
            .await
            .with_context(|| format!("{:?} into the rotation", started.elapsed()))?;
        ensure!(placed, "pod r-{admitted} was not placed");
        admitted += 1;
        let s = secrets.get(&secret).await?;
        generations.extend(secret_generation(&s));
        serving.extend(s.data.and_then(|d| d.get("tls.crt").cloned()).map(|b| b.0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "{admitted} pods admitted in 40 s; bundle generations {generations:?}; {} serving certificates",
        serving.len()
    );
    ensure!(
        serving.len() >= 4,
        "{} serving certificates in 40 s of 8 s ones",
        serving.len()
    );
    ensure!(
        generations.iter().max().copied().unwrap_or(0) >= 3,
        "no CA replacement seen (generations {generations:?})"
    );
    // A GitOps tool re-applies both configurations: a stale caBundle, no generation
    // annotation.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let stale = |webhook: &str| {
        json!({"metadata": {"annotations": {"workloadspread.io/ca-bundle-generation": null}},
            "webhooks": [{"name": webhook, "clientConfig": {"caBundle": "Zm9v"}}]})
    };
    let broken_at = Instant::now();
    mutating
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(&stale("mutate.workloadspread.test")),
        )
        .await?;
    validating
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(&stale("validate.workloadspread.test")),
        )
        .await?;
    let current = |b: &Option<k8s_openapi::ByteString>| b.as_ref().is_some_and(|b| b.0 != b"foo");
    let restored = wait_for(
        "the CA bundles re-patched",
        Duration::from_secs(15),
        || async {
            let m = mutating.get(&name).await?;
            let v = validating.get(&name).await?;
            let ok = m
                .webhooks
                .iter()
                .flatten()
                .all(|w| current(&w.client_config.ca_bundle))
                && v.webhooks
                    .iter()
                    .flatten()
                    .all(|w| current(&w.client_config.ca_bundle));
            Ok(ok.then_some(broken_at.elapsed()))
        },
    )
    .await?;
    let (_, placed) = admit(&ns, &rs_uid, "after-reapply").await?;
    eprintln!("re-applied configuration re-patched after {restored:?}");
    ensure!(placed, "the pod after the re-apply was not placed");
    configs.delete().await?;
    Ok(())
}

/// Issue #30 (4), when the bundle cannot be written: a host running as a user whose right
/// to update its webhook configurations is revoked after start (CA 60 s, serving 10 s,
/// grace 2 s). The next CA never reaches them: the host reports the bundle stale (the
/// metric, still ready: every replica would go at once), then — once the certificate
/// would expire before a fix could land — not ready, naming the configuration, the 403
/// and what to grant, also in its log. Granted again, it switches CA and is ready.
#[tokio::test]
async fn a_bundle_the_host_may_not_write_is_reported_before_its_certificate_expires() -> Result<()>
{
    let _machine = beside_others().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = namespace_with_crd("stale-bundle").await?;
    let client = ns.client();
    let name = unique_name("ws-stale");
    let configs = WebhookConfigs::create(&client, &name, "https://127.0.0.1:9").await?;
    let user = unique_name("ws-host");
    let rbac = HostRbac::grant(&client, &user, &name).await?;
    let kubeconfig = impersonating_kubeconfig(cluster.kubeconfig(), &user)?;
    let args: Vec<String> = vec![
        "--policy".into(),
        policy.display().to_string(),
        "--webhook-config".into(),
        name.clone(),
        format!("--tls-secret={}/{}", ns.name(), unique_name("tls")),
        "--tls-cert-validity=10s".into(),
        "--tls-ca-validity=60s".into(),
        "--tls-rotation-grace=2s".into(),
        "--tls-reload-seconds=1".into(),
    ];
    let host = HostProcess::start(host_bin(), &kubeconfig, &args).await?;
    rbac.revoke_write().await?;
    let started = Instant::now();
    const STALE: &str = "workloadspread_host_ca_bundle_stale_seconds";
    // Stale past the warning bound (the grace, 2 s) and still ready.
    let what = "the bundle stale for 3 s while ready";
    let stale = wait_for(what, Duration::from_secs(90), || async {
        let stale = host.metric(STALE).await?;
        let ready = host.get("/readyz").await?;
        Ok((stale >= 3.0 && ready == "ok").then_some(stale))
    })
    .await?;
    let reason = wait_for("/readyz failing", Duration::from_secs(90), || async {
        let body = host.get("/readyz").await?;
        Ok((body != "ok").then_some(body))
    })
    .await?;
    eprintln!(
        "stale {stale} s while ready; not ready {:?} after the revocation: {reason}",
        started.elapsed()
    );
    let advice = format!("grant update on mutatingwebhookconfigurations/{name}");
    ensure!(
        reason.contains(&format!("MutatingWebhookConfiguration {name}"))
            && reason.contains("forbidden")
            && reason.contains("the serving certificate stops working in")
            && reason.contains(&advice),
        "not ready before the certificate expired, naming the object, the error and what \
         to do: {reason}"
    );
    match std::fs::read_to_string(&host.log) {
        Ok(log) => ensure!(
            log.contains(&advice),
            "no warning saying what to do in the log"
        ),
        // Seen on the shared test machine only: another user's cleanup of the temp dir.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "{} was removed meanwhile: the log not checked",
                host.log.display()
            )
        }
        Err(e) => return Err(e.into()),
    }
    rbac.grant_write().await?;
    wait_for(
        "ready again after the grant",
        Duration::from_secs(60),
        || async {
            let ready = host.get("/readyz").await? == "ok";
            Ok((ready && host.metric(STALE).await? == 0.0).then_some(()))
        },
    )
    .await?;
    configs.delete().await?;
    rbac.delete().await
}

/// Issue #30 (7): `uninstall` deletes the webhook configurations and resets the CRD's
/// conversion when it points at the uninstalled host; `serve` refuses to point the
/// conversion of a CRD this project did not ship at itself (OpenKruise's has our name).
#[tokio::test]
async fn uninstall_removes_what_points_at_the_host_and_foreign_crds_are_left_alone() -> Result<()> {
    let _machine = beside_others().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let name = unique_name("ws-uninstall");
    let configs = WebhookConfigs::create(&client, &name, "https://127.0.0.1:1").await?;
    let crd_name = format!("{}.apps.kruise.io", unique_name("fakes").replace('-', ""));
    let plural = crd_name.split('.').next().unwrap_or_default().to_string();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
            "names": {"plural": plural, "singular": format!("{plural}x"),
                "kind": format!("F{}", &plural[1..])},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    workloadspread_testkit::webhook::apply_crd(&client, &crd).await?;
    // Not ours: the host refuses to start rather than patch it (and exits).
    let log = std::env::temp_dir().join(format!("{}.log", unique_name("foreign-crd")));
    let mut serve = std::process::Command::new(host_bin())
        .args(["serve", "--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args([
            "--listen",
            &format!("127.0.0.1:{}", free_port()?),
            "--policy",
        ])
        .arg(&policy)
        .args(["--conversion-crd", &crd_name])
        .args(["--conversion-url", "https://127.0.0.1:1/convert"])
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let exited = loop {
        if let Some(status) = serve.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = serve.kill();
    let _ = serve.wait();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    ensure!(
        exited.is_some_and(|status| !status.success())
            && stderr.contains("workloadspread.io/provider"),
        "serve did not refuse the foreign CRD: {stderr}"
    );
    // Ours (the annotation), pointing at the host's Service: reset by `uninstall`.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let patch = json!({"metadata": {"annotations": {"workloadspread.io/provider": "workloadspread"}},
        "spec": {"conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ws-system", "name": "ws-host", "path": "/convert"}}}}}});
    crds.patch(&crd_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let out = std::process::Command::new(host_bin())
        .args(["uninstall", "--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args(["--webhook-config", &name, "--conversion-crd", &crd_name])
        .args(["--conversion-service", "ws-system/ws-host"])
        .output()?;
    ensure!(
        out.status.success(),
        "uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        configs.has_ca_bundle().await.is_err(),
        "the webhook configurations are still there"
    );
    let strategy = crds
        .get(&crd_name)
        .await?
        .spec
        .conversion
        .map(|c| c.strategy);
    ensure!(
        strategy.as_deref() == Some("None"),
        "conversion left as {strategy:?}"
    );
    crds.delete(&crd_name, &Default::default()).await?;
    Ok(())
}

//! Issue #41 (2, 6): certificates from files (cert-manager) whose CA is renewed while pods
//! are admitted. The test plays cert-manager and the kubelet: the certificate, key and CA
//! files are swapped at once (a `..data` symlink, as the kubelet projects a Secret) for a
//! certificate of a new CA. The host publishes the new CA next to the old one, serves the
//! new certificate a grace later, and drops the old CA after the overlap: no admission is
//! refused.

use super::security_support::*;
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Api;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_testkit::stack::namespace_with_crd;
use workloadspread_testkit::webhook::{free_port, policy_wasm, HostProcess, WebhookConfigs};
use workloadspread_testkit::{cluster, unique_name, wait_for};

/// A CA, and a serving certificate for 127.0.0.1 it signed: (CA PEM, certificate PEM, key PEM).
fn issue(ca_name: &str) -> Result<(String, String, String)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![])?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca = params.self_signed(&ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    // Issued now, as cert-manager issues it (the overlap runs from then).
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    params.not_before = time::OffsetDateTime::now_utc();
    params.not_after = params.not_before + time::Duration::days(1);
    let leaf = params.signed_by(&key, &ca, &ca_key)?;
    Ok((ca.pem(), leaf.pem(), key.serialize_pem()))
}

/// Writes the three files into a new directory and points `dir/..data` at it at once (the
/// kubelet's atomic update of a projected Secret); `dir/tls.crt` & co. link through it.
fn project(dir: &Path, generation: u32, files: &(String, String, String)) -> Result<()> {
    let data = dir.join(format!("..{generation}"));
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("ca.crt"), &files.0)?;
    std::fs::write(data.join("tls.crt"), &files.1)?;
    std::fs::write(data.join("tls.key"), &files.2)?;
    let link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("..{generation}"), &link)?;
    std::fs::rename(&link, dir.join("..data"))?;
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        if !dir.join(f).exists() {
            std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f))?;
        }
    }
    Ok(())
}

/// The CA certificates the mutating configuration's webhooks trust.
async fn trusted(client: &kube::Client, name: &str) -> Result<String> {
    let c = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    let bundle = c
        .webhooks
        .unwrap_or_default()
        .first()
        .and_then(|w| w.client_config.ca_bundle.clone())
        .context("no CA bundle")?;
    Ok(String::from_utf8_lossy(&bundle.0).into_owned())
}

#[tokio::test]
async fn a_renewed_ca_from_files_refuses_no_admission() -> Result<()> {
    let _machine = beside_others().await;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = Arc::new(namespace_with_crd("ca-files").await?);
    let client = ns.client();
    let rs_uid = spread_over_replicaset(&ns, 100_000).await?;
    let dir = std::env::temp_dir().join(unique_name("cert-manager"));
    std::fs::create_dir_all(&dir)?;
    let (old, new) = (issue("old CA")?, issue("new CA")?);
    project(&dir, 1, &old)?;
    let port = free_port()?;
    let name = unique_name("ws-ca-files");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let path = |f: &str| dir.join(f).display().to_string();
    let (grace, overlap) = (3, 20);
    let _host = HostProcess::start_on(
        host_bin(),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
            "--tls-cert-file".into(),
            path("tls.crt"),
            "--tls-key-file".into(),
            path("tls.key"),
            "--tls-ca-file".into(),
            path("ca.crt"),
            "--tls-reload-seconds=1".into(),
            format!("--tls-rotation-grace={grace}s"),
            format!("--tls-ca-overlap={overlap}s"),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    ensure!(
        trusted(&client, &name).await?.contains(old.0.trim()),
        "the old CA is published"
    );
    // Pods keep being created through the API server while the CA changes.
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let (stop, ns) = (stop.clone(), ns.clone());
        let rs_uid = rs_uid.clone();
        tokio::spawn(async move {
            let (mut created, mut refused) = (0, vec![]);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                match admit(&ns, &rs_uid, &format!("rotation-{i}")).await {
                    Ok(_) => created += 1,
                    Err(e) => refused.push(format!("{e:#}")),
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (created, refused)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let swapped = Instant::now();
    project(&dir, 2, &new)?;
    let holds = |bundle: &str, ca: &str| bundle.contains(ca.trim());
    let published = wait_for("both CAs published", Duration::from_secs(20), || async {
        let bundle = trusted(&client, &name).await?;
        Ok((holds(&bundle, &new.0) && holds(&bundle, &old.0)).then(|| swapped.elapsed()))
    })
    .await?;
    let retired = wait_for(
        "the old CA dropped after the overlap",
        Duration::from_secs(overlap + 30),
        || async {
            let bundle = trusted(&client, &name).await?;
            Ok((holds(&bundle, &new.0) && !holds(&bundle, &old.0)).then(|| swapped.elapsed()))
        },
    )
    .await?;
    // A little longer: admissions after the old CA is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (created, refused) = stream.await?;
    eprintln!(
        "CA renewed in the files: both CAs published after {published:?}, the old one \
         dropped after {retired:?}; {created} pods created meanwhile, {} refused",
        refused.len()
    );
    ensure!(
        refused.is_empty(),
        "admissions refused: {:?}",
        &refused[..refused.len().min(3)]
    );
    ensure!(
        created > 50,
        "only {created} pods created across the rotation"
    );
    configs.delete().await?;
    Ok(())
}

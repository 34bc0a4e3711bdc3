//! Serving certificates from files, reloaded when they rotate.

use crate::support::host_bin;
use anyhow::{ensure, Result};
use std::path::Path;
use std::time::Duration;
use workloadspread_testkit::webhook::{policy_wasm, HostProcess};
use workloadspread_testkit::{cluster, unique_name, wait_for};

fn self_signed(dir: &Path, name: &str) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()?;
    ensure!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((cert, key))
}

/// SHA-256 fingerprint of the certificate the server presents.
fn served_fingerprint(port: u16) -> Result<String> {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn file_fingerprint(cert: &Path) -> Result<String> {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Certificates from files are reloaded while serving (cert-manager rotation).
#[tokio::test]
async fn rotated_certificate_files_are_served_without_a_restart() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let dir = std::env::temp_dir().join(unique_name("rotate"));
    std::fs::create_dir_all(&dir)?;
    let (first, first_key) = self_signed(&dir, "first")?;
    let (second, second_key) = self_signed(&dir, "second")?;
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(&first, &cert)?;
    std::fs::copy(&first_key, &key)?;
    let args: Vec<String> = [
        "--policy",
        &policy.display().to_string(),
        "--tls-cert-file",
        &cert.display().to_string(),
        "--tls-key-file",
        &key.display().to_string(),
        "--tls-reload-seconds",
        "1",
    ]
    .map(str::to_string)
    .to_vec();
    let host = HostProcess::start(host_bin(), cluster()?.kubeconfig(), &args).await?;
    ensure!(served_fingerprint(host.port)? == file_fingerprint(&first)?);
    std::fs::copy(&second, &cert)?;
    std::fs::copy(&second_key, &key)?;
    let want = file_fingerprint(&second)?;
    wait_for(
        "the rotated certificate",
        Duration::from_secs(15),
        || async { Ok((served_fingerprint(host.port)? == want).then_some(())) },
    )
    .await?;
    ensure!(host.get_over_tls("/healthz").await? == "ok");
    Ok(())
}

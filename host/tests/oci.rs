//! `push` / `pull` against a real OCI registry on loopback (Debian's `docker-registry`,
//! the CNCF distribution registry): Kubewarden's media types, metadata annotations,
//! pull by tag and by the immutable digest, and the pulled module still runs.

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use workloadspread_testkit::webhook::{free_port, policy_wasm};

fn host(args: &[&str]) -> Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .args(args)
        .output()?;
    ensure!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// A registry process on a free loopback port, killed on drop.
struct Registry {
    child: Child,
    port: u16,
    _dir: PathBuf,
}

impl Registry {
    fn start() -> Result<Option<Self>> {
        let bin = Path::new("/usr/bin/docker-registry");
        if !bin.exists() {
            if std::env::var_os("WS_REQUIRE_WASM").is_some() {
                bail!("docker-registry is missing (apt-get install docker-registry)");
            }
            eprintln!("SKIP: no docker-registry (apt-get install docker-registry)");
            return Ok(None);
        }
        let port = free_port()?;
        let dir = std::env::temp_dir().join(workloadspread_testkit::unique_name("registry"));
        std::fs::create_dir_all(&dir)?;
        let config = format!(
            "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("config.yml"), config)?;
        let child = Command::new(bin)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let registry = Registry {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(Some(registry));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("registry did not listen on {port}")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn manifest(port: u16, repo: &str, tag: &str) -> Result<Value> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
        ])
        .arg(format!("http://127.0.0.1:{port}/v2/{repo}/manifests/{tag}"))
        .output()?;
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[test]
fn push_and_pull_through_a_real_registry() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let Some(registry) = Registry::start()? else {
        return Ok(());
    };
    let root = workloadspread_testkit::repo_root();
    let dir = std::env::temp_dir().join(workloadspread_testkit::unique_name("oci"));
    std::fs::create_dir_all(&dir)?;
    let annotated = dir.join("annotated.wasm");
    let (meta, usage) = (root.join("metadata.yml"), root.join("README.md"));
    host(&[
        "annotate",
        "-m",
        &meta.display().to_string(),
        "-u",
        &usage.display().to_string(),
        "-o",
        &annotated.display().to_string(),
        &policy.display().to_string(),
    ])?;
    let uri = format!(
        "registry://127.0.0.1:{}/policies/workloadspread:v0.1.0",
        registry.port
    );

    let pushed: Value = serde_json::from_str(&host(&[
        "push",
        "--plain-http",
        "-o",
        "json",
        &annotated.display().to_string(),
        &uri,
    ])?)?;
    let immutable = pushed["immutable_ref"]
        .as_str()
        .context("immutable_ref")?
        .to_string();
    ensure!(
        immutable.contains("/policies/workloadspread@sha256:"),
        "{immutable}"
    );

    let m = manifest(registry.port, "policies/workloadspread", "v0.1.0")?;
    ensure!(
        m["config"]["mediaType"] == "application/vnd.wasm.config.v1+json",
        "{m}"
    );
    ensure!(
        m["layers"][0]["mediaType"] == "application/vnd.wasm.content.layer.v1+wasm",
        "{m}"
    );
    ensure!(
        m["annotations"]["io.kubewarden.policy.title"] == "workloadspread",
        "{m}"
    );
    ensure!(
        m["annotations"]["org.opencontainers.image.source"]
            == m["annotations"]["io.kubewarden.policy.source"],
        "{m}"
    );
    ensure!(
        m["annotations"].get("io.kubewarden.policy.usage").is_none(),
        "multi-line usage is not an OCI annotation"
    );

    for (i, source) in [uri.as_str(), immutable.as_str()].into_iter().enumerate() {
        let pulled = dir.join(format!("pulled-{i}.wasm"));
        host(&[
            "pull",
            "--plain-http",
            "-o",
            &pulled.display().to_string(),
            source,
        ])?;
        ensure!(
            std::fs::read(&pulled)? == std::fs::read(&annotated)?,
            "{source}: bytes differ"
        );
    }
    // The pulled module is the policy: it validates a WorkloadSpread.
    let request = root.join("policy/test_data/requests/workloadspread-create-invalid.json");
    let out: Value = serde_json::from_str(&host(&[
        "run",
        "--allow-context-aware",
        "-r",
        &request.display().to_string(),
        &dir.join("pulled-1.wasm").display().to_string(),
    ])?)?;
    ensure!(out["allowed"] == false, "{out}");

    let missing = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .args(["pull", "--plain-http", "-o", "/dev/null"])
        .arg(format!(
            "registry://127.0.0.1:{}/policies/none:v1",
            registry.port
        ))
        .output()?;
    let stderr = String::from_utf8_lossy(&missing.stderr);
    ensure!(
        !missing.status.success() && stderr.contains("pulling"),
        "{stderr}"
    );
    Ok(())
}

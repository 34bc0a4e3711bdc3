//! Integration-test helper: a real local Kubernetes control plane
//! (`e2e/cluster/cluster.sh`), started once per test run and shared by every test
//! process, with a fresh namespace per test.
//!
//! `WS_TEST_KUBECONFIG` points the tests at an existing cluster instead.
//!
//! Nodes are KWOK's: it reports them Ready, makes pods bound to them Running/Ready with a
//! pod IP and removes deleted pods, as kubelets would (the testkit's own fake kubelet is
//! gone). What KWOK cannot do, and tests do themselves: hold a pod in a state a kubelet
//! would move it out of (Pending on a node, Running but not Ready, terminating behind a
//! finalizer). Such pods carry the label `workloadspread.test/kwok-frozen` — every KWOK
//! pod stage skips them (`cluster.sh`) — and their test removes them when it ends.
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Label put on every namespace a test creates.
pub const TEST_NAMESPACE_LABEL: &str = "workloadspread.test/owned";

/// Pods with this label are skipped by every KWOK pod stage (`cluster.sh`'s
/// `KWOK_FROZEN_LABEL`): they stay in the state their test wrote.
pub const KWOK_FROZEN_LABEL: &str = "workloadspread.test/kwok-frozen";

/// A running control plane.
#[derive(Clone, Debug)]
pub struct Cluster {
    kubeconfig: PathBuf,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared cluster, started on first use (by any test process) and reused after.
pub fn cluster() -> Result<&'static Cluster> {
    CLUSTER
        .get_or_init(|| start_or_reuse().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("local control plane unavailable: {e}"))
}

/// Root of this repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn start_or_reuse() -> Result<Cluster> {
    if let Some(path) = std::env::var_os("WS_TEST_KUBECONFIG") {
        return Ok(Cluster {
            kubeconfig: PathBuf::from(path),
        });
    }
    // Test binaries run in parallel processes: one of them starts the cluster,
    // the others wait on the lock and then find it running.
    let lock_path = std::env::temp_dir().join("workloadspread-cluster.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock().context("locking the cluster lock file")?;
    let script = repo_root().join("e2e/cluster/cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    drop(lock);
    if !out.status.success() {
        bail!(
            "{} up failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kubeconfig = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export KUBECONFIG="))
        .context("cluster.sh up printed no KUBECONFIG")?;
    Ok(Cluster {
        kubeconfig: PathBuf::from(kubeconfig.trim()),
    })
}

impl Cluster {
    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's audit log of pod writes (`cluster.sh` keeps it next to the
    /// kubeconfig): one JSON `audit.k8s.io/v1` Event per line.
    pub fn audit_log(&self) -> PathBuf {
        self.kubeconfig.with_file_name("audit.log")
    }

    /// A client authenticated as cluster admin.
    pub async fn client(&self) -> Result<Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// A new namespace for one test, deleted when the returned guard drops.
    pub async fn namespace(&self, hint: &str) -> Result<TestNamespace> {
        let client = self.client().await?;
        let name = unique_name(hint);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace {
            name,
            kubeconfig: self.kubeconfig.clone(),
            client,
        })
    }
}

/// A control plane of a test's own (`cluster.sh` in a state dir of its own, no nodes),
/// for tests that change what the shared one serves; stopped on drop.
pub struct SeparateCluster {
    state: PathBuf,
    cluster: Cluster,
}

impl SeparateCluster {
    /// Starts one (about 10 s).
    pub fn up(hint: &str) -> Result<Self> {
        let state = std::env::temp_dir().join(unique_name(hint));
        let script = repo_root().join("e2e/cluster/cluster.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("up")
            .env("WS_CLUSTER_DIR", &state)
            .env("WS_NODES", "none")
            .env_remove("WS_APISERVER_PORT")
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        let separate = SeparateCluster {
            state: state.clone(),
            cluster: Cluster {
                kubeconfig: state.join("kubeconfig"),
            },
        };
        if !out.status.success() {
            bail!(
                "{} up (state {}) failed:\n{}",
                script.display(),
                state.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(separate)
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl Drop for SeparateCluster {
    fn drop(&mut self) {
        let script = repo_root().join("e2e/cluster/cluster.sh");
        let _ = Command::new("bash")
            .arg(&script)
            .arg("down")
            .env("WS_CLUSTER_DIR", &self.state)
            .output();
    }
}

/// A DNS-1123 name unique across test processes: `<hint>-<pid>-<n>`.
pub fn unique_name(hint: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let mut base: String = hint
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    base.truncate(40);
    let base = base.trim_matches('-');
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{base}-{}-{n}", std::process::id())
}

/// A namespace owned by one test.
pub struct TestNamespace {
    name: String,
    kubeconfig: PathBuf,
    client: Client,
}

impl TestNamespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A namespaced API in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        let cluster = Cluster {
            kubeconfig: self.kubeconfig.clone(),
        };
        clean_up_blocking(cluster, |client| async move {
            let _ = Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await;
        });
    }
}

/// Runs a best-effort clean-up from a `Drop`: on a thread of its own, with a runtime and
/// a client of its own (the test's runtime is blocked in the drop, and a client made on
/// it would wait for it for ever). Returns when the clean-up is done.
pub fn clean_up_blocking<F, Fut>(cluster: Cluster, cleanup: F)
where
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(rt) = rt {
            rt.block_on(async {
                if let Ok(client) = cluster.client().await {
                    cleanup(client).await;
                }
            });
        }
    })
    .join();
}

/// Polls `check` every 200 ms until it returns `Some`, failing after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            match last_err {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_dns_labels_and_distinct() {
        let a = unique_name("Smoke_Test: CRD!");
        let b = unique_name("Smoke_Test: CRD!");
        assert_ne!(a, b);
        assert!(a.starts_with("smoke-test--crd-"), "{a}");
        assert!(a.len() <= 63);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }

    #[tokio::test]
    async fn wait_for_returns_value_or_times_out_with_last_error() {
        let mut calls = 0;
        let v = wait_for("third call", Duration::from_secs(5), || {
            calls += 1;
            let c = calls;
            async move { Ok((c == 3).then_some(c)) }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let err = wait_for::<(), _, _>("never", Duration::from_millis(300), || async {
            bail!("boom")
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("waiting for never") && err.contains("boom"),
            "{err}"
        );
    }
}
pub mod api_writes;
pub mod convergence;
pub mod faults;
pub mod kruise;
pub mod measure;
pub mod monitor;
pub mod pods;
pub mod probes;
pub mod specs;
pub mod stack;
pub mod webhook;

//! Running the bundled host as a local webhook for a test: the process, the
//! webhook configurations scoped to one namespace, a round-robin TCP proxy for
//! several replicas, and CRDs.

use crate::measure::sum_metric;
use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The module built by `make policy`, or `None` (with a message) when it is missing
/// and `WS_REQUIRE_WASM` is unset; with it set a missing module is an error.
pub fn policy_wasm() -> Result<Option<PathBuf>> {
    let path = std::env::var_os("WS_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("policy/policy.wasm"));
    if path.exists() {
        return Ok(Some(path));
    }
    if std::env::var_os("WS_REQUIRE_WASM").is_some() {
        bail!("{} is missing (run `make policy`)", path.display());
    }
    eprintln!(
        "SKIP: {} not built (run `make policy`; CI sets WS_REQUIRE_WASM=1)",
        path.display()
    );
    Ok(None)
}

/// A free loopback port (bound then released), never one this process was given before:
/// ports are chosen one after the other and released in between, and the kernel may hand
/// the same number out again (a host once got its webhook port as its health port and
/// exited "Address already in use"). At most one entry per port number.
pub fn free_port() -> Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..100 {
        let port = StdListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
    }
    bail!("no loopback port this process was not given before, in 100 tries")
}

/// A `workloadspread-host serve` process, killed on drop.
pub struct HostProcess {
    child: Child,
    pub port: u16,
    /// The plain-HTTP port of its probes and metrics (`--health-listen`; the webhook port
    /// serves no `/metrics`).
    pub health_port: u16,
    pub log: PathBuf,
    /// Killed by the test ([`HostProcess::kill`]): not expected to answer any more.
    killed: bool,
}

impl HostProcess {
    /// Starts `bin serve --listen 127.0.0.1:<free port> <args>` with its log in the
    /// system temp dir and waits until `/readyz` answers.
    pub async fn start(bin: &Path, kubeconfig: &Path, args: &[String]) -> Result<Self> {
        Self::start_on(bin, kubeconfig, free_port()?, args).await
    }

    /// As [`HostProcess::start`] on a given port.
    pub async fn start_on(
        bin: &Path,
        kubeconfig: &Path,
        port: u16,
        args: &[String],
    ) -> Result<Self> {
        let mut host = Self::spawn_on(bin, kubeconfig, port, args)?;
        host.wait_ready().await?;
        Ok(host)
    }

    /// As [`HostProcess::start_on`] without waiting for `/readyz`. The probes and metrics
    /// get a port of their own (`--health-listen`) unless `args` name one.
    pub fn spawn_on(bin: &Path, kubeconfig: &Path, port: u16, args: &[String]) -> Result<Self> {
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("host")));
        let given = args.iter().enumerate().find_map(|(i, a)| {
            let value = a.strip_prefix("--health-listen=").or_else(|| {
                (a == "--health-listen")
                    .then(|| args.get(i + 1))
                    .flatten()
                    .map(|s| s.as_str())
            })?;
            value.rsplit(':').next()?.parse::<u16>().ok()
        });
        let health_port = match given {
            Some(p) => p,
            None => free_port()?,
        };
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--tls-san", "127.0.0.1"]);
        if given.is_none() {
            command.args(["--health-listen", &format!("127.0.0.1:{health_port}")]);
        }
        let child = command
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("WS_HOST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(HostProcess {
            child,
            port,
            health_port,
            log,
            killed: false,
        })
    }

    /// The process id (to read its memory and CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (60 s at most) until `/readyz` answers "ok"; fails at once if the host exits.
    pub async fn wait_ready(&mut self) -> Result<()> {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "host exited with {status}: {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if self.get("/readyz").await.is_ok_and(|body| body == "ok") {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "host not ready after 60 s: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// GET `path`: probes and metrics from the health port (plain HTTP), anything else
    /// over HTTPS from the webhook port (certificate not verified: this is a probe).
    pub async fn get(&self, path: &str) -> Result<String> {
        match path {
            "/metrics" | "/healthz" | "/readyz" => {
                self.fetch(&format!("http://127.0.0.1:{}{path}", self.health_port))
                    .await
            }
            _ => self.get_over_tls(path).await,
        }
    }

    /// GET `path` over HTTPS from the webhook port (its probes: the TLS handshake works
    /// without a client certificate, with the certificate served now).
    pub async fn get_over_tls(&self, path: &str) -> Result<String> {
        self.fetch(&format!("https://127.0.0.1:{}{path}", self.port))
            .await
    }

    async fn fetch(&self, url: &str) -> Result<String> {
        let out = tokio::process::Command::new("curl")
            .args(["-sSk", "--max-time", "5"])
            .arg(url)
            .output()
            .await
            .context("running curl")?;
        if !out.status.success() {
            bail!("curl: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// POSTs `body` (JSON) over HTTPS; returns the HTTP status and the response body.
    pub async fn post(&self, path: &str, body: &[u8]) -> Result<(u16, String)> {
        let file = std::env::temp_dir().join(format!("{}.json", crate::unique_name("body")));
        std::fs::write(&file, body)?;
        let out = tokio::process::Command::new("curl")
            .args([
                "-sSk",
                "--max-time",
                "20",
                "-H",
                "Content-Type: application/json",
            ])
            .arg("--data-binary")
            .arg(format!("@{}", file.display()))
            .args(["-w", "\n%{http_code}"])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .await
            .context("running curl")?;
        let _ = std::fs::remove_file(&file);
        if !out.status.success() {
            bail!("curl: {}", String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').context("no status code")?;
        Ok((code.trim().parse()?, body.to_string()))
    }

    /// Sum of the samples of metric `name` (all label sets) in `/metrics`.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = self.get("/metrics").await?;
        Ok(sum_metric(&text, name))
    }

    /// Sum of the samples of metric `name` whose labels contain `label`
    /// (e.g. `event="Taken"`).
    pub async fn metric_with(&self, name: &str, label: &str) -> Result<f64> {
        let text = self.get("/metrics").await?;
        Ok(crate::measure::sum_metric_with(&text, name, label))
    }

    /// This replica's reserved-slot holder id (`workloadspread_host_reservation_holder`).
    pub async fn holder(&self) -> Result<String> {
        let text = self.get("/metrics").await?;
        text.lines()
            .find_map(|l| {
                let rest = l.strip_prefix("workloadspread_host_reservation_holder{holder=\"")?;
                rest.split('"').next().map(str::to_string)
            })
            .context("no workloadspread_host_reservation_holder in /metrics")
    }

    /// Waits until this host's cache holds WorkloadSpread `namespace/name` targeting
    /// `target_ref`. The probe is the host's own answer, without side effects: a
    /// validation review of a second WorkloadSpread with the same target is refused as a
    /// conflict only once the host lists the first one.
    pub async fn wait_sees_workloadspread(
        &self,
        namespace: &str,
        name: &str,
        target_ref: &Value,
    ) -> Result<()> {
        let probe = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": format!("{name}-cache-probe"), "namespace": namespace},
            "spec": {"targetRef": target_ref, "subsets": [{"name": "probe"}]}});
        let review = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": {"uid": crate::unique_name("cache-probe"),
            "kind": {"group": "apps.kruise.io", "version": "v1beta1", "kind": "WorkloadSpread"},
            "resource": {"group": "apps.kruise.io", "version": "v1beta1",
                "resource": "workloadspreads"},
            "namespace": namespace, "name": probe["metadata"]["name"], "operation": "CREATE",
            "userInfo": {"username": "workloadspread-tests"}, "object": probe}}))?;
        let conflict = format!("in conflict with other WorkloadSpread {name}");
        crate::wait_for(
            &format!(
                "host on port {} to see WorkloadSpread {namespace}/{name}",
                self.port
            ),
            Duration::from_secs(30),
            || async {
                let (code, body) = self.post("/validate", &review).await?;
                Ok((code == 200 && body.contains(&conflict)).then_some(()))
            },
        )
        .await
    }

    /// Sends SIGKILL.
    pub fn kill(&mut self) {
        self.killed = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the test killed it ([`Self::kill`]); one that died by itself is not.
    pub fn killed(&self) -> bool {
        self.killed
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback TCP proxy spreading connections round-robin over `backends`.
pub async fn round_robin_proxy(backends: Vec<SocketAddr>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let i = next.fetch_add(1, Ordering::Relaxed) % backends.len();
            let backend = backends[i];
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Ok(addr)
}

/// Mutating (pods CREATE/DELETE, pods/eviction CREATE → `/mutate`) and validating
/// (workloadspreads CREATE/UPDATE → `/validate`) configurations called `name`, for
/// namespaces labelled `workloadspread.test/webhook=<name>` only, without a
/// `caBundle` (the host patches it in). Deleted by [`WebhookConfigs::delete`].
pub struct WebhookConfigs {
    pub name: String,
    client: Client,
}

impl WebhookConfigs {
    pub async fn create(client: &Client, name: &str, base_url: &str) -> Result<Self> {
        let selector = json!({"matchLabels": {"workloadspread.test/webhook": name}});
        let common = |path: &str, rules: Value| {
            json!({"name": format!("{path}.workloadspread.test"),
                "clientConfig": {"url": format!("{base_url}/{path}")},
                "rules": rules, "namespaceSelector": selector, "failurePolicy": "Fail",
                "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10})
        };
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [common("mutate", json!([
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE", "DELETE"]},
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/eviction"], "operations": ["CREATE"]}]))]
        }))?;
        let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [common("validate", json!([
                {"apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1", "v1beta1"],
                 "resources": ["workloadspreads"], "operations": ["CREATE", "UPDATE"]}]))]
        }))?;
        let pp = PostParams::default();
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&pp, &mutating)
            .await?;
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&pp, &validating)
            .await?;
        Ok(WebhookConfigs {
            name: name.to_string(),
            client: client.clone(),
        })
    }

    /// Routes namespace `ns` through these webhooks and waits until the API server
    /// does: its webhook and namespace caches lag the writes, so a request sent at
    /// once can bypass the webhook (seen in CI: an invalid WorkloadSpread admitted).
    /// The proof is a dry-run create of an invalid WorkloadSpread refused by our
    /// validating webhook; the WorkloadSpread CRD must be installed.
    pub async fn enroll(&self, ns: &str) -> Result<()> {
        let patch = json!({"metadata": {"labels": {"workloadspread.test/webhook": self.name}}});
        Api::<Namespace>::all(self.client.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.wait_until_enforced(ns, None).await
    }

    /// As [`WebhookConfigs::enroll`], with `host` serving the configurations: where
    /// another validating webhook refuses the probe first, `host`'s count of validations
    /// shows it was asked too.
    pub async fn enroll_beside(&self, ns: &str, host: &HostProcess) -> Result<()> {
        let patch = json!({"metadata": {"labels": {"workloadspread.test/webhook": self.name}}});
        Api::<Namespace>::all(self.client.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.wait_until_enforced(ns, Some(host)).await
    }

    async fn wait_until_enforced(&self, ns: &str, host: Option<&HostProcess>) -> Result<()> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "WorkloadSpread"),
            "workloadspreads",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource);
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "enrollment-probe"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "probe"},
                "subsets": [{"name": "a", "maxReplicas": "1.5"}]}
        }))?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let webhook = "validate.workloadspread.test";
        crate::wait_for(
            &format!("the API server to route namespace {ns} through webhook {webhook}"),
            Duration::from_secs(30),
            || async {
                let before = match host {
                    Some(h) => validations(h).await?,
                    None => 0.0,
                };
                match api.create(&dry_run, &probe).await {
                    Err(e) if e.to_string().contains(webhook) => Ok(Some(())),
                    // Another validating webhook refused it first (OpenKruise's, called in
                    // parallel with ours): routed if `host` evaluated it.
                    Err(e) if e.to_string().contains("admission webhook") => match host {
                        Some(h) if validations(h).await? > before => Ok(Some(())),
                        _ => Err(e.into()),
                    },
                    Err(e) => Err(e.into()),
                    Ok(_) => Ok(None),
                }
            },
        )
        .await
    }

    /// Whether both configurations carry a CA bundle.
    pub async fn has_ca_bundle(&self) -> Result<bool> {
        let m = Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .get(&self.name)
            .await?;
        let v = Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .get(&self.name)
            .await?;
        let mutating_ok = m
            .webhooks
            .iter()
            .flatten()
            .all(|w| w.client_config.ca_bundle.is_some());
        let validating_ok = v
            .webhooks
            .iter()
            .flatten()
            .all(|w| w.client_config.ca_bundle.is_some());
        Ok(mutating_ok && validating_ok)
    }

    pub async fn delete(self) -> Result<()> {
        let dp = DeleteParams::default();
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .delete(&self.name, &dp)
            .await?;
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .delete(&self.name, &dp)
            .await?;
        Ok(())
    }
}

/// Applies (server-side) a CRD given as JSON and waits until it is established.
pub async fn apply_crd(client: &Client, crd: &Value) -> Result<()> {
    let name = crd["metadata"]["name"]
        .as_str()
        .context("CRD without a name")?
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("workloadspread-tests").force();
    api.patch(&name, &params, &Patch::Apply(crd)).await?;
    crate::wait_for(
        &format!("CRD {name} established"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await?;
                let established = crd
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established.then_some(()))
            }
        },
    )
    .await
}

/// A `workloadspread-controller run` process, killed on drop.
pub struct ControllerProcess {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    /// Killed by the test ([`ControllerProcess::kill`]): not expected to answer any more.
    killed: bool,
}

impl ControllerProcess {
    /// Starts `bin run --metrics-listen 127.0.0.1:<free port> <args>` and waits
    /// until `/readyz` answers.
    pub async fn start(bin: &Path, kubeconfig: &Path, args: &[String]) -> Result<Self> {
        Self::start_until(bin, kubeconfig, args, |body| body == "ok").await
    }

    /// As [`ControllerProcess::start`], waiting until `/readyz` answers a body `settled`
    /// accepts (say, the not-ready answer of a controller standing back from OpenKruise).
    pub async fn start_until(
        bin: &Path,
        kubeconfig: &Path,
        args: &[String],
        settled: impl Fn(&str) -> bool,
    ) -> Result<Self> {
        // Rebalancing's plans and holds at debug: a failed rebalancing test shows why.
        let level = std::env::var("WS_CONTROLLER_LOG").unwrap_or_else(|_| {
            "info,workloadspread_controller::converge=debug,workloadspread_controller::rebalance=debug"
                .into()
        });
        let mut c = Self::spawn(bin, kubeconfig, args, &level)?;
        for _ in 0..300 {
            if let Some(status) = c.child.try_wait()? {
                bail!("controller exited with {status}: {}", c.log_text());
            }
            if c.get("/readyz").await.is_ok_and(|b| settled(&b)) {
                return Ok(c);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("controller not ready after 60 s: {}", c.log_text())
    }

    /// Starts the process without waiting for it (a standby replica answers `/readyz`
    /// with 200 "standby: …", not "ok", until it leads); `log_level` is its RUST_LOG.
    pub fn spawn(bin: &Path, kubeconfig: &Path, args: &[String], log_level: &str) -> Result<Self> {
        let port = free_port()?;
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("controller")));
        let child = Command::new(bin)
            .arg("run")
            .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(ControllerProcess {
            child,
            port,
            log,
            killed: false,
        })
    }

    /// The process id (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The metrics and probe port (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` on the metrics port.
    pub async fn get(&self, path: &str) -> Result<String> {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .await?;
        if !out.status.success() {
            bail!("curl: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Sum of metric `name` in `/metrics`.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        Ok(sum_metric(&self.get("/metrics").await?, name))
    }

    /// `/readyz` as a kubelet probe sees it: whether the status is 2xx, and the body.
    pub async fn readiness(&self) -> Result<(bool, String)> {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{}/readyz", self.port))
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').context("curl printed no status")?;
        Ok((code.starts_with('2'), body.to_string()))
    }

    /// Sends SIGKILL.
    pub fn kill(&mut self) {
        self.killed = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the test killed it ([`Self::kill`]); one that died by itself is not.
    pub fn killed(&self) -> bool {
        self.killed
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A binary of this workspace (`cargo test --workspace` builds them all); missing
/// is an error under `WS_REQUIRE_WASM` (CI), else `None` with a message.
pub fn workspace_binary(name: &str) -> Result<Option<PathBuf>> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"));
    let path = target.join("debug").join(name);
    if path.exists() {
        return Ok(Some(path));
    }
    if std::env::var_os("WS_REQUIRE_WASM").is_some() {
        bail!("{} is missing (cargo build --workspace)", path.display());
    }
    eprintln!("SKIP: {} not built", path.display());
    Ok(None)
}

/// `burst.workloadspread.test/v1` `Fleet`: a workload kind no controller acts on, so
/// only the test creates its pods (declare it in the policy's `customWorkloads`).
pub fn fleet_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "fleets.burst.workloadspread.test"},
        "spec": {"group": "burst.workloadspread.test", "scope": "Namespaced",
            "names": {"plural": "fleets", "singular": "fleet", "kind": "Fleet", "listKind": "FleetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}}]}})
}

/// Policy settings declaring the Fleet kind.
pub fn fleet_settings() -> Value {
    json!({"customWorkloads": [
        {"group": "burst.workloadspread.test", "kind": "Fleet", "replicasPath": "spec.replicas"}]})
}

/// [`fleet_settings`] as the chart gives the bundled host (`spreadLookup: target-name`):
/// what the benchmarks measure.
pub fn bundled_fleet_settings() -> Value {
    let mut settings = fleet_settings();
    settings["spreadLookup"] = json!("target-name");
    settings
}

/// A pod owned by Fleet `uid`.
pub fn fleet_pod(name: &str, fleet_uid: &str) -> k8s_openapi::api::core::v1::Pod {
    fleet_pod_of(name, "fleet", fleet_uid)
}

/// A pod owned by Fleet `fleet` (uid `fleet_uid`).
pub fn fleet_pod_of(name: &str, fleet: &str, fleet_uid: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "fleet"},
            "ownerReferences": [{"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
                "name": fleet, "uid": fleet_uid, "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap_or_default()
}

/// How many requests `host` evaluated on its validating endpoint.
async fn validations(host: &HostProcess) -> Result<f64> {
    Ok(crate::measure::sum_metric_with(
        &host.get("/metrics").await?,
        "workloadspread_host_evaluations_total",
        "endpoint=\"Validate\"",
    ))
}

#[cfg(test)]
mod port_tests {
    use super::free_port;

    #[test]
    fn free_ports_are_never_handed_out_twice() {
        let ports: Vec<u16> = (0..2000).map(|_| free_port().unwrap()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
    }
}

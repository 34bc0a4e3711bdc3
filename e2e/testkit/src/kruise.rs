//! OpenKruise's own `kruise-manager` (v1.9.0, built from the Go module proxy by
//! `e2e/kruise/kruise.sh`) run out of cluster against the local control plane: the
//! reference `make bench` measures beside host + controller.
//!
//! How it runs here (facts from running it, `docs/benchmarks.md`): it writes its own
//! serving certificate into `WEBHOOK_CERT_DIR` and rewrites its two webhook
//! configurations (which must exist: [`KruiseBuild::manifests`] carries them, generated
//! from upstream's `config/webhook`) to `https://127.0.0.1:<port>`; its pod webhook is
//! registered only when the SidecarSet and PodUnavailableBudget CRDs exist at its start
//! (every CRD of `config/crd` is installed first); a custom workload kind is read from the
//! `kruise-configuration` ConfigMap at its start. Its webhook server binds 0.0.0.0: only
//! loopback traffic is sent to it. Its WorkloadSpread CRD serves v1alpha1 and v1beta1 and
//! stores v1beta1, as ours does, with its own conversion webhook: its manager points the
//! conversion of every CRD its scheme knows at itself, whatever the gates
//! (`pkg/webhook/util/crd`), so the CRD stays OpenKruise's while it runs
//! ([`ensure_workloadspread_crd`] leaves a CRD whose conversion a webhook serves alone).

use crate::webhook::free_port;
use crate::{clean_up_blocking, wait_for, Cluster};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The OpenKruise release measured.
pub const VERSION: &str = "v1.9.0";
/// Namespace of its configuration (its `POD_NAMESPACE`).
pub const NAMESPACE: &str = "kruise-system";
const MUTATING: &str = "kruise-mutating-webhook-configuration";
const VALIDATING: &str = "kruise-validating-webhook-configuration";
const WORKLOADSPREAD_CRD: &str = "workloadspreads.apps.kruise.io";
const FIELD_MANAGER: &str = "workloadspread-tests";
/// What our CRD carries and OpenKruise's does not (`core::api::CRD_PROVIDER_ANNOTATION`).
const PROVIDER_ANNOTATION: &str = "workloadspread.io/provider";

/// The manager binary and its install manifests (`e2e/kruise/kruise.sh build|manifests`).
#[derive(Clone, Debug)]
pub struct KruiseBuild {
    pub manager: PathBuf,
    pub manifests: PathBuf,
}

impl KruiseBuild {
    /// From `WS_KRUISE_MANAGER` and `WS_KRUISE_MANIFESTS` (`make bench` sets both after
    /// running `kruise.sh`); `None` when neither is set, an error when one is missing.
    pub fn from_env() -> Result<Option<Self>> {
        let manager = std::env::var_os("WS_KRUISE_MANAGER").map(PathBuf::from);
        let manifests = std::env::var_os("WS_KRUISE_MANIFESTS").map(PathBuf::from);
        match (manager, manifests) {
            (None, None) => Ok(None),
            (Some(manager), Some(manifests)) => {
                for p in [&manager, &manifests] {
                    anyhow::ensure!(p.exists(), "{} does not exist (e2e/kruise/kruise.sh)", p.display());
                }
                Ok(Some(KruiseBuild { manager, manifests }))
            }
            _ => bail!("set both WS_KRUISE_MANAGER and WS_KRUISE_MANIFESTS (e2e/kruise/kruise.sh build|manifests)"),
        }
    }

    /// Every document of the install manifests.
    pub fn documents(&self) -> Result<Vec<Value>> {
        let text = std::fs::read_to_string(&self.manifests)
            .with_context(|| format!("reading {}", self.manifests.display()))?;
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("parsing {}", self.manifests.display()))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        Ok(docs)
    }

    fn of_kind(&self, kind: &str) -> Result<Vec<Value>> {
        Ok(self
            .documents()?
            .into_iter()
            .filter(|d| d["kind"] == kind)
            .collect())
    }
}

/// How the manager runs.
#[derive(Clone, Debug, Default)]
pub struct KruiseOptions {
    /// `--rest-config-qps` and `--rest-config-burst` (defaults 30 and 50).
    pub qps_burst: Option<(u32, u32)>,
    /// Custom workload kinds its WorkloadSpread accepts (`kruise-configuration`'s
    /// `WorkloadSpread_Watch_Custom_Workload_WhiteList` entries:
    /// `{"Group","Version","Kind","replicasPath"}`).
    pub custom_workloads: Vec<Value>,
    /// Its `WorkloadSpread` feature gate off (how a user switches OpenKruise's
    /// WorkloadSpread off and keeps the rest: `docs/operations.md`).
    pub workloadspread_off: bool,
}

/// A running `kruise-manager`; [`KruiseManager::stop`] (or drop) removes its webhook
/// configurations before it stops, so no pod create is refused by a webhook nobody serves.
pub struct KruiseManager {
    child: Child,
    cluster: Cluster,
    pub webhook_port: u16,
    pub health_port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
    _certs: tempdir::Dir,
}

mod tempdir {
    /// A directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl KruiseManager {
    /// Installs OpenKruise (every CRD, replacing a WorkloadSpread CRD of ours; its
    /// namespace, configuration and webhook configurations) and starts the manager; returns
    /// once its webhooks point at it with its CA and `/readyz` answers.
    pub async fn start(
        build: &KruiseBuild,
        cluster: &Cluster,
        options: &KruiseOptions,
    ) -> Result<Self> {
        let client = cluster.client().await?;
        install(build, &client, options).await?;
        served(build, &client).await?;
        let (webhook_port, health_port, metrics_port) = (free_port()?, free_port()?, free_port()?);
        let certs = std::env::temp_dir().join(crate::unique_name("kruise-certs"));
        std::fs::create_dir_all(&certs)?;
        let certs = tempdir::Dir(certs);
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("kruise")));
        let mut cmd = Command::new(&build.manager);
        cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args([
            "--enable-leader-election=false".to_string(),
            "--enable-pprof=false".into(),
            format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            format!("--health-probe-addr=127.0.0.1:{health_port}"),
            format!(
                "--feature-gates=WorkloadSpread={},PodWebhook=true,KruiseDaemon=false",
                !options.workloadspread_off
            ),
        ]);
        if let Some((qps, burst)) = options.qps_burst {
            cmd.args([
                format!("--rest-config-qps={qps}"),
                format!("--rest-config-burst={burst}"),
            ]);
        }
        let child = cmd
            .env("WEBHOOK_HOST", "127.0.0.1")
            .env("WEBHOOK_PORT", webhook_port.to_string())
            .env("WEBHOOK_CERT_DIR", &certs.0)
            .env("POD_NAMESPACE", NAMESPACE)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", build.manager.display()))?;
        let mut manager = KruiseManager {
            child,
            cluster: cluster.clone(),
            webhook_port,
            health_port,
            metrics_port,
            log,
            _certs: certs,
        };
        let converted: Vec<String> = build
            .of_kind("CustomResourceDefinition")?
            .into_iter()
            .filter(|c| c["spec"]["conversion"]["strategy"] == "Webhook")
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        manager.wait_ready(&client, &converted).await?;
        Ok(manager)
    }

    /// Until its pod webhook and the conversion of every CRD in `converted` point at it
    /// (a CRD left pointing at a previous run's port fails every write of its kind).
    async fn wait_ready(&mut self, client: &Client, converted: &[String]) -> Result<()> {
        let url = format!("https://127.0.0.1:{}/mutate-pod", self.webhook_port);
        let convert = format!("https://127.0.0.1:{}/convert", self.webhook_port);
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("kruise-manager exited with {status}: {}", self.log_tail());
            }
            let pod_webhook = mutating.get(MUTATING).await.ok().and_then(|c| {
                c.webhooks?
                    .into_iter()
                    .find(|w| w.name == "mpod.kb.io")
                    .map(|w| w.client_config)
            });
            let served = pod_webhook.is_some_and(|c| {
                c.url.as_deref() == Some(url.as_str())
                    && c.ca_bundle.is_some_and(|b| !b.0.is_empty())
            });
            let mut conversions = true;
            for name in converted {
                let crd = serde_json::to_value(crds.get(name).await?)?;
                conversions &=
                    crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == convert.as_str();
            }
            if served
                && conversions
                && self
                    .get("/readyz", self.health_port)
                    .await
                    .is_ok_and(|b| b == "ok")
            {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                bail!(
                    "kruise-manager's webhooks not served after 120 s (its mutating configuration must name {url} with a CA, its CRDs' conversion {convert}): {}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process id (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn get(&self, path: &str, port: u16) -> Result<String> {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "curl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Its Prometheus metrics.
    pub async fn metrics(&self) -> Result<String> {
        self.get("/metrics", self.metrics_port).await
    }

    /// Removes its webhook configurations, then stops it (SIGKILL: it keeps no state
    /// outside the API server).
    pub async fn stop(mut self) -> Result<()> {
        let client = self.cluster.client().await?;
        delete_webhook_configurations(&client).await?;
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for KruiseManager {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            clean_up_blocking(self.cluster.clone(), |client| async move {
                let _ = delete_webhook_configurations(&client).await;
            });
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn delete_webhook_configurations(client: &Client) -> Result<()> {
    let dp = DeleteParams::default();
    let ignore_missing = |r: Result<_, kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    };
    ignore_missing(
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(MUTATING, &dp)
            .await
            .map(|_| ()),
    )?;
    ignore_missing(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(VALIDATING, &dp)
            .await
            .map(|_| ()),
    )?;
    Ok(())
}

/// Everything the manager needs before it starts.
async fn install(build: &KruiseBuild, client: &Client, options: &KruiseOptions) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in build.of_kind("CustomResourceDefinition")? {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name == WORKLOADSPREAD_CRD {
            ensure_workloadspread_crd(client, &crd).await?;
        } else if crds.get_opt(&name).await?.is_none() {
            // Created once and then left to the manager, which points their conversion
            // webhooks at itself (an apply would merge the Service back beside its URL).
            crate::webhook::apply_crd(client, &crd).await?;
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    namespaces
        .patch(NAMESPACE, &params, &Patch::Apply(&ns))
        .await?;
    let whitelist = json!({"workloads": options.custom_workloads}).to_string();
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kruise-configuration", "namespace": NAMESPACE},
        "data": {"WorkloadSpread_Watch_Custom_Workload_WhiteList": whitelist}});
    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .patch("kruise-configuration", &params, &Patch::Apply(&config))
        .await?;
    // Fresh configurations: the manager keeps its template in an annotation of the ones it
    // finds, and a previous run's URL must not be called before this one rewrites it.
    delete_webhook_configurations(client).await?;
    for doc in build.of_kind("MutatingWebhookConfiguration")? {
        let c: MutatingWebhookConfiguration = serde_json::from_value(doc)?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &c)
            .await?;
    }
    for doc in build.of_kind("ValidatingWebhookConfiguration")? {
        let c: ValidatingWebhookConfiguration = serde_json::from_value(doc)?;
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &c)
            .await?;
    }
    Ok(())
}

/// Until discovery serves every kind and version of OpenKruise's CRDs. Established is
/// not enough: a manager started while discovery still lacked `CloneSet` in
/// `apps.kruise.io/v1beta1` kept its REST mapping without it ("no matches for kind",
/// every 10 s for 120 s, its webhooks never served).
async fn served(build: &KruiseBuild, client: &Client) -> Result<()> {
    let mut wanted = Vec::new();
    for crd in build.of_kind("CustomResourceDefinition")? {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            if v["served"] == true {
                let version = v["name"].as_str().unwrap_or_default();
                wanted.push(kube::core::GroupVersionKind::gvk(group, version, kind));
            }
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut missing = Vec::new();
        for gvk in &wanted {
            if kube::discovery::pinned_kind(client, gvk).await.is_err() {
                missing.push(format!("{}/{} {}", gvk.group, gvk.version, gvk.kind));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            bail!("not served by discovery after 60 s: {}", missing.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The storage version of a CRD given as JSON.
fn storage_version(crd: &Value) -> Option<&str> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"] == true)?["name"]
        .as_str()
}

/// Makes `crd` the cluster's WorkloadSpread CRD: applied in place when the one there
/// stores the same version (as OpenKruise v1.9.0's and ours do; left alone when a webhook
/// has pointed its conversion at itself, so an OpenKruise CRD stays after its manager
/// stopped, its objects read as the stored v1beta1), else the one there is deleted first —
/// with every WorkloadSpread it holds — and `crd` created.
pub async fn ensure_workloadspread_crd(client: &Client, crd: &Value) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(current) = api.get_opt(WORKLOADSPREAD_CRD).await? {
        let current = serde_json::to_value(&current)?;
        let same = storage_version(&current) == storage_version(crd);
        if same && current["spec"]["conversion"]["webhook"]["clientConfig"]["url"].is_string() {
            // A running webhook (OpenKruise's manager, our host's `--conversion-crd`)
            // pointed the conversion at itself: an apply would put the Service back beside
            // that URL, which the API server refuses.
            return Ok(());
        }
        if !same {
            api.delete(WORKLOADSPREAD_CRD, &DeleteParams::foreground())
                .await?;
            wait_for(
                &format!("CRD {WORKLOADSPREAD_CRD} deleted"),
                Duration::from_secs(120),
                || {
                    let api = api.clone();
                    async move {
                        Ok(api
                            .get_opt(WORKLOADSPREAD_CRD)
                            .await?
                            .is_none()
                            .then_some(()))
                    }
                },
            )
            .await?;
        }
    }
    crate::webhook::apply_crd(client, crd).await
}

/// Whether the WorkloadSpread CRD the cluster serves is OpenKruise's rather than ours
/// (ours carries `workloadspread.io/provider`; both store v1beta1).
pub async fn workloadspread_crd_is_kruise(client: &Client) -> Result<bool> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    Ok(match api.get_opt(WORKLOADSPREAD_CRD).await? {
        Some(c) => !c
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PROVIDER_ANNOTATION)),
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_version_is_the_version_marked_storage() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1alpha1", "storage": false}, {"name": "v1beta1", "storage": true}]}});
        assert_eq!(storage_version(&crd), Some("v1beta1"));
        assert_eq!(storage_version(&json!({"spec": {}})), None);
    }
}

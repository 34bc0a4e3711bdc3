//! Helpers shared by the modules: the host binary, the WorkloadSpread kind and CRD,
//! zone subsets, pods' subsets, and a one-host `Fleet` namespace ([`FleetSetup`]).

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use workloadspread_testkit::monitor::Monitor;
use workloadspread_testkit::webhook::{apply_crd, policy_wasm, HostProcess, WebhookConfigs};
use workloadspread_testkit::{cluster, unique_name};

pub const MATCHED: &str = "apps.kruise.io/matched-workloadspread";

pub fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-host"))
}

pub fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

pub async fn ws_crd(client: &kube::Client) -> Result<()> {
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(client, &serde_json::to_value(&crd)?).await
}

pub fn zone_subset(name: &str, zone: &str, max: Value) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}});
    if !max.is_null() {
        s["maxReplicas"] = max;
    }
    s
}

/// Subset of each pod (from the matched annotation); `-` for unmatched pods.
pub fn subsets_of(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for p in pods {
        let subset = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MATCHED))
            .and_then(|v| serde_json::from_str::<Value>(v).ok())
            .and_then(|v| v["subset"].as_str().map(str::to_string))
            .unwrap_or_else(|| "-".into());
        *counts.entry(subset).or_insert(0) += 1;
    }
    counts
}

pub fn fleet_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "burst.workloadspread.test",
        "v1",
        "Fleet",
    ))
}

/// One host for a namespace whose pods belong to a `Fleet` (a kind no controller acts
/// on: only the test creates its pods), a WorkloadSpread `spread` over a (max 5) and b,
/// and the host seeing it.
pub struct FleetSetup {
    pub ns: workloadspread_testkit::TestNamespace,
    pub host: HostProcess,
    pub configs: WebhookConfigs,
    pub fleet_uid: String,
    pub spreads: Api<DynamicObject>,
    /// The invariant monitor on `spread` and the fleet (#26 item 8), judged by
    /// [`FleetSetup::finish`].
    monitor: Monitor,
}

impl FleetSetup {
    pub async fn start(hint: &str, kubeconfig: &Path) -> Result<Option<Self>> {
        Self::start_with_patch(hint, kubeconfig, None).await
    }

    /// As [`FleetSetup::start`]; `patch` is subset a's patch, written before the
    /// namespace is enrolled so the validating webhook does not refuse a bad one.
    pub async fn start_with_patch(
        hint: &str,
        kubeconfig: &Path,
        patch: Option<Value>,
    ) -> Result<Option<Self>> {
        Self::start_with(hint, kubeconfig, patch, &[]).await
    }

    /// As [`FleetSetup::start_with_patch`], the host started with `extra` arguments too.
    pub async fn start_with(
        hint: &str,
        kubeconfig: &Path,
        patch: Option<Value>,
        extra: &[&str],
    ) -> Result<Option<Self>> {
        let Some(policy) = policy_wasm()? else {
            return Ok(None);
        };
        let ns = cluster()?.namespace(hint).await?;
        let client = ns.client();
        ws_crd(&client).await?;
        apply_crd(&client, &workloadspread_testkit::webhook::fleet_crd()).await?;
        let port = workloadspread_testkit::webhook::free_port()?;
        let name = unique_name(hint);
        let configs =
            WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
        let settings = workloadspread_testkit::webhook::fleet_settings().to_string();
        let args: Vec<String> = [
            "--policy",
            &policy.display().to_string(),
            "--settings-json",
            &settings,
            "--webhook-config",
            &name,
        ]
        .map(str::to_string)
        .to_vec();
        let args: Vec<String> = args
            .into_iter()
            .chain(extra.iter().map(|a| a.to_string()))
            .collect();
        let host = HostProcess::start_on(host_bin(), kubeconfig, port, &args).await?;
        let fleets: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns.name(), &fleet_resource());
        let fleet: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
            "metadata": {"name": "fleet"}, "spec": {"replicas": 10}}))?;
        let fleet = fleets.create(&PostParams::default(), &fleet).await?;
        let spreads = Api::namespaced_with(client.clone(), ns.name(), &ws_resource());
        let monitor =
            Monitor::start(client, ns.name(), "spread", fleet_resource(), "fleet").await?;
        let setup = FleetSetup {
            ns,
            host,
            configs,
            fleet_uid: fleet.metadata.uid.context("fleet uid")?,
            spreads,
            monitor,
        };
        setup.create_spread_with(patch).await?;
        setup.configs.enroll(setup.ns.name()).await?;
        Ok(Some(setup))
    }

    /// The monitor's verdict (no subset over its maximum at any observed moment), then
    /// the webhook configurations removed.
    pub async fn finish(self) -> Result<()> {
        let report = self.monitor.finish()?;
        eprintln!("monitor: {report}");
        self.configs.delete().await
    }

    pub fn target() -> Value {
        json!({"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"})
    }

    pub async fn create_spread(&self) -> Result<DynamicObject> {
        self.create_spread_with(None).await
    }

    pub async fn create_spread_with(&self, patch: Option<Value>) -> Result<DynamicObject> {
        let mut a = zone_subset("a", "zone-a", json!(5));
        if let Some(p) = patch {
            a["patch"] = p;
        }
        let ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "spread"},
            "spec": {"targetRef": Self::target(), "subsets": [a,
                zone_subset("b", "zone-b", Value::Null)]}}))?;
        let created = self.spreads.create(&PostParams::default(), &ws).await?;
        self.host
            .wait_sees_workloadspread(self.ns.name(), "spread", &Self::target())
            .await?;
        Ok(created)
    }

    /// Creates pod `name` of the fleet; the subset it was admitted into.
    pub async fn create_pod(&self, name: &str) -> Result<Option<String>> {
        let pod = workloadspread_testkit::webhook::fleet_pod(name, &self.fleet_uid);
        let pod = self
            .ns
            .api::<Pod>()
            .create(&PostParams::default(), &pod)
            .await?;
        Ok(subsets_of(std::slice::from_ref(&pod)).into_keys().next())
    }

    /// `creatingPods` of subset `subset` without reserved slots (`~…` placeholders).
    pub async fn creating_pods(&self, subset: usize) -> Result<Vec<String>> {
        let mut keys = self.creating(subset).await?;
        keys.retain(|k| !k.starts_with('~'));
        Ok(keys)
    }

    /// `creatingPods` of subset `subset` (versionIgnored) in the stored status.
    pub async fn creating(&self, subset: usize) -> Result<Vec<String>> {
        let status = self.spreads.get("spread").await?.data["status"].clone();
        let versioned = &status["versionedSubsetStatuses"];
        let statuses = versioned
            .as_object()
            .and_then(|m| m.values().next())
            .context("no versioned status")?;
        Ok(statuses[subset]["creatingPods"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default())
    }
}

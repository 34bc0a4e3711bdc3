//! The whole system for one test namespace: the admission host (webhooks routed to it
//! for this namespace only), the controller scoped to the namespace, and a fake kubelet
//! so workload controllers see pods become Ready and deleted pods go away.

use crate::webhook::{
    free_port, policy_wasm, workspace_binary, ControllerProcess, HostProcess, WebhookConfigs,
};
use crate::{cluster, unique_name, TestNamespace};
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Plays the kubelet for the fake nodes of one namespace: bound pods become Running and
/// Ready, pods marked for deletion are removed (the control plane has no kubelets).
pub struct FakeKubelet {
    task: JoinHandle<()>,
}

impl FakeKubelet {
    pub fn start(client: Client, namespace: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for pod in &list.items {
                        // Best effort: the next pass retries whatever failed.
                        let _ = Self::sync(&pods, pod).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        FakeKubelet { task }
    }

    async fn sync(pods: &Api<Pod>, pod: &Pod) -> Result<()> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await?;
            return Ok(());
        }
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !bound || phase == Some("Running") {
            return Ok(());
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        let conditions = ["PodScheduled", "Initialized", "ContainersReady", "Ready"].map(condition);
        let status = json!({"status": {"phase": "Running", "startTime": now, "podIP": "10.88.0.1",
            "conditions": conditions}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The policy module and the two binaries a stack runs.
pub struct Binaries {
    pub policy: std::path::PathBuf,
    pub host: std::path::PathBuf,
    pub controller: std::path::PathBuf,
}

impl Binaries {
    /// `None` (with a message) when something is not built and the run does not require it.
    pub fn find() -> Result<Option<Self>> {
        let (Some(policy), Some(host), Some(controller)) = (
            policy_wasm()?,
            workspace_binary("workloadspread-host")?,
            workspace_binary("workloadspread-controller")?,
        ) else {
            return Ok(None);
        };
        Ok(Some(Binaries {
            policy,
            host,
            controller,
        }))
    }
}

/// A fresh namespace with the WorkloadSpread CRD applied.
pub async fn namespace_with_crd(hint: &str) -> Result<TestNamespace> {
    let ns = cluster()?.namespace(hint).await?;
    crate::webhook::apply_crd(&ns.client(), &workloadspread_crd_json()?).await?;
    Ok(ns)
}

/// Host + controller + fake kubelet for one fresh namespace. Dropping it stops the
/// processes; [`Stack::finish`] also removes the webhook configurations.
pub struct Stack {
    pub ns: TestNamespace,
    pub host: HostProcess,
    pub controller: ControllerProcess,
    pub configs: WebhookConfigs,
    _kubelet: FakeKubelet,
}

impl Stack {
    /// `None` (with a message) when the policy module or binaries are not built and the
    /// run does not require them.
    pub async fn start(hint: &str, controller_args: &[&str]) -> Result<Option<Self>> {
        Self::start_with(hint, &[], controller_args).await
    }

    /// As [`Stack::start`] with extra `serve` arguments for the host.
    pub async fn start_with(
        hint: &str,
        host_args: &[&str],
        controller_args: &[&str],
    ) -> Result<Option<Self>> {
        let Some(bins) = Binaries::find()? else {
            return Ok(None);
        };
        let ns = namespace_with_crd(hint).await?;
        let client = ns.client();
        let kubeconfig = cluster()?.kubeconfig();
        let port = free_port()?;
        let name = unique_name(hint);
        let configs =
            WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
        let mut args = vec![
            "--policy".to_string(),
            bins.policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
        ];
        args.extend(host_args.iter().map(|s| s.to_string()));
        let host = HostProcess::start_on(&bins.host, kubeconfig, port, &args).await?;
        configs.enroll(ns.name()).await?;
        let mut args = vec!["--namespace".to_string(), ns.name().to_string()];
        args.extend(controller_args.iter().map(|s| s.to_string()));
        let controller = ControllerProcess::start(&bins.controller, kubeconfig, &args)
            .await
            .context("starting the controller")?;
        let kubelet = FakeKubelet::start(client, ns.name());
        Ok(Some(Stack {
            ns,
            host,
            controller,
            configs,
            _kubelet: kubelet,
        }))
    }

    /// Removes the webhook configurations (the namespace is left for inspection).
    pub async fn finish(self) -> Result<()> {
        let Stack { configs, .. } = self;
        configs.delete().await
    }
}

/// The WorkloadSpread CRD as the repository ships it (generated from `core`).
pub fn workloadspread_crd_json() -> Result<serde_json::Value> {
    let path = crate::repo_root().join("charts/workloadspread/crds/workloadspreads.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

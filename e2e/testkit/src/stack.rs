//! The whole system for one test namespace: the admission host (webhooks routed to it
//! for this namespace only) and the controller scoped to the namespace. The cluster's
//! KWOK nodes play the kubelets: pods bound to them become Running/Ready and deleted
//! pods go away, so the workload controllers behave as on a real cluster.

use crate::webhook::{
    free_port, policy_wasm, workspace_binary, ControllerProcess, HostProcess, WebhookConfigs,
};
use crate::{cluster, unique_name, TestNamespace};
use anyhow::{Context, Result};

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

/// Host + controller for one fresh namespace. Dropping it stops the processes;
/// [`Stack::finish`] also removes the webhook configurations.
pub struct Stack {
    pub ns: TestNamespace,
    pub host: HostProcess,
    pub controller: ControllerProcess,
    pub configs: WebhookConfigs,
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
        Self::start_via(hint, cluster()?.kubeconfig(), host_args, controller_args).await
    }

    /// As [`Stack::start_with`], the host reaching the API server through
    /// `host_kubeconfig` (e.g. through a fault proxy); the controller goes direct.
    pub async fn start_via(
        hint: &str,
        host_kubeconfig: &std::path::Path,
        host_args: &[&str],
        controller_args: &[&str],
    ) -> Result<Option<Self>> {
        let Some(bins) = Binaries::find()? else {
            return Ok(None);
        };
        let ns = namespace_with_crd(hint).await?;
        Self::start_in(ns, &bins, host_kubeconfig, host_args, controller_args)
            .await
            .map(Some)
    }

    /// Host + controller for `ns`, with whatever WorkloadSpread CRD the cluster has
    /// (e.g. OpenKruise's, taken over as it is). A controller standing back because
    /// OpenKruise's WorkloadSpread validation is registered counts as started.
    pub async fn start_in(
        ns: TestNamespace,
        bins: &Binaries,
        host_kubeconfig: &std::path::Path,
        host_args: &[&str],
        controller_args: &[&str],
    ) -> Result<Self> {
        let hint = ns.name().to_string();
        let client = ns.client();
        let kubeconfig = cluster()?.kubeconfig();
        let port = free_port()?;
        let name = unique_name(&hint);
        let configs =
            WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
        let mut args = vec![
            "--policy".to_string(),
            bins.policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
        ];
        args.extend(host_args.iter().map(|s| s.to_string()));
        with_bundled_settings(&mut args);
        let host = HostProcess::start_on(&bins.host, host_kubeconfig, port, &args).await?;
        configs.enroll_beside(ns.name(), &host).await?;
        let mut args = vec!["--namespace".to_string(), ns.name().to_string()];
        args.extend(controller_args.iter().map(|s| s.to_string()));
        let controller = ControllerProcess::start_until(&bins.controller, kubeconfig, &args, |b| {
            b == "ok" || b.contains("openkruise hand-over")
        })
        .await
        .context("starting the controller")?;
        Ok(Stack {
            ns,
            host,
            controller,
            configs,
        })
    }

    /// Checks that neither component found a rival writer ([`expect_uncontested`]), then
    /// removes the webhook configurations (the namespace is left for inspection).
    pub async fn finish(self) -> Result<()> {
        expect_uncontested(&self.host, &self.controller).await?;
        self.finish_contested().await
    }

    /// Removes the webhook configurations without the contest check: for a test that
    /// made a rival write on purpose (the namespace is left for inspection).
    pub async fn finish_contested(self) -> Result<()> {
        let Stack { configs, .. } = self;
        configs.delete().await
    }
}

/// The gauges of contested WorkloadSpreads (#45): host's, controller's.
pub const CONTESTED_GAUGES: [&str; 2] = [
    "workloadspread_host_contested_workloadspreads",
    "workloadspread_controller_contested_workloadspreads",
];

/// Fails unless both components report no contested WorkloadSpread. Without a rival
/// there must be none: a contest found where there is none (one of our own writes taken
/// for a rival's) silently stops the controller's writes for that spread and hides it
/// from the host's policy, so every run of the whole system ends with this check. A
/// component the test killed is not asked; one that died by itself fails the check.
pub async fn expect_uncontested(host: &HostProcess, controller: &ControllerProcess) -> Result<()> {
    host_uncontested(host).await?;
    controller_uncontested(controller).await
}

async fn host_uncontested(host: &HostProcess) -> Result<()> {
    if host.killed() {
        return Ok(());
    }
    let text = host.get("/metrics").await.context("the host's /metrics")?;
    contested(&text, CONTESTED_GAUGES[0])
}

async fn controller_uncontested(controller: &ControllerProcess) -> Result<()> {
    if controller.killed() {
        return Ok(());
    }
    let text = controller
        .get("/metrics")
        .await
        .context("the controller's /metrics")?;
    contested(&text, CONTESTED_GAUGES[1])
}

/// `gauge` in a `/metrics` text: present (a renamed gauge would pass as 0) and 0.
fn contested(text: &str, gauge: &str) -> Result<()> {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(gauge)?.strip_prefix(' '))
        .with_context(|| format!("no {gauge} in /metrics"))?;
    let n: f64 = value
        .trim()
        .parse()
        .with_context(|| format!("{gauge} {value}: not a number"))?;
    anyhow::ensure!(
        n == 0.0,
        "{gauge} is {n}: a component found a rival writer of a WorkloadSpread's status where \
         the test made none (our own write taken for another's? see the Contested events and \
         the logs)"
    );
    Ok(())
}

/// The WorkloadSpread CRD as the repository ships it (generated from `core`).
pub fn workloadspread_crd_json() -> Result<serde_json::Value> {
    let path = crate::repo_root().join("charts/workloadspread/crds/workloadspreads.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Two host replicas for one fresh namespace, sharing one TLS Secret, with the webhooks
/// pointing at a round-robin proxy in front of them (as a Service spreads calls), and
/// the controller (unless `controller` is false: started later with
/// [`Replicated::start_controller`]).
pub struct Replicated {
    pub ns: TestNamespace,
    pub hosts: Vec<HostProcess>,
    pub controller: Option<ControllerProcess>,
    pub configs: WebhookConfigs,
    pub bins: Binaries,
}

/// How a [`Replicated`] stack starts.
pub struct ReplicatedOptions<'a> {
    /// Each host's kubeconfig (e.g. one through a fault proxy).
    pub host_kubeconfigs: [&'a std::path::Path; 2],
    /// Extra `serve` arguments per host.
    pub host_args: [Vec<String>; 2],
    /// Start the controller with the stack.
    pub controller: bool,
}

impl Replicated {
    /// `None` (with a message) when the policy module or binaries are not built and the
    /// run does not require them.
    pub async fn start(hint: &str, options: ReplicatedOptions<'_>) -> Result<Option<Self>> {
        let Some(bins) = Binaries::find()? else {
            return Ok(None);
        };
        let ns = namespace_with_crd(hint).await?;
        let client = ns.client();
        let ports = [free_port()?, free_port()?];
        let backends = ports.map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)));
        let proxy = crate::webhook::round_robin_proxy(backends.to_vec()).await?;
        let name = unique_name(hint);
        let configs = WebhookConfigs::create(&client, &name, &format!("https://{proxy}")).await?;
        let mut hosts = vec![];
        for ((port, kubeconfig), extra) in ports
            .into_iter()
            .zip(options.host_kubeconfigs)
            .zip(options.host_args)
        {
            let mut args: Vec<String> = [
                "--policy",
                &bins.policy.display().to_string(),
                "--tls-secret",
                &format!("{}/host-tls", ns.name()),
                "--webhook-config",
                &name,
                "--max-concurrency",
                "128",
            ]
            .map(str::to_string)
            .to_vec();
            args.extend(extra);
            with_bundled_settings(&mut args);
            hosts.push(HostProcess::start_on(&bins.host, kubeconfig, port, &args).await?);
        }
        configs.enroll(ns.name()).await?;
        let mut stack = Replicated {
            ns,
            hosts,
            controller: None,
            configs,
            bins,
        };
        if options.controller {
            stack.start_controller().await?;
        }
        Ok(Some(stack))
    }

    /// Checks that no host replica and no controller the test left running found a
    /// rival writer ([`expect_uncontested`]), then removes the webhook configurations.
    pub async fn finish(self) -> Result<()> {
        for host in &self.hosts {
            host_uncontested(host).await?;
        }
        if let Some(controller) = &self.controller {
            controller_uncontested(controller).await?;
        }
        self.configs.delete().await
    }

    /// Starts (or restarts) the controller for the namespace.
    pub async fn start_controller(&mut self) -> Result<()> {
        if let Some(mut c) = self.controller.take() {
            c.kill();
        }
        let args = ["--namespace".to_string(), self.ns.name().to_string()];
        let controller =
            ControllerProcess::start(&self.bins.controller, cluster()?.kubeconfig(), &args)
                .await
                .context("starting the controller")?;
        self.controller = Some(controller);
        Ok(())
    }
}

/// The policy settings the chart gives the bundled host (`spreadLookup: target-name`:
/// WorkloadSpreads found by their target's name, which the host answers from its cache),
/// unless `args` name settings of their own (those tests decide, e.g. the list
/// Kubewarden's policy-server gets).
fn with_bundled_settings(args: &mut Vec<String>) {
    if !args.iter().any(|a| a.starts_with("--settings")) {
        args.extend([
            "--settings-json".to_string(),
            r#"{"spreadLookup":"target-name"}"#.to_string(),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::contested;

    #[test]
    fn a_contest_gauge_must_be_there_and_zero() {
        let gauge = "workloadspread_host_contested_workloadspreads";
        let text = |v: &str| format!("# TYPE {gauge} gauge\n{gauge} {v}\n{gauge}_other 3\n");
        assert!(contested(&text("0"), gauge).is_ok());
        let err = contested(&text("1"), gauge).unwrap_err().to_string();
        assert!(err.contains("is 1"), "{err}");
        assert!(
            contested("# nothing\n", gauge).is_err(),
            "a missing gauge passes as 0"
        );
        assert!(contested(&text("x"), gauge).is_err());
    }
}

//! `uninstall`: what must go before the host does (the chart's pre-delete hook) — the
//! webhook configurations, which with `failurePolicy: Fail` would refuse pods once no
//! host answers, and the CRD's conversion webhook (the CRD itself stays).

use crate::api_call::bounded;
use anyhow::{Context, Result};
use clap::Args;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::DeleteParams;
use kube::Api;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct UninstallArgs {
    /// Delete the Mutating- and ValidatingWebhookConfiguration of this name.
    #[arg(long)]
    pub webhook_config: String,
    /// Reset this CRD's conversion to `None` if it points at --conversion-service.
    #[arg(long, requires = "conversion_service")]
    pub conversion_crd: Option<String>,
    /// NAMESPACE/SERVICE of the host being uninstalled.
    #[arg(long)]
    pub conversion_service: Option<String>,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(20);

pub fn uninstall(args: UninstallArgs) -> Result<()> {
    super::current_thread_runtime()?.block_on(async {
        let client = super::serve::kube_client(args.kubeconfig.as_ref()).await?;
        let name = &args.webhook_config;
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let dp = DeleteParams::default();
        let m = gone(bounded(CALL_TIMEOUT, mutating.delete(name, &dp)).await?)
            .with_context(|| format!("deleting MutatingWebhookConfiguration {name}"))?;
        let v = gone(bounded(CALL_TIMEOUT, validating.delete(name, &dp)).await?)
            .with_context(|| format!("deleting ValidatingWebhookConfiguration {name}"))?;
        eprintln!("webhook configurations {name}: mutating deleted={m}, validating deleted={v}");
        if let (Some(crd), Some(service)) = (&args.conversion_crd, &args.conversion_service) {
            let (ns, svc) = service
                .split_once('/')
                .context("--conversion-service must be NAMESPACE/SERVICE")?;
            let svc = svc.split(':').next().unwrap_or(svc);
            let reset = bounded(
                CALL_TIMEOUT,
                crate::webhook::convert::disable_on_crd(&client, crd, ns, svc),
            )
            .await??;
            eprintln!("CRD {crd}: conversion reset to None={reset}");
        }
        Ok(())
    })
}

/// Deleted (true) or already gone (false).
fn gone<T>(r: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

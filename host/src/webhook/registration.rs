//! The webhooks of the webhook configurations, written by the host once it serves them
//! (issue #41, item 2). The chart creates the Mutating- and ValidatingWebhookConfiguration
//! without webhooks and hands the host their definitions (`--webhooks-file`): until a host
//! answers through its Service, no pod is sent to a webhook nobody serves — with
//! `failurePolicy: Fail` every covered pod creation would be refused from `helm install`
//! on (as Kubewarden registers a policy only once its policy server serves it). The host
//! writes them with its CA bundle, so they are never without one; `helm uninstall`
//! deletes the configurations (and the pre-delete hook before the hosts go).
//!
//! A host writes its definitions when it starts serving if the configurations hold others
//! (a changed chart rolls the hosts: the new ones write the new definitions), and restores
//! them whenever a configuration holds no webhook at all (an upgrade from a chart that
//! rendered them, a re-applied manifest).

use super::App;
use crate::api_call::bounded;
use crate::tls::publish::{watch_named, Published, GENERATION_ANNOTATION};
use crate::tls::staleness::TargetError;
use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// On a configuration: the digest of the definitions it holds (as a host wrote them).
pub const DIGEST_ANNOTATION: &str = "workloadspread.io/webhooks-digest";
/// Every API call here is abandoned after this.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The webhooks of both configurations (the chart's `webhooks.yaml`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Definitions {
    #[serde(default)]
    pub mutating: Vec<MutatingWebhook>,
    #[serde(default)]
    pub validating: Vec<ValidatingWebhook>,
}

impl Definitions {
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let defs: Definitions =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        anyhow::ensure!(
            !defs.mutating.is_empty() || !defs.validating.is_empty(),
            "{} defines no webhook",
            path.display()
        );
        Ok(defs)
    }

    /// What identifies these definitions (their caBundles left out).
    pub fn digest(&self) -> String {
        let mut bare = self.clone();
        for w in &mut bare.mutating {
            w.client_config.ca_bundle = None;
        }
        for w in &mut bare.validating {
            w.client_config.ca_bundle = None;
        }
        let json = serde_json::to_vec(&bare).unwrap_or_default();
        let digest = Sha256::digest(json);
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// The Services the webhooks are reached through: NAMESPACE, NAME, PORT.
    fn services(&self) -> Vec<(String, String, i32)> {
        let configs = self
            .mutating
            .iter()
            .map(|w| &w.client_config)
            .chain(self.validating.iter().map(|w| &w.client_config));
        let mut services: Vec<(String, String, i32)> = configs
            .filter_map(|c| c.service.as_ref())
            .map(|s| (s.namespace.clone(), s.name.clone(), s.port.unwrap_or(443)))
            .collect();
        services.sort();
        services.dedup();
        services
    }
}

/// Whether the API server reaches a ready host through Service `namespace/name:port`: its
/// service proxy (which picks an endpoint as webhook calls do) answers `/readyz` with ok.
async fn reachable(client: &Client, namespace: &str, name: &str, port: i32) -> Result<()> {
    let path = format!("/api/v1/namespaces/{namespace}/services/https:{name}:{port}/proxy/readyz");
    let request = axum::http::Request::get(&path)
        .body(Vec::new())
        .context("building the probe")?;
    let answer = bounded(CALL_TIMEOUT, client.request_text(request)).await??;
    anyhow::ensure!(answer.trim() == "ok", "{path} answered {answer:?}");
    Ok(())
}

/// Keeps the definitions in the configurations called `name`: written once this host is
/// ready and the API server reaches a host through each Service they name, then restored
/// whenever a configuration holds no webhook. Runs until the process ends.
pub async fn keep(
    client: Client,
    name: String,
    definitions: Definitions,
    mut published: watch::Receiver<Published>,
    app: Arc<App>,
) {
    while app.capabilities.not_ready_reason().is_some() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut pause = Duration::from_millis(250);
    for (namespace, service, port) in definitions.services() {
        let mut said = false;
        while let Err(e) = reachable(&client, &namespace, &service, port).await {
            if !said {
                tracing::info!(
                    "webhooks wait for the API server to reach a host through Service \
                     {namespace}/{service}:{port}: {e:#}"
                );
                said = true;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }
    let mut changes = futures::stream::select_all(vec![
        watch_named::<MutatingWebhookConfiguration>(&client, Some(&name)),
        watch_named::<ValidatingWebhookConfiguration>(&client, Some(&name)),
    ]);
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    let mut first = true;
    loop {
        let bundle = published.borrow_and_update().clone();
        match write(&client, &name, &definitions, &bundle, first).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                configuration = %name,
                digest = %definitions.digest(),
                "webhooks written into {n} configuration(s)"
            ),
            Err(e) => tracing::warn!("writing the webhooks: {e}"),
        }
        first = false;
        tokio::select! {
            changed = published.changed() => if changed.is_err() { return },
            Some(()) = changes.next() => {}
            _ = tick.tick() => {}
        }
    }
}

/// Writes the definitions with `bundle` into both configurations called `name` where they
/// hold no webhook, and with `replace` also where they hold other definitions. Returns
/// how many were written.
pub async fn write(
    client: &Client,
    name: &str,
    definitions: &Definitions,
    bundle: &Published,
    replace: bool,
) -> Result<usize, TargetError> {
    let digest = definitions.digest();
    let ca = ByteString(bundle.bundle.as_bytes().to_vec());
    let with_ca = |c: &WebhookClientConfig| WebhookClientConfig {
        ca_bundle: Some(ca.clone()),
        ..c.clone()
    };
    let mutating: Vec<MutatingWebhook> = definitions
        .mutating
        .iter()
        .map(|w| MutatingWebhook {
            client_config: with_ca(&w.client_config),
            ..w.clone()
        })
        .collect();
    let validating: Vec<ValidatingWebhook> = definitions
        .validating
        .iter()
        .map(|w| ValidatingWebhook {
            client_config: with_ca(&w.client_config),
            ..w.clone()
        })
        .collect();
    let mut written = 0;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    written += write_one(&api, name, "MutatingWebhookConfiguration", |c| {
        let held = c.webhooks.as_ref().is_some_and(|w| !w.is_empty());
        let due = !held || (replace && digest_of(&c.metadata) != Some(&digest));
        if due {
            c.webhooks = Some(mutating.clone());
            mark(&mut c.metadata, &digest, bundle.generation);
        }
        due
    })
    .await?;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    written += write_one(&api, name, "ValidatingWebhookConfiguration", |c| {
        let held = c.webhooks.as_ref().is_some_and(|w| !w.is_empty());
        let due = !held || (replace && digest_of(&c.metadata) != Some(&digest));
        if due {
            c.webhooks = Some(validating.clone());
            mark(&mut c.metadata, &digest, bundle.generation);
        }
        due
    })
    .await?;
    Ok(written)
}

fn digest_of(meta: &ObjectMeta) -> Option<&String> {
    meta.annotations.as_ref()?.get(DIGEST_ANNOTATION)
}

fn mark(meta: &mut ObjectMeta, digest: &str, generation: u64) {
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    annotations.insert(DIGEST_ANNOTATION.into(), digest.to_string());
    annotations.insert(GENERATION_ANNOTATION.into(), generation.to_string());
}

/// Reads configuration `name`, lets `change` update it (true: write it back), replaces it
/// guarded by its resourceVersion; conflicts are read again (a few times). A missing
/// configuration is left alone: the chart creates them, the host only fills them in.
async fn write_one<K>(
    api: &Api<K>,
    name: &str,
    kind: &'static str,
    change: impl Fn(&mut K) -> bool,
) -> Result<usize, TargetError>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let resource = match kind {
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        _ => "validatingwebhookconfigurations",
    };
    let fail = |verb, e| TargetError::new(kind, resource, name, verb, e);
    for _ in 0..5 {
        let got = bounded(CALL_TIMEOUT, api.get_opt(name))
            .await
            .and_then(|r| r.map_err(anyhow::Error::from))
            .map_err(|e| fail("get", e))?;
        let Some(mut config) = got else {
            return Ok(0);
        };
        if !change(&mut config) {
            return Ok(0);
        }
        match bounded(
            CALL_TIMEOUT,
            api.replace(name, &PostParams::default(), &config),
        )
        .await
        {
            Ok(Ok(_)) => return Ok(1),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => continue,
            Ok(Err(e)) => return Err(fail("update", e.into())),
            Err(e) => return Err(fail("update", e)),
        }
    }
    Err(fail(
        "update",
        anyhow::anyhow!("kept changing while being written"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART: &str = r#"
mutating:
- name: pods.workloadspread.io
  clientConfig: {service: {name: ws-host, namespace: ws-system, path: /mutate}}
  rules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE]}]
  failurePolicy: Fail
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1]
validating:
- name: workloadspreads.workloadspread.io
  clientConfig: {service: {name: ws-host, namespace: ws-system, path: /validate, port: 8443}}
  sideEffects: None
  admissionReviewVersions: [v1]
"#;

    #[test]
    fn definitions_name_their_services_and_digest_without_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhooks.yaml");
        std::fs::write(&path, CHART).unwrap();
        let defs = Definitions::read(&path).unwrap();
        assert_eq!(
            defs.services(),
            vec![
                ("ws-system".into(), "ws-host".into(), 443),
                ("ws-system".into(), "ws-host".into(), 8443)
            ]
        );
        let mut with_ca = defs.clone();
        with_ca.mutating[0].client_config.ca_bundle = Some(ByteString(b"CA".to_vec()));
        assert_eq!(
            with_ca.digest(),
            defs.digest(),
            "the bundle is not part of it"
        );
        let mut other = defs.clone();
        other.mutating[0].failure_policy = Some("Ignore".into());
        assert_ne!(other.digest(), defs.digest());
        std::fs::write(&path, "mutating: []\n").unwrap();
        let err = Definitions::read(&path).unwrap_err().to_string();
        assert!(err.contains("defines no webhook"), "{err}");
    }
}

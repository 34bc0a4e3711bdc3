//! The CA bundle kept in its targets (issue #30, item 4): the webhook configurations and
//! the CRD's conversion carry the bundle a replica publishes (generated certificates:
//! `rotation.rs`; files: `file_bundle.rs`), re-patched as soon as a watch sees them
//! changed (a GitOps tool re-applying them, say). A replica never writes an older bundle
//! over a newer one: every object carries the generation of the bundle it holds.
//! Without a generation: [`patch_ca_bundle`], a bundle written once at start.

use super::staleness::{BundleWatch, TargetError};
use super::CALL_TIMEOUT;
use crate::api_call::bounded;
use crate::clock::unix_now;
use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// On a webhook configuration or the CRD: the generation of the bundle it carries.
pub const GENERATION_ANNOTATION: &str = "workloadspread.io/ca-bundle-generation";

/// The bundle a replica publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub generation: u64,
    pub bundle: String,
}

/// Where the CA bundle must be kept.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// Mutating and validating webhook configurations of this name.
    pub webhook_config: Option<String>,
    /// The CRD whose conversion webhook this host serves.
    pub conversion_crd: Option<String>,
}

/// A target kind: its name and its RBAC resource.
pub(super) type Kind = (&'static str, &'static str);
pub(super) const MUTATING: Kind = (
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
);
pub(super) const VALIDATING: Kind = (
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
);
pub(super) const CRD: Kind = ("CustomResourceDefinition", "customresourcedefinitions");

fn target_error(kind: Kind, name: &str, verb: &'static str, e: anyhow::Error) -> TargetError {
    TargetError::new(kind.0, kind.1, name, verb, e)
}

/// GET of a target (`None`: it does not exist), failures named after it.
pub(super) async fn get<K>(api: &Api<K>, name: &str, kind: Kind) -> Result<Option<K>, TargetError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let got = bounded(CALL_TIMEOUT, api.get_opt(name))
        .await
        .and_then(|r| r.map_err(anyhow::Error::from));
    got.map_err(|e| target_error(kind, name, "get", e))
}

/// Keeps the targets' CA bundle equal to the published one: re-checked whenever the
/// bundle changes, a watch sees a target change, or a poll period (a minute at most)
/// passes; failures go to `health`.
pub async fn keep_bundles(
    client: Client,
    targets: Targets,
    mut published: watch::Receiver<Published>,
    health: Arc<BundleWatch>,
) {
    let mut changes = futures::stream::select_all(vec![
        watch_named::<MutatingWebhookConfiguration>(&client, targets.webhook_config.as_deref()),
        watch_named::<ValidatingWebhookConfiguration>(&client, targets.webhook_config.as_deref()),
        watch_named::<CustomResourceDefinition>(&client, targets.conversion_crd.as_deref()),
    ]);
    let mut tick = tokio::time::interval(health.poll().min(Duration::from_secs(60)));
    loop {
        let current = published.borrow_and_update().clone();
        let outcome = ensure_bundles(&client, &targets, &current).await;
        let first = health.written(unix_now(), outcome.as_ref().map(|_| ()));
        match &outcome {
            Err(e) if first => tracing::warn!("keeping the CA bundle current: {e}"),
            Err(e) => tracing::debug!("keeping the CA bundle current: {e}"),
            Ok(_) => {}
        }
        tokio::select! {
            changed = published.changed() => if changed.is_err() { return },
            Some(()) = changes.next() => {}
            _ = tick.tick() => {}
        }
    }
}

/// A stream yielding `()` whenever the cluster-scoped object `name` of kind `K` changes.
pub(crate) fn watch_named<K>(
    client: &Client,
    name: Option<&str>,
) -> futures::stream::BoxStream<'static, ()>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let Some(name) = name else {
        return futures::stream::pending().boxed();
    };
    let api: Api<K> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // With the API server unreachable a watcher without backoff retries at once, for
    // ever: two of them made ~25 000 failed requests (and ERROR lines) a second.
    watcher(api, config)
        .default_backoff()
        .filter_map(|event| async move {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::InitDone) => Some(()),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!("watching for CA bundle changes: {e}");
                    None
                }
            }
        })
        .boxed()
}

/// Whether an object holding `carried` (its generation annotation and bundle) must be
/// patched to `want`: an older generation, a missing one, or the same generation with
/// another bundle (someone overwrote it). A newer generation is left alone.
pub fn needs_patch(
    carried_generation: Option<u64>,
    carried_bundle: &[u8],
    want: &Published,
) -> bool {
    match carried_generation {
        None => true,
        Some(g) if g < want.generation => true,
        Some(g) if g == want.generation => carried_bundle != want.bundle.as_bytes(),
        Some(_) => false,
    }
}

fn generation_of(meta: &ObjectMeta) -> Option<u64> {
    meta.annotations
        .as_ref()?
        .get(GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

fn mark(meta: &mut ObjectMeta, generation: u64) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(GENERATION_ANNOTATION.into(), generation.to_string());
}

/// One webhook configuration (mutating or validating; `parts` gives its metadata and
/// client configs): replaced with `want`'s bundle if any webhook's is behind. 1 when
/// written, 0 otherwise.
async fn ensure_webhook_bundle<K>(
    api: &Api<K>,
    name: &str,
    kind: Kind,
    want: &Published,
    parts: impl Fn(&mut K) -> (&mut ObjectMeta, Vec<&mut WebhookClientConfig>),
) -> Result<usize, TargetError>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Some(mut c) = get(api, name, kind).await? else {
        return Ok(0);
    };
    let (meta, configs) = parts(&mut c);
    let generation = generation_of(meta);
    let stale = configs.iter().any(|w| {
        let have = w.ca_bundle.as_ref().map_or(&[][..], |b| &b.0);
        needs_patch(generation, have, want)
    });
    if !stale {
        return Ok(0);
    }
    let ca = ByteString(want.bundle.as_bytes().to_vec());
    for w in configs {
        w.ca_bundle = Some(ca.clone());
    }
    mark(meta, want.generation);
    bounded(CALL_TIMEOUT, api.replace(name, &PostParams::default(), &c))
        .await
        .and_then(|r| r.map_err(anyhow::Error::from))
        .map_err(|e| target_error(kind, name, "update", e))?;
    Ok(1)
}

/// Patches every target whose bundle is behind `want` (replace with resourceVersion;
/// a conflict is retried at the next trigger).
pub async fn ensure_bundles(
    client: &Client,
    targets: &Targets,
    want: &Published,
) -> Result<usize, TargetError> {
    let mut patched = 0;
    if let Some(name) = &targets.webhook_config {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        patched += ensure_webhook_bundle(&mutating, name, MUTATING, want, |c| {
            let meta = &mut c.metadata;
            let configs = c
                .webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config);
            (meta, configs.collect())
        })
        .await?;
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        patched += ensure_webhook_bundle(&validating, name, VALIDATING, want, |c| {
            let meta = &mut c.metadata;
            let configs = c
                .webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config);
            (meta, configs.collect())
        })
        .await?;
    }
    if let Some(name) = &targets.conversion_crd {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        if let Some(crd) = get(&api, name, CRD).await? {
            let generation = generation_of(&crd.metadata);
            let config = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref());
            if let Some(config) = config {
                let have = config.ca_bundle.as_ref().map_or(&[][..], |b| &b.0);
                if needs_patch(generation, have, want) {
                    // A merge patch (the host may patch the CRD, not update it), guarded by
                    // the resourceVersion read.
                    use base64::Engine as _;
                    let patch = serde_json::json!({
                        "metadata": {
                            "resourceVersion": crd.metadata.resource_version,
                            "annotations": {GENERATION_ANNOTATION: want.generation.to_string()},
                        },
                        "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle":
                            base64::engine::general_purpose::STANDARD.encode(&want.bundle)}}}},
                    });
                    let params = kube::api::PatchParams::default();
                    bounded(
                        CALL_TIMEOUT,
                        api.patch(name, &params, &kube::api::Patch::Merge(&patch)),
                    )
                    .await
                    .and_then(|r| r.map_err(anyhow::Error::from))
                    .map_err(|e| target_error(CRD, name, "patch", e))?;
                    patched += 1;
                }
            }
        }
    }
    if patched > 0 {
        tracing::info!(
            generation = want.generation,
            "CA bundle written to {patched} object(s)"
        );
    }
    Ok(patched)
}

/// Sets `caBundle` on every webhook of the Mutating and Validating configurations
/// called `name` (those that exist); retries on conflicts.
pub async fn patch_ca_bundle(client: &Client, name: &str, ca_pem: &str) -> Result<usize> {
    let ca = ByteString(ca_pem.as_bytes().to_vec());
    let mutating = set_bundle(client, name, |c: &mut MutatingWebhookConfiguration| {
        for w in c.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ca.clone());
        }
    });
    let validating = set_bundle(client, name, |c: &mut ValidatingWebhookConfiguration| {
        for w in c.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ca.clone());
        }
    });
    Ok(usize::from(mutating.await?) + usize::from(validating.await?))
}

/// Replaces the webhook configuration `name` (if it exists) with `set` applied, each
/// call bounded; retries on conflicts. Whether it was written.
async fn set_bundle<K>(client: &Client, name: &str, set: impl Fn(&mut K)) -> Result<bool>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + serde::Serialize,
{
    let api: Api<K> = Api::all(client.clone());
    for _ in 0..5 {
        let Some(mut c) = bounded(CALL_TIMEOUT, api.get_opt(name)).await?? else {
            return Ok(false);
        };
        set(&mut c);
        match bounded(CALL_TIMEOUT, api.replace(name, &PostParams::default(), &c)).await? {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context(format!("patching {} {name}", K::kind(&()))),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With nothing answering, the CA bundle's watches back off: a few attempts in a
    /// second, not one per failed connection as fast as the loop turns.
    #[tokio::test]
    async fn watches_back_off_while_the_api_server_is_unreachable() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // A loopback port that accepts and drops every connection, counting them.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: hyper::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        let server = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                drop(tcp);
            }
        });
        let client = Client::try_from(kube::Config::new(url)).unwrap();
        let mut changes = futures::stream::select_all(vec![
            watch_named::<MutatingWebhookConfiguration>(&client, Some("w")),
            watch_named::<ValidatingWebhookConfiguration>(&client, Some("w")),
        ]);
        let waited = tokio::time::timeout(Duration::from_secs(2), changes.next()).await;
        server.abort();
        assert!(waited.is_err(), "a change reported with no API server");
        let attempts = attempts.load(Ordering::Relaxed);
        assert!(
            (1..=40).contains(&attempts),
            "{attempts} connections in 2 s from two watches"
        );
    }

    #[test]
    fn an_older_bundle_never_overwrites_a_newer_one() {
        let want = Published {
            generation: 3,
            bundle: "B3".into(),
        };
        assert!(needs_patch(None, b"", &want), "a re-applied object");
        assert!(needs_patch(Some(2), b"B2", &want));
        assert!(needs_patch(Some(3), b"tampered", &want));
        assert!(!needs_patch(Some(3), b"B3", &want));
        assert!(
            !needs_patch(Some(4), b"B4", &want),
            "another replica is ahead"
        );
    }
}

//! The shared serving certificate kept current (issue #30, item 4): every replica polls
//! the Secret (`secret.rs`), applies what `certs::TlsState::plan` says is due (optimistic
//! concurrency: one replica's write wins, the others read it), serves the Secret's
//! certificate, and publishes the Secret's CA bundle, which `publish.rs` keeps in the
//! webhook configurations and the CRD's conversion.

use super::certs::{Issued, Lifetimes, TlsState};
use super::publish::{get, Published, Targets, CRD, MUTATING, VALIDATING};
use super::secret::{load_or_create, to_secret};
use super::staleness::{BundleWatch, TargetError};
use super::{CertBundle, CertResolver, SecretObserver, CALL_TIMEOUT};
use crate::api_call::bounded;
use crate::clock::unix_now;
use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client};
use std::sync::Arc;
use tokio::sync::watch;

/// Polls the Secret every `health.poll()`: rotates what is due, serves its certificate
/// through `resolver`, publishes its bundle to `published`, tells `health` what it saw and
/// `derived` the shared secret ([`TlsState::shared_secret`]).
#[allow(clippy::too_many_arguments)]
pub async fn keep_rotating(
    client: Client,
    namespace: String,
    name: String,
    sans: Vec<String>,
    lifetimes: Lifetimes,
    targets: Targets,
    resolver: Arc<CertResolver>,
    published: watch::Sender<Published>,
    health: Arc<BundleWatch>,
    derived: Arc<dyn SecretObserver>,
) {
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut served = String::new();
    loop {
        let polled = rotate_once(&client, &api, &name, &sans, &lifetimes, &targets, &health);
        match polled.await {
            Ok(state) => {
                health.observed(&state);
                derived.observe(state.shared_secret());
                if state.serving.cert_pem != served {
                    match CertBundle::from_state(&state).certified_key() {
                        Ok(key) => {
                            resolver.replace(key);
                            if !served.is_empty() {
                                tracing::info!(secret = %name, "serving the rotated certificate");
                            }
                            served = state.serving.cert_pem.clone();
                        }
                        Err(e) => tracing::warn!("the certificate in Secret {name}: {e:#}"),
                    }
                }
                published.send_if_modified(|p| {
                    let next = Published {
                        generation: state.generation,
                        bundle: state.bundle(),
                    };
                    let changed = *p != next && next.generation >= p.generation;
                    if changed {
                        *p = next;
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!(secret = %name, "certificate rotation: {e:#}"),
        }
        health.refresh(unix_now());
        tokio::time::sleep(health.poll()).await;
    }
}

/// One poll: the Secret's state after applying what is due (if this replica's write won).
async fn rotate_once(
    client: &Client,
    api: &Api<Secret>,
    name: &str,
    sans: &[String],
    lifetimes: &Lifetimes,
    targets: &Targets,
    health: &BundleWatch,
) -> Result<TlsState> {
    let (state, version) = load_or_create(api, name, sans, lifetimes).await?;
    let now = unix_now();
    // Only asked when a switch to the next CA is due. A failed check is "not carried"
    // (and reported): the serving certificate is still renewed by the current CA.
    let mut carried = None;
    if let Some(next) = &state.next_ca {
        if state
            .next_published_at
            .is_some_and(|t| now >= t + lifetimes.grace_seconds)
        {
            let outcome = carry(client, targets, next).await;
            health.checked(now, &outcome);
            carried = Some(matches!(outcome, Ok(None)));
        }
    }
    let Some(next) = state.plan(sans, now, lifetimes, |_| carried.unwrap_or(false))? else {
        return Ok(state);
    };
    let mut secret = to_secret(name, &next)?;
    secret.metadata.resource_version = version;
    match bounded(
        CALL_TIMEOUT,
        api.replace(name, &PostParams::default(), &secret),
    )
    .await?
    {
        Ok(_) => {
            tracing::info!(secret = %name, generation = next.generation, "certificates rotated");
            Ok(next)
        }
        // Another replica rotated first: serve what it wrote (read next time).
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(state),
        Err(e) => Err(e).context(format!("updating Secret {name}")),
    }
}

/// Whether every object the bundle goes into carries `ca` already: `None` when they
/// all do, else the first that does not (`KIND NAME`).
async fn carry(
    client: &Client,
    targets: &Targets,
    ca: &Issued,
) -> Result<Option<String>, TargetError> {
    let pem = ca.cert_pem.trim_end();
    let holds = |b: &Option<ByteString>| {
        b.as_ref()
            .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(pem))
    };
    if let Some(n) = &targets.webhook_config {
        let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        if let Some(c) = get(&m, n, MUTATING).await? {
            if !c
                .webhooks
                .iter()
                .flatten()
                .all(|w| holds(&w.client_config.ca_bundle))
            {
                return Ok(Some(format!("{} {n}", MUTATING.0)));
            }
        }
        if let Some(c) = get(&v, n, VALIDATING).await? {
            if !c
                .webhooks
                .iter()
                .flatten()
                .all(|w| holds(&w.client_config.ca_bundle))
            {
                return Ok(Some(format!("{} {n}", VALIDATING.0)));
            }
        }
    }
    if let Some(n) = &targets.conversion_crd {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        if let Some(crd) = get(&api, n, CRD).await? {
            let webhook = crd.spec.conversion.and_then(|c| c.webhook);
            if !holds(
                &webhook
                    .and_then(|w| w.client_config)
                    .and_then(|c| c.ca_bundle),
            ) {
                return Ok(Some(format!("{} {n}", CRD.0)));
            }
        }
    }
    Ok(None)
}

//! The shared serving certificate kept current (issue #30, item 4): every replica polls
//! the Secret, applies what `certs::TlsState::plan` says is due (optimistic concurrency:
//! one replica's write wins, the others read it), serves the Secret's certificate, and
//! keeps the CA bundle of the webhook configurations and the CRD's conversion equal to
//! the Secret's — re-patched as soon as a watch sees them changed (a GitOps tool
//! re-applying them, say). A replica never writes an older bundle over a newer one:
//! every object carries the generation of the bundle it holds.

use super::certs::{Issued, Lifetimes, TlsState};
use super::staleness::{BundleWatch, TargetError};
use super::{unix_now, CertBundle, CertResolver, SecretObserver};
use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The Secret's rotation bookkeeping (times, names, the bundle generation).
pub const STATE_ANNOTATION: &str = "workloadspread.io/tls-state";
/// On a webhook configuration or the CRD: the generation of the bundle it carries.
pub const GENERATION_ANNOTATION: &str = "workloadspread.io/ca-bundle-generation";
/// Every API call of the rotation is abandoned after this.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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

pub fn to_secret(name: &str, state: &TlsState) -> Result<Secret> {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
    };
    put("tls.crt", &state.serving.cert_pem);
    put("tls.key", &state.serving.key_pem);
    put("ca.crt", &state.bundle());
    if let Some(ca) = &state.ca {
        put("ca-signing.crt", &ca.cert_pem);
        put("ca-signing.key", &ca.key_pem);
    }
    if let Some(next) = &state.next_ca {
        put("next-ca.crt", &next.cert_pem);
        put("next-ca.key", &next.key_pem);
    }
    for (i, r) in state.retired.iter().enumerate() {
        put(&format!("retired-{i}.crt"), &r.cert_pem);
    }
    if let Some(legacy) = &state.legacy_bundle {
        put("legacy-ca.crt", legacy);
    }
    let annotations =
        BTreeMap::from([(STATE_ANNOTATION.to_string(), serde_json::to_string(state)?)]);
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(annotations),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    })
}

pub fn from_secret(s: &Secret) -> Result<TlsState> {
    let field = |k: &str| -> Result<Option<String>> {
        match s.data.as_ref().and_then(|d| d.get(k)) {
            None => Ok(None),
            Some(b) => Ok(Some(
                String::from_utf8(b.0.clone()).with_context(|| format!("{k} is not PEM text"))?,
            )),
        }
    };
    let need = |k: &str| field(k)?.with_context(|| format!("missing {k}"));
    let Some(json) = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATE_ANNOTATION))
    else {
        // Written before rotation: no CA key, certificates valid "for ever".
        return Ok(TlsState {
            ca: None,
            next_ca: None,
            next_published_at: None,
            retired: vec![],
            serving: Issued {
                name: "workloadspread-host".into(),
                cert_pem: need("tls.crt")?,
                key_pem: need("tls.key")?,
                issued_at: 0,
                not_after: i64::MAX / 2,
            },
            legacy_bundle: Some(need("ca.crt")?),
            generation: 0,
        });
    };
    let mut state: TlsState =
        serde_json::from_str(json).with_context(|| format!("annotation {STATE_ANNOTATION}"))?;
    state.serving.cert_pem = need("tls.crt")?;
    state.serving.key_pem = need("tls.key")?;
    if let Some(ca) = state.ca.as_mut() {
        ca.cert_pem = need("ca-signing.crt")?;
        ca.key_pem = need("ca-signing.key")?;
    }
    if let Some(next) = state.next_ca.as_mut() {
        next.cert_pem = need("next-ca.crt")?;
        next.key_pem = need("next-ca.key")?;
    }
    for (i, r) in state.retired.iter_mut().enumerate() {
        r.cert_pem = need(&format!("retired-{i}.crt"))?;
    }
    state.legacy_bundle = field("legacy-ca.crt")?;
    Ok(state)
}

/// The Secret's state (and resourceVersion), created when missing; replicas racing to
/// create it read the winner's.
pub async fn load_or_create(
    api: &Api<Secret>,
    name: &str,
    sans: &[String],
    lifetimes: &Lifetimes,
) -> Result<(TlsState, Option<String>)> {
    for _ in 0..3 {
        if let Some(secret) = bounded(api.get_opt(name)).await?? {
            let state = from_secret(&secret).with_context(|| format!("Secret {name}"))?;
            return Ok((state, secret.metadata.resource_version));
        }
        let state = TlsState::generate(sans, unix_now(), lifetimes)?;
        match bounded(api.create(&PostParams::default(), &to_secret(name, &state)?)).await? {
            Ok(created) => return Ok((state, created.metadata.resource_version)),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context(format!("creating Secret {name}")),
        }
    }
    bail!("Secret {name} kept changing while loading it")
}

async fn bounded<T>(call: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| anyhow::anyhow!("the API server did not answer within {CALL_TIMEOUT:?}"))
}

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
    match bounded(api.replace(name, &PostParams::default(), &secret)).await? {
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

/// A target kind: its name and its RBAC resource.
type Kind = (&'static str, &'static str);
const MUTATING: Kind = (
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
);
const VALIDATING: Kind = (
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
);
const CRD: Kind = ("CustomResourceDefinition", "customresourcedefinitions");

fn target_error(kind: Kind, name: &str, verb: &'static str, e: anyhow::Error) -> TargetError {
    TargetError::new(kind.0, kind.1, name, verb, e)
}

/// GET of a target (`None`: it does not exist), failures named after it.
async fn get<K>(api: &Api<K>, name: &str, kind: Kind) -> Result<Option<K>, TargetError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let got = bounded(api.get_opt(name))
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
    bounded(api.replace(name, &PostParams::default(), &c))
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
                    bounded(api.patch(name, &params, &kube::api::Patch::Merge(&patch)))
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
    fn secret_round_trip_keeps_every_certificate() {
        let l = Lifetimes {
            cert_seconds: 300,
            ca_seconds: 1200,
            grace_seconds: 30,
        };
        let sans = vec!["localhost".to_string()];
        let s0 = TlsState::generate(&sans, 0, &l).unwrap();
        let s1 = s0.plan(&sans, 900, &l, |_| true).unwrap().unwrap();
        assert!(s1.next_ca.is_some());
        let s2 = s1.plan(&sans, 950, &l, |_| true).unwrap().unwrap();
        assert_eq!(s2.retired.len(), 1);
        for s in [&s0, &s1, &s2] {
            assert_eq!(&from_secret(&to_secret("n", s).unwrap()).unwrap(), s);
        }
        // A Secret from before rotation: three PEMs, no annotation.
        let mut legacy = to_secret("n", &s0).unwrap();
        legacy.metadata.annotations = None;
        let read = from_secret(&legacy).unwrap();
        assert!(read.ca.is_none() && read.legacy_bundle.is_some());
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

//! What `serve` sets up before it serves: the API client, the policy engine, the
//! certificates, the conversion endpoint.

use super::ServeArgs;
use crate::commands::{default_policy, engine_options};
use crate::engine::PolicyEngine;
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The host's API client (`workloadspread_kube::client`: named `workloadspread-host`).
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    let manager = workloadspread_core::contest::HOST_MANAGER;
    workloadspread_kube::client::client(kubeconfig.map(PathBuf::as_path), manager).await
}

/// How this replica serves TLS.
pub(super) struct Tls {
    pub config: Arc<rustls::ServerConfig>,
    /// The CA bundle now (written out, patched at start).
    pub bundle: String,
    /// With generated certificates: the published bundle, kept in the targets.
    pub published: Option<tokio::sync::watch::Receiver<crate::tls::publish::Published>>,
    /// With generated certificates: whether that bundle reaches them.
    pub health: Option<Arc<crate::tls::staleness::BundleWatch>>,
    /// Keys of the pod webhook's re-invocation tokens (`webhook::reinvoke`), derived from the
    /// secret every replica shares and kept current with it.
    pub tokens: Arc<crate::webhook::reinvoke::TokenKeys>,
}

pub(super) fn lifetimes(args: &ServeArgs) -> Result<crate::tls::certs::Lifetimes> {
    anyhow::ensure!(
        args.tls_ca_validity >= 2 * args.tls_cert_validity,
        "--tls-ca-validity ({} s) must be at least twice --tls-cert-validity ({} s)",
        args.tls_ca_validity,
        args.tls_cert_validity
    );
    Ok(crate::tls::certs::Lifetimes {
        cert_seconds: args.tls_cert_validity,
        ca_seconds: args.tls_ca_validity,
        grace_seconds: args.tls_rotation_grace,
    })
}

pub(super) fn targets(args: &ServeArgs) -> crate::tls::publish::Targets {
    crate::tls::publish::Targets {
        webhook_config: args.webhook_config.clone(),
        conversion_crd: args.conversion_crd.clone(),
    }
}

/// Certificates from files (re-read every --tls-reload-seconds), from the shared
/// Secret (rotated by whichever replica finds it due), or generated for this process.
pub(super) async fn tls(
    args: &ServeArgs,
    client: &kube::Client,
    stale_gauge: prometheus_client::metrics::gauge::Gauge,
) -> Result<Tls> {
    use crate::tls::publish::Published;
    use crate::tls::rotation;
    use crate::tls::{CertBundle, CertResolver, FileReloader};
    let client_ca = args
        .client_ca_file
        .as_deref()
        .map(crate::tls::client_auth::ReloadingVerifier::new)
        .transpose()?;
    if let (Some(verifier), true) = (&client_ca, args.tls_reload_seconds > 0) {
        tokio::spawn(
            verifier
                .clone()
                .watch(Duration::from_secs(args.tls_reload_seconds)),
        );
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) {
        let bundle = CertBundle::from_files(cert, key, args.tls_ca_file.as_deref())?;
        let targets = targets(args);
        if targets.webhook_config.is_some() || targets.conversion_crd.is_some() {
            return files_with_bundle(args, client, bundle, targets, client_ca, stale_gauge).await;
        }
        let tokens = Arc::new(crate::webhook::reinvoke::TokenKeys::default());
        let reloader = FileReloader::new(cert, key, tokens.clone())?;
        let config = crate::tls::server_config(reloader.resolver.clone(), client_ca.clone())?;
        if args.tls_reload_seconds > 0 {
            tokio::spawn(reloader.watch(Duration::from_secs(args.tls_reload_seconds)));
        }
        return Ok(Tls {
            config,
            bundle: bundle.ca_pem,
            published: None,
            health: None,
            tokens,
        });
    }
    let lifetimes = lifetimes(args)?;
    let state = match &args.tls_secret {
        Some(s) => {
            let (ns, name) = s
                .split_once('/')
                .context("--tls-secret must be NAMESPACE/NAME")?;
            let api = kube::Api::namespaced(client.clone(), ns);
            crate::tls::secret::load_or_create(&api, name, &args.tls_sans, &lifetimes)
                .await?
                .0
        }
        None => crate::tls::certs::TlsState::generate(
            &args.tls_sans,
            crate::clock::unix_now(),
            &lifetimes,
        )?,
    };
    let bundle = CertBundle::from_state(&state);
    let tokens = Arc::new(crate::webhook::reinvoke::TokenKeys::default());
    tokens.observe(state.shared_secret());
    // Without polling the bundle is still re-checked in its targets every minute.
    let poll = match args.tls_reload_seconds {
        0 => 60,
        s => s,
    };
    let health = Arc::new(crate::tls::staleness::BundleWatch::new(
        lifetimes,
        Duration::from_secs(poll),
        stale_gauge,
    ));
    health.observed(&state);
    let resolver = Arc::new(CertResolver::new(bundle.certified_key()?));
    let config = crate::tls::server_config(resolver.clone(), client_ca)?;
    let (tx, rx) = tokio::sync::watch::channel(Published {
        generation: state.generation,
        bundle: bundle.ca_pem.clone(),
    });
    if let (Some(s), true) = (&args.tls_secret, args.tls_reload_seconds > 0) {
        let (ns, name) = s.split_once('/').unwrap_or_default();
        tokio::spawn(rotation::keep_rotating(
            client.clone(),
            ns.to_string(),
            name.to_string(),
            args.tls_sans.clone(),
            lifetimes,
            targets(args),
            resolver,
            tx,
            health.clone(),
            tokens.clone(),
        ));
    } else {
        // Nothing rotates this bundle; the sender lives as long as the process.
        tokio::spawn(async move {
            let _published = tx;
            std::future::pending::<()>().await
        });
    }
    Ok(Tls {
        config,
        bundle: bundle.ca_pem,
        published: Some(rx),
        health: Some(health),
        tokens,
    })
}

/// Certificates from files (cert-manager) whose CA bundle this host keeps in the targets,
/// with an overlap at a CA change (`tls::file_bundle`).
async fn files_with_bundle(
    args: &ServeArgs,
    client: &kube::Client,
    bundle: crate::tls::CertBundle,
    targets: crate::tls::publish::Targets,
    client_ca: Option<Arc<crate::tls::client_auth::ReloadingVerifier>>,
    stale_gauge: prometheus_client::metrics::gauge::Gauge,
) -> Result<Tls> {
    use crate::tls::file_bundle::{self, Files, Timing};
    let resolver = Arc::new(crate::tls::CertResolver::new(bundle.certified_key()?));
    let tokens = Arc::new(crate::webhook::reinvoke::TokenKeys::default());
    tokens.observe(&bundle.key_pem);
    let config = crate::tls::server_config(resolver.clone(), client_ca)?;
    let live = file_bundle::live(client, &targets).await;
    let timing = Timing {
        poll: Duration::from_secs(match args.tls_reload_seconds {
            0 => 60,
            s => s,
        }),
        grace: args.tls_rotation_grace,
        overlap: args.tls_ca_overlap,
    };
    let initial = file_bundle::bundle(
        &bundle.ca_pem,
        &bundle.cert_pem,
        &live,
        crate::clock::unix_now(),
        timing.overlap,
    );
    let health = Arc::new(crate::tls::staleness::BundleWatch::new(
        lifetimes(args)?,
        timing.poll,
        stale_gauge,
    ));
    let (tx, rx) = tokio::sync::watch::channel(initial.clone());
    let files = Files {
        cert: args.tls_cert_file.clone().unwrap_or_default(),
        key: args.tls_key_file.clone().unwrap_or_default(),
        ca: args.tls_ca_file.clone(),
    };
    tokio::spawn(file_bundle::keep(
        client.clone(),
        targets,
        files,
        resolver,
        tokens.clone(),
        tx,
        timing,
        bundle,
    ));
    Ok(Tls {
        config,
        bundle: initial.bundle,
        published: Some(rx),
        health: Some(health),
        tokens,
    })
}

/// `--metadata`, else the module's embedded metadata, else the metadata.yml this
/// binary was built with.
pub fn policy_metadata(path: Option<&PathBuf>, module: &std::path::Path) -> Result<Value> {
    if let Some(p) = path {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        return serde_yaml::from_str(&text).context("parsing policy metadata");
    }
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    if let Some(embedded) = crate::annotate::embedded_metadata(&wasm)? {
        return Ok(embedded);
    }
    serde_yaml::from_str(include_str!("../../../../metadata.yml"))
        .context("parsing policy metadata")
}

/// The policy engine: the module precompiled for it when `--precompiled-dir` holds one,
/// else compiled here — with a warning (it costs ~15 CPU-seconds, minutes under a small
/// CPU limit) and `workloadspread_host_policy_compiled_at_start`.
pub(super) async fn load_policy(
    args: &ServeArgs,
    metrics: &crate::metrics::Metrics,
) -> Result<PolicyEngine> {
    use crate::engine::precompiled::{Fallback, Loaded};
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    let instances = crate::commands::Instances {
        pool: args.pool_instances,
        reuse: args.reuse_instances,
    };
    let options = engine_options(&args.policy_args, instances)?;
    let dir = args.precompiled_dir.clone();
    let started = std::time::Instant::now();
    let (engine, loaded) = tokio::task::spawn_blocking(move || {
        let wasm =
            std::fs::read(&policy).with_context(|| format!("reading {}", policy.display()))?;
        PolicyEngine::load(&wasm, options, dir.as_deref())
    })
    .await??;
    let took = started.elapsed();
    metrics.policy_load_seconds.set(took.as_secs_f64());
    match loaded {
        Loaded::Precompiled(path) => {
            tracing::info!(path = %path.display(), ?took, "policy module loaded precompiled");
        }
        Loaded::Compiled(why) => {
            metrics
                .policy_compiled
                .get_or_create(&crate::metrics::CompiledLabels {
                    reason: why.reason().to_string(),
                })
                .set(1);
            if why == Fallback::NotConfigured {
                tracing::info!(?took, "policy module compiled (no --precompiled-dir)");
            } else {
                tracing::warn!(
                    ?took,
                    "policy module compiled at start instead of loaded precompiled: {why}"
                );
            }
        }
    }
    Ok(engine)
}

pub fn conversion_endpoint(args: &ServeArgs) -> Result<crate::webhook::convert::Endpoint> {
    use crate::webhook::convert::Endpoint;
    if let Some(url) = &args.conversion_url {
        return Ok(Endpoint::Url(url.clone()));
    }
    let spec = args
        .conversion_service
        .as_deref()
        .context("--conversion-crd needs --conversion-url or --conversion-service")?;
    let (namespace, rest) = spec
        .split_once('/')
        .context("--conversion-service must be NAMESPACE/SERVICE[:PORT]")?;
    let (name, port) = match rest.split_once(':') {
        Some((n, p)) => (n, p.parse().context("--conversion-service port")?),
        None => (rest, 443),
    };
    Ok(Endpoint::Service {
        namespace: namespace.into(),
        name: name.into(),
        port,
    })
}

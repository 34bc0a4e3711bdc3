//! `serve`: the HTTPS admission webhook with exact counters.

use super::{default_policy, engine_options, settings, PolicyArgs};
use crate::engine::PolicyEngine;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// The policy module (default: policy/policy.wasm of this workspace or $WS_POLICY_WASM).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Policy metadata (hostCapabilities, contextAwareResources); default: the
    /// metadata.yml this binary was built with.
    #[arg(long)]
    pub metadata: Option<PathBuf>,
    /// Address to listen on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: std::net::SocketAddr,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Serving certificate chain (PEM); without it a CA and certificate are generated.
    #[arg(long, requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// CA bundle to publish with --tls-cert-file (default: the chain's last certificate).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_ca_file: Option<PathBuf>,
    /// How often the certificate files are re-read (rotation by cert-manager or a
    /// mounted Secret); 0 disables reloading.
    #[arg(long, default_value_t = 30)]
    pub tls_reload_seconds: u64,
    /// DNS names / IPs of the generated certificate (repeatable).
    #[arg(long = "tls-san", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    pub tls_sans: Vec<String>,
    /// Share the generated certificate among replicas through this Secret (NAMESPACE/NAME).
    #[arg(long, conflicts_with = "tls_cert_file")]
    pub tls_secret: Option<String>,
    /// Write the CA bundle (PEM) here.
    #[arg(long)]
    pub ca_bundle_out: Option<PathBuf>,
    /// Patch the CA bundle into the Mutating/ValidatingWebhookConfiguration of this name.
    #[arg(long)]
    pub webhook_config: Option<String>,
    /// How long a counter batch keeps collecting after its first claim/release, in
    /// milliseconds. 0 (default) waits for nothing: an idle WorkloadSpread's status is
    /// written at once, and what arrives during a write goes into the next one.
    #[arg(long, default_value_t = 0)]
    pub batch_window_ms: u64,
    /// Most counter operations per status write; 1 writes every claim/release alone
    /// (the reference algorithm's write pattern).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub max_batch: u16,
    /// Most reserved slots held per subset (`docs/counter-protocol.md`, *Reserved
    /// slots*): claims are answered from slots reserved ahead in one status write,
    /// without a write of their own. 0 writes every claim before answering it.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub reserve_max: u16,
    /// Do not offer the counter capability (best-effort mode, like Kubewarden).
    #[arg(long)]
    pub no_counter: bool,
    /// Concurrent evaluations (each holds a blocking thread).
    #[arg(long, default_value_t = 256)]
    pub max_concurrency: usize,
    /// Pooling-allocator instance slots (0 = allocate on demand).
    #[arg(long, default_value_t = 0)]
    pub pool_instances: u32,
    /// CRD whose conversion (v1alpha1 ⇄ v1beta1) this host serves on `/convert`: the host
    /// sets the CRD's conversion strategy to Webhook with its CA (e.g.
    /// workloadspreads.apps.kruise.io). Needs --conversion-url or --conversion-service.
    #[arg(long)]
    pub conversion_crd: Option<String>,
    /// How the API server reaches this host for conversion (outside the cluster).
    #[arg(
        long,
        requires = "conversion_crd",
        conflicts_with = "conversion_service"
    )]
    pub conversion_url: Option<String>,
    /// NAMESPACE/SERVICE[:PORT] through which the API server reaches this host.
    #[arg(long, requires = "conversion_crd")]
    pub conversion_service: Option<String>,
    /// Largest AdmissionReview accepted (the API server sends objects up to its 3 MiB
    /// request limit, and an UPDATE carries two); larger bodies get HTTP 413.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_request_bytes: usize,
    /// How long a namespace's caches (pods, workloads) are kept after its last
    /// WorkloadSpread is deleted (one recreated meanwhile keeps them warm).
    #[arg(long, default_value_t = 60)]
    pub namespace_cache_grace_seconds: u64,
    /// Run the policy even for pods of namespaces without a WorkloadSpread (by default
    /// they are allowed unchanged without it: the answer the policy gives them).
    #[arg(long)]
    pub evaluate_unrelated: bool,
    /// How long a WorkloadSpread's counter queue lives without work (its memory goes with
    /// it).
    #[arg(long, default_value_t = 60, hide = true)]
    pub counter_idle_seconds: u64,
    /// Fault tests only: seconds added to this host's clock for the stamps it writes
    /// (a machine whose clock is off; nothing compares stamps across machines).
    #[arg(long, default_value_t = 0, hide = true, allow_hyphen_values = true)]
    pub clock_offset_seconds: i64,
}

pub fn serve(args: ServeArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(args.max_concurrency.max(1) + 16)
        .build()?;
    runtime.block_on(serve_main(args))
}

async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn tls_bundle(
    args: &ServeArgs,
    client: &kube::Client,
) -> Result<crate::serve::tls::CertBundle> {
    use crate::serve::tls::{shared_bundle, CertBundle};
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) {
        return CertBundle::from_files(cert, key, args.tls_ca_file.as_deref());
    }
    match &args.tls_secret {
        Some(s) => {
            let (ns, name) = s
                .split_once('/')
                .context("--tls-secret must be NAMESPACE/NAME")?;
            shared_bundle(client, ns, name, &args.tls_sans).await
        }
        None => CertBundle::generate(&args.tls_sans),
    }
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
    serde_yaml::from_str(include_str!("../../../metadata.yml")).context("parsing policy metadata")
}

async fn serve_main(args: ServeArgs) -> Result<()> {
    super::set_clock_offset(args.clock_offset_seconds);
    let settings = settings(&args.policy_args)?;
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    let options = engine_options(&args.policy_args, args.pool_instances)?;
    let engine = Arc::new(
        tokio::task::spawn_blocking(move || PolicyEngine::from_file(&policy, options)).await??,
    );
    let client = kube_client(args.kubeconfig.as_ref()).await?;
    let metrics = Arc::new(crate::serve::metrics::Metrics::new());
    let committer = (!args.no_counter).then(|| {
        crate::serve::commit::Committer::new(
            client.clone(),
            crate::serve::commit::BatchPolicy {
                window: Duration::from_millis(args.batch_window_ms),
                max_batch: usize::from(args.max_batch),
            },
            Some(crate::serve::reserve::ReservePolicy {
                max_block: usize::from(args.reserve_max),
                ..Default::default()
            }),
            metrics.clone(),
            super::skewed_now,
            Duration::from_secs(args.counter_idle_seconds.max(1)),
        )
    });
    let module = args.policy.clone().unwrap_or_else(default_policy);
    let allow =
        crate::serve::allow_list_from_metadata(&policy_metadata(args.metadata.as_ref(), &module)?)
            .with_custom_workloads(&settings);
    let caps = crate::serve::kube_state::KubeCapabilities::start(
        client.clone(),
        allow,
        committer.clone(),
        metrics.clone(),
        Duration::from_secs(args.namespace_cache_grace_seconds),
    )
    .await?;
    {
        let (engine, settings, caps) = (engine.clone(), settings.clone(), caps.clone());
        tokio::task::spawn_blocking(move || {
            crate::run::validate_settings(&engine, &settings, caps)
        })
        .await??;
    }
    let bundle = tls_bundle(&args, &client).await?;
    if let Some(out) = &args.ca_bundle_out {
        std::fs::write(out, &bundle.ca_pem)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(name) = &args.webhook_config {
        let n = crate::serve::tls::patch_ca_bundle(&client, name, &bundle.ca_pem).await?;
        tracing::info!("CA bundle patched into {n} webhook configuration(s) named {name}");
    }
    if let Some(crd) = &args.conversion_crd {
        let endpoint = conversion_endpoint(&args)?;
        crate::serve::convert::enable_on_crd(&client, crd, &endpoint, &bundle.ca_pem).await?;
        tracing::info!("conversion webhook enabled on CRD {crd}");
    }
    let listener = crate::serve::bind(args.listen).await?;
    let app = Arc::new(crate::serve::App {
        engine,
        settings,
        capabilities: caps.clone(),
        metrics,
        slots: tokio::sync::Semaphore::new(args.max_concurrency.max(1)),
        max_request_bytes: args.max_request_bytes,
        skip_unrelated: !args.evaluate_unrelated,
    });
    tracing::info!(listen = %args.listen, "serving (admissions wait for the caches' first list)");
    crate::serve::serve_tls(
        listener,
        tls_config(&args, &bundle)?,
        crate::serve::router(app),
        shutdown_signal(),
        Duration::from_secs(15),
    )
    .await?;
    if let Some(committer) = committer {
        committer.return_all(Duration::from_secs(5)).await;
    }
    Ok(())
}

pub fn conversion_endpoint(args: &ServeArgs) -> Result<crate::serve::convert::Endpoint> {
    use crate::serve::convert::Endpoint;
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

/// The TLS configuration; certificates from files are re-read periodically so a
/// rotation needs no restart (new connections get the new certificate).
pub fn tls_config(
    args: &ServeArgs,
    bundle: &crate::serve::tls::CertBundle,
) -> Result<Arc<rustls::ServerConfig>> {
    match (
        &args.tls_cert_file,
        &args.tls_key_file,
        args.tls_reload_seconds,
    ) {
        (Some(cert), Some(key), secs) if secs > 0 => {
            let reloader = crate::serve::tls::FileReloader::new(cert, key)?;
            let config = crate::serve::tls::server_config(reloader.resolver.clone())?;
            tokio::spawn(reloader.watch(Duration::from_secs(secs)));
            Ok(config)
        }
        _ => bundle.server_config(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

//! `workloadspread-host`: runs the WorkloadSpread policy module outside Kubewarden.
#![forbid(unsafe_code)]

mod annotate;
mod bench;
mod capabilities;
mod engine;
mod oci;
mod replay;
mod run;
mod serve;
mod state;
mod wapc;

use anyhow::{Context, Result};
use capabilities::AllowList;
use clap::{Args, Parser, Subcommand};
use engine::{EngineOptions, PolicyEngine};
use serde_json::Value;
use state::ClusterState;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "workloadspread-host",
    version,
    about = "Bundled host for the WorkloadSpread policy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one admission request offline (kwctl run compatible output).
    Run(RunArgs),
    /// Serve the policy as an HTTPS admission webhook with exact counters.
    Serve(Box<ServeArgs>),
    /// Evaluate one request N times through the module and natively; print p50/p99.
    Bench(BenchArgs),
    /// Embed metadata in the module (`io.kubewarden.metadata`), as `kwctl annotate`.
    Annotate(AnnotateArgs),
    /// Push the (annotated) module to an OCI registry, as `kwctl push`.
    Push(PushArgs),
    /// Pull a policy module from an OCI registry into a file, as `kwctl pull`.
    Pull(PullArgs),
}

#[derive(Args)]
struct RegistryArgs {
    /// Talk plain HTTP to the registry (e.g. one on loopback without TLS).
    #[arg(long)]
    plain_http: bool,
    /// Basic-auth credentials `user:password` (default: anonymous); also $WS_REGISTRY_AUTH.
    #[arg(long, env = "WS_REGISTRY_AUTH", hide_env_values = true)]
    registry_auth: Option<String>,
}

impl RegistryArgs {
    fn registry(&self) -> oci::Registry {
        oci::Registry {
            plain_http: self.plain_http,
            credentials: self.registry_auth.clone(),
        }
    }
}

#[derive(Args)]
struct PushArgs {
    #[command(flatten)]
    registry: RegistryArgs,
    /// `text` prints the immutable reference; `json` prints {"immutable_ref": …} like kwctl.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    output: String,
    /// The module (annotated: `make annotated-policy`).
    wasm_path: PathBuf,
    /// Destination, e.g. registry://127.0.0.1:5000/policies/workloadspread:v0.1.0
    uri: String,
}

#[derive(Args)]
struct PullArgs {
    #[command(flatten)]
    registry: RegistryArgs,
    /// Where to write the module.
    #[arg(short = 'o', long)]
    output_path: PathBuf,
    /// Source, e.g. registry://127.0.0.1:5000/policies/workloadspread:v0.1.0
    uri: String,
}

#[derive(Args)]
struct AnnotateArgs {
    /// metadata.yml
    #[arg(short = 'm', long)]
    metadata_path: PathBuf,
    /// README to embed as `io.kubewarden.policy.usage`.
    #[arg(short = 'u', long)]
    usage_path: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long)]
    output_path: PathBuf,
    /// The module to annotate.
    wasm_path: PathBuf,
}

#[derive(Args)]
struct BenchArgs {
    /// AdmissionRequest or AdmissionReview JSON.
    #[arg(short = 'r', long)]
    request_path: PathBuf,
    #[command(flatten)]
    policy_args: PolicyArgs,
    /// Objects answering the policy's reads (as for `run`); repeatable.
    #[arg(long)]
    cluster_state: Vec<PathBuf>,
    /// Do not offer the counter capability.
    #[arg(long)]
    no_counter: bool,
    #[arg(short = 'n', long, default_value_t = 2000)]
    iterations: usize,
    /// Pooling-allocator instance slots, as for `serve` (0 = allocate on demand).
    #[arg(long, default_value_t = 0)]
    pool_instances: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The policy module (default: policy/policy.wasm of this workspace).
    policy: Option<PathBuf>,
}

/// Options shared by every command that evaluates the policy.
#[derive(Args, Clone)]
struct PolicyArgs {
    /// Settings as JSON.
    #[arg(long, conflicts_with = "settings_path")]
    settings_json: Option<String>,
    /// Settings file (YAML or JSON).
    #[arg(short = 's', long)]
    settings_path: Option<PathBuf>,
    /// Evaluation deadline in seconds.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
    /// Linear memory cap per policy instance, in MiB.
    #[arg(long, default_value_t = 256)]
    max_memory_mib: usize,
    /// wasmtime compilation cache directory (`none` disables it).
    #[arg(long, default_value_os_t = default_cache_dir())]
    cache_dir: PathBuf,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    policy_args: PolicyArgs,
    /// The policy module (default: policy/policy.wasm of this workspace or $WS_POLICY_WASM).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Policy metadata (hostCapabilities, contextAwareResources); default: the
    /// metadata.yml this binary was built with.
    #[arg(long)]
    metadata: Option<PathBuf>,
    /// Address to listen on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: std::net::SocketAddr,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Serving certificate chain (PEM); without it a CA and certificate are generated.
    #[arg(long, requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// CA bundle to publish with --tls-cert-file (default: the chain's last certificate).
    #[arg(long, requires = "tls_cert_file")]
    tls_ca_file: Option<PathBuf>,
    /// How often the certificate files are re-read (rotation by cert-manager or a
    /// mounted Secret); 0 disables reloading.
    #[arg(long, default_value_t = 30)]
    tls_reload_seconds: u64,
    /// DNS names / IPs of the generated certificate (repeatable).
    #[arg(long = "tls-san", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    tls_sans: Vec<String>,
    /// Share the generated certificate among replicas through this Secret (NAMESPACE/NAME).
    #[arg(long, conflicts_with = "tls_cert_file")]
    tls_secret: Option<String>,
    /// Write the CA bundle (PEM) here.
    #[arg(long)]
    ca_bundle_out: Option<PathBuf>,
    /// Patch the CA bundle into the Mutating/ValidatingWebhookConfiguration of this name.
    #[arg(long)]
    webhook_config: Option<String>,
    /// How long a counter batch keeps collecting after its first claim/release, in
    /// milliseconds. 0 (default) waits for nothing: an idle WorkloadSpread's status is
    /// written at once, and what arrives during a write goes into the next one.
    #[arg(long, default_value_t = 0)]
    batch_window_ms: u64,
    /// Most counter operations per status write; 1 writes every claim/release alone
    /// (the reference algorithm's write pattern).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u16).range(1..=4096))]
    max_batch: u16,
    /// Do not offer the counter capability (best-effort mode, like Kubewarden).
    #[arg(long)]
    no_counter: bool,
    /// Concurrent evaluations (each holds a blocking thread).
    #[arg(long, default_value_t = 256)]
    max_concurrency: usize,
    /// Pooling-allocator instance slots (0 = allocate on demand).
    #[arg(long, default_value_t = 0)]
    pool_instances: u32,
    /// CRD whose conversion (v1alpha1 ⇄ v1beta1) this host serves on `/convert`: the host
    /// sets the CRD's conversion strategy to Webhook with its CA (e.g.
    /// workloadspreads.apps.kruise.io). Needs --conversion-url or --conversion-service.
    #[arg(long)]
    conversion_crd: Option<String>,
    /// How the API server reaches this host for conversion (outside the cluster).
    #[arg(
        long,
        requires = "conversion_crd",
        conflicts_with = "conversion_service"
    )]
    conversion_url: Option<String>,
    /// NAMESPACE/SERVICE[:PORT] through which the API server reaches this host.
    #[arg(long, requires = "conversion_crd")]
    conversion_service: Option<String>,
    /// Largest AdmissionReview accepted (the API server sends objects up to its 3 MiB
    /// request limit, and an UPDATE carries two); larger bodies get HTTP 413.
    #[arg(long, default_value_t = 8 << 20)]
    max_request_bytes: usize,
}

#[derive(Args)]
struct RunArgs {
    /// AdmissionRequest or AdmissionReview JSON; `-` reads stdin.
    #[arg(short = 'r', long)]
    request_path: PathBuf,
    #[command(flatten)]
    policy_args: PolicyArgs,
    /// Grant the Kubernetes reads the policy declares (metadata.yml contextAwareResources).
    #[arg(long)]
    allow_context_aware: bool,
    /// Objects answering the policy's reads and holding WorkloadSpread counters
    /// (files or directories of YAML/JSON; repeatable).
    #[arg(long)]
    cluster_state: Vec<PathBuf>,
    /// Write the WorkloadSpreads (with updated statuses) to this file after the run.
    #[arg(long)]
    output_state: Option<PathBuf>,
    /// Do not offer the counter capability (behave like Kubewarden's policy-server).
    #[arg(long)]
    no_counter: bool,
    /// Answer the policy's reads from a kwctl session file (FIFO; requests must match).
    #[arg(long, conflicts_with = "cluster_state")]
    replay_host_capabilities_interactions: Option<PathBuf>,
    /// The policy module (default: policy/policy.wasm of this workspace).
    policy: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let result = match Cli::parse().command {
        Command::Run(args) => cmd_run(args),
        Command::Serve(args) => cmd_serve(*args),
        Command::Bench(args) => cmd_bench(args),
        Command::Annotate(args) => cmd_annotate(args),
        Command::Push(args) => cmd_push(args),
        Command::Pull(args) => cmd_pull(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn cmd_push(args: PushArgs) -> Result<()> {
    let registry = args.registry.registry();
    let immutable =
        current_thread_runtime()?.block_on(oci::push(&args.wasm_path, &args.uri, &registry))?;
    match args.output.as_str() {
        "json" => println!("{}", serde_json::json!({ "immutable_ref": immutable })),
        _ => println!("{immutable}"),
    }
    Ok(())
}

fn cmd_pull(args: PullArgs) -> Result<()> {
    let registry = args.registry.registry();
    let digest =
        current_thread_runtime()?.block_on(oci::pull(&args.uri, &args.output_path, &registry))?;
    println!(
        "pulled {} ({digest}) to {}",
        args.uri,
        args.output_path.display()
    );
    Ok(())
}

fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("workloadspread").join("wasmtime")
}

fn default_policy() -> PathBuf {
    std::env::var_os("WS_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policy/policy.wasm"))
}

fn read_input(path: &PathBuf) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn settings(args: &PolicyArgs) -> Result<Value> {
    if let Some(json) = &args.settings_json {
        return serde_json::from_str(json).context("--settings-json");
    }
    match &args.settings_path {
        Some(p) => serde_yaml::from_str(&read_input(p)?)
            .with_context(|| format!("parsing {}", p.display())),
        None => Ok(Value::Object(Default::default())),
    }
}

pub(crate) fn now() -> workloadspread_core::Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    workloadspread_core::timestamp_since_epoch(since)
}

fn engine_options(args: &PolicyArgs, pool_instances: u32) -> Result<EngineOptions> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    let cache_dir = (args.cache_dir.as_os_str() != "none").then(|| args.cache_dir.clone());
    Ok(EngineOptions {
        timeout: Duration::from_secs_f64(args.timeout),
        max_memory_bytes: args.max_memory_mib << 20,
        pool_instances,
        cache_dir,
    })
}

/// What `run` and `bench` evaluate: the request, settings, compiled module and the
/// objects answering its reads.
struct Offline {
    request: Value,
    settings: Value,
    engine: PolicyEngine,
    objects: Vec<Value>,
}

impl Offline {
    fn load(
        request_path: &PathBuf,
        policy_args: &PolicyArgs,
        policy: Option<&PathBuf>,
        cluster_state: &[PathBuf],
        pool_instances: u32,
    ) -> Result<Self> {
        let input: Value =
            serde_json::from_str(&read_input(request_path)?).context("request is not JSON")?;
        let policy = policy.cloned().unwrap_or_else(default_policy);
        let mut objects = vec![];
        for path in cluster_state {
            objects.extend(ClusterState::load_objects(path)?);
        }
        Ok(Offline {
            request: run::admission_request(&input)?,
            settings: settings(policy_args)?,
            engine: PolicyEngine::from_file(&policy, engine_options(policy_args, pool_instances)?)?,
            objects,
        })
    }
}

fn cmd_run(args: RunArgs) -> Result<()> {
    let Offline {
        request,
        settings,
        engine,
        objects,
    } = Offline::load(
        &args.request_path,
        &args.policy_args,
        args.policy.as_ref(),
        &args.cluster_state,
        0,
    )?;
    let allow = AllowList {
        capabilities: vec![],
        // Without --allow-context-aware no Kubernetes read is granted (as kwctl).
        resources: (!args.allow_context_aware).then(Vec::new),
        group_kinds: vec![],
    };
    if let Some(session) = &args.replay_host_capabilities_interactions {
        let replay = Arc::new(replay::Replay::load(&read_input(session)?)?);
        run::validate_settings(&engine, &settings, replay.clone())?;
        let response = run::evaluate(&engine, &request, &settings, replay.clone());
        println!("{}", serde_json::to_string(&response)?);
        if replay.leftovers() > 0 {
            eprintln!(
                "warning: {} recorded exchanges were not used",
                replay.leftovers()
            );
        }
        return Ok(());
    }
    let state = Arc::new(ClusterState::new(objects, allow, !args.no_counter, now()));
    run::validate_settings(&engine, &settings, state.clone())?;
    let response = run::evaluate(&engine, &request, &settings, state.clone());
    println!("{}", serde_json::to_string(&response)?);
    if let Some(out) = &args.output_state {
        let docs: Vec<String> = state
            .workloadspreads()
            .iter()
            .map(serde_yaml::to_string)
            .collect::<Result<_, _>>()?;
        std::fs::write(out, docs.join("---\n"))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn cmd_serve(args: ServeArgs) -> Result<()> {
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

async fn tls_bundle(args: &ServeArgs, client: &kube::Client) -> Result<serve::tls::CertBundle> {
    use serve::tls::{shared_bundle, CertBundle};
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
fn policy_metadata(path: Option<&PathBuf>, module: &std::path::Path) -> Result<Value> {
    if let Some(p) = path {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        return serde_yaml::from_str(&text).context("parsing policy metadata");
    }
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    if let Some(embedded) = annotate::embedded_metadata(&wasm)? {
        return Ok(embedded);
    }
    serde_yaml::from_str(include_str!("../../metadata.yml")).context("parsing policy metadata")
}

fn cmd_annotate(args: AnnotateArgs) -> Result<()> {
    let wasm = std::fs::read(&args.wasm_path)
        .with_context(|| format!("reading {}", args.wasm_path.display()))?;
    let metadata: Value = serde_yaml::from_str(&read_input(&args.metadata_path)?)
        .with_context(|| format!("parsing {}", args.metadata_path.display()))?;
    let usage = args.usage_path.as_ref().map(read_input).transpose()?;
    let engine = PolicyEngine::new(&wasm, EngineOptions::default())?;
    let annotated = annotate::annotate(&wasm, &engine, metadata, usage)?;
    std::fs::write(&args.output_path, annotated)
        .with_context(|| format!("writing {}", args.output_path.display()))
}

async fn serve_main(args: ServeArgs) -> Result<()> {
    let settings = settings(&args.policy_args)?;
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    let options = engine_options(&args.policy_args, args.pool_instances)?;
    let engine = Arc::new(
        tokio::task::spawn_blocking(move || PolicyEngine::from_file(&policy, options)).await??,
    );
    let client = kube_client(args.kubeconfig.as_ref()).await?;
    let metrics = Arc::new(serve::metrics::Metrics::new());
    let committer = (!args.no_counter).then(|| {
        serve::commit::Committer::new(
            client.clone(),
            serve::commit::BatchPolicy {
                window: Duration::from_millis(args.batch_window_ms),
                max_batch: usize::from(args.max_batch),
            },
            metrics.clone(),
            now,
        )
    });
    let module = args.policy.clone().unwrap_or_else(default_policy);
    let allow = serve::allow_list_from_metadata(&policy_metadata(args.metadata.as_ref(), &module)?)
        .with_custom_workloads(&settings);
    let caps = serve::kube_state::KubeCapabilities::start(
        client.clone(),
        allow,
        committer,
        metrics.clone(),
    )
    .await?;
    {
        let (engine, settings, caps) = (engine.clone(), settings.clone(), caps.clone());
        tokio::task::spawn_blocking(move || run::validate_settings(&engine, &settings, caps))
            .await??;
    }
    let bundle = tls_bundle(&args, &client).await?;
    if let Some(out) = &args.ca_bundle_out {
        std::fs::write(out, &bundle.ca_pem)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(name) = &args.webhook_config {
        let n = serve::tls::patch_ca_bundle(&client, name, &bundle.ca_pem).await?;
        tracing::info!("CA bundle patched into {n} webhook configuration(s) named {name}");
    }
    if let Some(crd) = &args.conversion_crd {
        let endpoint = conversion_endpoint(&args)?;
        serve::convert::enable_on_crd(&client, crd, &endpoint, &bundle.ca_pem).await?;
        tracing::info!("conversion webhook enabled on CRD {crd}");
    }
    let listener = serve::bind(args.listen).await?;
    let app = Arc::new(serve::App {
        engine,
        settings,
        capabilities: caps.clone(),
        metrics,
        slots: tokio::sync::Semaphore::new(args.max_concurrency.max(1)),
        max_request_bytes: args.max_request_bytes,
    });
    tracing::info!(listen = %args.listen, "serving (admissions wait for the caches' first list)");
    serve::serve_tls(
        listener,
        tls_config(&args, &bundle)?,
        serve::router(app),
        shutdown_signal(),
        Duration::from_secs(15),
    )
    .await
}

fn conversion_endpoint(args: &ServeArgs) -> Result<serve::convert::Endpoint> {
    use serve::convert::Endpoint;
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
fn tls_config(
    args: &ServeArgs,
    bundle: &serve::tls::CertBundle,
) -> Result<Arc<rustls::ServerConfig>> {
    match (
        &args.tls_cert_file,
        &args.tls_key_file,
        args.tls_reload_seconds,
    ) {
        (Some(cert), Some(key), secs) if secs > 0 => {
            let reloader = serve::tls::FileReloader::new(cert, key)?;
            let config = serve::tls::server_config(reloader.resolver.clone())?;
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

fn cmd_bench(args: BenchArgs) -> Result<()> {
    let Offline {
        request,
        settings,
        engine,
        objects,
    } = Offline::load(
        &args.request_path,
        &args.policy_args,
        args.policy.as_ref(),
        &args.cluster_state,
        args.pool_instances,
    )?;
    let bench_input = bench::BenchInput {
        engine: &engine,
        request: &request,
        settings: &settings,
        objects: &objects,
        counter: !args.no_counter,
        iterations: args.iterations.max(1),
    };
    // Warm-up: page in the compiled module and the allocator.
    let _ = bench::wasm(&bench::BenchInput {
        iterations: 20,
        ..bench_input
    });
    let wasm = bench::wasm(&bench_input);
    let native = bench::native(&bench_input)?;
    let ratio = wasm.p50.as_secs_f64() / native.p50.as_secs_f64().max(1e-9);
    if args.json {
        let s = |x: &bench::Summary| {
            serde_json::json!({"iterations": x.iterations,
            "p50_us": x.p50.as_secs_f64() * 1e6, "p99_us": x.p99.as_secs_f64() * 1e6,
            "mean_us": x.mean.as_secs_f64() * 1e6, "per_second": x.per_second()})
        };
        println!(
            "{}",
            serde_json::json!({"wasm": s(&wasm), "native": s(&native), "p50_ratio": ratio})
        );
    } else {
        for (name, x) in [("wasm", &wasm), ("native", &native)] {
            println!(
                "{name:<7} n={} p50={:?} p99={:?} mean={:?} ({:.0}/s on one thread)",
                x.iterations,
                x.p50,
                x.p99,
                x.mean,
                x.per_second()
            );
        }
        println!("wasm/native p50 ratio: {ratio:.2}");
    }
    Ok(())
}

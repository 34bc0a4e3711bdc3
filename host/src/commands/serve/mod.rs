//! `serve`: the HTTPS admission webhook with exact counters.

mod setup;

use super::{default_policy, settings, PolicyArgs};
use anyhow::{Context, Result};
use clap::Args;
pub use setup::{conversion_endpoint, kube_client, policy_metadata};
use setup::{load_policy, targets, tls};
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
    /// Directory of modules precompiled by `precompile` (the image's /policy/precompiled):
    /// the one made from --policy for this engine configuration is loaded instead of
    /// compiling the module (~15 CPU-seconds); without one the module is compiled, with a
    /// warning and workloadspread_host_policy_compiled_at_start.
    #[arg(long)]
    pub precompiled_dir: Option<PathBuf>,
    /// Policy metadata (hostCapabilities, contextAwareResources); default: the
    /// metadata.yml this binary was built with.
    #[arg(long)]
    pub metadata: Option<PathBuf>,
    /// Address to listen on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: std::net::SocketAddr,
    /// Also serve /healthz, /readyz and /metrics over plain HTTP here (probes and
    /// scrapes then need neither the webhook port nor a client certificate). Bound before
    /// anything slow: /healthz answers from the first moment, /readyz says which step of
    /// the start the host is in.
    #[arg(long)]
    pub health_listen: Option<std::net::SocketAddr>,
    /// Answer /mutate and /validate only for callers presenting a client certificate
    /// signed by this CA (PEM): the API server's, configured through its admission
    /// configuration's kubeConfigFile. /convert (the API server sends no certificate for
    /// CRD conversion) and the probes need none.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// With --client-ca-file: the certificate must also name this identity (its subject's
    /// common name or a DNS name; repeatable), as the API server's does — any other
    /// certificate the CA signed is refused (403). The CA file is re-read every
    /// --tls-reload-seconds.
    #[arg(long = "client-cert-identity", requires = "client_ca_file")]
    pub client_cert_identities: Vec<String>,
    /// The container's memory limit in MiB: the host refuses to start when
    /// --max-concurrency evaluations at their worst would exceed it.
    #[arg(long)]
    pub memory_limit_mib: Option<u64>,
    /// A request's headers must arrive within this of its first byte.
    #[arg(long, default_value_t = 10)]
    pub request_read_timeout_seconds: u64,
    /// A request's body must arrive within this of its headers. It is read before the
    /// request may take an evaluation slot: a slow sender holds none, only the bytes it
    /// sent.
    #[arg(long, default_value_t = 3)]
    pub body_timeout_seconds: u64,
    /// A new connection must begin its first request within this (idle connections that
    /// never ask anything cannot fill --max-connections).
    #[arg(long, default_value_t = 5)]
    pub first_request_timeout_seconds: u64,
    /// A connection may wait this long for its next request; keep it above the API
    /// server's idle-connection timeout (90 s) so that the client closes idle connections
    /// (a connection we close as the client reuses it fails that admission with EOF).
    #[arg(long, default_value_t = 120)]
    pub idle_timeout_seconds: u64,
    /// Open connections at most. At the cap, the connection that has waited longest on its
    /// client (idle, or silent) among those of the peer holding the most is closed; one with
    /// a request in flight never is. New ones wait accepted meanwhile, the least-connected
    /// peer's served first.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Open connections of one peer address at most (more are closed at once; 0: no
    /// limit, the default). One API server opens one per admission in flight — hundreds in
    /// a scale-in burst — so a limit below its --max-requests-inflight plus
    /// --max-mutating-requests-inflight (600 by default) refuses its admissions.
    #[arg(long, default_value_t = 0)]
    pub max_connections_per_peer: usize,
    /// Open connections of the health port (--health-listen) at most: probes and
    /// scrapes need a few; the same shedding applies, with short idle timeouts.
    #[arg(long, default_value_t = 64)]
    pub health_max_connections: usize,
    /// Pod creations that may claim a slot, per namespace and second (0: no limit). Above
    /// what a ReplicaSet or Job controller creates (kube-controller-manager's client QPS),
    /// so that only a flood is refused, not a workload's scale-out.
    #[arg(long, default_value_t = 200.0)]
    pub claim_rate: f64,
    /// How many such creations a namespace may make at once before the rate applies: the
    /// most a ReplicaSet or Job controller creates in one sync (its slow-start batches
    /// stop at 500), so one workload's burst is never slowed and a flood holds no more.
    #[arg(long, default_value_t = 500)]
    pub claim_burst: u32,
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
    /// How often the certificate files (rotation by cert-manager or a mounted Secret) or
    /// the --tls-secret (rotation by any replica) are re-read; 0 disables reloading.
    #[arg(long, default_value_t = 30)]
    pub tls_reload_seconds: u64,
    /// Lifetime of a generated serving certificate (renewed after two thirds); s, m, h, d.
    #[arg(long, default_value = "365d", value_parser = crate::tls::certs::parse_duration)]
    pub tls_cert_validity: i64,
    /// Lifetime of a generated CA (at least twice the certificate's).
    #[arg(long, default_value = "1825d", value_parser = crate::tls::certs::parse_duration)]
    pub tls_ca_validity: i64,
    /// How long a new CA is published before it signs, and an old one kept after; with
    /// certificate files and --webhook-config, how long a certificate of a new CA waits
    /// for its CA to be published before it is served.
    #[arg(long, default_value = "120s", value_parser = crate::tls::certs::parse_duration)]
    pub tls_rotation_grace: i64,
    /// With certificate files and --webhook-config (cert-manager): how long the CAs of the
    /// previous certificate stay in the published bundle after a certificate of a new CA was
    /// issued (every replica must have moved to the new certificate by then).
    #[arg(long, default_value = "15m", value_parser = crate::tls::certs::parse_duration)]
    pub tls_ca_overlap: i64,
    /// NAMESPACE/CERTIFICATE whose CA cert-manager's cainjector keeps in the conversion CRD
    /// (annotation cert-manager.io/inject-ca-from). Not with --webhook-config: the host then
    /// keeps the bundle itself, with an overlap at a CA change (the chart no longer sets it).
    #[arg(long, requires = "conversion_crd", conflicts_with = "webhook_config")]
    pub crd_ca_injection_from: Option<String>,
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
    /// The webhooks of those configurations (YAML: `mutating:` and `validating:` lists of
    /// webhooks, without caBundle): written into them, with the CA bundle, only once this
    /// host is ready and the API server reaches a host through the Services they name —
    /// covered pods are never refused for want of a host (the chart creates the
    /// configurations empty).
    #[arg(long, requires = "webhook_config")]
    pub webhooks_file: Option<PathBuf>,
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
    /// Concurrent admissions (each holds a blocking thread and its body; taken before the
    /// body is read).
    #[arg(long, default_value_t = 256)]
    pub max_concurrency: usize,
    /// Pooling-allocator instance slots (0 = allocate on demand).
    #[arg(long, default_value_t = 0)]
    pub pool_instances: u32,
    /// Policy instances kept idle between evaluations and reused (waPC's model; the policy
    /// keeps no state between calls): no instantiation per admission. 0 instantiates a
    /// fresh one for each, as Kubewarden's policy-server does. At most --max-concurrency.
    #[arg(long, default_value_t = 8)]
    pub reuse_instances: usize,
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
    /// Claims and deletions the controller has left in a WorkloadSpread's status this long
    /// (as this host saw them) are resolved by the host from a consistent list of the
    /// namespace's pods: with the controller down, the status stays as large as the pods
    /// (it would grow with every admission and deletion until etcd refused it). Well
    /// above the controller's windows (30 s, 15 s), which handle them when it runs.
    #[arg(long, default_value_t = 60)]
    pub counter_expiry_seconds: u64,
    /// Fault tests only: seconds added to this host's clock for the stamps it writes
    /// (a machine whose clock is off; nothing compares stamps across machines).
    #[arg(long, default_value_t = 0, hide = true, allow_hyphen_values = true)]
    pub clock_offset_seconds: i64,
    /// Fault tests only: the first N status writes that reserve placeholders land but are
    /// answered 2.1 s late, past the 2 s call timeout.
    #[arg(long, default_value_t = 0, hide = true)]
    pub late_reserve_answers: u32,
    /// Fault tests only: how long handed-out placeholders wait for their settle write
    /// (a slow host; a fault then surely lands between a hand-out and its settle).
    #[arg(long, default_value_t = 1000, hide = true)]
    pub settle_delay_ms: u64,
    /// Fault tests only: each change the WorkloadSpread watch delivers reaches this host
    /// this late (a slow watch: an edit is stored well before the host sees it).
    #[arg(long, default_value_t = 0, hide = true)]
    pub watch_delay_ms: u64,
}

pub fn serve(args: ServeArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(args.max_concurrency.max(1) + 16)
        .build()?;
    runtime.block_on(serve_main(args))
}

/// A connection waiting on its client may be shed at a listener's cap after this: a
/// client reuses its newest idle connection, and an honest one speaks at once on a new one.
const SHED_AFTER: Duration = Duration::from_secs(1);

async fn serve_main(args: ServeArgs) -> Result<()> {
    let sizing = crate::webhook::limits::Sizing {
        concurrency: args.max_concurrency,
        max_memory_mib: args.policy_args.max_memory_mib,
        max_request_bytes: args.max_request_bytes,
        connections: args
            .max_connections
            .saturating_add(match args.health_listen {
                Some(_) => args.health_max_connections,
                None => 0,
            }),
    };
    let worst = crate::webhook::limits::worst_case_mib(sizing);
    match args.memory_limit_mib {
        Some(limit) => crate::webhook::limits::check_memory_fit(limit, sizing)?,
        None => tracing::info!(
            "no --memory-limit-mib: evaluations may use up to {worst} MiB at their worst"
        ),
    }
    let settings = settings(&args.policy_args)?;
    anyhow::ensure!(
        args.reuse_instances <= args.max_concurrency,
        "--reuse-instances {} exceeds --max-concurrency {}: idle instances would hold memory \
         the concurrency limit does not account for",
        args.reuse_instances,
        args.max_concurrency
    );
    let definitions = args
        .webhooks_file
        .as_deref()
        .map(crate::webhook::registration::Definitions::read)
        .transpose()?;
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let startup = crate::webhook::startup::Startup::new(metrics.clone());
    let options = crate::webhook::ServeOptions {
        header_timeout: Duration::from_secs(args.request_read_timeout_seconds.max(1)),
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds.max(1)),
        first_request_timeout: Duration::from_secs(args.first_request_timeout_seconds.max(1)),
        max_connections: args.max_connections,
        max_connections_per_peer: args.max_connections_per_peer,
        shed_after: SHED_AFTER,
        drain: Duration::from_secs(15),
    };
    let health_options = crate::webhook::ServeOptions {
        drain: options.drain,
        ..crate::webhook::ServeOptions::probes(args.health_max_connections)
    };
    let limits = metrics.limits.clone();
    let shed = move |listener| {
        limits
            .shed
            .get_or_create(&crate::metrics::ListenerLabels { listener })
            .clone()
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // The health port first: the liveness probe passes while the rest starts.
    if let Some(addr) = args.health_listen {
        let health = crate::webhook::bind(addr).await?;
        let mut stopped = stopped.clone();
        tokio::spawn(crate::webhook::serve(
            health,
            None,
            crate::webhook::startup::health_router(startup.clone()),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
            health_options,
            shed(crate::metrics::Listener::Health),
        ));
        tracing::info!(listen = %addr, "health and metrics over HTTP");
    }
    startup.step("loading the policy module");
    let engine = Arc::new(load_policy(&args, &metrics).await?);
    startup.step("connecting to the API server");
    let client = kube_client(args.kubeconfig.as_ref()).await?;
    let committer = (!args.no_counter).then(|| {
        let settings = crate::counter::CounterSettings {
            batching: crate::counter::BatchPolicy {
                window: Duration::from_millis(args.batch_window_ms),
                max_batch: usize::from(args.max_batch),
            },
            reserving: Some(crate::counter::reserve::ReservePolicy {
                max_block: usize::from(args.reserve_max),
                ..Default::default()
            }),
            lifetimes: crate::counter::Lifetimes {
                idle: Duration::from_secs(args.counter_idle_seconds.max(1)),
                expiry: Duration::from_secs(args.counter_expiry_seconds.max(5)),
            },
            faults: crate::counter::Faults {
                clock_offset: k8s_openapi::jiff::SignedDuration::from_secs(
                    args.clock_offset_seconds,
                ),
                settle_delay: Duration::from_millis(args.settle_delay_ms),
                late_reserve_answers: args.late_reserve_answers,
            },
        };
        crate::counter::Committer::new(client.clone(), settings, metrics.clone(), crate::clock::now)
    });
    let module = args.policy.clone().unwrap_or_else(default_policy);
    let allow = crate::webhook::allow_list_from_metadata(&policy_metadata(
        args.metadata.as_ref(),
        &module,
    )?)
    .with_custom_workloads(&settings);
    startup.step("discovering the kinds the policy reads");
    // Settings that do not parse watch pods; the policy's validation below refuses them.
    let counting = serde_json::from_value::<workloadspread_policy::Settings>(settings.clone())
        .is_ok_and(|s| s.counts_with_counter(committer.is_some()));
    let caps = crate::index::KubeCapabilities::start(
        client.clone(),
        allow,
        (committer.clone(), counting),
        metrics.clone(),
        crate::index::IndexSettings {
            namespace_grace: Duration::from_secs(args.namespace_cache_grace_seconds),
            watch_delay: Duration::from_millis(args.watch_delay_ms),
        },
    )
    .await?;
    startup.step("validating the policy settings");
    {
        let (engine, settings, caps) = (engine.clone(), settings.clone(), caps.clone());
        tokio::task::spawn_blocking(move || {
            crate::engine::evaluate::validate_settings(&engine, &settings, caps)
        })
        .await??;
    }
    startup.step("loading the serving certificate");
    let tls = tls(&args, &client, metrics.ca_bundle_stale.clone()).await?;
    if let Some(out) = &args.ca_bundle_out {
        std::fs::write(out, &tls.bundle).with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(crd) = &args.conversion_crd {
        startup.step("enabling the conversion webhook");
        let endpoint = conversion_endpoint(&args)?;
        crate::webhook::convert::enable_on_crd(
            &client,
            crd,
            &endpoint,
            &tls.bundle,
            args.crd_ca_injection_from.as_deref(),
        )
        .await?;
        tracing::info!("conversion webhook enabled on CRD {crd}");
    }
    startup.step("publishing the CA bundle");
    match (&tls.published, &tls.health, &args.webhook_config) {
        (Some(published), Some(health), _) => {
            // Generated certificates: this host keeps the bundle current everywhere.
            let current = published.borrow().clone();
            let n = crate::tls::publish::ensure_bundles(&client, &targets(&args), &current).await?;
            tracing::info!(
                "CA bundle (generation {}) written to {n} object(s)",
                current.generation
            );
            tokio::spawn(crate::tls::publish::keep_bundles(
                client.clone(),
                targets(&args),
                published.clone(),
                health.clone(),
            ));
        }
        (_, _, Some(name)) => {
            let n = crate::tls::publish::patch_ca_bundle(&client, name, &tls.bundle).await?;
            tracing::info!("CA bundle patched into {n} webhook configuration(s) named {name}");
        }
        (_, _, None) => {}
    }
    let listener = crate::webhook::bind(args.listen).await?;
    let app = Arc::new(crate::webhook::App {
        engine,
        settings,
        capabilities: caps.clone(),
        metrics,
        slots: Arc::new(tokio::sync::Semaphore::new(args.max_concurrency.max(1))),
        large_slots: Arc::new(tokio::sync::Semaphore::new(crate::webhook::LARGE_SLOTS)),
        read_budget: tokio::sync::Semaphore::new(crate::webhook::body::read_budget(
            args.max_request_bytes,
        )),
        convert_slots: Arc::new(tokio::sync::Semaphore::new(crate::webhook::CONVERT_SLOTS)),
        peer_reads: Default::default(),
        convert_budget: tokio::sync::Semaphore::new(crate::webhook::body::convert_budget(
            args.max_request_bytes,
        )),
        convert_peer_reads: Default::default(),
        max_request_bytes: args.max_request_bytes,
        skip_unrelated: !args.evaluate_unrelated,
        claims: crate::webhook::limits::ClaimLimiter::new(args.claim_rate, args.claim_burst),
        body_timeout: Duration::from_secs(args.body_timeout_seconds.max(1)),
        client_auth: args.client_ca_file.is_some(),
        client_identities: args.client_cert_identities.clone(),
        certificates: tls.health.clone(),
        tokens: tls.tokens.clone(),
    });
    startup.serving(app.clone());
    // Every host given --webhook-config publishes a bundle (generated certificates, or
    // files whose bundle it keeps: `setup::tls`).
    if let (Some(name), Some(definitions), Some(published)) =
        (&args.webhook_config, definitions, tls.published.clone())
    {
        tokio::spawn(crate::webhook::registration::keep(
            client.clone(),
            name.clone(),
            definitions,
            published,
            app.clone(),
        ));
    }
    tracing::info!(listen = %args.listen, "serving (admissions wait for the caches' first list)");
    crate::webhook::serve(
        listener,
        Some(tls.config),
        crate::webhook::router(app),
        workloadspread_kube::signal::shutdown("host"),
        options,
        shed(crate::metrics::Listener::Webhook),
    )
    .await?;
    let _ = stop.send(true);
    if let Some(committer) = committer {
        committer.return_all(Duration::from_secs(5)).await;
    }
    Ok(())
}

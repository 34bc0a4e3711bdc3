//! Online mode: watches, leader election, the kube-runtime Controller and the
//! metrics/health endpoint.

use crate::args::RunArgs;
use crate::context::Context;
use crate::leader::{LeaderElector, Leadership, Timing};
use crate::metrics::Metrics;
use crate::pod_caches::{self, PodCaches};
use crate::reconciler;
use crate::workloads::Workloads;
use anyhow::Result;
use axum::routing::get;
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::DynamicObject;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use workloadspread_kube::resource::workloadspread_resource;

/// The client of every call, and one for evictions: kube-rs retries 429 answers by
/// default (up to 15 times, after the server's Retry-After), but a 429 to an eviction is
/// a PodDisruptionBudget's "not now", which rebalancing retries an interval later.
async fn clients(path: Option<&std::path::PathBuf>) -> Result<(Client, Client)> {
    let config = workloadspread_kube::client::config(
        path.map(std::path::PathBuf::as_path),
        workloadspread_core::contest::CONTROLLER_MANAGER,
    )
    .await?;
    let mut no_retry = config.clone();
    no_retry.default_retry = false;
    let evictions = Client::try_from(no_retry)?;
    Ok((Client::try_from(config)?, evictions))
}

/// Runs until SIGTERM/Ctrl-C (or until leadership is lost).
pub async fn run(args: RunArgs) -> Result<()> {
    let (client, evictions) = clients(args.kubeconfig.as_ref()).await?;
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    // A standby replica is ready (healthy, waiting for the Lease): otherwise a Deployment of
    // two replicas never becomes available and `helm install --wait` never returns.
    let leading = Arc::new(AtomicBool::new(!args.leader_elect));
    let standing = Arc::new(crate::contest::Standing::default());
    tokio::spawn(serve_metrics(
        args.metrics_listen,
        args.max_connections,
        metrics.clone(),
        Readiness {
            leading: leading.clone(),
            synced: ready.clone(),
            standing: standing.clone(),
        },
    ));
    // Before the Lease: a replica that cannot tell whether OpenKruise owns WorkloadSpreads
    // (RBAC) must not hold it while it waits.
    let mut registrations = workloadspread_kube::openkruise::registrations(client.clone());
    first_registration(&mut registrations, &standing, &metrics).await;
    let elector = args.leader_elect.then(|| {
        let timing = Timing::from_duration(Duration::from_secs(args.lease_duration_seconds));
        Arc::new(LeaderElector::new(
            client.clone(),
            &args.lease_namespace,
            &args.lease_name,
            &args.identity,
            timing,
        ))
    });
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    let leadership = match &elector {
        Some(e) => {
            tracing::info!(identity = %args.identity, lease = %args.lease_name, "waiting for leadership");
            wait_for_leadership(e).await;
            leading.store(true, Ordering::Relaxed);
            metrics.leader.set(1);
            tracing::info!("leading");
            let leadership = Arc::new(Leadership::elected(e.timing().renew_deadline));
            tokio::spawn(keep_leading(e.clone(), leadership.clone(), lost_tx));
            leadership
        }
        None => {
            metrics.leader.set(1);
            Arc::new(Leadership::unelected())
        }
    };
    let clients = Clients {
        client,
        evictions,
        standing,
        registrations,
    };
    let result = run_controller(&args, clients, metrics, ready, lost_rx, leadership).await;
    if let Some(e) = &elector {
        if let Err(err) = e.release().await {
            tracing::warn!("releasing the Lease: {err}");
        }
    }
    result
}

async fn wait_for_leadership(e: &LeaderElector) {
    loop {
        match e.try_acquire(workloadspread_kube::clock::now()).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(err) => tracing::warn!("leader election: {err}"),
        }
        tokio::time::sleep(e.timing().retry).await;
    }
}

/// Renews every `retry`; signals `lost` (and `leadership` stops holding) when another
/// replica holds the Lease or no renewal succeeded for `renew_deadline` — before any
/// other replica may take over (it waits a whole lease duration from its last sight of
/// a change).
async fn keep_leading(
    e: Arc<LeaderElector>,
    leadership: Arc<Leadership>,
    lost: tokio::sync::oneshot::Sender<()>,
) {
    let timing = e.timing();
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(timing.retry).await;
        if last_ok.elapsed() >= timing.renew_deadline {
            tracing::error!(
                "could not renew the Lease for {:?}: stepping down",
                timing.renew_deadline
            );
            break;
        }
        match e.try_acquire(workloadspread_kube::clock::now()).await {
            Ok(true) => {
                last_ok = tokio::time::Instant::now();
                leadership.renewed();
            }
            Ok(false) => {
                tracing::error!("leadership lost to another replica");
                break;
            }
            Err(err) => tracing::warn!("renewing the Lease: {err}"),
        }
    }
    let _ = lost.send(());
}

struct Clients {
    client: Client,
    evictions: Client,
    /// What is contested (shared with `/readyz`).
    standing: Arc<crate::contest::Standing>,
    /// Whether OpenKruise owns WorkloadSpreads, after its first answer.
    registrations: futures::stream::BoxStream<'static, Result<bool, String>>,
}

async fn run_controller(
    args: &RunArgs,
    clients: Clients,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    lost: tokio::sync::oneshot::Receiver<()>,
    leadership: Arc<Leadership>,
) -> Result<()> {
    let client = clients.client;
    let standing = clients.standing;
    let resource = workloadspread_resource();
    let wc = watcher::Config::default();
    let scope = args.namespace.as_deref();
    // Pods are cached per namespace with a WorkloadSpread, pruned (#19).
    let (pods, pod_triggers) = PodCaches::new(client.clone(), resource.clone(), metrics.clone());
    let (nodes, node_stream) = reflect(Api::<Node>::all(client.clone()));
    // Reconciles wait for the node cache: its first list comes first. A watch that
    // cannot list (RBAC) is reported at warn, with a periodic line saying what the
    // controller waits for, instead of silent 30 s reconcile stalls.
    let mut node_stream = node_stream.boxed();
    drive_until_ready(&mut node_stream, &nodes, "nodes").await;
    tokio::spawn(async move { while node_stream.next().await.is_some() {} });
    let kinds = args.rules.kinds()?;
    let ws_api: Api<DynamicObject> = match scope {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let controller = Controller::new_with(ws_api, wc.clone(), resource.clone());
    let spreads = controller.store();
    let grace = Duration::from_secs(args.pod_cache_grace_seconds);
    tokio::spawn(pod_caches::follow(
        pods.clone(),
        spreads.clone(),
        grace.clamp(Duration::from_secs(1), Duration::from_secs(10)),
        grace,
    ));
    tokio::spawn(follow_deletions(
        metrics.clone(),
        standing.clone(),
        spreads.clone(),
        Duration::from_secs(15),
    ));
    let (workloads, workload_triggers) =
        Workloads::start(&client, scope, &kinds, spreads.clone(), resource.clone());
    let handed_over = follow_registrations(
        clients.registrations,
        standing.clone(),
        metrics.clone(),
        spreads.clone(),
        resource.clone(),
    );
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            pods.clone(),
            nodes.clone(),
            workloads.clone(),
            kinds,
            args.rules.versioned(),
            args.rules.options()?,
            Recorder::new(
                client.clone(),
                Reporter {
                    controller: "workloadspread-controller".into(),
                    instance: Some(args.identity.clone()),
                },
            ),
            metrics,
            workloadspread_kube::clock::now,
            leadership,
        )
        .with_rebalancing(args.rules.rebalance()?, clients.evictions)
        .with_safety(
            !args.no_reschedule,
            (args.creating_drop_seconds > 0)
                .then(|| k8s_openapi::jiff::SignedDuration::from_secs(args.creating_drop_seconds)),
        )
        .with_status_interval(Duration::from_millis(args.status_interval_ms))
        .with_capacity(args.capacity())
        .with_standing(standing),
    );
    let controller = controller
        .reconcile_on(futures::stream::select(
            futures::stream::select(workload_triggers, pod_triggers),
            handed_over,
        ))
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrency))
        .graceful_shutdown_on(async move {
            let lost = async move {
                let _ = lost.await;
            };
            tokio::select! {
                _ = workloadspread_kube::signal::shutdown("controller") => tracing::info!("shutting down"),
                _ = lost => tracing::error!("stopping: not the leader any more"),
            }
        });
    tokio::spawn(mark_ready(
        [
            owned_ready(nodes.clone()),
            owned_ready(spreads.clone()),
            workloads_ready(workloads),
        ],
        ready,
    ));
    controller
        .run(reconciler::run, reconciler::error_policy, ctx)
        .for_each(|r| async move {
            match r {
                // Failed reconciles are logged by the error policy.
                Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                // A watch that keeps failing leaves the caches stale: say so.
                Err(e @ kube::runtime::controller::Error::QueueError(_)) => {
                    tracing::warn!("watch: {e}")
                }
                Err(e) => tracing::debug!("reconcile: {e}"),
                Ok(_) => {}
            }
        })
        .await;
    Ok(())
}

/// Waits for the first answer of `registrations` (whether OpenKruise's WorkloadSpread
/// validation is registered) and records it in `standing`; says every 10 s what it waits
/// for (`/readyz` says it too, with the watch's last error).
async fn first_registration(
    registrations: &mut futures::stream::BoxStream<'static, Result<bool, String>>,
    standing: &crate::contest::Standing,
    metrics: &Metrics,
) {
    let started = tokio::time::Instant::now();
    let mut report = tokio::time::interval(Duration::from_secs(10));
    report.tick().await;
    loop {
        tokio::select! {
            next = registrations.next() => match next {
                Some(Ok(registered)) => {
                    let (_, contested) = standing.set_registered(registered);
                    metrics.contested.set(i64::try_from(contested).unwrap_or(i64::MAX));
                    return;
                }
                Some(Err(e)) => standing.registration_failed(e),
                // A watcher never ends; if it did, nothing would be decided on a guess.
                None => std::future::pending().await,
            },
            _ = report.tick() => tracing::info!(
                "waiting to know whether OpenKruise owns WorkloadSpreads (the watch of \
                 validatingwebhookconfigurations/{}, {:?} so far)",
                workloadspread_core::contest::OPENKRUISE_CONFIGURATION,
                started.elapsed()),
        }
    }
}

/// Follows the rest of `registrations` into `standing` in the background. Returns the
/// reconciles to run at a hand-over: every spread of `spreads`, each seen as the store
/// holds it first (its first sight from then on).
fn follow_registrations(
    mut registrations: futures::stream::BoxStream<'static, Result<bool, String>>,
    standing: Arc<crate::contest::Standing>,
    metrics: Arc<Metrics>,
    spreads: Store<DynamicObject>,
    resource: kube::api::ApiResource,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<DynamicObject>> + Send + 'static
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        while let Some(registered) = registrations.next().await {
            let Ok(registered) = registered else { continue };
            let every = spreads.state();
            let (change, contested) =
                standing.set_registered_seeing(registered, every.iter().map(|o| o.as_ref()));
            metrics
                .contested
                .set(i64::try_from(contested).unwrap_or(i64::MAX));
            if change != workloadspread_core::contest::Registration::HandedOver {
                continue;
            }
            for o in every {
                let spread = kube::runtime::reflector::ObjectRef::from_obj_with(
                    o.as_ref(),
                    resource.clone(),
                );
                if tx.send(spread).await.is_err() {
                    return;
                }
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
}

/// Removes the series (and contests) of deleted WorkloadSpreads every `period`: those `spreads` (the
/// controller's store) no longer holds. Runs until the process ends.
async fn follow_deletions(
    metrics: Arc<Metrics>,
    standing: Arc<crate::contest::Standing>,
    spreads: kube::runtime::reflector::Store<kube::api::DynamicObject>,
    period: Duration,
) {
    let _ = spreads.wait_until_ready().await;
    loop {
        let left = standing.retain(&crate::contest::Standing::keys(
            spreads.state().iter().map(|o| o.as_ref()),
        ));
        metrics
            .contested
            .set(i64::try_from(left).unwrap_or(i64::MAX));
        let live: std::collections::HashSet<(String, String)> = spreads
            .state()
            .iter()
            .map(|o| {
                (
                    o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        metrics.retain(&live);
        tokio::time::sleep(period).await;
    }
}

/// Polls `stream` (discarding its events) until `store` holds its first list; says
/// what it waits for every 10 s. The watcher retries with backoff, so this ends once
/// the API server answers.
async fn drive_until_ready<K, S>(stream: &mut S, store: &Store<K>, what: &str)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
    S: futures::Stream<Item = Result<K, watcher::Error>> + Unpin,
{
    let started = tokio::time::Instant::now();
    let ready = store.wait_until_ready();
    futures::pin_mut!(ready);
    let mut report = tokio::time::interval(Duration::from_secs(10));
    report.tick().await;
    loop {
        tokio::select! {
            _ = &mut ready => break,
            item = stream.next() => match item {
                Some(Err(e)) => tracing::warn!("{what} watch: {e}"),
                Some(Ok(_)) => {}
                // A watcher never ends; if it did, reconciles would wait for the cache.
                None => {
                    tracing::error!("the {what} watch ended before its first list");
                    return;
                }
            },
            _ = report.tick() => tracing::info!(
                "waiting for the first list of {what} ({:?} so far)", started.elapsed()),
        }
    }
    tracing::info!("{what} cache synced in {:?}", started.elapsed());
}

/// Sets `ready` once every cache has its first list. Polls instead of awaiting: the
/// pod and WorkloadSpread streams are driven inside the controller's future.
async fn mark_ready<F>(caches: [F; 3], ready: Arc<AtomicBool>)
where
    F: std::future::Future + Unpin,
{
    let mut caches: Vec<Option<F>> = caches.into_iter().map(Some).collect();
    while caches.iter().any(Option::is_some) {
        for slot in caches.iter_mut() {
            if let Some(f) = slot.as_mut() {
                if futures::FutureExt::now_or_never(f).is_some() {
                    *slot = None;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ready.store(true, Ordering::Relaxed);
    tracing::info!("caches synced");
}

fn owned_ready<K>(store: Store<K>) -> futures::future::BoxFuture<'static, ()>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    async move {
        let _ = store.wait_until_ready().await;
    }
    .boxed()
}

/// Resolves once the built-in workload kinds' caches have their first list.
fn workloads_ready(workloads: Arc<Workloads>) -> futures::future::BoxFuture<'static, ()> {
    async move {
        while !workloads.builtin_synced() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .boxed()
}

/// A cluster-wide reflector (managedFields dropped) and its event stream, which must be
/// polled for the store to fill.
fn reflect<K>(
    api: Api<K>,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send,
)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o: &mut K| o.managed_fields_mut().clear())
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// What `/readyz` answers: a standby is ready; a leader once its caches are synced.
#[derive(Clone)]
struct Readiness {
    leading: Arc<AtomicBool>,
    synced: Arc<AtomicBool>,
    /// A contested spread makes a leader not ready, saying which and what to do.
    standing: Arc<crate::contest::Standing>,
}

impl Readiness {
    fn answer(&self) -> (axum::http::StatusCode, String) {
        use axum::http::StatusCode;
        if let Some(waiting) = self.standing.registration_unknown() {
            return (StatusCode::SERVICE_UNAVAILABLE, waiting);
        }
        match (
            self.leading.load(Ordering::Relaxed),
            self.synced.load(Ordering::Relaxed),
        ) {
            (false, _) => (StatusCode::OK, "standby: waiting for leadership".into()),
            (true, false) => (StatusCode::SERVICE_UNAVAILABLE, "caches are syncing".into()),
            (true, true) => match self.standing.not_ready_reason() {
                Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
                None => (StatusCode::OK, "ok".into()),
            },
        }
    }
}

/// /healthz, /readyz and /metrics under the probe port's limits (security review R9: a plain
/// `axum::serve` had no connection cap, header or idle deadline: a pod holding connections
/// open starved the kubelet's probes).
async fn serve_metrics(
    addr: std::net::SocketAddr,
    max_connections: usize,
    metrics: Arc<Metrics>,
    readiness: Readiness,
) {
    let shed = metrics.connections_shed.clone();
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move { readiness.answer() }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { metrics.encode() }
            }),
        );
    use workloadspread_kube::serve;
    match serve::bind(addr).await {
        Ok(listener) => {
            let options = serve::ServeOptions::probes(max_connections);
            let forever = std::future::pending::<()>();
            if let Err(e) = serve::serve(listener, None, app, forever, options, shed).await {
                tracing::error!("metrics server: {e:#}");
            }
        }
        Err(e) => tracing::error!("metrics server: {e:#}"),
    }
}

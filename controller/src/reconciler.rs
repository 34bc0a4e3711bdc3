//! The online reconcile: fetch inputs, decide through `core`, write.
//!
//! Order as the reference (§4.2): adoptions, deletion costs, status (guarded by
//! `resourceVersion`; on 409 the WorkloadSpread is re-read and everything recomputed,
//! so counter entries the admission host wrote meanwhile are kept), then deletion of
//! pods stuck unschedulable, then events.

use crate::inputs::{node_infos, workload_view, InputError};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::placeholders::Placeholders;
use crate::pod_caches::PodCaches;
use crate::workloads::{Lookup, Workloads};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::SignedDuration;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::discovery::pinned_kind;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::cost::CostPatch;
use workloadspread_core::controller::pending::costs_before_status;
use workloadspread_core::controller::view::status_view;
use workloadspread_core::controller::{
    reconcile, Event, PlaceholderView, ReconcileInput, ReconcileOptions, ReconcileOutput,
};
use workloadspread_core::version::VersionedKinds;
use workloadspread_core::workload::WorkloadKinds;
use workloadspread_core::Timestamp;

/// Status write attempts per reconcile (each after a fresh read).
const STATUS_ATTEMPTS: usize = 5;
/// How long a reconcile waits for the pod and node caches' first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);
/// Bound of every API call a reconcile makes.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// Default spacing of one WorkloadSpread's status writes (`--status-interval-ms`).
pub const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// Shared state of the reconciler.
pub struct Context {
    pub client: Client,
    /// Pods of the namespaces that have a WorkloadSpread (`crate::pod_caches`).
    pub pods: Arc<PodCaches>,
    pub nodes: Store<Node>,
    /// Cached workloads and ReplicaSets (`crate::workloads`).
    pub workloads: Arc<Workloads>,
    pub kinds: WorkloadKinds,
    pub versioned: VersionedKinds,
    pub options: ReconcileOptions,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub clock: fn() -> Timestamp,
    /// Fences every write: false once the Lease was not renewed within its deadline.
    pub leadership: Arc<Leadership>,
    /// When each placeholder was first seen, per WorkloadSpread.
    pub placeholders: Placeholders,
    /// Rebalancing's default and rate limit (`crate::rebalance`).
    pub limiter: crate::rebalance::Limiter,
    /// The client evictions go through (no retry of 429: `crate::rebalance`).
    pub evictions: Client,
    resources: Mutex<HashMap<(String, String), ApiResource>>,
    /// Adaptive rescheduling may delete pods (`--no-reschedule` turns it off).
    pub reschedule: bool,
    /// Drop creatingPods entries whose pod is confirmed absent after this long.
    pub early_drop: Option<SignedDuration>,
    /// Status writes per WorkloadSpread at most once per interval (`crate::pacing`).
    pub pacing: crate::pacing::StatusPacing,
    /// Provisioner signals and node room (`crate::capacity`; off by default).
    pub capacity: crate::capacity::Reader,
    /// Spreads another manager writes too: left alone (`crate::contest`).
    pub standing: Arc<crate::contest::Standing>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        pods: Arc<PodCaches>,
        nodes: Store<Node>,
        workloads: Arc<Workloads>,
        kinds: WorkloadKinds,
        versioned: VersionedKinds,
        options: ReconcileOptions,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        clock: fn() -> Timestamp,
        leadership: Arc<Leadership>,
    ) -> Self {
        Context {
            leadership,
            evictions: client.clone(),
            client,
            pods,
            nodes,
            workloads,
            kinds,
            versioned,
            options,
            recorder,
            metrics,
            clock,
            placeholders: Placeholders::default(),
            limiter: crate::rebalance::Limiter::new(Default::default()),
            resources: Mutex::new(HashMap::new()),
            reschedule: true,
            early_drop: None,
            pacing: crate::pacing::StatusPacing::new(STATUS_INTERVAL),
            capacity: crate::capacity::Reader::new(Default::default()),
            standing: Arc::default(),
        }
    }

    /// Sharing what is contested with `/readyz` (`crate::contest`).
    pub fn with_standing(mut self, standing: Arc<crate::contest::Standing>) -> Self {
        self.standing = standing;
        self
    }

    /// Reading provisioner signals and node room with `settings` (#42).
    pub fn with_capacity(mut self, settings: crate::capacity::Settings) -> Self {
        self.capacity = crate::capacity::Reader::new(settings);
        self
    }

    /// Status writes per WorkloadSpread at most once per `interval` (zero: no pacing).
    pub fn with_status_interval(mut self, interval: Duration) -> Self {
        self.pacing = crate::pacing::StatusPacing::new(interval);
        self
    }

    /// With rebalancing's default and rate limit, evicting through `evictions`.
    pub fn with_rebalancing(
        mut self,
        settings: crate::rebalance::Settings,
        evictions: Client,
    ) -> Self {
        self.limiter = crate::rebalance::Limiter::new(settings);
        self.evictions = evictions;
        self
    }

    pub fn with_safety(mut self, reschedule: bool, early_drop: Option<SignedDuration>) -> Self {
        self.reschedule = reschedule;
        self.early_drop = early_drop;
        self
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] Box<kube::Error>),
    #[error("decoding {what}: {source}")]
    Decode {
        what: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("patching the deletion cost or pending label of pod {pod}: {source}")]
    PodMetadata {
        pod: String,
        source: Box<kube::Error>,
    },
    #[error("the pod, node or workload caches are not synced yet")]
    CachesNotSynced,
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("status of {0} kept conflicting")]
    Conflicts(String),
    #[error("not the leader (the Lease was not renewed in time): nothing written")]
    NotLeader,
    #[error("evicting pod {pod} to rebalance: {source}")]
    Evict {
        pod: String,
        source: Box<kube::Error>,
    },
}

/// `apps.kruise.io/v1beta1` `workloadspreads`.
pub fn workloadspread_resource() -> ApiResource {
    ApiResource {
        group: "apps.kruise.io".into(),
        version: "v1beta1".into(),
        api_version: "apps.kruise.io/v1beta1".into(),
        kind: "WorkloadSpread".into(),
        plural: "workloadspreads".into(),
    }
}

/// Reconciles one WorkloadSpread.
pub async fn run(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_object(&object, &ctx).await;
    ctx.metrics
        .observe_reconcile(started.elapsed(), result.is_err());
    result
}

/// A replica whose Lease renewal is overdue writes nothing (it may be paused or cut off
/// while another replica has taken over).
pub(crate) fn ensure_leading(ctx: &Context) -> Result<(), Error> {
    if ctx.leadership.holds() {
        Ok(())
    } else {
        Err(Error::NotLeader)
    }
}

/// Backoff on errors.
pub fn error_policy(object: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(workloadspread = %object.name_any(), namespace = ?object.namespace(), "reconcile failed: {error}");
    Action::requeue(Duration::from_secs(5))
}

use crate::writes::{
    adopt, delete_unschedulable, patch_pod_metadata, publish, publish_events, ws_reference,
};

async fn reconcile_object(object: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    // Deciding on empty caches would drop every pod from the status. The namespace's
    // pod cache starts with its first WorkloadSpread's first reconcile.
    let ns = object.namespace().unwrap_or_default();
    let pods = ctx.pods.store(&ns);
    let synced = async {
        let _ = pods.wait_until_ready().await;
        let _ = ctx.nodes.wait_until_ready().await;
    };
    if tokio::time::timeout(CACHE_WAIT, synced).await.is_err() {
        return Err(Error::CachesNotSynced);
    }
    let name = object.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &workloadspread_resource());
    let mut current = object.clone();
    // Costs this reconcile has written (a retry after a conflict recomputes from a cache
    // that may not show them yet: they are not written twice).
    let mut costs_written: BTreeMap<String, i64> = BTreeMap::new();
    let key = (ns.clone(), name.clone());
    // Within the interval after our last status write (a burst): the whole reconcile
    // waits for its end and then does at once what the events meanwhile asked for. Not
    // only the write: every pod event of a burst recomputing the status for nothing cost
    // more CPU than the admissions themselves (`crate::pacing`).
    if let Some(wait) = ctx.pacing.wait(&key, Instant::now()) {
        tracing::debug!(workloadspread = %name, namespace = %ns, ?wait,
            "reconcile deferred: coalescing a burst");
        ctx.metrics.reconciles_deferred.inc();
        return Ok(Action::requeue(wait.max(Duration::from_millis(20))));
    }
    for attempt in 0..STATUS_ATTEMPTS {
        if current.metadata.deletion_timestamp.is_some()
            || crate::contest::stands_back(&current, ctx).await
        {
            return Ok(Action::await_change());
        }
        let mut ws = decode(&current)?;
        if ws.spec.target_ref.is_none() {
            return Ok(Action::await_change());
        }
        let written = ws.status.clone();
        let unseen = crate::creating::drop_unseen(&mut ws, &pods, ctx).await?;
        if !unseen.behind.is_empty() {
            // Pods the cache has not shown yet carry entries the recount would expire:
            // wait for the cache rather than free slots those pods hold.
            tracing::info!(
                workloadspread = name,
                entries = ?unseen.behind,
                "the pod cache is behind a live read: waiting for it before recounting"
            );
            return Ok(Action::requeue(std::time::Duration::from_secs(1)));
        }
        let (dropped, recheck) = (unseen.dropped, unseen.recheck);
        let (mut output, inputs) = compute(&ws, &pods, ctx).await?;
        if let Some(recheck) = recheck {
            let recheck = std::time::Duration::try_from(recheck).unwrap_or_default();
            output.requeue_after = Some(output.requeue_after.map_or(recheck, |r| r.min(recheck)));
        }
        if attempt == 0 {
            ensure_leading(ctx)?;
            adopt(&ws, &output, ctx).await?;
        }
        let new_status = serde_json::to_value(&output.status).map_err(|e| Error::Decode {
            what: "status".into(),
            source: e,
        })?;
        // The version whose status counts the pods: the one written, or the one read.
        let mut counted_in = current.metadata.resource_version.clone();
        let status_changed = written.as_ref() != Some(&output.status);
        // Costs first: a status that counts the pods is written after their costs
        // (`core::controller::pending::costs_before_status`).
        let (first, later) = costs_before_status(&output.deletion_costs, &inputs.namespace_pods);
        let first: Vec<CostPatch> = first
            .into_iter()
            .filter(|c| costs_written.get(&c.pod) != Some(&c.cost))
            .collect();
        ensure_leading(ctx)?;
        // A cost that cannot be written (no pod write right in this namespace, say) does
        // not hold the status back, the count admissions work from: its error is returned
        // after the status write, where cost errors were returned before costs came first.
        let costs_failed = match patch_pod_metadata(&ws, &first, &[], ctx).await {
            Ok(()) => {
                costs_written.extend(first.into_iter().map(|c| (c.pod, c.cost)));
                None
            }
            Err(e) => Some(e),
        };
        if status_changed {
            let mut updated = current.clone();
            if let Some(map) = updated.data.as_object_mut() {
                map.insert("status".into(), new_status);
            }
            ensure_leading(ctx)?;
            match bounded(api.replace_status(&name, &PostParams::default(), &updated)).await? {
                Ok(written) => {
                    counted_in = written.metadata.resource_version;
                    ctx.pacing.wrote(key.clone(), Instant::now());
                    ctx.metrics.status_writes.inc();
                    ctx.metrics
                        .placeholders_expired
                        .inc_by(output.expired_placeholders as u64);
                    tracing::debug!(workloadspread = %name, namespace = %ns, "status written");
                    if !dropped.is_empty() {
                        ctx.metrics.creating_dropped.inc_by(dropped.len() as u64);
                        let event = Event::warning(
                            "CreatingPodDropped",
                            format!(
                                "{} admitted pod(s) never appeared (no pod carries {:?}); their slots \
                                 were freed {}s after the claim instead of the creating window",
                                dropped.len(),
                                dropped.iter().take(5).collect::<Vec<_>>(),
                                ctx.early_drop.map_or(0, |d| d.as_secs())
                            ),
                        );
                        publish(ws_reference(&ws), &event, ctx).await;
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    ctx.metrics.conflicts.inc();
                    match bounded(api.get_opt(&name)).await?? {
                        Some(fresh) => {
                            current = fresh;
                            continue;
                        }
                        None => return Ok(Action::await_change()),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
                Err(e) => return Err(e.into()),
            }
        }
        // Only now that the status counts them may admissions stop counting pending pods.
        let pending = crate::converge::pending(&ws, &inputs, counted_in, object, ctx);
        ensure_leading(ctx)?;
        patch_pod_metadata(&ws, &later, &pending.patches, ctx).await?;
        if let Some(e) = costs_failed {
            return Err(e);
        }
        ctx.metrics.record_subsets(&ns, &name, &output.status);
        ctx.metrics.record_view(&status_view(
            &ws,
            &inputs.view.pods,
            inputs.view.replicas,
            0,
        ));
        ctx.metrics
            .record_pending(&ns, &name, oldest_pending(&ws, &inputs.namespace_pods, ctx));
        tracing::debug!(
            workloadspread = %name, namespace = %ns,
            adoptions = output.adoptions.len(), costs = output.deletion_costs.len(),
            pending = pending.patches.len(),
            reschedule = ?output.pods_to_delete, requeue = ?output.requeue_after,
            "reconciled"
        );
        if !output.pods_to_delete.is_empty() {
            tracing::info!(workloadspread = %name, namespace = %ns, pods = ?output.pods_to_delete,
                causes = ?output.reschedule_causes, "rescheduling stuck pods");
        }
        ctx.metrics
            .recovered_on_capacity
            .inc_by(output.recovered_on_capacity as u64);
        for outcome in ctx.capacity.ended_waits(&ws, &output, &inputs.view.pods) {
            ctx.metrics.wait_ended(outcome);
        }
        ensure_leading(ctx)?;
        delete_unschedulable(&ws, &output, ctx).await?;
        publish_events(&current, &output.events, ctx).await;
        let rebalance = crate::converge::rebalance(&ws, &inputs, &output, ctx).await?;
        let pending_requeue = pending
            .requeue_after
            .and_then(|d| Duration::try_from(d).ok());
        let requeue = [output.requeue_after, pending_requeue, rebalance]
            .into_iter()
            .flatten()
            .min();
        return Ok(match requeue {
            Some(d) => Action::requeue(d.max(Duration::from_millis(100))),
            None => Action::await_change(),
        });
    }
    Err(Error::Conflicts(format!("{ns}/{name}")))
}

pub(crate) fn decode(object: &DynamicObject) -> Result<WorkloadSpread, Error> {
    let mut v = serde_json::to_value(object).map_err(|e| Error::Decode {
        what: object.name_any(),
        source: e,
    })?;
    v["apiVersion"] = "apps.kruise.io/v1beta1".into();
    v["kind"] = "WorkloadSpread".into();
    serde_json::from_value(v).map_err(|e| Error::Decode {
        what: format!("WorkloadSpread {}", object.name_any()),
        source: e,
    })
}

/// How long the oldest pod still labelled pending for `ws` has existed.
fn oldest_pending(ws: &WorkloadSpread, pods: &[Arc<Pod>], ctx: &Context) -> Option<Duration> {
    use workloadspread_core::api::PENDING_LABEL;
    let now = (ctx.clock)();
    let labelled = |p: &&Pod| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(PENDING_LABEL))
    };
    let ours =
        |p: &&Pod| workloadspread_core::pods::matched(p).is_some_and(|m| m.name == ws.name());
    pods.iter()
        .map(|p| p.as_ref())
        .filter(labelled)
        .filter(ours)
        .filter_map(|p| p.metadata.creation_timestamp.as_ref())
        .map(|t| now.duration_since(t.0))
        .max()
        .and_then(|d| Duration::try_from(d).ok())
}

/// Gathers the inputs and runs `core`'s reconcile; also returns the inputs.
async fn compute(
    ws: &WorkloadSpread,
    pods: &Store<Pod>,
    ctx: &Context,
) -> Result<(ReconcileOutput, crate::converge::Inputs), Error> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let workload = get_workload(ws, ctx).await?;
    let is_deployment = ws
        .spec
        .target_ref
        .as_ref()
        .is_some_and(|t| t.kind == "Deployment");
    let owner = workload
        .as_ref()
        .and_then(|w| w["metadata"]["uid"].as_str())
        .filter(|_| is_deployment);
    let replica_sets = match owner {
        Some(uid) => cached(|| ctx.workloads.replica_sets(&ns, uid)).await?,
        None => vec![],
    };
    // The namespace's own cache: no scan of other namespaces' pods, and no copy of any:
    // the workload's (the view) and those in the pending flow (read after the status
    // write) are the cache's `Arc`s. A copy of every pod per reconcile cost 137 ms and
    // hundreds of MB with 1 000 WorkloadSpreads of 10 pods in one namespace; a copy of
    // the workload's pods was 8 % of the controller's CPU during a 3 000-pod burst.
    let cached = pods.state();
    let pods: Vec<Arc<Pod>> = cached
        .iter()
        .filter(|p| workloadspread_core::controller::pending::in_pending_flow(p))
        .cloned()
        .collect();
    let view = workload_view(
        ws,
        workload.as_ref(),
        &replica_sets,
        &cached,
        &ctx.kinds,
        &ctx.versioned,
    )?;
    let nodes = node_infos(ctx.nodes.state().iter().map(|n| n.as_ref()));
    let now = (ctx.clock)();
    let sightings = ctx
        .placeholders
        .observe(ws, crate::placeholders::monotonic_now());
    let rebalancing =
        workloadspread_core::controller::rebalance::enabled(ws, ctx.limiter.settings.default);
    let capacity = ctx
        .capacity
        .read(
            &ctx.client,
            ws,
            &view.pods,
            &ctx.nodes,
            rebalancing,
            &ctx.metrics,
        )
        .await;
    let input = ReconcileInput {
        ws,
        pods: &view.pods,
        workload_replicas: view.replicas,
        latest_version: &view.latest_version,
        nodes: &nodes,
        versioned_kinds: &ctx.versioned,
        now,
        options: &ctx.options,
        placeholders: PlaceholderView {
            sightings: &sightings,
            now: crate::placeholders::monotonic_now(),
        },
        capacity: &capacity,
    };
    let output = reconcile(&input);
    let inputs = crate::converge::Inputs {
        namespace_pods: pods,
        view,
        workload,
        capacity,
    };
    Ok((output, inputs))
}

/// The target from its watch cache; a kind we do not watch is read from the API server.
async fn get_workload(ws: &WorkloadSpread, ctx: &Context) -> Result<Option<Value>, Error> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(None);
    };
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let (group, _) = target
        .api_version
        .split_once('/')
        .unwrap_or(("", &target.api_version));
    let gk = (group.to_string(), target.kind.clone());
    let lookup = cached(|| match ctx.workloads.get(&gk, &ns, &target.name) {
        Lookup::NotSynced => None,
        other => Some(other),
    })
    .await?;
    match lookup {
        Lookup::Found(v) => Ok(Some(v)),
        Lookup::Missing => Ok(None),
        Lookup::NotWatched | Lookup::NotSynced => get_unwatched(ws, ctx).await,
    }
}

/// Polls a cache until it answers (its first list), for at most CACHE_WAIT.
async fn cached<T>(read: impl Fn() -> Option<T>) -> Result<T, Error> {
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    loop {
        if let Some(v) = read() {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::CachesNotSynced);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A live GET, for a target kind that is neither built in, OpenKruise's nor configured.
async fn get_unwatched(ws: &WorkloadSpread, ctx: &Context) -> Result<Option<Value>, Error> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(None);
    };
    let Some(resource) = resource_for(ctx, &target.api_version, &target.kind).await? else {
        return Ok(None);
    };
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &resource);
    let Some(object) = bounded(api.get_opt(&target.name)).await?? else {
        return Ok(None);
    };
    let mut v = serde_json::to_value(&object).map_err(|e| Error::Decode {
        what: target.name.clone(),
        source: e,
    })?;
    v["apiVersion"] = resource.api_version.clone().into();
    v["kind"] = resource.kind.clone().into();
    Ok(Some(v))
}

/// Every API call of a reconcile is abandoned after API_TIMEOUT (and retried).
pub(crate) async fn bounded<T>(call: impl std::future::Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(API_TIMEOUT, call)
        .await
        .map_err(|_| Error::Timeout(API_TIMEOUT))
}

/// The API resource of a kind, discovered once; `None` when the cluster does not serve it.
async fn resource_for(
    ctx: &Context,
    api_version: &str,
    kind: &str,
) -> Result<Option<ApiResource>, Error> {
    let key = (api_version.to_string(), kind.to_string());
    if let Some(r) = ctx
        .resources
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
    {
        return Ok(Some(r.clone()));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    match bounded(pinned_kind(&ctx.client, &gvk)).await? {
        Ok((resource, _)) => {
            ctx.resources
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, resource.clone());
            Ok(Some(resource))
        }
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::Kube(Box::new(e))
    }
}

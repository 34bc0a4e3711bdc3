//! The online reconcile: fetch inputs, decide through `core`, write.
//!
//! Order as the reference (§4.2): adoptions, deletion costs, status (guarded by
//! `resourceVersion`; on 409 the WorkloadSpread is re-read and everything recomputed,
//! so counter entries the admission host wrote meanwhile are kept), then deletion of
//! pods stuck unschedulable, then events.

use crate::context::{bounded, ensure_leading, Context, Error};
use crate::inputs::{node_infos, workload_view};
use crate::workloads::Lookup;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::discovery::pinned_kind;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::cost::CostPatch;
use workloadspread_core::controller::pending::costs_before_status;
use workloadspread_core::controller::view::status_view;
use workloadspread_core::controller::{
    reconcile, Event, PlaceholderView, ReconcileInput, ReconcileOutput,
};
use workloadspread_kube::resource::workloadspread_resource;

/// Status write attempts per reconcile (each after a fresh read).
const STATUS_ATTEMPTS: usize = 5;
/// How long a reconcile waits for the pod and node caches' first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// Reconciles one WorkloadSpread.
pub async fn run(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_object(&object, &ctx).await;
    let failed = result.as_ref().err().map(Error::metric_label);
    ctx.metrics.observe_reconcile(started.elapsed(), failed);
    result
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
    let mut current = object.clone();
    // Costs this reconcile has written (a retry after a conflict recomputes from a cache
    // that may not show them yet: they are not written twice).
    let mut costs_written: BTreeMap<String, i64> = BTreeMap::new();
    for attempt in 0..STATUS_ATTEMPTS {
        // Fetch.
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
        // Decide (core).
        let (mut output, inputs) = compute(&ws, &pods, ctx).await?;
        if let Some(recheck) = unseen.recheck {
            let recheck = std::time::Duration::try_from(recheck).unwrap_or_default();
            output.requeue_after = Some(output.requeue_after.map_or(recheck, |r| r.min(recheck)));
        }
        // Write: adoptions, the costs the status must follow, the status.
        if attempt == 0 {
            ensure_leading(ctx)?;
            adopt(&ws, &output, ctx).await?;
        }
        let costs = write_costs_first(&ws, &output, &inputs, &mut costs_written, ctx).await?;
        // The version whose status counts the pods: the one written, or the one read.
        let counted_in = match written.as_ref() == Some(&output.status) {
            true => current.metadata.resource_version.clone(),
            false => match write_status(&current, &ws, &output, &unseen.dropped, ctx).await? {
                StatusWrite::Written(version) => version,
                StatusWrite::Conflict(fresh) => {
                    current = *fresh;
                    continue;
                }
                StatusWrite::Gone => return Ok(Action::await_change()),
            },
        };
        let done = StatusDone {
            ws: &ws,
            inputs: &inputs,
            output: &output,
            counted_in,
            current: &current,
        };
        return after_status(done, object, costs, ctx).await;
    }
    Err(Error::Conflicts(format!("{ns}/{name}")))
}

/// The costs a status that counts their pods must follow, written first
/// (`core::controller::pending::costs_before_status`); the rest are written after it.
struct Costs {
    later: Vec<CostPatch>,
    /// A cost that could not be written (no pod write right in this namespace, say) does
    /// not hold the status back, the count admissions work from: its error is returned
    /// after the status write.
    failed: Option<Error>,
}

async fn write_costs_first(
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    inputs: &crate::converge::Inputs,
    costs_written: &mut BTreeMap<String, i64>,
    ctx: &Context,
) -> Result<Costs, Error> {
    let (first, later) = costs_before_status(&output.deletion_costs, &inputs.namespace_pods);
    let first: Vec<CostPatch> = first
        .into_iter()
        .filter(|c| costs_written.get(&c.pod) != Some(&c.cost))
        .collect();
    ensure_leading(ctx)?;
    let failed = match patch_pod_metadata(ws, &first, &[], ctx).await {
        Ok(()) => {
            costs_written.extend(first.into_iter().map(|c| (c.pod, c.cost)));
            None
        }
        Err(e) => Some(e),
    };
    Ok(Costs { later, failed })
}

/// How a status write came out.
enum StatusWrite {
    /// Stored, in this `resourceVersion`.
    Written(Option<String>),
    /// Someone wrote first: decide again on this fresh copy.
    Conflict(Box<DynamicObject>),
    /// The WorkloadSpread is gone.
    Gone,
}

/// Writes `output`'s status on `current` (guarded by its `resourceVersion`).
async fn write_status(
    current: &DynamicObject,
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    dropped: &std::collections::BTreeSet<String>,
    ctx: &Context,
) -> Result<StatusWrite, Error> {
    let ns = current.namespace().unwrap_or_default();
    let name = current.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &workloadspread_resource());
    let new_status = serde_json::to_value(&output.status).map_err(|e| Error::Decode {
        what: "status".into(),
        source: e,
    })?;
    let mut updated = current.clone();
    if let Some(map) = updated.data.as_object_mut() {
        map.insert("status".into(), new_status);
    }
    ensure_leading(ctx)?;
    match bounded(api.replace_status(&name, &PostParams::default(), &updated)).await? {
        Ok(written) => {
            ctx.pacing.wrote((ns.clone(), name.clone()), Instant::now());
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
                publish(ws_reference(ws), &event, ctx).await;
            }
            Ok(StatusWrite::Written(written.metadata.resource_version))
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            ctx.metrics.conflicts.inc();
            Ok(match bounded(api.get_opt(&name)).await?? {
                Some(fresh) => StatusWrite::Conflict(Box::new(fresh)),
                None => StatusWrite::Gone,
            })
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(StatusWrite::Gone),
        Err(e) => Err(e.into()),
    }
}

/// A reconcile whose status is stored (or needed no write).
struct StatusDone<'a> {
    ws: &'a WorkloadSpread,
    inputs: &'a crate::converge::Inputs,
    output: &'a ReconcileOutput,
    /// The version whose status counts the pods.
    counted_in: Option<String>,
    current: &'a DynamicObject,
}

/// What follows a stored status: pending labels and the later costs, metrics,
/// rescheduling, events, rebalancing; when to look again.
async fn after_status(
    done: StatusDone<'_>,
    object: &DynamicObject,
    costs: Costs,
    ctx: &Context,
) -> Result<Action, Error> {
    let StatusDone {
        ws,
        inputs,
        output,
        counted_in,
        current,
    } = done;
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let name = ws.metadata.name.clone().unwrap_or_default();
    // Only now that the status counts them may admissions stop counting pending pods.
    let pending = crate::converge::pending(ws, inputs, counted_in, object, ctx);
    ensure_leading(ctx)?;
    patch_pod_metadata(ws, &costs.later, &pending.patches, ctx).await?;
    if let Some(e) = costs.failed {
        return Err(e);
    }
    ctx.metrics.record_subsets(&ns, &name, &output.status);
    ctx.metrics
        .record_view(&status_view(ws, &inputs.view.pods, inputs.view.replicas, 0));
    ctx.metrics
        .record_pending(&ns, &name, oldest_pending(ws, &inputs.namespace_pods, ctx));
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
    for outcome in ctx.capacity.ended_waits(ws, output, &inputs.view.pods) {
        ctx.metrics.wait_ended(outcome);
    }
    ensure_leading(ctx)?;
    delete_unschedulable(ws, output, ctx).await?;
    publish_events(current, &output.events, ctx).await;
    let rebalance = crate::converge::rebalance(ws, inputs, output, ctx).await?;
    let pending_requeue = pending
        .requeue_after
        .and_then(|d| Duration::try_from(d).ok());
    let requeue = [output.requeue_after, pending_requeue, rebalance]
        .into_iter()
        .flatten()
        .min();
    Ok(match requeue {
        Some(d) => Action::requeue(d.max(Duration::from_millis(100))),
        None => Action::await_change(),
    })
}

pub(crate) fn decode(object: &DynamicObject) -> Result<WorkloadSpread, Error> {
    workloadspread_kube::resource::decode_workloadspread(object).map_err(|e| Error::Decode {
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

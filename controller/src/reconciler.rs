//! The online reconcile: fetch (`fetch`), decide (`core`'s reconcile), write (through
//! the `Writer`).
//!
//! Order as the reference (§4.2): adoptions, deletion costs, status (guarded by
//! `resourceVersion`; on 409 the WorkloadSpread is re-read and everything recomputed,
//! so counter entries the admission host wrote meanwhile are kept), then deletion of
//! pods stuck unschedulable, then events.

use crate::calls::bounded;
use crate::context::{Context, Error};
use crate::fetch::{caches_synced, fetch, Fetch, Fetched};
use crate::writer::WriteError;
use crate::writes::{
    adopt, delete_unschedulable, patch_pod_metadata, publish_events, ws_reference,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::cost::CostPatch;
use workloadspread_core::controller::pending::costs_before_status;
use workloadspread_core::controller::view::status_view;
use workloadspread_core::controller::{reconcile, Event, ReconcileOutput};
use workloadspread_kube::resource::workloadspread_resource;
use workloadspread_kube::status::StatusWrite;

/// Status write attempts per reconcile (each after a fresh read).
const STATUS_ATTEMPTS: usize = 5;

/// Reconciles one WorkloadSpread.
pub async fn run(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_object(&object, &ctx).await;
    let failed = result.as_ref().err().map(Error::metric_label);
    ctx.metrics.observe_reconcile(started.elapsed(), failed);
    if result.is_ok() {
        ctx.backoff.succeeded(&key(&object));
    }
    result
}

/// Retries a failed reconcile after the backoff of its kind (`crate::backoff`).
pub fn error_policy(object: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    let retry = ctx
        .backoff
        .failed(key(&object), error.metric_label(), Instant::now());
    tracing::warn!(workloadspread = %object.name_any(), namespace = ?object.namespace(), ?retry, "reconcile failed: {error}");
    Action::requeue(retry)
}

fn key(object: &DynamicObject) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

async fn reconcile_object(object: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    let (ns, name) = key(object);
    let pods = ctx.pods.store(&ns);
    caches_synced(&pods, ctx).await?;
    // Within the interval after our last status write (a burst): the whole reconcile
    // waits for its end and then does at once what the events meanwhile asked for. Not
    // only the write: every pod event of a burst recomputing the status for nothing cost
    // more CPU than the admissions themselves (`crate::pacing`).
    if let Some(wait) = ctx.pacing.wait(&key(object), Instant::now()) {
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
        let fetched = match fetch(&current, &pods, ctx).await? {
            Fetch::Go(fetched) => fetched,
            Fetch::Stop(action) => return Ok(action),
        };
        // Decide (core).
        let output = fetched.recheck(reconcile(&fetched.input(ctx)));
        // Write: adoptions, the costs the status must follow, the status.
        if attempt == 0 {
            adopt(&fetched.ws, &output, &ctx.writer, &ctx.metrics).await?;
        }
        let costs = write_costs_first(&fetched, &output, &mut costs_written, ctx).await?;
        // The version whose status counts the pods: the one written, or the one read.
        let counted_in = match fetched.written.as_ref() == Some(&output.status) {
            true => current.metadata.resource_version.clone(),
            false => match write_status(&current, &fetched, &output, ctx).await? {
                Stored::Written(version) => version,
                Stored::Conflict(fresh) => {
                    current = *fresh;
                    continue;
                }
                Stored::Gone => return Ok(Action::await_change()),
            },
        };
        let done = StatusDone {
            fetched: &fetched,
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
    fetched: &Fetched,
    output: &ReconcileOutput,
    costs_written: &mut BTreeMap<String, i64>,
    ctx: &Context,
) -> Result<Costs, Error> {
    let pods = &fetched.inputs.namespace_pods;
    let (first, later) = costs_before_status(&output.deletion_costs, pods);
    let first: Vec<CostPatch> = first
        .into_iter()
        .filter(|c| costs_written.get(&c.pod) != Some(&c.cost))
        .collect();
    let failed = match patch_pod_metadata(&fetched.ws, &first, &[], &ctx.writer, &ctx.metrics).await
    {
        Ok(()) => {
            costs_written.extend(first.into_iter().map(|c| (c.pod, c.cost)));
            None
        }
        Err(WriteError::NotLeader) => return Err(Error::NotLeader),
        Err(e) => Some(e.into()),
    };
    Ok(Costs { later, failed })
}

/// How a status write came out.
enum Stored {
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
    fetched: &Fetched,
    output: &ReconcileOutput,
    ctx: &Context,
) -> Result<Stored, Error> {
    let (ns, name) = key(current);
    let new_status = serde_json::to_value(&output.status).map_err(|e| Error::Decode {
        what: "status".into(),
        source: e,
    })?;
    match ctx.writer.status(current, new_status).await? {
        StatusWrite::Written(written) => {
            let version = written.metadata.resource_version;
            ctx.pacing.wrote((ns.clone(), name.clone()), Instant::now());
            ctx.metrics.status_writes.inc();
            ctx.metrics
                .placeholders_expired
                .inc_by(output.expired_placeholders as u64);
            tracing::debug!(workloadspread = %name, namespace = %ns, "status written");
            let dropped = &fetched.unseen.dropped;
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
                ctx.writer.event(&ws_reference(&fetched.ws), &event).await;
            }
            Ok(Stored::Written(version))
        }
        StatusWrite::Conflict => {
            ctx.metrics.conflicts.inc();
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &ns, &workloadspread_resource());
            Ok(match bounded(api.get_opt(&name)).await?? {
                Some(fresh) => Stored::Conflict(Box::new(fresh)),
                None => Stored::Gone,
            })
        }
        StatusWrite::Gone => Ok(Stored::Gone),
    }
}

/// A reconcile whose status is stored (or needed no write).
struct StatusDone<'a> {
    fetched: &'a Fetched,
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
        fetched,
        output,
        counted_in,
        current,
    } = done;
    let (ws, inputs) = (&fetched.ws, &fetched.inputs);
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let name = ws.metadata.name.clone().unwrap_or_default();
    // Only now that the status counts them may admissions stop counting pending pods.
    let pending = crate::converge::pending(ws, inputs, counted_in, object, ctx);
    let (writer, metrics) = (&ctx.writer, &ctx.metrics);
    patch_pod_metadata(ws, &costs.later, &pending.patches, writer, metrics).await?;
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
    delete_unschedulable(ws, output, ctx.reschedule, writer, metrics).await?;
    publish_events(current, &output.events, writer).await;
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

//! What a reconcile does once the status is written, beyond the reference: the pending
//! stamps and label removals of best-effort admissions (`core::controller::pending`)
//! and rebalancing (`core::controller::rebalance`, applied by the `rebalance` module).
//! Each decision is `core`'s; this module gathers its inputs.

use crate::context::{Context, Error};
use crate::inputs::WorkloadView;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::pending::{
    counted_pods, plan_pending, PendingInput, PendingPlan, PENDING_GRACE,
};
use workloadspread_core::controller::rebalance::{enabled, plan_rebalance, RebalanceInput};
use workloadspread_core::controller::ReconcileOutput;

/// What the reconcile read.
pub struct Inputs {
    /// The namespace's pods in the pending flow (labelled pending, or stamped), from the
    /// cache: all that is read of the namespace's pods after the status write.
    pub namespace_pods: Vec<Arc<Pod>>,
    /// The workload's pods and replicas.
    pub view: WorkloadView<Arc<Pod>>,
    /// The workload object, `None` when it does not exist.
    pub workload: Option<Value>,
    /// Provisioner signals and subset room (the `capacity` module).
    pub capacity: workloadspread_core::controller::capacity::Capacity,
}

/// The pending stamps and label removals after a status write (or an equal status)
/// at `counted_in`; `observed` is the object the controller's own watch delivered.
pub fn pending(
    ws: &WorkloadSpread,
    inputs: &Inputs,
    counted_in: Option<String>,
    observed: &DynamicObject,
    ctx: &Context,
) -> PendingPlan {
    let Some(written_version) = counted_in else {
        return PendingPlan::default();
    };
    let counted = counted_pods(ws, &inputs.view.pods);
    plan_pending(&PendingInput {
        ws,
        namespace_pods: &inputs.namespace_pods,
        counted: &counted,
        written_version: &written_version,
        observed_version: observed
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default(),
        now: (ctx.clock)(),
        grace: PENDING_GRACE,
    })
}

/// Rebalancing: plans with what the interval allows and evicts; returns when to look
/// again.
pub async fn rebalance(
    ws: &WorkloadSpread,
    inputs: &Inputs,
    output: &ReconcileOutput,
    ctx: &Context,
) -> Result<Option<Duration>, Error> {
    let on = enabled(ws, ctx.limiter.settings.default);
    if !on {
        return Ok(None);
    }
    let key = (ws.namespace().to_string(), ws.name().to_string());
    let (budget, _) = ctx.limiter.budget(&key);
    let plan = plan_rebalance(&RebalanceInput {
        ws,
        status: &output.status,
        pods: &inputs.view.pods,
        workload: inputs.workload.as_ref(),
        workload_replicas: inputs.view.replicas,
        latest_version: &inputs.view.latest_version,
        versioned_kinds: &ctx.versioned,
        costs: &output.deletion_costs,
        adoptions: output.adoptions.len(),
        rules: ctx.options.rules,
        max_evictions: budget,
        enabled: on,
        now: (ctx.clock)(),
        rooms: &inputs.capacity.rooms,
    });
    tracing::debug!(
        workloadspread = %ws.name(), namespace = %ws.namespace(), budget,
        current = ?plan.current, target = ?plan.target, hold = ?plan.hold,
        evictions = ?plan.evictions.iter().map(|e| e.pod.as_str()).collect::<Vec<_>>(),
        "rebalance plan"
    );
    let applied = crate::rebalance::apply(ws, &plan, &ctx.limiter, &ctx.writer, &ctx.metrics);
    Ok(applied.await?)
}

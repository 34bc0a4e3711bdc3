//! What a reconcile writes besides the status, through the [`Writer`]: adoption
//! patches, deletion costs and pending-label changes, deletions of pods stuck
//! unschedulable, and events.

use crate::metrics::Metrics;
use crate::writer::{Deleted, Patched, WriteError, Writer};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use std::collections::HashSet;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::cost::CostPatch;
use workloadspread_core::controller::pending::{pod_patches, PendingPatch};
use workloadspread_core::controller::{Event, ReconcileOutput};

/// Adoption patches (before the status that counts the adopted pods).
pub(crate) async fn adopt(
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    writer: &Writer,
    metrics: &Metrics,
) -> Result<(), WriteError> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    for adoption in &output.adoptions {
        writer.adopt(&ns, &adoption.pod, &adoption.patch).await?;
        metrics.patches.adoption.inc();
    }
    Ok(())
}

/// Deletion costs and the pending stamps and label removals, one patch per pod (costs
/// alone before the status write, costs of pending pods with their label changes after
/// the status write that counts the pods).
pub(crate) async fn patch_pod_metadata(
    ws: &WorkloadSpread,
    deletion_costs: &[CostPatch],
    pending: &[(String, PendingPatch)],
    writer: &Writer,
    metrics: &Metrics,
) -> Result<(), WriteError> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let costs: HashSet<&str> = deletion_costs.iter().map(|c| c.pod.as_str()).collect();
    let unlabelled: HashSet<&str> = pending
        .iter()
        .filter(|(_, p)| *p == PendingPatch::Unlabel)
        .map(|(n, _)| n.as_str())
        .collect();
    for (pod, patch) in pod_patches(deletion_costs, pending) {
        match writer.pod_metadata(&ns, &pod, &patch).await {
            Ok(Patched::Done) => {}
            // Gone since the cache listed it (a scale-in): nothing left to rank.
            Ok(Patched::Gone) => continue,
            Err(e @ WriteError::Api { .. }) => {
                let event = Event::warning(
                    "PatchPodMetadataFailed",
                    format!(
                        "Failed to patch the deletion cost or pending label of Pod {ns}/{pod}: {}",
                        api_cause(&e)
                    ),
                );
                writer.event(&ws_reference(ws), &event).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        if costs.contains(pod.as_str()) {
            metrics.patches.deletion_cost.inc();
        }
        if unlabelled.contains(pod.as_str()) {
            metrics.patches.pending_label.inc();
        }
    }
    Ok(())
}

/// What the API server said to a refused write.
fn api_cause(e: &WriteError) -> String {
    match e {
        WriteError::Api { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// Deletes the pods `output` found stuck unschedulable (when rescheduling is on).
pub(crate) async fn delete_unschedulable(
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    reschedule: bool,
    writer: &Writer,
    metrics: &Metrics,
) -> Result<(), WriteError> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    if !reschedule {
        if !output.pods_to_delete.is_empty() {
            let event = Event::warning(
                "ReschedulingDisabled",
                format!(
                    "Pods {:?} stayed unschedulable past rescheduleCriticalSeconds; the controller \
                     runs with --no-reschedule (chart controller.podWrite.rescheduling: false) and \
                     deletes no pods: delete them by hand or enable rescheduling",
                    output.pods_to_delete
                ),
            );
            writer.event(&ws_reference(ws), &event).await;
        }
        return Ok(());
    }
    let causes = output
        .reschedule_causes
        .iter()
        .map(Some)
        .chain(std::iter::repeat(None));
    let uids = output
        .reschedule_uids
        .iter()
        .cloned()
        .chain(std::iter::repeat(None));
    for ((pod, cause), uid) in output.pods_to_delete.iter().zip(causes).zip(uids) {
        match writer.delete_pod(&ns, pod, uid).await {
            Ok(Deleted::Done) => {
                metrics.rescheduled.inc();
                if let Some(cause) = cause {
                    metrics.fallback(cause.label());
                    if let Some(event) = fallback_event(ws, pod, cause) {
                        writer.event(&ws_reference(ws), &event).await;
                    }
                }
            }
            // Gone, or replaced under its name (the uid precondition): nothing to do.
            Ok(Deleted::Gone) => {}
            Err(e @ WriteError::Api { .. }) => {
                let event = Event::warning(
                    "DeletePodFailed",
                    format!(
                        "Failed to delete unschedulable Pod {ns}/{pod} in WorkloadSpread {}",
                        ws.metadata.name.clone().unwrap_or_default()
                    ),
                );
                writer.event(&ws_reference(ws), &event).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The event naming the provisioner's signal that moved a pod (none for the timer:
/// the reference's behaviour, no event).
fn fallback_event(
    ws: &WorkloadSpread,
    pod: &str,
    cause: &workloadspread_core::controller::capacity::Cause,
) -> Option<Event> {
    use workloadspread_core::controller::capacity::Cause;
    let name = ws.metadata.name.clone().unwrap_or_default();
    let message = match cause {
        Cause::Timer => return None,
        Cause::NoCapacity { reason, source } => format!(
            "Pod {pod} of WorkloadSpread {name} rescheduled to a later subset at once: {source} reported {reason} (no capacity comes for it)"
        ),
        Cause::WaitExpired { reason } => format!(
            "Pod {pod} of WorkloadSpread {name} rescheduled to a later subset: capacity was coming ({reason}) but not within the wait bound"
        ),
    };
    Some(Event::normal("RescheduleForCapacity", message))
}

/// Records `events` on the WorkloadSpread `object` (in the version read); whether every
/// one was recorded.
pub(crate) async fn publish_events(
    object: &DynamicObject,
    events: &[Event],
    writer: &Writer,
) -> bool {
    let reference = ObjectReference {
        api_version: Some("apps.kruise.io/v1beta1".into()),
        kind: Some("WorkloadSpread".into()),
        name: object.metadata.name.clone(),
        namespace: object.metadata.namespace.clone(),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        field_path: None,
    };
    let mut all = true;
    for e in events {
        all &= writer.event(&reference, e).await;
    }
    all
}

/// The WorkloadSpread `ws` as an event's subject.
pub(crate) fn ws_reference(ws: &WorkloadSpread) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1beta1".into()),
        kind: Some("WorkloadSpread".into()),
        name: ws.metadata.name.clone(),
        namespace: ws.metadata.namespace.clone(),
        uid: ws.metadata.uid.clone(),
        ..Default::default()
    }
}

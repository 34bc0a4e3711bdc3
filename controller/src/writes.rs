//! What a reconcile writes besides the status: adoption patches, deletion costs and
//! pending-label changes, deletions of pods stuck unschedulable, and events.

use crate::context::{bounded, Context, Error};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::Api;
use std::collections::HashSet;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::cost::CostPatch;
use workloadspread_core::controller::pending::{pod_patches, PendingPatch};
use workloadspread_core::controller::{Event, ReconcileOutput};

/// Bound of one event write.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Adoption patches (before the status that counts the adopted pods).
pub(crate) async fn adopt(
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    ctx: &Context,
) -> Result<(), Error> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams::default();
    for adoption in &output.adoptions {
        bounded(pods.patch(&adoption.pod, &pp, &Patch::Strategic(&adoption.patch))).await??;
        ctx.metrics.patches.adoption.inc();
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
    ctx: &Context,
) -> Result<(), Error> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams::default();
    let costs: HashSet<&str> = deletion_costs.iter().map(|c| c.pod.as_str()).collect();
    let unlabelled: HashSet<&str> = pending
        .iter()
        .filter(|(_, p)| *p == PendingPatch::Unlabel)
        .map(|(n, _)| n.as_str())
        .collect();
    for (pod, patch) in pod_patches(deletion_costs, pending) {
        match bounded(pods.patch(&pod, &pp, &Patch::Strategic(&patch))).await? {
            Ok(_) => {}
            // Gone since the cache listed it (a scale-in): nothing left to rank.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => {
                let event = Event::warning(
                    "PatchPodMetadataFailed",
                    format!(
                        "Failed to patch the deletion cost or pending label of Pod {ns}/{pod}: {e}"
                    ),
                );
                publish(ws_reference(ws), &event, ctx).await;
                return Err(Error::PodMetadata {
                    pod,
                    source: Box::new(e),
                });
            }
        }
        if costs.contains(pod.as_str()) {
            ctx.metrics.patches.deletion_cost.inc();
        }
        if unlabelled.contains(pod.as_str()) {
            ctx.metrics.patches.pending_label.inc();
        }
    }
    Ok(())
}

pub(crate) async fn delete_unschedulable(
    ws: &WorkloadSpread,
    output: &ReconcileOutput,
    ctx: &Context,
) -> Result<(), Error> {
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    if !ctx.reschedule {
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
            publish(ws_reference(ws), &event, ctx).await;
        }
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
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
        // Only the pod that was judged stuck: a successor of the same name is not it.
        let params = DeleteParams {
            preconditions: uid.map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match bounded(pods.delete(pod, &params)).await? {
            Ok(_) => {
                ctx.metrics.rescheduled.inc();
                if let Some(cause) = cause {
                    ctx.metrics.fallback(cause.label());
                    if let Some(event) = fallback_event(ws, pod, cause) {
                        publish(ws_reference(ws), &event, ctx).await;
                    }
                }
            }
            // Gone, or replaced under its name (the uid precondition): nothing to do.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                let event = Event::warning(
                    "DeletePodFailed",
                    format!(
                        "Failed to delete unschedulable Pod {ns}/{pod} in WorkloadSpread {}",
                        ws.metadata.name.clone().unwrap_or_default()
                    ),
                );
                publish(ws_reference(ws), &event, ctx).await;
                return Err(e.into());
            }
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

pub(crate) async fn publish_events(object: &DynamicObject, events: &[Event], ctx: &Context) {
    let reference = ObjectReference {
        api_version: Some("apps.kruise.io/v1beta1".into()),
        kind: Some("WorkloadSpread".into()),
        name: object.metadata.name.clone(),
        namespace: object.metadata.namespace.clone(),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        field_path: None,
    };
    for e in events {
        publish(reference.clone(), e, ctx).await;
    }
}

/// Records `e` on the WorkloadSpread.
pub(crate) async fn publish_event(ws: &WorkloadSpread, e: &Event, ctx: &Context) {
    publish(ws_reference(ws), e, ctx).await;
}

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

pub(crate) async fn publish(reference: ObjectReference, e: &Event, ctx: &Context) {
    let event = KubeEvent {
        type_: if e.type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason.to_string(),
        note: Some(e.message.clone()),
        action: e.reason.to_string(),
        secondary: None,
    };
    // Bounded like every other call: a stalled events API must not hold the reconcile
    // (an event is best effort; a lost one is logged).
    match tokio::time::timeout(EVENT_TIMEOUT, ctx.recorder.publish(&event, &reference)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!("recording event {}: {err}", e.reason),
        Err(_) => tracing::warn!(
            "recording event {}: no answer in {EVENT_TIMEOUT:?}",
            e.reason
        ),
    }
}

//! Pod predicates shared by admission and the controller.

use crate::annotation::MatchedWorkloadSpread;
use crate::workload::ObjectRef;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::cmp::Ordering;

/// `IsPodActive`: not Succeeded/Failed and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's controller owner reference.
pub fn controller_of(pod: &Pod) -> Option<ObjectRef> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| ObjectRef {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
        })
}

/// The uid of the pod's controller owner reference.
pub fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The pod's matched-workloadspread annotation, if present and valid.
pub fn matched(pod: &Pod) -> Option<MatchedWorkloadSpread> {
    MatchedWorkloadSpread::from_annotations(pod.metadata.annotations.as_ref())?.ok()
}

/// The placeholder a pod was admitted into (`workloadspread.io/reservation`), if any.
pub fn reservation(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(crate::api::RESERVATION_ANNOTATION)
        .map(String::as_str)
}

/// Pod metadata only this system writes: the subset a pod is counted in
/// ([`crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION`]), the placeholder it was admitted
/// into ([`crate::api::RESERVATION_ANNOTATION`]), the controller's counted
/// stamp, the best-effort pending label ([`crate::api::PENDING_LABEL`]) and the host's
/// admission id ([`crate::api::ADMISSION_LABEL`]). A pod created
/// with its own copy would be counted in another pod's slot or another subset, or counted
/// by admissions as placed when it was not; the chart's ValidatingAdmissionPolicy
/// (`charts/workloadspread/files/pod-metadata.cel`) refuses changes to them after creation
/// by anyone but the controller.
pub const SYSTEM_ANNOTATIONS: &[&str] = &[
    crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION,
    crate::api::RESERVATION_ANNOTATION,
    crate::api::COUNTED_ANNOTATION,
];
pub const SYSTEM_LABELS: &[&str] = &[
    crate::api::PENDING_LABEL,
    crate::api::RESERVATION_LABEL,
    crate::api::ADMISSION_LABEL,
];

/// Removes [`SYSTEM_ANNOTATIONS`] and [`SYSTEM_LABELS`] from an incoming pod (admission
/// does so before it decides; it sets them itself where they belong). Returns the keys
/// removed.
pub fn strip_system_metadata(pod: &mut serde_json::Value) -> Vec<&'static str> {
    let mut removed = Vec::new();
    for (field, keys) in [
        ("annotations", SYSTEM_ANNOTATIONS),
        ("labels", SYSTEM_LABELS),
    ] {
        let Some(map) = pod
            .get_mut("metadata")
            .and_then(|m| m.get_mut(field))
            .and_then(serde_json::Value::as_object_mut)
        else {
            continue;
        };
        for key in keys {
            if map.remove(*key).is_some() {
                removed.push(*key);
            }
        }
    }
    removed
}

/// `metadata.name` or "".
pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "True")
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
        .max(0)
}

/// `afterOrZero`: a zero (absent) time sorts first; otherwise later first.
fn after_or_zero(a: Option<&Time>, b: Option<&Time>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => a.is_none(),
        (Some(a), Some(b)) => a.0 > b.0,
    }
}

/// `controller.ActivePods.Less`: true when `a` should be deleted before `b`.
pub fn active_pods_less(a: &Pod, b: &Pod) -> bool {
    let (na, nb) = (node_name(a), node_name(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return na.is_empty();
    }
    if phase_ordinal(a) != phase_ordinal(b) {
        return phase_ordinal(a) < phase_ordinal(b);
    }
    let (ra, rb) = (ready_condition(a), ready_condition(b));
    if ra.is_some() != rb.is_some() {
        return ra.is_none();
    }
    if let (Some(ra), Some(rb)) = (ra, rb) {
        let (ta, tb) = (
            ra.last_transition_time.as_ref(),
            rb.last_transition_time.as_ref(),
        );
        if ta != tb {
            return after_or_zero(ta, tb);
        }
    }
    if max_restarts(a) != max_restarts(b) {
        return max_restarts(a) > max_restarts(b);
    }
    let (ca, cb) = (
        a.metadata.creation_timestamp.as_ref(),
        b.metadata.creation_timestamp.as_ref(),
    );
    if ca != cb {
        return after_or_zero(ca, cb);
    }
    false
}

/// `active_pods_less` as an ordering (for stable sorts: deletion order first).
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    if active_pods_less(a, b) {
        Ordering::Less
    } else if active_pods_less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// Drops from a pod what no controller decision reads, before a cache keeps it: managed
/// fields, the last-applied annotation, containers beyond their names, volumes and the
/// rest of the spec except `nodeName`, `affinity` and `tolerations` (subset matching),
/// and the status except phase, conditions (without messages) and the container
/// statuses' name, readiness, restarts and image. With thousands of pods in a cluster
/// this is most of a cache's memory; `controller::tests` hold a reconcile of pruned pods
/// equal to one of whole pods.
pub fn prune_for_cache(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
    pod.metadata.managed_fields = None;
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            affinity: spec.affinity.take(),
            tolerations: spec.tolerations.take(),
            containers: spec
                .containers
                .iter_mut()
                .map(|c| Container {
                    name: std::mem::take(&mut c.name),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        let conditions = status.conditions.take().map(|mut cs| {
            for c in &mut cs {
                c.message = None;
            }
            cs
        });
        let containers = status.container_statuses.take().map(|cs| {
            cs.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    ready: c.ready,
                    restart_count: c.restart_count,
                    image: c.image,
                    image_id: c.image_id,
                    ..Default::default()
                })
                .collect()
        });
        *status = PodStatus {
            phase: status.phase.take(),
            conditions,
            container_statuses: containers,
            ..Default::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart's ValidatingAdmissionPolicy guards exactly the metadata admission strips
    /// on CREATE: its expression names every key, each in the map it belongs to.
    #[test]
    fn the_charts_pod_metadata_policy_guards_the_system_metadata() {
        let cel = include_str!("../../charts/workloadspread/files/pod-metadata.cel");
        let lists: Vec<&str> = cel.split("].all(").collect();
        let (annotations, labels) = (lists[0], lists[1]);
        for key in SYSTEM_ANNOTATIONS {
            assert!(
                annotations.contains(&format!("'{key}'")),
                "annotation {key}"
            );
        }
        for key in SYSTEM_LABELS {
            assert!(labels.contains(&format!("'{key}'")), "label {key}");
        }
        let quoted = cel.matches('\'').count() / 2;
        assert_eq!(quoted, SYSTEM_ANNOTATIONS.len() + SYSTEM_LABELS.len());
        let (annotation_rule, label_rule) = (lists[1], lists[2]);
        assert!(annotation_rule.contains("object.metadata.annotations[k]"));
        assert!(label_rule.contains("object.metadata.labels[k]"));
        assert!(!label_rule.contains("annotations"));
        // A Binding's annotations reach the pod too: the same keys, none of the labels.
        let binding = include_str!("../../charts/workloadspread/files/pod-binding.cel");
        for key in SYSTEM_ANNOTATIONS {
            assert!(binding.contains(&format!("'{key}'")), "binding: {key}");
        }
        assert_eq!(binding.matches('\'').count() / 2, SYSTEM_ANNOTATIONS.len());
    }

    #[test]
    fn an_incoming_pods_system_metadata_is_stripped() {
        let mut pod = serde_json::json!({"metadata": {
            "annotations": {crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION: "{}", "keep": "1"},
            "labels": {crate::api::PENDING_LABEL: "true", "app": "web"}}});
        let removed = strip_system_metadata(&mut pod);
        assert_eq!(
            removed,
            [
                crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION,
                crate::api::PENDING_LABEL
            ]
        );
        assert_eq!(
            pod,
            serde_json::json!({"metadata": {"annotations": {"keep": "1"}, "labels": {"app": "web"}}})
        );
    }
}

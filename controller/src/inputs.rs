//! Which pods and replica count a WorkloadSpread is reconciled against (reference
//! §4.3), from objects already fetched. Pure: the online controller and `reconcile
//! --offline` both call it.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::version::{workload_version, VersionedKinds};
use workloadspread_core::workload::WorkloadKinds;

/// The workload side of a reconcile; `P` is how a pod is held (the online controller
/// holds its cache's `Arc<Pod>`s, so a reconcile copies no pod).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadView<P = Pod> {
    /// Pods of the workload (inactive ones included); empty when replicas are 0.
    pub pods: Vec<P>,
    pub replicas: i32,
    /// "" when the workload is missing.
    pub latest_version: String,
}

/// Errors that abort a reconcile (retried with backoff).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InputError {
    #[error("reading the replicas of {kind} {name}: {reason}")]
    Replicas {
        kind: String,
        name: String,
        reason: String,
    },
    #[error("{0}")]
    Version(String),
}

impl<P> Default for WorkloadView<P> {
    fn default() -> Self {
        WorkloadView {
            pods: vec![],
            replicas: 0,
            latest_version: String::new(),
        }
    }
}

/// `getPodsForWorkloadSpread` + `filterWorkload` + the latest version.
///
/// `workload` is the target (`None` when it does not exist), `replica_sets` the
/// namespace's ReplicaSets (used for Deployments), `pods` the namespace's pods (the
/// workload's are cloned into the view: `Arc`s are shared, not copied).
pub fn workload_view<P: std::borrow::Borrow<Pod> + Clone>(
    ws: &WorkloadSpread,
    workload: Option<&Value>,
    replica_sets: &[Value],
    pods: &[P],
    kinds: &WorkloadKinds,
    versioned: &VersionedKinds,
) -> Result<WorkloadView<P>, InputError> {
    let (Some(workload), Some(target)) = (
        workload.filter(|w| w["metadata"]["deletionTimestamp"].is_null()),
        ws.spec.target_ref.as_ref(),
    ) else {
        return Ok(WorkloadView::default());
    };
    let replicas = kinds
        .workload_replicas(target, ws.spec.target_filter.as_ref(), workload)
        .map_err(|e| InputError::Replicas {
            kind: target.kind.clone(),
            name: target.name.clone(),
            reason: e.to_string(),
        })?;
    if replicas == 0 {
        // No pods: nothing is ordered by version.
        return Ok(WorkloadView::default());
    }
    let latest_version = workload_version(workload, replica_sets, versioned)
        .map_err(|e| InputError::Version(e.to_string()))?;
    let owners = owner_uids(workload, replica_sets);
    let pods = pods
        .iter()
        .filter(|p| controller_uid((*p).borrow()).is_some_and(|uid| owners.contains(uid)))
        .cloned()
        .collect();
    Ok(WorkloadView {
        pods,
        replicas,
        latest_version,
    })
}

fn controller_uid(pod: &Pod) -> Option<&String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| &o.uid)
}

/// UIDs whose pods belong to the workload: a Deployment's non-deleting ReplicaSets
/// (or the Deployment itself when it has none), otherwise the workload.
fn owner_uids(workload: &Value, replica_sets: &[Value]) -> BTreeSet<String> {
    let uid = workload["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if workload["kind"] != "Deployment" {
        return BTreeSet::from([uid]);
    }
    let owned: BTreeSet<String> = replica_sets
        .iter()
        .filter(|rs| rs["metadata"]["deletionTimestamp"].is_null())
        .filter(|rs| {
            rs["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["controller"] == true && o["uid"] == uid.as_str())
        })
        .filter_map(|rs| rs["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    if owned.is_empty() {
        BTreeSet::from([uid])
    } else {
        owned
    }
}

/// Node views by name for adoption.
pub fn node_infos<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> BTreeMap<String, NodeInfo> {
    nodes
        .into_iter()
        .filter(|n| n.metadata.name.is_some())
        .map(|n| {
            let info = NodeInfo::from(n);
            (info.name.clone(), info)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws(kind: &str, api_version: &str) -> WorkloadSpread {
        serde_json::from_value(json!({
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": api_version, "kind": kind, "name": "w"},
                "subsets": [{"name": "a"}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, owner_uid: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": owner_uid, "controller": true}]}}))
        .unwrap()
    }

    fn deployment(replicas: i32) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "uid": "d-uid"},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": []}}}})
    }

    fn replica_set(uid: &str, owner: &str, hash: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("w-{hash}"), "uid": uid, "labels": {"pod-template-hash": hash},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "w", "uid": owner, "controller": true}]},
            "spec": {"template": {"metadata": {"labels": {"app": "w", "pod-template-hash": hash}}, "spec": {"containers": []}}}})
    }

    #[test]
    fn deployment_pods_come_through_its_replica_sets() {
        let rss = [
            replica_set("rs1", "d-uid", "h1"),
            replica_set("rs2", "other", "h2"),
        ];
        let pods = [pod("p1", "rs1"), pod("p2", "rs2"), pod("p3", "d-uid")];
        let kinds = WorkloadKinds::default();
        let versioned = VersionedKinds::new(["deployment"]);
        let view = workload_view(
            &ws("Deployment", "apps/v1"),
            Some(&deployment(3)),
            &rss,
            &pods,
            &kinds,
            &versioned,
        )
        .unwrap();
        let names: Vec<_> = view
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["p1"]);
        assert_eq!(view.replicas, 3);
        assert_eq!(view.latest_version, "h1");
    }

    /// The online controller's view holds the cache's pods, not copies of them.
    #[test]
    fn a_view_of_shared_pods_shares_them() {
        use std::sync::Arc;
        let rss = [replica_set("rs1", "d-uid", "h1")];
        let pods = [Arc::new(pod("p1", "rs1")), Arc::new(pod("p2", "other"))];
        let view = workload_view(
            &ws("Deployment", "apps/v1"),
            Some(&deployment(2)),
            &rss,
            &pods,
            &WorkloadKinds::default(),
            &VersionedKinds::new(["deployment"]),
        )
        .unwrap();
        assert_eq!(view.pods.len(), 1);
        assert!(
            Arc::ptr_eq(&view.pods[0], &pods[0]),
            "the view copied the pod"
        );
    }

    #[test]
    fn zero_replicas_or_missing_workload_means_no_pods() {
        let kinds = WorkloadKinds::default();
        let versioned = VersionedKinds::new(["deployment"]);
        let pods = [pod("p3", "d-uid")];
        let w = ws("Deployment", "apps/v1");
        let zero = workload_view(&w, Some(&deployment(0)), &[], &pods, &kinds, &versioned).unwrap();
        assert!(zero.pods.is_empty());
        let missing = workload_view(&w, None, &[], &pods, &kinds, &versioned).unwrap();
        assert_eq!(missing, WorkloadView::default());
        let without_rs = workload_view(&w, Some(&deployment(1)), &[], &pods, &kinds, &versioned);
        assert!(
            matches!(without_rs, Err(InputError::Version(_))),
            "{without_rs:?}"
        );
    }
}

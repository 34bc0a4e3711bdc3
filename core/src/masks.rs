//! Field masks: Kubewarden's `field_masks` on `list_resources_*` / `get_resource` (SDK
//! 0.17), which a host honours by returning each object pruned to the listed dotted
//! paths, traversing arrays implicitly (`spec.containers.name` keeps the name of every
//! container). The policy asks for [`PENDING_POD_FIELDS`] when it lists the pods a
//! best-effort admission must add to the controller's status: what
//! `admission::pending_pods` reads. Everything else — most of a running pod's bytes —
//! is never copied, serialised or parsed. It asks for [`WORKLOADSPREAD_TARGET_FIELDS`]
//! when it looks through a namespace's WorkloadSpreads for the one a pod belongs to, or
//! for one targeting the same workload: what `workload::SpreadTarget` holds.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The pod fields a best-effort admission reads from the pods still labelled pending
/// (`api::PENDING_LABEL`): which WorkloadSpread and subset, which version, whether active.
pub const PENDING_POD_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "metadata.annotations",
    "metadata.deletionTimestamp",
    "metadata.ownerReferences",
    "status.phase",
];

/// The WorkloadSpread fields that decide which spread a pod belongs to and whether two
/// spreads target the same workload (`workload::find_matching_workloadspread`,
/// `validation`'s conflict check): `workload::SpreadTarget`. No uid: a spread recreated
/// alike matches alike, and the one that matched is read whole anyway. One fixed list,
/// so a host keeps one cache for it.
pub const WORKLOADSPREAD_TARGET_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.deletionTimestamp",
    "spec.targetRef",
    "spec.targetFilter",
];

/// A WorkloadSpread without its status: what a pod admission reads when the counter keeps
/// the counts (`admission::spread_fields`).
pub const WORKLOADSPREAD_SPEC_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];

/// The workload fields a WorkloadSpread's validation reads to find its target by name
/// (the one found is then read whole).
pub const WORKLOAD_NAME_FIELDS: &[&str] = &["metadata.name"];

/// Paths as a tree of names; a leaf keeps the whole value under it.
#[derive(Debug, Default, PartialEq)]
pub struct Mask {
    children: BTreeMap<String, Mask>,
}

impl Mask {
    /// The mask of `paths`; a path that is a prefix of another keeps everything under it.
    pub fn new<S: AsRef<str>>(paths: impl IntoIterator<Item = S>) -> Self {
        let mut root = Mask::default();
        let mut whole: Vec<Vec<String>> = vec![];
        for path in paths {
            let parts: Vec<String> = path
                .as_ref()
                .split('.')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            if !parts.is_empty() {
                whole.push(parts);
            }
        }
        // Shorter paths first, so a prefix marks its subtree whole before longer paths
        // under it are considered.
        whole.sort_by_key(Vec::len);
        for parts in whole {
            root.insert(&parts);
        }
        root
    }

    fn insert(&mut self, parts: &[String]) {
        let Some((first, rest)) = parts.split_first() else {
            return;
        };
        match self.children.get_mut(first) {
            // Already kept whole by a shorter path.
            Some(child) if child.children.is_empty() => {}
            Some(child) => child.insert(rest),
            None => {
                let mut child = Mask::default();
                child.insert(rest);
                self.children.insert(first.clone(), child);
            }
        }
    }

    /// Whether the mask keeps nothing (no paths): the caller returns objects whole.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// What the mask keeps under the entry `name`: `None` when it drops the entry; an
    /// empty mask when it keeps it whole (or when the mask itself is empty).
    pub fn child(&self, name: &str) -> Option<&Mask> {
        static WHOLE: Mask = Mask {
            children: BTreeMap::new(),
        };
        if self.children.is_empty() {
            return Some(&WHOLE);
        }
        self.children.get(name)
    }

    /// The entries the mask keeps at its top (none when it keeps everything).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.children.keys().map(String::as_str)
    }

    /// An object given as its entries (e.g. typed metadata next to untyped data), pruned
    /// to the mask without building the whole object first.
    pub fn apply_entries<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> Value {
        let mut out = Map::new();
        for (name, v) in entries {
            match self.children.get(name) {
                Some(child) => {
                    out.insert(name.to_string(), child.apply(v));
                }
                None if self.children.is_empty() => {
                    out.insert(name.to_string(), v.clone());
                }
                None => {}
            }
        }
        Value::Object(out)
    }

    /// `value` pruned to the mask, to serialise without building it: nothing is cloned
    /// (a host answering a list of a thousand objects writes only what it keeps).
    pub fn masked<'a>(&'a self, value: &'a Value) -> Masked<'a> {
        Masked { mask: self, value }
    }

    /// `value` pruned to the mask; only what is kept is cloned.
    pub fn apply(&self, value: &Value) -> Value {
        if self.children.is_empty() {
            return value.clone();
        }
        match value {
            Value::Object(map) => {
                let mut out = Map::new();
                for (name, child) in &self.children {
                    if let Some(v) = map.get(name) {
                        out.insert(name.clone(), child.apply(v));
                    }
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.apply(v)).collect()),
            // A scalar where the mask expected an object: nothing under it to keep.
            _ => Value::Null,
        }
    }
}

/// A value as [`Mask::apply`] prunes it, serialised straight from the whole value.
#[derive(Clone, Copy, Debug)]
pub struct Masked<'a> {
    mask: &'a Mask,
    value: &'a Value,
}

impl serde::Serialize for Masked<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        if self.mask.children.is_empty() {
            return self.value.serialize(serializer);
        }
        match self.value {
            Value::Object(map) => {
                let kept = self
                    .mask
                    .children
                    .iter()
                    .filter_map(|(name, child)| map.get(name).map(|v| (name, child.masked(v))));
                let mut out = serializer.serialize_map(None)?;
                for (name, v) in kept {
                    out.serialize_entry(name, &v)?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for v in items {
                    out.serialize_element(&self.mask.masked(v))?;
                }
                out.end()
            }
            _ => serializer.serialize_unit(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_prune_objects_and_traverse_arrays() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "managedFields": [{"x": 1}]},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "E"}]},
                                    {"name": "d", "image": "j"}], "nodeName": "n"},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        let mask = Mask::new([
            "apiVersion",
            "metadata.labels",
            "metadata.name",
            "spec.containers.name",
            "status.phase",
            "status.missing",
        ]);
        assert_eq!(
            mask.apply(&pod),
            json!({"apiVersion": "v1", "metadata": {"name": "p", "labels": {"a": "1"}},
                "spec": {"containers": [{"name": "c"}, {"name": "d"}]},
                "status": {"phase": "Running"}})
        );
    }

    /// Serialised without building the pruned value, it is the pruned value.
    #[test]
    fn masked_serialises_what_apply_builds() {
        let pod = kubelet_pod(7, 1, "a", "v1");
        let cases: [&[&str]; 5] = [
            PENDING_POD_FIELDS,
            WORKLOADSPREAD_TARGET_FIELDS,
            &[
                "spec.containers.env.name",
                "status.conditions.type",
                "metadata.name.x",
            ],
            &["metadata.labels.app", "metadata"],
            &[],
        ];
        for paths in cases {
            let mask = Mask::new(paths);
            let written = serde_json::to_value(mask.masked(&pod)).unwrap();
            assert_eq!(written, mask.apply(&pod), "{paths:?}");
        }
    }

    #[test]
    fn a_prefix_keeps_its_whole_subtree_and_no_paths_keep_everything() {
        let v = json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {}});
        let prefix_last = Mask::new(["metadata.labels.a", "metadata"]);
        assert_eq!(
            prefix_last.apply(&v),
            json!({"metadata": {"name": "p", "labels": {"a": "1"}}})
        );
        let entries = [("metadata", &v["metadata"]), ("spec", &v["spec"])];
        assert_eq!(
            Mask::new(["metadata.name"]).apply_entries(entries),
            json!({"metadata": {"name": "p"}})
        );
        let none: [&str; 0] = [];
        assert_eq!(Mask::new(none).apply_entries(entries), v);
        assert!(Mask::new(none).is_empty());
        assert_eq!(Mask::new(none).apply(&v), v);
        assert_eq!(Mask::new(["", "."]).apply(&v), v);
    }

    /// A pod as the API server holds it once a kubelet runs it: defaulted spec,
    /// tolerations, affinity, volumes, and a status with conditions, IPs and container
    /// statuses — `state` picks the phase the recount cares about.
    pub(crate) fn kubelet_pod(i: usize, state: usize, subset: &str, version: &str) -> Value {
        let name = format!("web-{version}-{i:05}");
        let created = format!("2026-11-24T10:{:02}:{:02}Z", (i / 60) % 60, i % 60);
        let ready_at = format!("2026-11-24T11:00:0{}Z", (i / 6) % 4);
        let scheduled = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
            "lastTransitionTime": created});
        let ready = |s: &str| {
            json!([
            {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": created},
            {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": created},
            // Readiness shared by a few pods per second (a rollout): restarts then rank them.
            {"type": "Ready", "status": s, "lastProbeTime": null, "lastTransitionTime": ready_at},
            {"type": "ContainersReady", "status": s, "lastProbeTime": null, "lastTransitionTime": ready_at},
            scheduled.clone()])
        };
        let container_status = |restarts: i64, ready: bool| {
            json!([{"name": "main",
            "state": {"running": {"startedAt": created}}, "lastState": {}, "ready": ready,
            "restartCount": restarts, "image": "registry.example/web:1.27",
            "imageID": "registry.example/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "containerID": format!("containerd://{:064x}", i), "started": true}])
        };
        let node = format!("node-{subset}-{}", i % 7);
        let (node, status) = match state % 8 {
            0 => (
                Some(node),
                json!({"phase": "Running", "conditions": ready("True"),
                "containerStatuses": container_status(0, true)}),
            ),
            1 => (
                Some(node),
                json!({"phase": "Running", "conditions": ready("True"),
                "containerStatuses": container_status(3, true)}),
            ),
            2 => (
                None,
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "lastProbeTime": null,
                "lastTransitionTime": created,
                "message": "0/6 nodes are available: 6 Insufficient cpu."}]}),
            ),
            3 | 5 => (
                Some(node),
                json!({"phase": "Running", "conditions": ready("False"),
                "containerStatuses": container_status(1, false)}),
            ),
            4 => (
                Some(node),
                json!({"phase": "Succeeded", "conditions": ready("False")}),
            ),
            6 => (
                Some(node),
                json!({"phase": "Pending", "conditions": [scheduled.clone()]}),
            ),
            _ => (
                Some(node),
                json!({"phase": "Failed", "conditions": ready("False")}),
            ),
        };
        let mut status = status;
        status["qosClass"] = json!("Burstable");
        status["startTime"] = json!(created);
        if node.is_some() {
            status["hostIP"] = json!(format!("10.0.{}.{}", i % 7, 10 + i % 200));
            status["hostIPs"] = json!([{"ip": status["hostIP"]}]);
            status["podIP"] = json!(format!("10.244.{}.{}", i / 250, i % 250));
            status["podIPs"] = json!([{"ip": status["podIP"]}]);
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "generateName": format!("web-{version}-"), "namespace": "demo",
                "uid": format!("{i:08x}-0000-4000-8000-{i:012x}"), "resourceVersion": (1000 + i).to_string(),
                "creationTimestamp": created,
                "labels": {"app": "web", "pod-template-hash": version, "tier": "frontend"},
                "annotations": {
                    "apps.kruise.io/matched-workloadspread": format!("{{\"name\":\"web-spread\",\"subset\":\"{subset}\"}}"),
                    "controller.kubernetes.io/pod-deletion-cost": (999_990 - (i % 10) as i64).to_string(),
                    "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:00:00Z"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{version}"),
                    "uid": format!("rs-{version}"), "controller": true, "blockOwnerDeletion": true}]},
            "spec": {
                "containers": [{"name": "main", "image": "registry.example/web:1.27", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "ZONE", "value": subset}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                    "volumeMounts": [{"name": "kube-api-access-x", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
                "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true,
                "preemptionPolicy": "PreemptLowerPriority",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [format!("zone-{subset}")]}]}]}}},
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
            "status": status});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        if state % 8 == 3 {
            pod["metadata"]["deletionTimestamp"] = json!("2026-11-24T11:59:50Z");
            pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        }
        pod
    }

    /// What a best-effort admission takes from masked pods equals what it takes from
    /// whole ones, for pods in every state (running, restarted, unschedulable, deleting,
    /// not ready, completed, failed, scheduled but pending), two versions, pending or
    /// not, of this WorkloadSpread or another.
    #[test]
    fn pending_pods_read_from_masked_pods_equal_those_from_whole_pods() {
        use crate::admission::pending_pods;
        use crate::api::{PENDING_LABEL, PENDING_VALUE};
        use crate::version::VersionedKinds;
        use k8s_openapi::api::core::v1::Pod;
        let subsets = ["a", "b", "c"];
        let whole: Vec<Value> = (0..240)
            .map(|i| {
                let version = if i % 5 == 0 { "v1" } else { "v2" };
                let mut pod = kubelet_pod(i, i / 3, subsets[i % 3], version);
                if i % 4 != 1 {
                    pod["metadata"]["labels"][PENDING_LABEL] = json!(PENDING_VALUE);
                }
                if i % 11 == 0 {
                    pod["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"] =
                        json!(r#"{"name":"other","subset":"a"}"#);
                }
                pod
            })
            .collect();
        let mask = Mask::new(PENDING_POD_FIELDS);
        let decode = |v: &Value| serde_json::from_value::<Pod>(v.clone()).unwrap();
        let full: Vec<Pod> = whole.iter().map(decode).collect();
        let masked: Vec<Pod> = whole.iter().map(|p| decode(&mask.apply(p))).collect();
        let masked_bytes: usize = whole.iter().map(|p| mask.apply(p).to_string().len()).sum();
        let whole_bytes: usize = whole.iter().map(|p| p.to_string().len()).sum();
        assert!(
            masked_bytes * 4 < whole_bytes,
            "{masked_bytes} of {whole_bytes} bytes kept"
        );
        let kinds = VersionedKinds::new(["deployment", "replicaset"]);
        let (a, b) = (
            pending_pods(&full, "web-spread", &kinds),
            pending_pods(&masked, "web-spread", &kinds),
        );
        assert_eq!(a, b);
        // Some of each: both versions, every subset; inactive and other pods left out.
        assert!(a.iter().any(|p| p.version == "v1") && a.iter().any(|p| p.version == "v2"));
        assert!(subsets.iter().all(|s| a.iter().any(|p| p.subset == *s)));
        assert!(a.len() > 60 && a.len() < 180, "{}", a.len());
    }
}

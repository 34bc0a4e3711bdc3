//! Ported from `pkg/controller/workloadspread/*_test.go` (§5.5 of the reference spec).
//! `reconcile` end to end, by concern; the helpers shared by the modules below.

use super::*;
use crate::api::VERSION_IGNORED;
use k8s_openapi::jiff::ToSpan;
use serde_json::{json, Value};

mod adoption;
mod capacity;
mod costs;
mod counts;
mod pruned;
mod reschedule;
mod windows;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> String {
    (now() - secs.seconds()).to_string()
}

/// `podDemo`: Running, Ready, on node-1, owned by CloneSet cloneset-test.
fn pod(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "nginx"},
            "creationTimestamp": "2024-05-01T09:00:00Z",
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cloneset-test",
                "uid": "a03eb001-27eb-4713-b634-7c46f6861758", "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T09:00:10Z"}]}
    })
}

fn in_subset(mut p: Value, subset: &str) -> Value {
    p["metadata"]["annotations"] = json!({"apps.kruise.io/matched-workloadspread":
        json!({"name": "test-workloadSpread", "subset": subset}).to_string()});
    p
}

fn with(mut p: Value, f: impl FnOnce(&mut Value)) -> Value {
    f(&mut p);
    p
}

fn pods(values: Vec<Value>) -> Vec<Pod> {
    values
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
}

fn ws(subsets: Value, status: Value) -> WorkloadSpread {
    serde_json::from_value(json!({
        "metadata": {"name": "test-workloadSpread", "namespace": "ns", "generation": 10},
        "spec": {"targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cloneset-test"},
            "subsets": subsets},
        "status": status
    })).unwrap()
}

fn one_subset(max: Value) -> Value {
    json!([{"name": "subset-a", "maxReplicas": max}])
}

struct Run {
    out: ReconcileOutput,
}

impl Run {
    fn subset(&self, name: &str) -> &WorkloadSpreadSubsetStatus {
        self.out
            .status
            .subset_statuses
            .iter()
            .find(|s| s.name == name)
            .unwrap()
    }
    fn cost(&self, pod: &str) -> Option<i64> {
        self.out
            .deletion_costs
            .iter()
            .find(|c| c.pod == pod)
            .map(|c| c.cost)
    }
}

fn run_with(
    ws: &WorkloadSpread,
    pods: &[Pod],
    replicas: i32,
    kinds: &VersionedKinds,
    latest: &str,
    nodes: &BTreeMap<String, NodeInfo>,
) -> Run {
    // The ported reference cases run against the reference's cost values.
    let options = ReconcileOptions {
        rules: crate::rules::Rules::Reference,
        ..Default::default()
    };
    let stamped = StampedPlaceholders::of(ws);
    let input = ReconcileInput {
        ws,
        pods,
        workload_replicas: replicas,
        latest_version: latest,
        nodes,
        versioned_kinds: kinds,
        now: now(),
        options: &options,
        placeholders: stamped.view(now()),
        capacity: &crate::controller::capacity::Capacity::NONE,
    };
    Run {
        out: reconcile(&input),
    }
}

fn run(ws: &WorkloadSpread, pods: &[Pod], replicas: i32) -> Run {
    run_with(
        ws,
        pods,
        replicas,
        &VersionedKinds::default(),
        VERSION_IGNORED,
        &BTreeMap::new(),
    )
}

fn node(name: &str, labels: Value, taints: Value) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: serde_json::from_value(labels).unwrap(),
        taints: serde_json::from_value(taints).unwrap(),
    }
}

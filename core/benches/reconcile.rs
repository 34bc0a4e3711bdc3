//! Controller reconcile of one WorkloadSpread with 5 000 pods: CPU time per reconcile,
//! and the writes a second reconcile would issue when nothing changed (goal: 0).
//! Run with `make bench` (`cargo bench -p workloadspread-core --bench reconcile`).

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::api::POD_DELETION_COST_ANNOTATION;
use workloadspread_core::controller::{reconcile, ReconcileInput, ReconcileOptions};
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::version::VersionedKinds;
use workloadspread_core::Timestamp;

const PODS: usize = 5_000;

fn workloadspread() -> WorkloadSpread {
    let zone = |name: &str, max: Option<i32>| {
        let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [name]}]}});
        if let Some(m) = max {
            s["maxReplicas"] = json!(m);
        }
        s
    };
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "bench", "generation": 1},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [zone("zone-a", Some(2000)), zone("zone-b", Some(2000)), zone("zone-c", None)]}
    }))
    .expect("static WorkloadSpread")
}

fn pods(now: Timestamp) -> Vec<Pod> {
    (0..PODS)
        .map(|i| {
            let zone = ["zone-a", "zone-b", "zone-c"][i % 3];
            serde_json::from_value(json!({
                "metadata": {"name": format!("web-h1-{i:05}"), "namespace": "bench",
                    "labels": {"app": "web", "pod-template-hash": "h1"},
                    "creationTimestamp": now.to_string(),
                    "annotations": {"apps.kruise.io/matched-workloadspread":
                        format!("{{\"name\":\"ws\",\"subset\":\"{zone}\"}}")},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-h1",
                        "uid": "rs", "controller": true}]},
                "spec": {"nodeName": format!("node-{zone}-{}", i % 10), "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("static pod")
        })
        .collect()
}

fn main() {
    let now: Timestamp = "2026-01-01T00:00:00Z".parse().expect("timestamp");
    let mut ws = workloadspread();
    let mut pods = pods(now);
    let nodes: BTreeMap<String, NodeInfo> = BTreeMap::new();
    let kinds = VersionedKinds::new(["deployment", "replicaset"]);
    let options = ReconcileOptions::default();
    let no_placeholders = workloadspread_core::controller::StampedPlaceholders::default();
    let run = |ws: &WorkloadSpread, pods: &[Pod]| {
        reconcile(&ReconcileInput {
            ws,
            pods,
            workload_replicas: PODS as i32,
            latest_version: "h1",
            nodes: &nodes,
            versioned_kinds: &kinds,
            now,
            options: &options,
            placeholders: no_placeholders.view(now),
            capacity: &workloadspread_core::controller::capacity::Capacity::NONE,
        })
    };
    // First reconcile: everything is new (status and every deletion cost written).
    let first = run(&ws, &pods);
    let first_writes = usize::from(ws.status.as_ref() != Some(&first.status))
        + first.deletion_costs.len()
        + first.adoptions.len();
    // Apply what the controller would write, then measure steady-state reconciles.
    ws.status = Some(first.status.clone());
    let costs: BTreeMap<&str, i64> = first
        .deletion_costs
        .iter()
        .map(|c| (c.pod.as_str(), c.cost))
        .collect();
    for p in &mut pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(c) = costs.get(name.as_str()) {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(POD_DELETION_COST_ANNOTATION.to_string(), c.to_string());
        }
    }
    let iterations = 30;
    let mut samples = Vec::with_capacity(iterations);
    let mut steady_writes = 0;
    for _ in 0..iterations {
        let started = Instant::now();
        let out = run(&ws, &pods);
        samples.push(started.elapsed());
        steady_writes = usize::from(ws.status.as_ref() != Some(&out.status))
            + out.deletion_costs.len()
            + out.adoptions.len()
            + out.pods_to_delete.len();
    }
    samples.sort_unstable();
    let mean: Duration = samples.iter().sum::<Duration>() / iterations as u32;
    println!(
        "reconcile {PODS} pods: p50 {:?}, max {:?}, mean {:?} CPU per reconcile; writes: first {first_writes}, unchanged {steady_writes}",
        samples[iterations / 2],
        samples[iterations - 1],
        mean
    );
    assert_eq!(
        steady_writes, 0,
        "a reconcile with nothing changed must write nothing"
    );
}

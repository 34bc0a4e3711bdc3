//! Support tools: `reconcile --offline` (one reconcile from files, as JSON) and
//! `plan` (per-subset counts and scale-in order for a series of replica counts).

use crate::args::{PlanArgs, ReconcileArgs, RuleArgs};
use crate::inputs::{node_infos, workload_view};
use anyhow::{bail, Context as _, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};
use std::path::Path;
use workloadspread_core::admission::reserve::stale::Sightings;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::capacity::Capacity;
use workloadspread_core::controller::rebalance::{
    enabled, plan_rebalance, Rebalance, RebalanceInput,
};
use workloadspread_core::controller::{
    reconcile as core_reconcile, PlaceholderView, ReconcileInput, ReconcileOutput,
};
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::Timestamp;
use workloadspread_kube::manifests::load_objects;

/// Reads one WorkloadSpread, converting v1alpha1 to v1beta1.
pub fn load_workloadspread(path: &Path) -> Result<WorkloadSpread> {
    let docs = load_objects(path)?;
    let doc = docs
        .into_iter()
        .find(|d| d["kind"] == "WorkloadSpread")
        .with_context(|| format!("no WorkloadSpread in {}", path.display()))?;
    decode_workloadspread(doc)
}

fn decode_workloadspread(doc: Value) -> Result<WorkloadSpread> {
    workloadspread_core::api::decode_workloadspread(&doc).context("decoding the WorkloadSpread")
}

pub fn reconcile(args: ReconcileArgs) -> Result<()> {
    if !args.offline {
        bail!("`reconcile` only runs offline: pass --offline (the controller itself is `run`)");
    }
    let ws = load_workloadspread(&args.workloadspread)?;
    let mut objects = vec![];
    for p in &args.objects {
        objects.extend(load_objects(p)?);
    }
    let now = match &args.now {
        Some(s) => s
            .parse::<Timestamp>()
            .with_context(|| format!("--now {s:?}"))?,
        None => workloadspread_kube::clock::now(),
    };
    let reconciled = reconcile_objects(&ws, &objects, &args.rules, now)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&output_json(&reconciled))?
    );
    Ok(())
}

/// One offline reconcile: what the controller writes, and the pods rebalancing would
/// evict (the interval's whole budget; none without rebalancing).
pub struct Reconciled {
    pub output: ReconcileOutput,
    pub rebalance: Rebalance,
}

/// One reconcile over in-memory objects.
pub fn reconcile_objects(
    ws: &WorkloadSpread,
    objects: &[Value],
    rules: &RuleArgs,
    now: Timestamp,
) -> Result<Reconciled> {
    let ns = ws
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let in_ns = |o: &&Value| o["metadata"]["namespace"].as_str().unwrap_or("default") == ns;
    let workload = ws.spec.target_ref.as_ref().and_then(|target| {
        objects.iter().filter(in_ns).find(|o| {
            o["kind"] == target.kind.as_str() && o["metadata"]["name"] == target.name.as_str()
        })
    });
    let replica_sets: Vec<Value> = objects
        .iter()
        .filter(in_ns)
        .filter(|o| o["kind"] == "ReplicaSet")
        .cloned()
        .collect();
    let pods: Vec<Pod> = objects
        .iter()
        .filter(in_ns)
        .filter(|o| o["kind"] == "Pod")
        .map(|o| serde_json::from_value(o.clone()))
        .collect::<Result<_, _>>()
        .context("decoding pods")?;
    let nodes: Vec<Node> = objects
        .iter()
        .filter(|o| o["kind"] == "Node")
        .map(|o| serde_json::from_value(o.clone()))
        .collect::<Result<_, _>>()
        .context("decoding nodes")?;
    let (kinds, versioned, options) = (rules.kinds()?, rules.versioned(), rules.options()?);
    let view = workload_view(ws, workload, &replica_sets, &pods, &kinds, &versioned)?;
    let nodes = node_infos(&nodes);
    // No history here: placeholders age by their stamps.
    let sightings = ws
        .status
        .as_ref()
        .map(Sightings::from_stamps)
        .unwrap_or_default();
    let output = core_reconcile(&ReconcileInput {
        ws,
        pods: &view.pods,
        workload_replicas: view.replicas,
        latest_version: &view.latest_version,
        nodes: &nodes,
        versioned_kinds: &versioned,
        now,
        options: &options,
        placeholders: PlaceholderView {
            sightings: &sightings,
            now,
        },
        // Offline: no events or node usage to read; the timers decide (#42).
        capacity: &Capacity::NONE,
    });
    let settings = rules.rebalance()?;
    let rebalance = plan_rebalance(&RebalanceInput {
        ws,
        status: &output.status,
        pods: &view.pods,
        workload,
        workload_replicas: view.replicas,
        latest_version: &view.latest_version,
        versioned_kinds: &versioned,
        costs: &output.deletion_costs,
        adoptions: output.adoptions.len(),
        rules: options.rules,
        max_evictions: settings.max_evictions,
        enabled: enabled(ws, settings.default),
        now,
        rooms: &Default::default(),
    });
    Ok(Reconciled { output, rebalance })
}

/// The JSON printed by `reconcile --offline`.
pub fn output_json(r: &Reconciled) -> Value {
    let o = &r.output;
    json!({
        "status": o.status,
        "adoptions": o.adoptions.iter().map(|a| json!({"pod": a.pod, "subset": a.subset, "patch": a.patch})).collect::<Vec<_>>(),
        "deletionCosts": o.deletion_costs.iter().map(|c| json!({"pod": c.pod, "cost": c.cost})).collect::<Vec<_>>(),
        "podsToDelete": o.pods_to_delete,
        "events": o.events.iter().map(|e| json!({"type": e.type_, "reason": e.reason, "message": e.message})).collect::<Vec<_>>(),
        "requeueAfterSeconds": o.requeue_after.map(|d| d.as_secs_f64()),
        "evictions": r.rebalance.evictions.iter().map(|e| e.pod.as_str()).collect::<Vec<_>>(),
        "rebalance": r.rebalance.hold.as_ref().map_or_else(
            || format!("{} evictions", r.rebalance.evictions.len()),
            |h| h.to_string()),
    })
}

pub fn plan(args: PlanArgs) -> Result<()> {
    let ws = load_workloadspread(&args.file)?;
    let nodes = match &args.nodes {
        Some(path) => {
            let nodes: Vec<NodeInfo> = load_objects(path)?
                .into_iter()
                .filter(|o| o["kind"] == "Node")
                .map(|o| serde_json::from_value::<Node>(o).map(|n| NodeInfo::from(&n)))
                .collect::<Result<_, _>>()
                .context("decoding nodes")?;
            if nodes.is_empty() {
                bail!("no Node objects in {}", path.display());
            }
            Some(nodes)
        }
        None => None,
    };
    let steps =
        workloadspread_core::plan::plan_with(&ws, &args.replicas, nodes.as_deref(), args.rules);
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&steps)?);
        return Ok(());
    }
    print_plan(&steps);
    Ok(())
}

fn print_plan(steps: &[workloadspread_core::plan::PlanStep]) {
    for step in steps {
        println!("replicas {}:", step.replicas);
        println!(
            "  {:<24} {:>5} {:>8} {:>8}",
            "SUBSET", "PODS", "MAX", "MISSING"
        );
        for s in &step.subsets {
            let max = s.max_replicas.map_or("-".to_string(), |m| m.to_string());
            let mark = if s.unschedulable {
                "  unschedulable"
            } else {
                ""
            };
            println!(
                "  {:<24} {:>5} {:>8} {:>8}{mark}",
                s.name, s.pods, max, s.missing_replicas
            );
        }
        let pending: Vec<&str> = step
            .pods
            .iter()
            .filter(|p| p.pending)
            .map(|p| p.name.as_str())
            .collect();
        if !pending.is_empty() {
            println!("  pending (no node fits): {}", pending.join(", "));
        }
        if !step.rescheduled.is_empty() {
            println!("  rescheduled: {}", step.rescheduled.join(", "));
        }
        if step.unplaced > 0 {
            println!("  (unplaced: {})", step.unplaced);
        }
        if !step.deleted.is_empty() {
            println!("  deleted: {}", step.deleted.join(", "));
        }
        println!("  scale-in order: {}", step.scale_in_order.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        rules: RuleArgs,
    }

    #[test]
    fn offline_reconcile_of_a_deployment_dump() {
        let rules = T::parse_from(["t"]).rules;
        let objects: Vec<Value> = serde_json::from_value(json!([
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default", "uid": "d"},
             "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-h1", "namespace": "default", "uid": "rs",
                "labels": {"pod-template-hash": "h1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]},
             "spec": {"template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "h1"}}, "spec": {"containers": []}}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-h1-a", "namespace": "default", "labels": {"pod-template-hash": "h1"},
                "annotations": {"apps.kruise.io/matched-workloadspread": "{\"name\":\"ws\",\"subset\":\"a\"}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-h1", "uid": "rs", "controller": true}]},
             "spec": {"containers": []}, "status": {"phase": "Running"}}
        ]))
        .unwrap();
        let ws: WorkloadSpread = serde_json::from_value(json!({
            "metadata": {"name": "ws", "namespace": "default", "generation": 1},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a", "maxReplicas": 1}, {"name": "b"}]}}))
        .unwrap();
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        let reconciled = reconcile_objects(&ws, &objects, &rules, now).unwrap();
        let out = &reconciled.output;
        let a = &out.status.subset_statuses[0];
        assert_eq!(
            (a.name.as_str(), a.replicas, a.missing_replicas),
            ("a", 1, 0)
        );
        assert_eq!(out.status.versioned_subset_statuses["h1"][0].replicas, 1);
        // The only pod is the last one standing: level 1.
        assert_eq!(
            output_json(&reconciled)["deletionCosts"],
            json!([{"pod": "web-h1-a", "cost": 999_999}])
        );
        assert_eq!(output_json(&reconciled)["evictions"], json!([]));
        // `--rules reference`: positive cost of the first of two subsets, 100 × (2 − 0).
        let reference = T::parse_from(["t", "--rules", "reference"]).rules;
        let out = reconcile_objects(&ws, &objects, &reference, now).unwrap();
        assert_eq!(
            output_json(&out)["deletionCosts"],
            json!([{"pod": "web-h1-a", "cost": 200}])
        );
    }

    /// Issue #27 (2): `evictions` lists the pods rebalancing would evict, and is empty
    /// without the annotation (or with `--rebalance` and the annotation "false").
    #[test]
    fn offline_reconcile_prints_the_evictions() {
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                "labels": {"pod-template-hash": "h1"}, "creationTimestamp": "2025-12-31T00:00:00Z",
                "annotations": {"apps.kruise.io/matched-workloadspread": "{\"name\":\"ws\",\"subset\":\"a\"}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-h1", "uid": "rs", "controller": true}]},
             "spec": {"containers": [], "nodeName": "n"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        };
        let objects = vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default", "uid": "d", "generation": 2},
             "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
             "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3}}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-h1", "namespace": "default", "uid": "rs",
                "labels": {"pod-template-hash": "h1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]},
             "spec": {"template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "h1"}}, "spec": {"containers": []}}}}),
            pod("web-h1-x"),
            pod("web-h1-y"),
            pod("web-h1-z"),
        ];
        let ws = |annotation: Option<&str>| -> WorkloadSpread {
            let mut v = json!({"metadata": {"name": "ws", "namespace": "default", "generation": 1},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "subsets": [{"name": "a", "maxReplicas": 1}, {"name": "b"}]}});
            if let Some(a) = annotation {
                v["metadata"]["annotations"] = json!({"workloadspread.io/rebalance": a});
            }
            serde_json::from_value(v).unwrap()
        };
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        let evictions = |ws: &WorkloadSpread, args: &[&str]| {
            let rules = T::parse_from(std::iter::once("t").chain(args.iter().copied())).rules;
            let out = reconcile_objects(ws, &objects, &rules, now).unwrap();
            output_json(&out)["evictions"].clone()
        };
        // a holds 3 pods for a maximum of 1: its two cheapest leave for b, one per
        // interval by default.
        let on = ws(Some("true"));
        let first = evictions(&on, &[]);
        assert_eq!(first.as_array().map(Vec::len), Some(1), "{first}");
        let both = evictions(&on, &["--rebalance-max-evictions", "5"]);
        assert_eq!(both.as_array().map(Vec::len), Some(2), "{both}");
        assert!(both.as_array().unwrap().contains(&first[0]));
        assert_eq!(evictions(&ws(None), &[]), json!([]));
        assert_eq!(
            evictions(&ws(None), &["--rebalance"])
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        assert_eq!(evictions(&ws(Some("false")), &["--rebalance"]), json!([]));
    }
}

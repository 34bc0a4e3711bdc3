//! The controller's pruned pod cache reconciles as whole pods do.

use super::*;

/// #19: the controller's pod cache keeps pods pruned (`pods::prune_for_cache`); a
/// reconcile of pruned pods equals one of whole pods — pods in every state, two versions,
/// adoption by node (taints, pod tolerations and affinity), unschedulable pods,
/// percentage and integer subsets, both rules — and a pruned pod is a fraction of the size.
#[test]
fn a_reconcile_of_pruned_pods_equals_one_of_whole_pods() {
    use crate::masks::tests::kubelet_pod;
    use crate::pods::prune_for_cache;
    let zone = |z: &str| {
        json!({"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}]})
    };
    let ws: WorkloadSpread = serde_json::from_value(json!({
        "metadata": {"name": "web-spread", "namespace": "demo", "generation": 1},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 60}},
            "subsets": [
                {"name": "a", "maxReplicas": "30%", "requiredNodeSelector": zone("zone-a"),
                 "patch": {"metadata": {"labels": {"zone": "a"}}}},
                {"name": "b", "maxReplicas": 20, "requiredNodeSelector": zone("zone-b")},
                {"name": "c"}]}}))
    .unwrap();
    let subsets = ["a", "b", "c"];
    let whole: Vec<Pod> = (0..240)
        .map(|i| {
            let version = if i % 5 == 0 { "v1" } else { "v2" };
            let mut pod = kubelet_pod(i, i / 3, subsets[i % 3], version);
            pod["metadata"]["managedFields"] = json!([{"manager": "kubelet", "operation": "Update",
                "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]);
            if subsets[i % 3] == "a" {
                // Zone a's nodes are tainted: only pods that tolerate it match subset a.
                pod["spec"]["tolerations"].as_array_mut().unwrap().push(
                    json!({"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}),
                );
            }
            if i % 4 == 0 {
                // Created before the WorkloadSpread: adopted by its node.
                pod["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove("apps.kruise.io/matched-workloadspread");
            }
            serde_json::from_value(pod).unwrap()
        })
        .collect();
    let pruned: Vec<Pod> = whole
        .iter()
        .cloned()
        .map(|mut p| {
            prune_for_cache(&mut p);
            p
        })
        .collect();
    let size = |pods: &[Pod]| serde_json::to_string(pods).unwrap().len();
    assert!(
        size(&pruned) * 2 < size(&whole),
        "{} of {} bytes kept",
        size(&pruned),
        size(&whole)
    );
    let nodes: BTreeMap<String, NodeInfo> = subsets
        .iter()
        .flat_map(|s| (0..7).map(move |i| (*s, i)))
        .map(|(s, i)| {
            let taints = if s == "a" {
                json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}])
            } else {
                json!([])
            };
            node(
                &format!("node-{s}-{i}"),
                json!({"topology.kubernetes.io/zone": format!("zone-{s}")}),
                taints,
            )
        })
        .map(|n| (n.name.clone(), n))
        .collect();
    let kinds = VersionedKinds::new(["deployment", "replicaset"]);
    for rules in [crate::rules::Rules::Planned, crate::rules::Rules::Reference] {
        let options = ReconcileOptions {
            rules,
            ..Default::default()
        };
        for replicas in [0, 50, 240, 400] {
            let stamped = StampedPlaceholders::of(&ws);
            let run = |pods: &[Pod]| {
                reconcile(&ReconcileInput {
                    ws: &ws,
                    pods,
                    workload_replicas: replicas,
                    latest_version: "v2",
                    nodes: &nodes,
                    versioned_kinds: &kinds,
                    now: now(),
                    options: &options,
                    placeholders: stamped.view(now()),
                    capacity: &crate::controller::capacity::Capacity::NONE,
                })
            };
            let (a, b) = (run(&whole), run(&pruned));
            assert_eq!(a, b, "{rules:?} at {replicas} replicas");
            assert!(!a.adoptions.is_empty() && !a.status.subset_statuses.is_empty());
        }
    }
}

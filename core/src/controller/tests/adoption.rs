//! Pods without a subset annotation adopted by their node (required and preferred
//! terms, tolerations), and the subset scores behind it.

use super::*;
use crate::api::POD_DELETION_COST_ANNOTATION;
use crate::controller::grouping::subset_score;

#[test]
fn adopts_existing_pods() {
    // TestManagerExistingPods case 1.
    let w = ws(
        json!([
        {"name": "subset-a", "maxReplicas": 5,
         "requiredNodeSelector": {"matchExpressions": [{"key": "name-is", "operator": "In", "values": ["node-a"]}]},
         "tolerations": [{"key": "node-taint", "operator": "Equal", "value": "node-a", "effect": "NoSchedule"}],
         "patch": {"metadata": {"annotations": {"subset": "subset-a"}}}},
        {"name": "subset-b",
         "requiredNodeSelector": {"matchExpressions": [{"key": "name-is", "operator": "In", "values": ["node-b"]}]}}]),
        json!({}),
    );
    let nodes: BTreeMap<String, NodeInfo> = [
        node("node-a", json!({"name-is": "node-a", "type": "worker"}),
            json!([{"key": "node-taint", "value": "node-a", "effect": "NoSchedule"}, {"key": "schedule-system", "value": "unified", "effect": "NoSchedule"}])),
        node("node-c", json!({}), json!([{"key": "node-taint", "value": "node-c", "effect": "NoSchedule"}])),
    ].into_iter().map(|n| (n.name.clone(), n)).collect();
    let on_a = |n: &str| {
        with(pod(n), |p| {
            p["spec"]["nodeName"] = json!("node-a");
            p["spec"]["tolerations"] = json!([{"key": "schedule-system", "operator": "Equal", "value": "unified", "effect": "NoSchedule"}]);
            p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "type", "operator": "In", "values": ["worker"]}]}]}}});
        })
    };
    let other_ws = |p: Value| {
        with(p, |p| {
            p["metadata"]["annotations"] = json!({"apps.kruise.io/matched-workloadspread": r#"{"name":"other","subset":"subset-a"}"#});
        })
    };
    let p = pods(vec![
        on_a("pod-0"),
        on_a("pod-1"),
        other_ws(on_a("pod-2")),
        other_ws(on_a("pod-3")),
        in_subset(on_a("pod-4"), "subset-a"),
        in_subset(on_a("pod-5"), "subset-a"),
        in_subset(pod("pod-6"), "subset-b"),
        in_subset(pod("pod-7"), "subset-b"),
        with(pod("pod-8"), |p| {
            p["spec"]["nodeName"] = json!("node-c");
        }),
        with(in_subset(on_a("pod-9"), "subset-c"), |p| {
            p["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] = json!("200");
        }),
    ]);
    let r = run_with(
        &w,
        &p,
        10,
        &VersionedKinds::default(),
        VERSION_IGNORED,
        &nodes,
    );
    assert_eq!(
        (r.subset("subset-a").replicas, r.subset("subset-b").replicas),
        (6, 2)
    );
    let adopted: Vec<&str> = r.out.adoptions.iter().map(|a| a.pod.as_str()).collect();
    assert_eq!(adopted, vec!["pod-0", "pod-1", "pod-2", "pod-3"]);
    assert_eq!(
        r.out.adoptions[0].patch,
        json!({"metadata": {"annotations": {"subset": "subset-a",
        "apps.kruise.io/matched-workloadspread": r#"{"name":"test-workloadSpread","subset":"subset-a"}"#}}})
    );
    let costs: Vec<i64> = (0..10)
        .map(|i| r.cost(&format!("pod-{i}")).unwrap())
        .collect();
    assert_eq!(costs.iter().filter(|c| **c > 0).count(), 7);
    assert_eq!(costs.iter().filter(|c| (-200..=0).contains(*c)).count(), 1);
    assert_eq!(costs.iter().filter(|c| **c < -200).count(), 2);
    assert_eq!(costs[8], -300);
}

#[test]
fn adopts_by_preferred_terms() {
    // TestManagerExistingPods case 2 (preferred-only subsets).
    let pref = |a: i32, b: i32| {
        json!([
        {"weight": a, "preference": {"matchExpressions": [{"key": "type", "operator": "In", "values": ["worker-2"]}]}},
        {"weight": b, "preference": {"matchExpressions": [{"key": "type", "operator": "In", "values": ["worker-3"]}]}}])
    };
    let w = ws(
        json!([
        {"name": "subset-a", "maxReplicas": 3, "tolerations": [{"key": "node-taint", "operator": "Exists"}],
         "patch": {"metadata": {"annotations": {"subset": "subset-a"}}}},
        {"name": "subset-b", "maxReplicas": 3, "tolerations": [{"key": "node-taint", "operator": "Exists"}], "preferredNodeSelector": pref(200, 100)},
        {"name": "subset-c", "tolerations": [{"key": "node-taint", "operator": "Exists"}], "preferredNodeSelector": pref(100, 200)}]),
        json!({}),
    );
    let nodes: BTreeMap<String, NodeInfo> = (1..=3)
        .map(|i| {
            node(
                &format!("worker-{i}"),
                json!({"type": format!("worker-{i}")}),
                json!([{"key": "node-taint", "value": "x", "effect": "NoSchedule"}]),
            )
        })
        .map(|n| (n.name.clone(), n))
        .collect();
    let subset = |n: &str| w.subset(n).unwrap();
    let p: Pod = serde_json::from_value(pod("p")).unwrap();
    assert_eq!(
        subset_score(&p, &nodes["worker-1"], subset("subset-a"), 3),
        Some(11)
    );
    assert_eq!(
        subset_score(&p, &nodes["worker-1"], subset("subset-b"), 3),
        Some(1)
    );
    assert_eq!(
        subset_score(&p, &nodes["worker-2"], subset("subset-b"), 3),
        Some(20001)
    );
    assert_eq!(
        subset_score(&p, &nodes["worker-3"], subset("subset-c"), 3),
        Some(20001)
    );
    let p = pods(
        (1..=3)
            .map(|i| {
                with(pod(&format!("pod-{i}")), |p| {
                    p["spec"]["nodeName"] = json!(format!("worker-{i}"));
                })
            })
            .collect(),
    );
    let r = run_with(
        &w,
        &p,
        3,
        &VersionedKinds::default(),
        VERSION_IGNORED,
        &nodes,
    );
    let counts: Vec<i32> = ["subset-a", "subset-b", "subset-c"]
        .iter()
        .map(|s| r.subset(s).replicas)
        .collect();
    assert_eq!(counts, vec![1, 1, 1]);
    assert!(r.out.deletion_costs.iter().all(|c| c.cost > 0) && r.out.deletion_costs.len() == 3);
}

#[test]
fn match_subset_scores() {
    // TestMatchSubset, missingReplicas 0.
    let subset: crate::api::v1beta1::WorkloadSpreadSubset = serde_json::from_value(json!({"name": "s",
        "requiredNodeSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        "preferredNodeSelector": [{"weight": 100, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}],
        "tolerations": [{"key": "t", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "patch": {"metadata": {"labels": {"l": "v"}, "annotations": {"a": "v"}}}})).unwrap();
    let n = node(
        "n",
        json!({"zone": "a", "disk": "ssd"}),
        json!([{"key": "t", "value": "v", "effect": "NoSchedule"}]),
    );
    let has_patch: Pod = serde_json::from_value(with(pod("p"), |p| {
        p["metadata"]["labels"]["l"] = json!("v");
        p["metadata"]["annotations"] = json!({"a": "v"});
    }))
    .unwrap();
    let label_differs: Pod = serde_json::from_value(with(pod("p"), |p| {
        p["metadata"]["labels"]["l"] = json!("x");
    }))
    .unwrap();
    assert_eq!(subset_score(&has_patch, &n, &subset, 0), Some(10010));
    assert_eq!(subset_score(&label_differs, &n, &subset, 0), Some(10000));
    let other_pref = node(
        "n",
        json!({"zone": "a", "disk": "hdd"}),
        json!([{"key": "t", "value": "v", "effect": "NoSchedule"}]),
    );
    assert_eq!(subset_score(&has_patch, &other_pref, &subset, 0), Some(10));
    let wrong_zone = node(
        "n",
        json!({"zone": "b", "disk": "ssd"}),
        json!([{"key": "t", "value": "v", "effect": "NoSchedule"}]),
    );
    assert_eq!(subset_score(&has_patch, &wrong_zone, &subset, 0), None);
    let other_taint = node(
        "n",
        json!({"zone": "a"}),
        json!([{"key": "t", "value": "w", "effect": "NoSchedule"}]),
    );
    assert_eq!(subset_score(&has_patch, &other_taint, &subset, 0), None);
}

//! Status math: replicas and missing replicas per subset, per version, for custom
//! workloads, in the spec's subset order.

use super::*;

#[test]
fn reconcile_basic_counts_and_costs() {
    // TestWorkloadSpreadReconcile cases 1-6 and 16.
    let r = run(
        &ws(
            one_subset(json!(5)),
            json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5}]}),
        ),
        &[],
        0,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (
            a.missing_replicas,
            a.replicas,
            r.out.status.observed_generation
        ),
        (5, 0, 10)
    );
    assert!(a.creating_pods.is_empty() && a.deleting_pods.is_empty());

    let two =
        json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b", "maxReplicas": 5}]);
    let r = run(&ws(two.clone(), json!({})), &[], 10);
    assert_eq!(
        (
            r.subset("subset-a").missing_replicas,
            r.subset("subset-b").missing_replicas
        ),
        (5, 5)
    );

    let p = pods(vec![
        in_subset(pod("test-pod-0"), "subset-a"),
        in_subset(pod("test-pod-1"), "subset-b"),
    ]);
    let r = run(&ws(two, json!({})), &p, 10);
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (1, 4)
    );
    assert_eq!(
        (
            r.subset("subset-b").replicas,
            r.subset("subset-b").missing_replicas
        ),
        (1, 4)
    );
    assert_eq!(
        (r.cost("test-pod-0"), r.cost("test-pod-1")),
        (Some(200), Some(100))
    );

    let one = pods(vec![in_subset(pod("test-pod-0"), "subset-a")]);
    let r = run(&ws(one_subset(json!(5)), json!({})), &one, 10);
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.cost("test-pod-0")
        ),
        (1, 4, Some(100))
    );
    assert_eq!(
        run(&ws(one_subset(json!("100%")), json!({})), &one, 5)
            .subset("subset-a")
            .missing_replicas,
        4
    );
    assert_eq!(
        run(&ws(one_subset(json!("80%")), json!({})), &one, 5)
            .subset("subset-a")
            .missing_replicas,
        3
    );

    let five = pods(
        (0..5)
            .map(|i| in_subset(pod(&format!("test-pod-{i}")), "subset-a"))
            .collect(),
    );
    let r = run(&ws(one_subset(json!(3)), json!({})), &five, 10);
    let costs: Vec<Option<i64>> = (0..5).map(|i| r.cost(&format!("test-pod-{i}"))).collect();
    assert_eq!(
        costs,
        vec![Some(-100), Some(-100), Some(100), Some(100), Some(100)]
    );
    assert_eq!(
        (
            r.subset("subset-a").missing_replicas,
            r.subset("subset-a").replicas
        ),
        (0, 5)
    );
}

#[test]
fn reconcile_multiple_versions() {
    // Case 15: a (max 3), b (nil); pods 0-5 in a, 6-9 in b; even pods old, odd pods new.
    let subsets = json!([{"name": "subset-a", "maxReplicas": 3}, {"name": "subset-b"}]);
    let p = pods(
        (0..10)
            .map(|i| {
                let subset = if i < 6 { "subset-a" } else { "subset-b" };
                let version = if i % 2 == 0 {
                    "oldVersion"
                } else {
                    "newVersion"
                };
                with(in_subset(pod(&format!("test-pod-{i}")), subset), |p| {
                    p["metadata"]["labels"]["pod-template-hash"] = json!(version);
                })
            })
            .collect(),
    );
    let kinds = VersionedKinds::new(["deployment", "replicaset", "cloneset"]);
    let r = run_with(
        &ws(subsets, json!({})),
        &p,
        10,
        &kinds,
        "newVersion",
        &BTreeMap::new(),
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (6, 0)
    );
    assert_eq!(
        (
            r.subset("subset-b").replicas,
            r.subset("subset-b").missing_replicas
        ),
        (4, -1)
    );
    for v in ["oldVersion", "newVersion"] {
        let s = &r.out.status.versioned_subset_statuses[v];
        assert_eq!(
            (
                s[0].replicas,
                s[0].missing_replicas,
                s[1].replicas,
                s[1].missing_replicas
            ),
            (3, 0, 2, -1),
            "{v}"
        );
    }
    let cost = |i: usize| r.cost(&format!("test-pod-{i}"));
    assert_eq!([cost(0), cost(2), cost(4)], [Some(100); 3]);
    assert_eq!([cost(6), cost(8)], [Some(200); 2]);
    assert_eq!([cost(1), cost(3), cost(5)], [Some(200); 3]);
    assert_eq!([cost(7), cost(9)], [Some(100); 2]);
}

#[test]
fn reconcile_custom_workloads_have_no_cost() {
    // Cases 17-19: custom kinds get counted with the replicas the caller resolved.
    let custom = |filter: Value| -> WorkloadSpread {
        serde_json::from_value(json!({"metadata": {"name": "test-workloadSpread", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": "mock.kruise.io/v1", "kind": "GameServerSet", "name": "g"},
                "targetFilter": filter,
                "subsets": [{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b", "maxReplicas": "50%"}]}})).unwrap()
    };
    let p = pods(vec![
        in_subset(pod("test-pod-0"), "subset-a"),
        in_subset(pod("test-pod-1"), "subset-a"),
    ]);
    let r = run(&custom(json!(null)), &p, 14);
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.subset("subset-b").missing_replicas
        ),
        (2, 3, 7)
    );
    assert!(r.out.deletion_costs.is_empty());
    let selected = pods(vec![
        with(in_subset(pod("test-pod-0"), "subset-a"), |p| {
            p["metadata"]["labels"]["selected"] = json!("true");
        }),
        in_subset(pod("test-pod-1"), "subset-a"),
    ]);
    let filter = json!({"selector": {"matchLabels": {"selected": "true"}}, "replicasPathList": ["spec.revisionHistoryLimit"]});
    let r = run(&custom(filter.clone()), &selected, 18);
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.subset("subset-b").missing_replicas
        ),
        (1, 4, 9)
    );
    let r = run(&custom(filter), &selected, 0);
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.subset("subset-b").missing_replicas
        ),
        (1, 4, 0)
    );
}

#[test]
fn subset_order_follows_spec() {
    // TestUpdateSubsetSequence
    let w = ws(
        json!([{"name": "subset-b", "maxReplicas": 5}, {"name": "subset-a", "maxReplicas": 5}]),
        json!({"subsetStatuses": [
            {"name": "subset-a", "replicas": 0, "missingReplicas": 4, "creatingPods": {"test-pod-0": ago(1)}},
            {"name": "subset-b", "replicas": 0, "missingReplicas": 4, "creatingPods": {"test-pod-1": ago(1)}}]}),
    );
    let p = pods(vec![
        in_subset(pod("test-pod-0"), "subset-a"),
        in_subset(pod("test-pod-1"), "subset-b"),
    ]);
    let r = run(&w, &p, 5);
    let names: Vec<&str> = r
        .out
        .status
        .subset_statuses
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, vec!["subset-b", "subset-a"]);
    for s in &r.out.status.subset_statuses {
        assert_eq!((s.missing_replicas, s.creating_pods.len()), (4, 0));
    }
}

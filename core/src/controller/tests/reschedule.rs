//! Adaptive rescheduling: the `Schedulable` condition, unschedulable pods to delete and
//! the hold before a subset is schedulable again.

use super::*;

#[test]
fn reschedule_subset() {
    // TestRescheduleSubset: a (max 5), b (nil), Adaptive 5s.
    let adaptive = |subsets_status: Value| -> WorkloadSpread {
        let mut w = ws(
            json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b"}]),
            subsets_status,
        );
        w.spec.schedule_strategy = serde_json::from_value(
            json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 5}}),
        )
        .unwrap();
        w
    };
    let cond = |r: &Run, s: &str| {
        r.subset(s)
            .condition("Schedulable")
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let fixed = ws(
        json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b"}]),
        json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5, "conditions": [{"type": "Schedulable", "status": "True", "reason": "Sufficient"}]}]}),
    );
    assert!(run(&fixed, &[], 5).subset("subset-a").conditions.is_empty());
    let r = run(&adaptive(json!({})), &[], 5);
    assert_eq!(
        cond(&r, "subset-a"),
        Some(("True".into(), "Sufficient".into()))
    );
    assert_eq!(
        cond(&r, "subset-b"),
        Some(("True".into(), "Sufficient".into()))
    );
    let stuck = |n: &str| {
        with(in_subset(pod(n), "subset-a"), |p| {
            p["spec"]["nodeName"] = json!(null);
            p["metadata"]["creationTimestamp"] = json!(ago(60));
            p["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        })
    };
    let r = run(
        &adaptive(json!({})),
        &pods(vec![stuck("p1"), stuck("p2")]),
        5,
    );
    assert_eq!(
        cond(&r, "subset-a"),
        Some(("False".into(), "PodUnschedulable".into()))
    );
    assert_eq!(
        cond(&r, "subset-b"),
        Some(("True".into(), "Sufficient".into()))
    );
    assert_eq!(r.out.pods_to_delete, vec!["p1", "p2"]);
    let held = |ltt: i64| {
        json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5,
        "conditions": [{"type": "Schedulable", "status": "False", "reason": "PodUnschedulable", "lastTransitionTime": ago(ltt)}]}]})
    };
    let r = run(&adaptive(held(240)), &[], 5);
    assert_eq!(
        cond(&r, "subset-a"),
        Some(("False".into(), "PodUnschedulable".into()))
    );
    assert_eq!(r.out.requeue_after.map(|d| d.as_secs()), Some(60));
    let r = run(&adaptive(held(600)), &[], 5);
    assert_eq!(
        cond(&r, "subset-a"),
        Some(("True".into(), "Sufficient".into()))
    );
    assert_eq!(r.out.events[0].reason, "RecoverSchedulable");
}

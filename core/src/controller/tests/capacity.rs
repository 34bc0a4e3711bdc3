//! Issue #42: rescheduling on the provisioner's signals, recovery on room.

use super::*;
use crate::controller::capacity::{Capacity, Cause, Room, Signal, SignalKind};
use k8s_openapi::jiff::SignedDuration;

fn adaptive(status: Value) -> WorkloadSpread {
    let mut w = ws(
        json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b"}]),
        status,
    );
    w.spec.schedule_strategy = serde_json::from_value(
        json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30}}),
    )
    .unwrap();
    w
}

/// Pending and Unschedulable in subset-a, created `age` seconds ago.
fn stuck(name: &str, age: i64) -> Value {
    with(in_subset(pod(name), "subset-a"), |p| {
        p["spec"]["nodeName"] = json!(null);
        p["metadata"]["uid"] = json!(format!("uid-{name}"));
        p["metadata"]["creationTimestamp"] = json!(ago(age));
        p["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    })
}

fn signal(kind: SignalKind, reason: &str, age: i64) -> Signal {
    Signal {
        kind,
        reason: reason.into(),
        source: "cluster-autoscaler".into(),
        message: "pod didn't trigger scale-up".into(),
        at: now() - SignedDuration::from_secs(age),
    }
}

fn run_capacity(ws: &WorkloadSpread, pods: &[Pod], capacity: &Capacity) -> ReconcileOutput {
    let options = ReconcileOptions::default();
    let stamped = StampedPlaceholders::of(ws);
    reconcile(&ReconcileInput {
        ws,
        pods,
        workload_replicas: 5,
        latest_version: VERSION_IGNORED,
        nodes: &BTreeMap::new(),
        versioned_kinds: &VersionedKinds::default(),
        now: now(),
        options: &options,
        placeholders: stamped.view(now()),
        capacity,
    })
}

fn condition(out: &ReconcileOutput, subset: &str) -> (String, String) {
    let c = out
        .status
        .subset_statuses
        .iter()
        .find(|s| s.name == subset)
        .and_then(|s| s.condition("Schedulable"))
        .unwrap();
    (c.status.clone(), c.message.clone())
}

fn with_signal(pod: &str, s: Signal) -> Capacity {
    Capacity {
        signals: BTreeMap::from([(pod.to_string(), s)]),
        poll: Some(SignedDuration::from_secs(2)),
        ..Default::default()
    }
}

#[test]
fn no_capacity_moves_the_pod_at_once_and_says_why() {
    let ws = adaptive(json!({}));
    let pods = pods(vec![stuck("p1", 5), stuck("p2", 5)]);
    // Without signals: both wait for the 30 s timer (and nothing is polled).
    let out = run_capacity(&ws, &pods, &Capacity::NONE);
    assert!(out.pods_to_delete.is_empty());
    assert_eq!(out.requeue_after.map(|d| d.as_secs()), Some(25));
    // cluster-autoscaler said no for p1: p1 moves now; p2 still waits, polled.
    let capacity = with_signal("p1", signal(SignalKind::NoCapacity, "NotTriggerScaleUp", 1));
    let out = run_capacity(&ws, &pods, &capacity);
    assert_eq!(out.pods_to_delete, ["p1"]);
    // Deleted only as the pod judged stuck (a uid precondition).
    assert_eq!(out.reschedule_uids, [Some("uid-p1".to_string())]);
    assert_eq!(
        out.reschedule_causes,
        [Cause::NoCapacity {
            reason: "NotTriggerScaleUp".into(),
            source: "cluster-autoscaler".into()
        }]
    );
    assert_eq!(
        condition(&out, "subset-a"),
        (
            "False".into(),
            "no capacity: cluster-autoscaler said NotTriggerScaleUp".into()
        )
    );
    assert_eq!(out.requeue_after.map(|d| d.as_secs()), Some(2));
}

#[test]
fn coming_capacity_is_waited_for_up_to_the_bound() {
    let ws = adaptive(json!({}));
    let pods = pods(vec![stuck("p1", 45)]);
    let mut capacity = with_signal(
        "p1",
        signal(SignalKind::CapacityComing, "TriggeredScaleUp", 40),
    );
    // Not opted in: the critical timer (30 s) still decides.
    let out = run_capacity(&ws, &pods, &capacity);
    assert_eq!(out.pods_to_delete, ["p1"]);
    // Deleted only as the pod judged stuck (a uid precondition).
    assert_eq!(out.reschedule_uids, [Some("uid-p1".to_string())]);
    assert_eq!(out.reschedule_causes, [Cause::Timer]);
    // Opted in (120 s): waits, schedulable, saying for what.
    capacity.wait_bound = Some(SignedDuration::from_secs(120));
    let out = run_capacity(&ws, &pods, &capacity);
    assert!(out.pods_to_delete.is_empty());
    assert_eq!(
        condition(&out, "subset-a"),
        (
            "True".into(),
            "waiting for capacity: TriggeredScaleUp".into()
        )
    );
    assert_eq!(out.requeue_after.map(|d| d.as_secs()), Some(2));
    assert_eq!(out.waiting_for_capacity, ["p1"]);
    // Past the bound: moves, and says the wait expired.
    let late = self::pods(vec![stuck("p1", 121)]);
    let out = run_capacity(&ws, &late, &capacity);
    assert_eq!(
        out.reschedule_causes,
        [Cause::WaitExpired {
            reason: "TriggeredScaleUp".into()
        }]
    );
}

/// Held `since` seconds ago with `message`.
fn held(since: i64, message: &str) -> WorkloadSpread {
    adaptive(
        json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5,
        "conditions": [{"type": "Schedulable", "status": "False", "reason": "PodUnschedulable",
            "lastTransitionTime": ago(since), "message": message}]}]}),
    )
}

#[test]
fn a_held_subset_comes_back_when_a_node_has_room_not_before() {
    // Held 70 s: past the floor of 2 subsets × 30 s, within the 300 s hold.
    let held = held(70, "");
    let rooms = |room: Room| Capacity {
        rooms: BTreeMap::from([("subset-a".to_string(), room)]),
        ..Default::default()
    };
    for room in [Room::Full { nodes: 3 }, Room::Unknown] {
        let out = run_capacity(&held, &[], &rooms(room.clone()));
        assert_eq!(condition(&out, "subset-a").0, "False", "{room:?}");
        assert_eq!(out.recovered_on_capacity, 0);
    }
    let fits = rooms(Room::Fits { node: "a-3".into() });
    let out = run_capacity(&held, &[], &fits);
    assert_eq!(
        condition(&out, "subset-a"),
        (
            "True".into(),
            "recovered on capacity: node a-3 has room for the workload's pod".into()
        )
    );
    assert_eq!(out.recovered_on_capacity, 1);
    assert!(
        out.events[0].message.contains("node a-3 has room"),
        "{:?}",
        out.events
    );
}

/// Hysteresis: no early recovery before a rescheduled pod could reach a later subset,
/// while a pod of the subset still waits, or right after an early recovery failed —
/// which a failure after an early recovery records.
#[test]
fn early_recovery_has_hysteresis() {
    use crate::controller::status::EARLY_RECOVERY_FAILED;
    let fits = Capacity {
        rooms: BTreeMap::from([("subset-a".to_string(), Room::Fits { node: "a-3".into() })]),
        ..Default::default()
    };
    let early =
        |ws: &WorkloadSpread, pods: &[Pod]| run_capacity(ws, pods, &fits).recovered_on_capacity;
    assert_eq!(
        early(&held(70, ""), &[]),
        1,
        "past the floor, nothing waiting"
    );
    assert_eq!(early(&held(20, ""), &[]), 0, "within 2 × 30 s");
    assert_eq!(
        early(&held(70, ""), &pods(vec![stuck("p1", 5)])),
        0,
        "a pod waits"
    );
    assert_eq!(
        early(&held(70, EARLY_RECOVERY_FAILED), &[]),
        0,
        "the last early recovery failed"
    );
    let after_hold = run_capacity(&held(301, EARLY_RECOVERY_FAILED), &[], &fits);
    assert_eq!(
        condition(&after_hold, "subset-a").0,
        "True",
        "the whole hold ends it"
    );
    // A failure right after an early recovery marks the next hold.
    let recovered = adaptive(
        json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5,
        "conditions": [{"type": "Schedulable", "status": "True", "reason": "Sufficient",
            "lastTransitionTime": ago(10), "message": "recovered on capacity: node a-3 has room for the workload's pod"}]}]}),
    );
    let out = run_capacity(&recovered, &pods(vec![stuck("p1", 40)]), &Capacity::NONE);
    let (status, message) = condition(&out, "subset-a");
    assert_eq!(status, "False");
    assert!(message.contains(EARLY_RECOVERY_FAILED), "{message}");
}

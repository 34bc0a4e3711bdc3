use super::*;
use crate::api::v1beta1::WorkloadSpreadStatus;
use serde_json::json;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn ws(subsets: Value, annotation: Option<&str>) -> WorkloadSpread {
    let mut v = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": subsets}});
    if let Some(a) = annotation {
        v["metadata"]["annotations"] = json!({REBALANCE_ANNOTATION: a});
    }
    serde_json::from_value(v).unwrap()
}

fn percent() -> Value {
    json!([{"name": "a", "maxReplicas": "30%"}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}])
}

/// A Ready pod of version h1 in `subset` ("" = no annotation) with deletion cost `cost`.
fn pod(name: &str, subset: &str, cost: i64) -> Pod {
    let mut annotations = json!({POD_DELETION_COST_ANNOTATION: cost.to_string()});
    if !subset.is_empty() {
        annotations["apps.kruise.io/matched-workloadspread"] =
            json!(format!(r#"{{"name":"web","subset":"{subset}"}}"#));
    }
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations,
        "labels": {"app": "web", "pod-template-hash": "h1"},
        "creationTimestamp": "2024-05-01T09:00:00Z",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-h1", "uid": "rs", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap()
}

/// Pods per subset: `spread[i]` pods in subset i (names `<subset>-<k>`, costs rising
/// with k), then `unplaced` pods without a subset.
fn pods(ws: &WorkloadSpread, spread: &[usize], unplaced: usize) -> Vec<Pod> {
    let mut out = vec![];
    for (s, &n) in ws.spec.subsets.iter().zip(spread) {
        for k in 0..n {
            out.push(pod(&format!("{}-{k}", s.name), &s.name, 100 * k as i64));
        }
    }
    for k in 0..unplaced {
        out.push(pod(&format!("x-{k}"), "", -1000 + k as i64));
    }
    out
}

fn deployment(replicas: i64) -> Value {
    json!({"kind": "Deployment", "metadata": {"generation": 3},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 3, "replicas": replicas, "updatedReplicas": replicas}})
}

fn status(ws: &WorkloadSpread, unschedulable: &[&str]) -> WorkloadSpreadStatus {
    let subsets: Vec<Value> = ws
        .spec
        .subsets
        .iter()
        .map(|s| {
            let schedulable = if unschedulable.contains(&s.name.as_str()) {
                "False"
            } else {
                "True"
            };
            json!({"name": s.name, "missingReplicas": 0,
                "conditions": [{"type": "Schedulable", "status": schedulable}]})
        })
        .collect();
    serde_json::from_value(json!({"subsetStatuses": subsets})).unwrap()
}

struct Case {
    name: &'static str,
    ws: WorkloadSpread,
    spread: Vec<usize>,
    unplaced: usize,
    replicas: i32,
    unschedulable: &'static [&'static str],
    max: usize,
    evicted: &'static [&'static str],
    hold: Option<Hold>,
}

fn run(
    case: &Case,
    tweak: impl Fn(&mut Vec<Pod>, &mut WorkloadSpreadStatus, &mut Value),
) -> Rebalance {
    run_with_rooms(case, tweak, &BTreeMap::new())
}

fn run_with_rooms(
    case: &Case,
    tweak: impl Fn(&mut Vec<Pod>, &mut WorkloadSpreadStatus, &mut Value),
    rooms: &BTreeMap<String, Room>,
) -> Rebalance {
    let mut pods = pods(&case.ws, &case.spread, case.unplaced);
    let mut status = status(&case.ws, case.unschedulable);
    let mut workload = deployment(i64::from(case.replicas));
    tweak(&mut pods, &mut status, &mut workload);
    let kinds = VersionedKinds::default();
    plan_rebalance(&RebalanceInput {
        ws: &case.ws,
        status: &status,
        pods: &pods,
        workload: Some(&workload),
        workload_replicas: case.replicas,
        latest_version: "h1",
        versioned_kinds: &kinds,
        costs: &[],
        adoptions: 0,
        rules: Rules::Planned,
        max_evictions: case.max,
        enabled: enabled(&case.ws, false),
        now: now(),
        rooms,
    })
}

/// Issue #42 (4): no pod is moved into a subset where no node has room for it; a
/// subset with room, or not known, takes it as before.
#[test]
fn nothing_is_evicted_into_a_subset_without_room() {
    let case = Case {
        name: "2/5/3 at 10: c's surplus would go to a",
        ws: ws(percent(), Some("true")),
        spread: vec![2, 5, 3],
        unplaced: 0,
        replicas: 10,
        unschedulable: &[],
        max: 5,
        evicted: &["c-0"],
        hold: None,
    };
    let rooms = |room: Room| BTreeMap::from([("a".to_string(), room)]);
    let full = run_with_rooms(&case, |_, _, _| {}, &rooms(Room::Full { nodes: 2 }));
    assert!(full.evictions.is_empty(), "{full:?}");
    assert_eq!(full.hold, Some(Hold::NoRoom("a".into())));
    assert!(full
        .hold
        .unwrap()
        .to_string()
        .contains("no node of subset a has room"));
    // Not known (a read failed, too many nodes): no eviction either.
    let unknown = run_with_rooms(&case, |_, _, _| {}, &rooms(Room::Unknown));
    assert_eq!(unknown.hold, Some(Hold::NoRoom("a".into())), "{unknown:?}");
    let fits = run_with_rooms(
        &case,
        |_, _, _| {},
        &rooms(Room::Fits { node: "a-3".into() }),
    );
    let evicted: Vec<&str> = fits.evictions.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(evicted, case.evicted, "{fits:?}");
    // Room is known for one pod: one replacement per plan goes there, however many
    // the interval allows (0/5/5 at 10 wants 3 in a).
    // Another subset being full does not matter.
    let b_full = BTreeMap::from([("b".to_string(), Room::Full { nodes: 1 })]);
    assert_eq!(
        run_with_rooms(&case, |_, _, _| {}, &b_full).evictions.len(),
        1
    );
    let many = Case {
        name: "0/5/5 at 10: three to a, room for one",
        spread: vec![0, 5, 5],
        ..case
    };
    let one = run_with_rooms(
        &many,
        |_, _, _| {},
        &rooms(Room::Fits { node: "a-3".into() }),
    );
    assert_eq!(one.evictions.len(), 1, "{one:?}");
    assert_eq!(
        run(&many, |_, _, _| {}).evictions.len(),
        3,
        "rooms not read: not limited"
    );
}

/// Issue #27 (2): what is evicted, table-driven.
#[test]
fn surplus_pods_are_evicted_lowest_cost_first_where_a_replacement_lands_below_its_target() {
    let on = Some("true");
    let cases = [
        Case {
            name: "annotation absent: off",
            ws: ws(percent(), None),
            spread: vec![4, 5, 1],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &[],
            hold: Some(Hold::Off),
        },
        Case {
            name: "annotation false: off",
            ws: ws(percent(), Some("false")),
            spread: vec![4, 5, 1],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &[],
            hold: Some(Hold::Off),
        },
        Case {
            name: "on plan",
            ws: ws(percent(), on),
            spread: vec![3, 5, 2],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &[],
            hold: Some(Hold::OnPlan),
        },
        Case {
            name: "burst 4/5/1 at 10: a's cheapest pod",
            ws: ws(percent(), on),
            spread: vec![4, 5, 1],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &["a-0"],
            hold: None,
        },
        Case {
            name: "6/12/2 at 20: b's two cheapest, a and c take them",
            ws: ws(percent(), on),
            spread: vec![6, 12, 2],
            unplaced: 0,
            replicas: 20,
            unschedulable: &[],
            max: 5,
            evicted: &["b-0", "b-1"],
            hold: None,
        },
        Case {
            name: "6/9/0 at 15: a's and b's surplus, the cheapest first, at most 1",
            ws: ws(percent(), on),
            spread: vec![6, 9, 0],
            unplaced: 0,
            replicas: 15,
            unschedulable: &[],
            max: 1,
            evicted: &["a-0"],
            hold: None,
        },
        Case {
            name: "interval used up",
            ws: ws(percent(), on),
            spread: vec![4, 5, 1],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 0,
            evicted: &[],
            hold: Some(Hold::RateLimited),
        },
        Case {
            name: "maximum lowered 50% → 30%: a's surplus moves to b",
            ws: ws(
                json!([{"name": "a", "maxReplicas": "30%"}, {"name": "b"}]),
                on,
            ),
            spread: vec![5, 5],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &["a-0", "a-1"],
            hold: None,
        },
        Case {
            name: "a unschedulable (adaptive): b's pods stay",
            ws: ws(json!([{"name": "a", "maxReplicas": 3}, {"name": "b"}]), on),
            spread: vec![0, 10],
            unplaced: 0,
            replicas: 10,
            unschedulable: &["a"],
            max: 5,
            evicted: &[],
            hold: Some(Hold::OnPlan),
        },
        Case {
            name: "a schedulable again: they come back",
            ws: ws(json!([{"name": "a", "maxReplicas": 3}, {"name": "b"}]), on),
            spread: vec![0, 10],
            unplaced: 0,
            replicas: 10,
            unschedulable: &[],
            max: 5,
            evicted: &["b-0", "b-1", "b-2"],
            hold: None,
        },
        Case {
            name: "pods outside every subset go first (lowest cost) where a subset has room",
            ws: ws(
                json!([{"name": "a", "maxReplicas": 3}, {"name": "b", "maxReplicas": 3}]),
                on,
            ),
            spread: vec![3, 1],
            unplaced: 2,
            replicas: 6,
            unschedulable: &[],
            max: 5,
            evicted: &["x-0", "x-1"],
            hold: None,
        },
        Case {
            name: "pods outside every subset where no subset has room: on plan",
            ws: ws(
                json!([{"name": "a", "maxReplicas": 3}, {"name": "b", "maxReplicas": 3}]),
                on,
            ),
            spread: vec![3, 3],
            unplaced: 2,
            replicas: 8,
            unschedulable: &[],
            max: 5,
            evicted: &[],
            hold: Some(Hold::OnPlan),
        },
    ];
    for case in &cases {
        let plan = run(case, |_, _, _| {});
        let evicted: Vec<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
        assert_eq!(evicted, case.evicted, "{}: {plan:?}", case.name);
        assert_eq!(plan.hold, case.hold, "{}", case.name);
    }
}

/// A burst left 4/5/1 at 10 replicas (planned 3/5/2): a's cheapest pod is the surplus.
fn burst() -> Case {
    Case {
        name: "burst 4/5/1",
        ws: ws(percent(), Some("true")),
        spread: vec![4, 5, 1],
        unplaced: 0,
        replicas: 10,
        unschedulable: &[],
        max: 5,
        evicted: &["a-0"],
        hold: None,
    }
}

/// Nothing is evicted while the workload is not steady.
#[test]
fn nothing_is_evicted_while_the_workload_is_not_steady() {
    let case = burst();
    type Tweak = fn(&mut Vec<Pod>, &mut WorkloadSpreadStatus, &mut Value);
    type Expected = fn(&Hold) -> bool;
    let cases: [(&str, Tweak, Expected); 8] = [
        (
            "generation not observed",
            |_, _, w| w["metadata"]["generation"] = json!(4),
            |h| matches!(h, Hold::RollingOut(_)),
        ),
        (
            "pods not updated",
            |_, _, w| w["status"]["updatedReplicas"] = json!(5),
            |h| matches!(h, Hold::RollingOut(_)),
        ),
        (
            "a pod of another version",
            |p, _, _| {
                p[0].metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert("pod-template-hash".into(), "h0".into());
            },
            |h| matches!(h, Hold::RollingOut(_)),
        ),
        (
            "one pod fewer than replicas",
            |p, _, _| {
                p.pop();
            },
            |h| {
                *h == Hold::PodCount {
                    active: 9,
                    replicas: 10,
                }
            },
        ),
        (
            "a pod evicted, its replacement not created yet",
            |p, _, _| {
                p[0].metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
            },
            |h| {
                *h == Hold::PodCount {
                    active: 9,
                    replicas: 10,
                }
            },
        ),
        (
            "a pod not ready",
            |p, _, _| {
                p[3].status.as_mut().unwrap().conditions = Some(vec![]);
            },
            |h| matches!(h, Hold::NotReady(_)),
        ),
        (
            "an admission in flight",
            |_, s, _| {
                s.subset_statuses[1].creating_pods.insert(
                    "new".into(),
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
                );
            },
            |h| matches!(h, Hold::InFlight(_)),
        ),
        (
            "a StatefulSet",
            |_, _, _| {},
            |h| matches!(h, Hold::Unsupported(_)),
        ),
    ];
    assert_eq!(
        run(&case, |_, _, _| {}).evictions.len(),
        1,
        "the steady case evicts"
    );
    for (name, tweak, expected) in cases {
        let mut case = Case {
            ws: case.ws.clone(),
            spread: case.spread.clone(),
            hold: None,
            ..case
        };
        if name == "a StatefulSet" {
            case.ws.spec.target_ref.as_mut().unwrap().kind = "StatefulSet".into();
        }
        let plan = run(&case, tweak);
        assert!(plan.evictions.is_empty(), "{name}: {plan:?}");
        assert!(
            plan.hold.as_ref().is_some_and(expected),
            "{name}: {:?}",
            plan.hold
        );
        let _ = case.name;
    }
}

/// An unready pod that is itself surplus is evicted (it costs no availability); an
/// unready pod elsewhere still holds every eviction back.
#[test]
fn an_unready_surplus_pod_is_evicted_and_other_unready_pods_hold() {
    let case = burst();
    let plan = run(&case, |p, _, _| {
        p[0].status.as_mut().unwrap().conditions = Some(vec![]);
    });
    let evicted: Vec<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(evicted, ["a-0"], "a-0, unready, is a's surplus: {plan:?}");
    let plan = run(&case, |p, _, _| {
        p[0].status.as_mut().unwrap().conditions = Some(vec![]);
        p[5].status.as_mut().unwrap().conditions = Some(vec![]);
    });
    assert!(plan.evictions.is_empty(), "{plan:?}");
    assert_eq!(plan.hold, Some(Hold::NotReady("b-1".into())));
}

/// Evicting what the plan says and admitting each replacement with the claim rule
/// converges on the target, with exactly as many evictions as pods above it.
#[test]
fn repeated_rebalancing_converges_on_the_target() {
    let ws = ws(percent(), Some("true"));
    let starts: [(i32, [usize; 3]); 5] = [
        (10, [10, 0, 0]),
        (10, [4, 5, 1]),
        (20, [6, 12, 2]),
        (15, [6, 9, 0]),
        (7, [0, 0, 7]),
    ];
    for (replicas, start) in starts {
        let mut spread = start.to_vec();
        let mut evictions = 0;
        let target = planned_spread_holding(&ws, replicas as usize, &[]).subsets;
        let surplus: usize = spread
            .iter()
            .zip(&target)
            .map(|(c, t)| c.saturating_sub(*t))
            .sum();
        for _ in 0..50 {
            let case = Case {
                name: "",
                ws: ws.clone(),
                spread: spread.clone(),
                unplaced: 0,
                replicas,
                unschedulable: &[],
                max: 1,
                evicted: &[],
                hold: None,
            };
            let plan = run(&case, |_, _, _| {});
            let Some(e) = plan.evictions.first() else {
                break;
            };
            evictions += 1;
            let from = ws
                .spec
                .subsets
                .iter()
                .position(|s| Some(&s.name) == e.from.as_ref())
                .unwrap();
            let to = ws
                .spec
                .subsets
                .iter()
                .position(|s| Some(&s.name) == e.to.as_ref())
                .unwrap();
            spread[from] -= 1;
            spread[to] += 1;
        }
        assert_eq!(spread, target, "{replicas} replicas from {start:?}");
        assert_eq!(evictions, surplus, "{replicas} replicas from {start:?}");
    }
}

/// Issue #65: after a planned scale-in, rebalancing has nothing to do wherever the
/// scale-in landed on the plan (600 → 60: 18/30/12). Where no state within every
/// maximum is on plan, it moves one pod: 61 → 60 leaves 19/30/11 (no 60 of the 61 pods
/// are within, zone-c would need a 12th) and a's extra pod goes to c; 20 → 7 leaves
/// 3/3/1, within every maximum, off the plan 3/4/0 (from which 6 would leave a above
/// its maximum), and c's pod goes to b.
#[test]
fn after_a_planned_scale_in_rebalancing_moves_only_what_no_scale_in_could_place() {
    let ws = ws(percent(), Some("true"));
    // (from, to, spread the planner's scale-in leaves, evicted pod, its replacement)
    type Expected = (i32, i32, [usize; 3], Option<(&'static str, &'static str)>);
    let cases: [Expected; 3] = [
        (600, 60, [18, 30, 12], None),
        (61, 60, [19, 30, 11], Some(("a", "c"))),
        (20, 7, [3, 3, 1], Some(("c", "b"))),
    ];
    for (from, to, spread, moved) in cases {
        let steps = crate::plan::plan(&ws, &[from, to]);
        let landed: Vec<usize> = steps[1].subsets.iter().map(|s| s.pods).collect();
        assert_eq!(landed, spread, "{from} → {to}");
        let case = Case {
            name: "",
            ws: ws.clone(),
            spread: spread.to_vec(),
            unplaced: 0,
            replicas: to,
            unschedulable: &[],
            max: 1,
            evicted: &[],
            hold: None,
        };
        let plan = run(&case, |_, _, _| {});
        let got = plan
            .evictions
            .iter()
            .map(|e| (e.from.as_deref(), e.to.as_deref()))
            .collect::<Vec<_>>();
        match moved {
            None => {
                assert_eq!(got, [], "{from} → {to}");
                assert_eq!(plan.hold, Some(Hold::OnPlan), "{from} → {to}");
            }
            Some((out, into)) => assert_eq!(got, [(Some(out), Some(into))], "{from} → {to}"),
        }
    }
}

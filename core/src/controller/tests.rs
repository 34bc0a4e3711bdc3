//! Ported from `pkg/controller/workloadspread/*_test.go` (§5.5 of the reference spec).

use super::cost::subset_costs;
use super::grouping::subset_score;
use super::*;
use crate::api::{FAKE_SUBSET_NAME, POD_DELETION_COST_ANNOTATION, VERSION_IGNORED};
use k8s_openapi::jiff::ToSpan;
use serde_json::{json, Value};

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

#[test]
fn subset_pod_deletion_cost() {
    // TestSubsetPodDeletionCost: (subsets, index, max, pods) → costs (None = untouched).
    let running = |n: &str| pod(n);
    let unscheduled = |n: &str| {
        with(pod(n), |p| {
            p["spec"]["nodeName"] = json!(null);
            p["status"] = json!({"phase": "Pending"});
        })
    };
    let pending = |n: &str| {
        with(pod(n), |p| {
            p["status"] = json!({"phase": "Pending"});
        })
    };
    let unknown = |n: &str| {
        with(pod(n), |p| {
            p["status"] = json!({"phase": "Unknown"});
        })
    };
    let terminating = |n: &str| {
        with(pod(n), |p| {
            p["metadata"]["deletionTimestamp"] = json!("2024-05-01T09:59:00Z");
        })
    };
    let failed = |n: &str| {
        with(pod(n), |p| {
            p["status"]["phase"] = json!("Failed");
        })
    };
    let succeeded = |n: &str| {
        with(pod(n), |p| {
            p["status"]["phase"] = json!("Succeeded");
        })
    };
    let same = |k: usize| {
        (0..k)
            .map(|i| running(&format!("pod-{i}")))
            .collect::<Vec<_>>()
    };
    type Case = (i64, i64, Option<usize>, Vec<Value>, Vec<Option<i64>>);
    let cases: Vec<Case> = vec![
        (2, 0, Some(3), same(3), vec![Some(200); 3]),
        (2, 1, Some(3), same(3), vec![Some(100); 3]),
        (
            2,
            0,
            Some(3),
            same(4),
            vec![Some(-100), Some(200), Some(200), Some(200)],
        ),
        (
            2,
            1,
            Some(3),
            same(4),
            vec![Some(-200), Some(100), Some(100), Some(100)],
        ),
        (1, 0, Some(3), same(3), vec![Some(100); 3]),
        (1, 0, Some(3), same(2), vec![Some(100); 2]),
        (
            1,
            0,
            Some(1),
            same(3),
            vec![Some(-100), Some(-100), Some(100)],
        ),
        (
            1,
            0,
            Some(1),
            vec![
                terminating("pod-0"),
                running("pod-1"),
                running("pod-2"),
                running("pod-3"),
            ],
            vec![None, Some(-100), Some(-100), Some(100)],
        ),
        (1, 0, None, same(3), vec![Some(100); 3]),
        (
            1,
            0,
            Some(2),
            vec![
                unscheduled("pod-0"),
                running("pod-1"),
                running("pod-2"),
                pending("pod-3"),
                pending("pod-4"),
            ],
            vec![Some(-100), Some(100), Some(100), Some(-100), Some(-100)],
        ),
        (
            1,
            0,
            Some(2),
            vec![
                running("pod-0"),
                running("pod-1"),
                unscheduled("pod-2"),
                pending("pod-3"),
                unknown("pod-4"),
            ],
            vec![Some(100), Some(100), Some(-100), Some(-100), Some(-100)],
        ),
        (
            1,
            0,
            Some(2),
            vec![
                running("pod-0"),
                running("pod-1"),
                unscheduled("pod-2"),
                pending("pod-3"),
                terminating("pod-4"),
            ],
            vec![Some(100), Some(100), Some(-100), Some(-100), None],
        ),
        (
            1,
            0,
            Some(2),
            vec![
                running("pod-0"),
                running("pod-1"),
                unscheduled("pod-2"),
                terminating("pod-3"),
                pending("pod-4"),
            ],
            vec![Some(100), Some(100), Some(-100), None, Some(-100)],
        ),
        (
            1,
            0,
            Some(2),
            vec![
                running("pod-0"),
                running("pod-1"),
                unscheduled("pod-2"),
                failed("pod-3"),
                pending("pod-4"),
            ],
            vec![Some(100), Some(100), Some(-100), None, Some(-100)],
        ),
        (
            1,
            0,
            Some(2),
            vec![
                running("pod-0"),
                running("pod-1"),
                unscheduled("pod-2"),
                succeeded("pod-3"),
                pending("pod-4"),
            ],
            vec![Some(100), Some(100), Some(-100), None, Some(-100)],
        ),
    ];
    for (case, (n, idx, max, values, want)) in cases.into_iter().enumerate() {
        let owned = pods(values);
        let refs: Vec<&Pod> = owned.iter().collect();
        let active: Vec<usize> = (0..refs.len())
            .filter(|&i| crate::pods::is_active(refs[i]))
            .collect();
        let got: BTreeMap<usize, i64> = subset_costs(&refs, active, max, 0, idx, n)
            .into_iter()
            .collect();
        let got: Vec<Option<i64>> = (0..refs.len()).map(|i| got.get(&i).copied()).collect();
        assert_eq!(got, want, "case {}", case + 1);
    }
}

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

fn status_with(creating: Value, deleting: Value) -> Value {
    json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5, "creatingPods": creating, "deletingPods": deleting}]})
}

/// Reserved slots: a pod admitted into a placeholder is counted once (the placeholder
/// is dropped even before the host renames it); another placeholder is kept while
/// young, and a dead holder's old one is dropped after its TTL with no event (no pod was
/// expected).
#[test]
fn a_reserved_pod_is_counted_once_and_dead_placeholders_expire() {
    let reserved = with(in_subset(pod("test-pod-0"), "subset-a"), |p| {
        p["metadata"]["annotations"]["workloadspread.io/reservation"] = json!("~h1.0");
        p["metadata"]["labels"]["workloadspread.io/reservation"] = json!("h1.0");
    });
    let drop = crate::admission::reserve::PLACEHOLDER_DROP_SECONDS;
    let creating =
        json!({"~h1.0": ago(1), "~h1.1": ago(1), "~h2.0": ago(drop + 1), "test-pod-9": ago(1)});
    let r = run(
        &ws(one_subset(json!(5)), status_with(creating, json!({}))),
        &pods(vec![reserved]),
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        a.creating_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-9", "~h1.1"]
    );
    // 5 − 1 pod − 2 creating.
    assert_eq!((a.replicas, a.missing_replicas), (1, 2));
    assert!(r.out.events.is_empty(), "{:?}", r.out.events);
}

fn run_seeing(ws: &WorkloadSpread, pods: &[Pod], view: PlaceholderView<'_>) -> Run {
    let options = ReconcileOptions::default();
    let input = ReconcileInput {
        ws,
        pods,
        workload_replicas: 10,
        latest_version: VERSION_IGNORED,
        nodes: &BTreeMap::new(),
        versioned_kinds: &VersionedKinds::default(),
        now: now(),
        options: &options,
        placeholders: view,
    };
    Run {
        out: reconcile(&input),
    }
}

/// #26 items 1, 4, 5, 7: the controller ages a placeholder from when it first saw it (a
/// stamp an hour old from a host whose clock is behind expires nothing) and expires it
/// only after the drop window (a pod admitted into it may still be on its way); a pod
/// stands for a placeholder only in its own subset and when its label agrees with its
/// annotation (a copied or forged annotation frees nothing); a pod is counted once even
/// when an admission recorded it in another subset too.
#[test]
fn placeholders_expire_by_this_controllers_sightings_and_pods_stand_for_their_own() {
    use crate::admission::reserve::stale::Sightings;
    use crate::admission::reserve::{PLACEHOLDER_DROP_SECONDS, RESERVATION_LABEL};
    let two =
        json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b", "maxReplicas": 5}]);
    let status = json!({"subsetStatuses": [
        {"name": "subset-a", "replicas": 0, "missingReplicas": 5,
            "creatingPods": {"~h2.0": ago(3600), "~h2.1": ago(3600), "~h2.2": ago(3600), "test-pod-9": ago(1)}},
        {"name": "subset-b", "replicas": 0, "missingReplicas": 5, "creatingPods": {"test-pod-0": ago(1)}}]});
    let w = ws(two, status);
    let naming = |name: &str, subset: &str, annotation: &str, label: &str| {
        with(in_subset(pod(name), subset), |p| {
            p["metadata"]["annotations"]["workloadspread.io/reservation"] = json!(annotation);
            p["metadata"]["labels"][RESERVATION_LABEL] = json!(label);
        })
    };
    let pods = pods(vec![
        // Names another pod's key: frees nothing.
        naming("test-pod-0", "subset-a", "test-pod-9", "test-pod-9"),
        // Took ~h2.1: stands for it.
        naming("test-pod-1", "subset-a", "~h2.1", "h2.1"),
        // Its label disagrees (a copied annotation): stands for nothing.
        naming("test-pod-2", "subset-a", "~h2.2", "h9.9"),
        // In b: ~h2.0 of a is not its slot.
        naming("test-pod-3", "subset-b", "~h2.0", "h2.0"),
    ]);
    let keys =
        |r: &Run, s: &str| -> Vec<String> { r.subset(s).creating_pods.keys().cloned().collect() };
    let drop = PLACEHOLDER_DROP_SECONDS;
    // (what, seen this long ago, placeholders left in a)
    let cases: [(&str, i64, &[&str]); 3] = [
        (
            "seen just now: kept, whatever the stamp",
            0,
            &["~h2.0", "~h2.2"],
        ),
        (
            "seen 6 s ago: kept, a pod may be on its way",
            6,
            &["~h2.0", "~h2.2"],
        ),
        ("seen past the drop window: expired", drop + 1, &[]),
    ];
    for (what, seen_ago, left) in cases {
        let mut sightings = Sightings::default();
        sightings.observe(w.status.as_ref().unwrap(), now() - seen_ago.seconds());
        let view = PlaceholderView {
            sightings: &sightings,
            now: now(),
        };
        let r = run_seeing(&w, &pods, view);
        let mut want: Vec<String> = left.iter().map(|k| k.to_string()).collect();
        want.push("test-pod-9".into());
        want.sort();
        assert_eq!(keys(&r, "subset-a"), want, "{what}");
        // test-pod-0 counted in a: its entry in b is gone.
        assert!(keys(&r, "subset-b").is_empty(), "{what}");
        assert_eq!(
            (r.subset("subset-a").replicas, r.subset("subset-b").replicas),
            (3, 1),
            "{what}"
        );
        assert!(r.out.events.is_empty(), "{what}: {:?}", r.out.events);
        assert_eq!(r.out.expired_placeholders, 2 - left.len(), "{what}");
    }
}

#[test]
fn reconcile_creating_and_deleting_windows() {
    // TestWorkloadSpreadReconcile cases 7-14.
    let p0 = pods(vec![in_subset(pod("test-pod-0"), "subset-a")]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(2), "test-pod-1": ago(2)}),
                json!({}),
            ),
        ),
        &p0,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(a.missing_replicas, 3);
    assert_eq!(
        a.creating_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-1"]
    );

    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(60), "test-pod-1": ago(60)}),
                json!({}),
            ),
        ),
        &p0,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").missing_replicas,
            r.subset("subset-a").creating_pods.len()
        ),
        (4, 0)
    );
    assert_eq!(
        r.out.events,
        vec![Event::warning(
            "CreatePodFailed",
            "Pod ns/test-pod-1 was expected to be created but it wasn't".into()
        )]
    );

    let p01 = pods(vec![
        in_subset(pod("test-pod-0"), "subset-a"),
        in_subset(pod("test-pod-1"), "subset-a"),
    ]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(3), "test-pod-1": ago(3)}),
                json!({}),
            ),
        ),
        &p01,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.subset("subset-a").creating_pods.len()
        ),
        (2, 3, 0)
    );

    let mixed = pods(
        (0..5)
            .map(|i| {
                let p = in_subset(pod(&format!("test-pod-{i}")), "subset-a");
                match i {
                    2 | 3 => with(p, |p| {
                        p["status"]["phase"] = json!("Failed");
                    }),
                    4 => with(p, |p| {
                        p["status"]["phase"] = json!("Succeeded");
                    }),
                    _ => p,
                }
            })
            .collect(),
    );
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(3), "test-pod-1": ago(3)}),
                json!({}),
            ),
        ),
        &mixed,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (2, 3)
    );
    assert_eq!(
        r.out
            .deletion_costs
            .iter()
            .map(|c| c.pod.as_str())
            .collect::<Vec<_>>(),
        vec!["test-pod-0", "test-pod-1"]
    );

    let five = |f: &dyn Fn(usize, Value) -> Value| {
        pods(
            (0..5)
                .map(|i| f(i, in_subset(pod(&format!("test-pod-{i}")), "subset-a")))
                .collect(),
        )
    };
    let all = five(&|_, p| p);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(5), "test-pod-4": ago(5)}),
                json!({}),
            ),
        ),
        &all,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (5, 0)
    );
    assert_eq!(r.out.deletion_costs.len(), 5);

    let term4 = five(&|i, p| {
        if i == 4 {
            with(p, |p| {
                p["metadata"]["deletionTimestamp"] = json!(ago(1));
            })
        } else {
            p
        }
    });
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(5), "test-pod-4": ago(5)}),
                json!({"test-pod-4": ago(1)}),
            ),
        ),
        &term4,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (a.replicas, a.missing_replicas, a.deleting_pods.len()),
        (4, 1, 0)
    );
    assert_eq!(r.cost("test-pod-4"), None);

    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({}), json!({"test-pod-4": ago(1)})),
        ),
        &all,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (
            a.replicas,
            a.missing_replicas,
            a.deleting_pods
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
        ),
        (5, 1, vec!["test-pod-4"])
    );

    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(360), "test-pod-4": ago(360)}),
                json!({"test-pod-4": ago(960)}),
            ),
        ),
        &all,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (
            a.replicas,
            a.missing_replicas,
            a.deleting_pods.len(),
            a.creating_pods.len()
        ),
        (5, 0, 0, 0)
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

#[test]
fn requeue_delays() {
    // TestDelayReconcile
    let secs = |r: &Run| r.out.requeue_after.map(|d| d.as_secs());
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({"a": ago(3), "b": ago(1)}), json!({})),
        ),
        &[],
        10,
    );
    assert_eq!(secs(&r), Some(27));
    let p = pods(vec![
        in_subset(pod("p1"), "subset-a"),
        in_subset(pod("p2"), "subset-a"),
    ]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({}), json!({"p1": ago(3), "p2": ago(1)})),
        ),
        &p,
        10,
    );
    assert_eq!(secs(&r), Some(12));
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({"x": ago(2)}), json!({"p1": ago(3)})),
        ),
        &p,
        10,
    );
    assert_eq!(secs(&r), Some(12));
    assert_eq!(
        run(&ws(one_subset(json!(5)), json!({})), &[], 10)
            .out
            .requeue_after,
        None
    );
}

fn node(name: &str, labels: Value, taints: Value) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: serde_json::from_value(labels).unwrap(),
        taints: serde_json::from_value(taints).unwrap(),
    }
}

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

#[test]
fn fake_subset_and_removed_subsets() {
    // Pods of a removed subset land in the fake subset with the lowest cost (−100·(n+1)).
    let p = pods(vec![
        in_subset(pod("p1"), "gone"),
        in_subset(pod("p2"), "subset-a"),
    ]);
    let r = run(&ws(one_subset(json!(5)), json!({})), &p, 5);
    assert_eq!((r.cost("p1"), r.cost("p2")), (Some(-200), Some(100)));
    assert_eq!(r.subset("subset-a").replicas, 1);
    assert!(!r
        .out
        .status
        .subset_statuses
        .iter()
        .any(|s| s.name == FAKE_SUBSET_NAME));
}

#[test]
fn min_replicas_protects_subsets_on_scale_in() {
    // a (max 4, min 2), b (unlimited): b's pods are removed first, a keeps its minimum
    // above b's pods, and a's pods above the minimum go before b's.
    let w = ws(
        json!([{"name": "subset-a", "maxReplicas": 4, "minReplicas": 2}, {"name": "subset-b"}]),
        json!({}),
    );
    let mut values: Vec<Value> = (0..4)
        .map(|i| in_subset(pod(&format!("a{i}")), "subset-a"))
        .collect();
    values.extend((0..3).map(|i| in_subset(pod(&format!("b{i}")), "subset-b")));
    let r = run(&w, &pods(values), 7);
    let cost = |n: &str| r.cost(n).unwrap();
    assert_eq!([cost("a0"), cost("a1")], [200, 200]);
    assert_eq!([cost("a2"), cost("a3")], [400, 400]);
    assert_eq!([cost("b0"), cost("b1"), cost("b2")], [100, 100, 100]);
}

fn run_planned(ws: &WorkloadSpread, pods: &[Pod], replicas: i32) -> Run {
    let options = ReconcileOptions::default();
    let stamped = StampedPlaceholders::of(ws);
    let input = ReconcileInput {
        ws,
        pods,
        workload_replicas: replicas,
        latest_version: VERSION_IGNORED,
        nodes: &BTreeMap::new(),
        versioned_kinds: &VersionedKinds::default(),
        now: now(),
        options: &options,
        placeholders: stamped.view(now()),
    };
    Run {
        out: reconcile(&input),
    }
}

/// Planned costs (the default): `PLANNED_COST_BASE − level`, the level being the number
/// of pods left when the pod is removed on the way down the planned spreads.
#[test]
fn planned_costs_rank_the_scale_in_path() {
    use super::cost::PLANNED_COST_BASE as BASE;
    let subsets = |a: Value| json!([{"name": "a", "maxReplicas": a}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]);
    let named =
        |names: &[(&str, &str)]| pods(names.iter().map(|(n, s)| in_subset(pod(n), s)).collect());
    // 30 % / 50 % / rest holding 3 / 5 / 2, plus a pod of a removed subset: the removed
    // subset's pod first (level 11), then c, b, c, b, a, b, a, b, b, a — every prefix
    // leaves the planned spread (10: 3/5/2, 7: 3/4/0, 4: 2/2/0, …) or, at 6 (planned
    // 2/3/1, c already empty), the closest one.
    let mut all: Vec<(&str, &str)> = vec![("x", "gone")];
    all.extend([("a0", "a"), ("a1", "a"), ("a2", "a")]);
    all.extend([
        ("b0", "b"),
        ("b1", "b"),
        ("b2", "b"),
        ("b3", "b"),
        ("b4", "b"),
    ]);
    all.extend([("c0", "c"), ("c1", "c")]);
    let r = run_planned(&ws(subsets(json!("30%")), json!({})), &named(&all), 10);
    let level = |p: &str| r.cost(p).map(|c| BASE - c);
    let want = [
        ("x", 11),
        ("c0", 10),
        ("b0", 9),
        ("c1", 8),
        ("b1", 7),
        ("a0", 6),
        ("b2", 5),
        ("a1", 4),
        ("b3", 3),
        ("b4", 2),
        ("a2", 1),
    ];
    for (pod, l) in want {
        assert_eq!(level(pod), Some(l), "{pod}");
    }
    // Over an integer maximum (a: 1 holding 3): the two extra pods go first.
    let r = run_planned(
        &ws(
            json!([{"name": "a", "maxReplicas": 1}, {"name": "b"}]),
            json!({}),
        ),
        &named(&[("a0", "a"), ("a1", "a"), ("a2", "a"), ("b0", "b")]),
        4,
    );
    let levels: Vec<i64> = ["a0", "a1", "b0", "a2"]
        .iter()
        .map(|p| BASE - r.cost(p).unwrap())
        .collect();
    assert_eq!(levels, [4, 3, 2, 1]);
    // The reference's values for the same pods: −100 over the maximum, 100 in b.
    let reference = run(
        &ws(
            json!([{"name": "a", "maxReplicas": 1}, {"name": "b"}]),
            json!({}),
        ),
        &named(&[("a0", "a"), ("a1", "a"), ("a2", "a"), ("b0", "b")]),
        4,
    );
    assert_eq!(reference.cost("b0"), Some(100));
    assert_eq!(reference.cost("a0"), Some(-100));
}

/// A best-effort burst left a over its maximum and b short of its plan (12 / 9 / 39
/// over 10 / 10 / rest): every step of the scale-in path removes a's surplus before a
/// pod within a maximum, though c stays as far above its plan as a (b's missing pod).
/// Before, ties went to c and a scale-in to 20 left 11 / 9 / 0.
#[test]
fn planned_costs_remove_pods_above_a_maximum_first() {
    use super::cost::PLANNED_COST_BASE as BASE;
    let spec = ws(
        json!([{"name": "a", "maxReplicas": 10}, {"name": "b", "maxReplicas": 10}, {"name": "c"}]),
        json!({}),
    );
    let mut values = vec![];
    for (subset, n) in [("a", 12), ("b", 9), ("c", 39)] {
        values.extend((0..n).map(|i| in_subset(pod(&format!("{subset}{i:02}")), subset)));
    }
    let all = pods(values);
    let r = run_planned(&spec, &all, 60);
    let level = |p: &Pod| BASE - r.cost(p.metadata.name.as_deref().unwrap()).unwrap();
    for left in 1..=58 {
        let in_a = all
            .iter()
            .filter(|p| p.metadata.name.as_deref().unwrap().starts_with('a'))
            .filter(|p| level(p) <= left)
            .count();
        assert!(in_a <= 10, "{in_a} pods of a left at {left}");
    }
    let left_at_20: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|s| {
            all.iter()
                .filter(|p| p.metadata.name.as_deref().unwrap().starts_with(s))
                .filter(|p| level(p) <= 20)
                .count()
        })
        .collect();
    assert_eq!(left_at_20, [10, 9, 1]);
}

/// While a scale is in flight (pods ≠ replicas) the planned costs already written stay;
/// pods without one get theirs. Once the count settles every pod is ranked again.
#[test]
fn planned_costs_wait_for_the_pod_count_to_settle() {
    let stale = |p: Value| {
        with(p, |p| {
            p["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] = json!("7");
        })
    };
    let spread = ws(
        json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}]),
        json!({}),
    );
    let p = pods(vec![
        stale(in_subset(pod("a0"), "a")),
        stale(in_subset(pod("a1"), "a")),
        in_subset(pod("b0"), "b"),
    ]);
    // Scale-in from 3 to 2 in flight: a0 and a1 keep their cost, b0 gets its level (3).
    let r = run_planned(&spread, &p, 2);
    assert_eq!((r.cost("a0"), r.cost("a1")), (None, None));
    assert_eq!(r.cost("b0"), Some(super::cost::PLANNED_COST_BASE - 3));
    // Settled: all three ranked.
    let r = run_planned(&spread, &p, 3);
    assert_eq!(r.out.deletion_costs.len(), 3);
    // Fewer pods than replicas and none new (a targetFilter, a quota): settled too.
    assert_eq!(run_planned(&spread, &p, 4).out.deletion_costs.len(), 3);
    // A scale-out in flight: a pod created just now.
    let mut young = p.clone();
    young[2].metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let r = run_planned(&spread, &young, 4);
    assert_eq!((r.cost("a0"), r.cost("a1")), (None, None));
    // A pod being deleted: in flight whatever the counts.
    let mut deleting = p.clone();
    deleting.push(
        serde_json::from_value(with(in_subset(pod("b1"), "b"), |p| {
            p["metadata"]["deletionTimestamp"] = json!("2024-05-01T09:59:00Z");
        }))
        .unwrap(),
    );
    let r = run_planned(&spread, &deleting, 3);
    assert_eq!((r.cost("a0"), r.cost("a1")), (None, None));
}

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
                })
            };
            let (a, b) = (run(&whole), run(&pruned));
            assert_eq!(a, b, "{rules:?} at {replicas} replicas");
            assert!(!a.adoptions.is_empty() && !a.status.subset_statuses.is_empty());
        }
    }
}

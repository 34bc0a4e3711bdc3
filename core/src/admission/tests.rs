//! Ported from `workloadspread_test.go` (§5.1): TestWorkloadSpreadMutatingPod and friends.

use super::*;
use crate::annotation::MatchedWorkloadSpread;
use crate::api::VERSION_IGNORED;
use crate::inject::inject;
use serde_json::{json, Value};
use std::collections::BTreeSet;

pub(crate) fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

pub(crate) fn subset_a() -> Value {
    json!({
        "name": "subset-a",
        "requiredNodeSelector": {
            "matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["ack"]},
                {"key": "sigma.ali/resource-pool", "operator": "In", "values": ["lark"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["i-8vbhlh6rte2w5d1k2sgn", "i-8vbhlh6rte2vnxlq8ztc"]}]
        },
        "preferredNodeSelector": [{"weight": 5, "preference": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["cn-zhangjiakou-a"]}]}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
        "patch": {"metadata": {"labels": {"subset": "subset-a"}, "annotations": {"subset": "subset-a"}}},
        "maxReplicas": 5
    })
}

fn subset_b() -> Value {
    json!({"name": "subset-b", "requiredNodeSelector": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["cn-zhangjiakou-b"]}]}})
}

fn ws_with(subsets: Value, statuses: Value) -> WorkloadSpread {
    serde_json::from_value(json!({
        "metadata": {"name": "test-ws", "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cloneset-test"},
            "subsets": subsets},
        "status": {"subsetStatuses": statuses.clone(), "versionedSubsetStatuses": {VERSION_IGNORED: statuses}}
    })).unwrap()
}

fn pod() -> Value {
    json!({"metadata": {"name": "test-pod-1", "namespace": "default",
        "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "cloneset-test", "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.15.1"}]}})
}

/// The ported cases run under the reference's rules.
fn reference(replicas: i32) -> Scale<'static> {
    Scale::new(replicas, Rules::Reference)
}

fn key(name: &str) -> PodKey<'_> {
    PodKey {
        name,
        version: VERSION_IGNORED,
    }
}

/// Runs the create path like `mutatingPod(Create)`; returns the pod and new status.
fn create(ws: &WorkloadSpread, mut pod: Value) -> (Value, Option<WorkloadSpreadStatus>) {
    let d = decide_create(ws, key("test-pod-1"), reference(0), now(), "gen-uid");
    if let Some(subset) = &d.subset {
        inject(&mut pod, ws, subset, d.generated_uid.as_deref()).unwrap();
    }
    (pod, d.new_status)
}

fn versioned(status: &WorkloadSpreadStatus) -> &Vec<WorkloadSpreadSubsetStatus> {
    &status.versioned_subset_statuses[VERSION_IGNORED]
}

fn expect_subset_a_injected(pod: &Value) {
    let a = subset_a();
    assert_eq!(pod["metadata"]["labels"], json!({"subset": "subset-a"}));
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"subset": "subset-a",
        "apps.kruise.io/matched-workloadspread": r#"{"name":"test-ws","subset":"subset-a"}"#})
    );
    assert_eq!(pod["spec"]["tolerations"], a["tolerations"]);
    let na = &pod["spec"]["affinity"]["nodeAffinity"];
    assert_eq!(
        na["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([a["requiredNodeSelector"]])
    );
    assert_eq!(
        na["preferredDuringSchedulingIgnoredDuringExecution"],
        a["preferredNodeSelector"]
    );
}

#[test]
fn case01_create_takes_a_slot() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 5, "replicas": 0}]),
    );
    let (pod, status) = create(&ws, pod());
    expect_subset_a_injected(&pod);
    let s = status.expect("status write");
    assert_eq!(versioned(&s)[0].missing_replicas, 4);
    assert_eq!(
        versioned(&s)[0].creating_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-1"]
    );
    assert_eq!(versioned(&s)[0].creating_pods["test-pod-1"].0, now());
}

#[test]
fn case02_full_subset_spills_to_unlimited_without_status_write() {
    let ws = ws_with(
        json!([subset_a(), subset_b()]),
        json!([{"name": "subset-a", "missingReplicas": 0, "replicas": 5}, {"name": "subset-b", "missingReplicas": -1, "replicas": 0}]),
    );
    let (pod, status) = create(&ws, pod());
    assert!(status.is_none());
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"apps.kruise.io/matched-workloadspread": r#"{"name":"test-ws","subset":"subset-b"}"#})
    );
    let na = &pod["spec"]["affinity"]["nodeAffinity"];
    assert_eq!(
        na["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([subset_b()["requiredNodeSelector"]])
    );
    assert!(na
        .get("preferredDuringSchedulingIgnoredDuringExecution")
        .is_none());
}

#[test]
fn case03_no_room_admits_unchanged() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 0, "replicas": 5}]),
    );
    let (p, status) = create(&ws, pod());
    assert_eq!(p, pod());
    assert!(status.is_none());
}

/// The reference's case gives the subset `maxReplicas: 5` and a stored `-1`; here the
/// spec decides whether a subset is limited (A12), so the case is an unlimited subset.
#[test]
fn case05_unlimited_status_injects_without_write() {
    let mut unlimited = subset_a();
    unlimited.as_object_mut().unwrap().remove("maxReplicas");
    let ws = ws_with(
        json!([unlimited]),
        json!([{"name": "subset-a", "missingReplicas": -1, "replicas": 0}]),
    );
    let (p, status) = create(&ws, pod());
    expect_subset_a_injected(&p);
    assert!(status.is_none());
}

/// A12: a maximum set on a subset that was unlimited (its stored `missingReplicas` still
/// -1) counts from the next admission; the reference admitted untracked pods past it
/// until the controller recomputed.
#[test]
fn a_maximum_set_on_an_unlimited_subset_counts_at_once() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": -1, "replicas": 5}]),
    );
    let (p, status) = create(&ws, pod());
    assert_eq!(
        p,
        pod(),
        "subset-a holds its 5: the pod is admitted unchanged"
    );
    assert!(status.is_none());
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": -1, "replicas": 4}]),
    );
    let (p, status) = create(&ws, pod());
    expect_subset_a_injected(&p);
    let s = status.expect("the claim is recorded");
    assert_eq!(versioned(&s)[0].missing_replicas, 0);
    assert!(versioned(&s)[0].creating_pods.contains_key("test-pod-1"));
}

#[test]
fn case06_readmission_is_idempotent() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 4, "replicas": 0,
        "creatingPods": {"test-pod-1": "2024-05-01T09:59:59Z"}}]),
    );
    let (p, status) = create(&ws, pod());
    expect_subset_a_injected(&p);
    assert!(status.is_none());
}

fn delete(ws: &WorkloadSpread, annotation: Option<&str>) -> Option<WorkloadSpreadStatus> {
    let matched = MatchedWorkloadSpread::parse(annotation?).ok()?;
    decide_release(ws, key("test-pod-1"), &matched.subset, reference(0), now())
}

/// The reference's cases 7 and 8 expect `missingReplicas` 0 → 1: the admitted DELETE or
/// eviction frees the slot. Here (A11) it records the deletion as an intent and frees
/// nothing until the pod's departure is a fact: the next pod finds subset-a full while
/// test-pod-1 runs (its eviction may yet be refused), and room once it has departed.
#[test]
fn case07_08_delete_and_eviction_record_an_intent() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 0, "replicas": 5}]),
    );
    let s = delete(&ws, Some(r#"{"name":"test-ws","subset":"subset-a"}"#)).expect("status write");
    assert_eq!(versioned(&s)[0].missing_replicas, 0);
    assert_eq!(
        versioned(&s)[0].deleting_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-1"]
    );
    let mut ws = ws;
    ws.status = Some(s);
    let next = |departed: &BTreeSet<String>| {
        let scale = reference(0).with_departed(departed);
        decide_create(&ws, key("test-pod-2"), scale, now(), "u").subset
    };
    assert_eq!(next(&BTreeSet::new()), None, "test-pod-1 still runs");
    let gone: BTreeSet<String> = ["test-pod-1".to_string()].into();
    assert_eq!(
        next(&gone).as_deref(),
        Some("subset-a"),
        "test-pod-1 has departed"
    );
}

#[test]
fn case09_to_12_deletes_that_change_nothing() {
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 0, "replicas": 5}]),
    );
    assert!(delete(&ws, None).is_none());
    assert!(delete(&ws, Some(r#"{"Name":"test-ws","Subset":"subset-b"}"#)).is_none());
    let ws = ws_with(
        json!([subset_a()]),
        json!([{"name": "subset-a", "missingReplicas": 1, "replicas": 5,
        "deletingPods": {"test-pod-1": "2024-05-01T09:59:59Z"}}]),
    );
    assert!(delete(&ws, Some(r#"{"name":"test-ws","subset":"subset-a"}"#)).is_none());
    let mut unlimited = subset_a();
    unlimited.as_object_mut().unwrap().remove("maxReplicas");
    let ws = ws_with(
        json!([unlimited]),
        json!([{"name": "subset-a", "missingReplicas": -1, "replicas": 5}]),
    );
    assert!(delete(&ws, Some(r#"{"name":"test-ws","subset":"subset-a"}"#)).is_none());
}

#[test]
fn case14_priority_class_patch_clears_priority() {
    let ws = ws_with(
        json!([{"name": "subset-a", "maxReplicas": 5, "patch": {"spec": {"priorityClassName": "low"}}}]),
        json!([{"name": "subset-a", "missingReplicas": 5, "replicas": 0}]),
    );
    let mut p = pod();
    p["spec"]["priority"] = json!(10000);
    p["spec"]["priorityClassName"] = json!("high");
    let (p, status) = create(&ws, p);
    assert_eq!(p["spec"]["priorityClassName"], "low");
    assert!(p["spec"].get("priority").is_none());
    assert_eq!(p["spec"]["affinity"], json!({"nodeAffinity": {}}));
    assert_eq!(
        p["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        r#"{"name":"test-ws","subset":"subset-a"}"#
    );
    let s = status.unwrap();
    assert_eq!(versioned(&s)[0].missing_replicas, 4);
    assert!(versioned(&s)[0].creating_pods.contains_key("test-pod-1"));
}

#[test]
fn unnamed_pod_gets_generated_uid() {
    // TestWorkloadSpreadCreatePodWithoutFullName
    let ws = ws_with(
        json!([subset_a(), {"name": "subset-b", "maxReplicas": 2}]),
        json!([{"name": "subset-a", "missingReplicas": 0, "replicas": 5}, {"name": "subset-b", "missingReplicas": 2, "replicas": 0}]),
    );
    let d = decide_create(&ws, key(""), reference(0), now(), "c0ffee");
    assert_eq!(d.subset.as_deref(), Some("subset-b"));
    assert_eq!(d.generated_uid.as_deref(), Some("c0ffee"));
    let s = d.new_status.unwrap();
    assert_eq!(
        versioned(&s)[1].creating_pods.keys().collect::<Vec<_>>(),
        vec!["c0ffee"]
    );
    let mut p = pod();
    inject(&mut p, &ws, "subset-b", Some("c0ffee")).unwrap();
    assert_eq!(
        p["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        r#"{"name":"test-ws","subset":"subset-b","uid":"c0ffee"}"#
    );
}

#[test]
fn initialized_subset_statuses() {
    // TestInitializedSubsetStatuses
    let ws = |a: Value, b: Value| -> WorkloadSpread {
        serde_json::from_value(json!({"spec": {"subsets": [{"name": "a", "maxReplicas": a}, {"name": "b", "maxReplicas": b}, {"name": "c"}]}})).unwrap()
    };
    let missing = |w: &WorkloadSpread, r| {
        initial_subset_statuses(w, r)
            .iter()
            .map(|s| s.missing_replicas)
            .collect::<Vec<_>>()
    };
    assert_eq!(missing(&ws(json!(2), json!(3)), 0), vec![2, 3, -1]);
    assert_eq!(missing(&ws(json!(2), json!(3)), 5), vec![2, 3, -1]);
    let pct: WorkloadSpread = serde_json::from_value(
        json!({"spec": {"subsets": [{"name": "a", "maxReplicas": "20%"},
        {"name": "b", "maxReplicas": "30%"}, {"name": "c", "maxReplicas": "50%"}]}}),
    )
    .unwrap();
    assert_eq!(missing(&pct, 10), vec![2, 3, 5]);
    assert!(needs_workload_replicas(&pct));
    assert!(!needs_workload_replicas(&ws(json!(2), json!(3))));
}

#[test]
fn ordinals() {
    // TestGetParentNameAndOrdinal
    for i in 0..500 {
        assert_eq!(pod_ordinal(&format!("sample-{i}")), i);
    }
    assert_eq!(pod_ordinal("sample"), -1);
    assert_eq!(pod_ordinal("sample-x"), -1);
    assert_eq!(pod_ordinal("sample-99999999999"), -1);
}

#[test]
fn statefulset_ordinal_ranges() {
    // max 5,5,nil → ordinals [0,5)→a, [5,10)→b, [10,∞)→c; unschedulable subsets are skipped.
    let mut ws: WorkloadSpread = serde_json::from_value(json!({"spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s"},
        "subsets": [{"name": "a", "maxReplicas": 5}, {"name": "b", "maxReplicas": 5}, {"name": "c"}]}})).unwrap();
    let pick = |ws: &WorkloadSpread, n: &str| decide_create(ws, key(n), reference(0), now(), "x");
    for (n, want) in [
        ("s-0", "a"),
        ("s-4", "a"),
        ("s-5", "b"),
        ("s-9", "b"),
        ("s-10", "c"),
        ("s-1000", "c"),
        ("noordinal", "a"),
    ] {
        let d = pick(&ws, n);
        assert_eq!(d.subset.as_deref(), Some(want), "{n}");
        assert!(d.new_status.is_none());
    }
    ws.status = Some(serde_json::from_value(json!({"subsetStatuses": [{"name": "a", "replicas": 0, "missingReplicas": 5,
        "conditions": [{"type": "Schedulable", "status": "False", "reason": "PodUnschedulable"}]}]})).unwrap());
    assert_eq!(pick(&ws, "s-0").subset.as_deref(), Some("b"));
    assert_eq!(pick(&ws, "s-5").subset.as_deref(), Some("c"));
}

#[test]
fn single_unlimited_subset_shortcut() {
    let ws = ws_with(json!([{"name": "only"}]), json!([]));
    let d = decide_create(&ws, key("p"), reference(0), now(), "x");
    assert_eq!((d.subset.as_deref(), d.new_status), (Some("only"), None));
}

#[test]
fn unschedulable_subsets_are_skipped() {
    let ws = ws_with(
        json!([subset_a(), subset_b()]),
        json!([
        {"name": "subset-a", "missingReplicas": 5, "replicas": 0, "conditions": [{"type": "Schedulable", "status": "False", "reason": "PodUnschedulable"}]},
        {"name": "subset-b", "missingReplicas": -1, "replicas": 0}]),
    );
    assert_eq!(
        decide_create(&ws, key("p"), reference(0), now(), "x")
            .subset
            .as_deref(),
        Some("subset-b")
    );
}

#[test]
fn min_replicas_served_first() {
    // a (max 10) then b (min 2, unlimited): b gets pods until it holds 2, then a fills.
    let ws: WorkloadSpread = serde_json::from_value(json!({"metadata": {"name": "w"}, "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
        "subsets": [{"name": "a", "maxReplicas": 10}, {"name": "b", "minReplicas": 2}]}}))
    .unwrap();
    let mut status = WorkloadSpreadStatus::default();
    let picks: Vec<String> = (0..5)
        .map(|i| {
            let name = format!("p{i}");
            let c = claim_for_create(&mut status, &ws, key(&name), reference(10), now(), "x");
            // Filling b's minimum is tracked in creatingPods although b is unlimited.
            assert!(c.status_changed);
            c.subset.unwrap()
        })
        .collect();
    assert_eq!(picks, vec!["b", "b", "a", "a", "a"]);
}

#[test]
fn claim_among_candidates_only() {
    let ws = ws_with(
        json!([subset_a(), {"name": "subset-b", "maxReplicas": 2}]),
        json!([{"name": "subset-a", "missingReplicas": 5, "replicas": 0}, {"name": "subset-b", "missingReplicas": 2, "replicas": 0}]),
    );
    let mut status = ws.status.clone().unwrap();
    let c = claim_among(
        &mut status,
        &ws,
        key("p"),
        &["subset-b".to_string()],
        reference(0),
        now(),
        "x",
    );
    assert_eq!(c.subset.as_deref(), Some("subset-b"));
    assert_eq!(versioned(&status)[1].missing_replicas, 1);
    let none = claim_among(&mut status, &ws, key("q"), &[], reference(0), now(), "x");
    assert_eq!(none, Claim::default());
}

/// Issue #16 (1a): a 20 % / 30 % / rest spread whose status the controller computed at 10
/// replicas (2 / 3 / 5), scaled to 20 before it catches up. Planned rules fill a to 4 and
/// b to 6 from the current replicas; the reference's stale `missingReplicas` (0) sends
/// all ten new pods to the last subset (kruise #778).
#[test]
fn percent_room_follows_the_current_replicas_under_planned_rules() {
    let stale = json!([
        {"name": "a", "replicas": 2, "missingReplicas": 0},
        {"name": "b", "replicas": 3, "missingReplicas": 0},
        {"name": "c", "replicas": 5, "missingReplicas": -1}]);
    let ws = ws_with(
        json!([{"name": "a", "maxReplicas": "20%"}, {"name": "b", "maxReplicas": "30%"}, {"name": "c"}]),
        stale,
    );
    let picks = |rules: Rules| -> Vec<String> {
        let mut status = ws.status.clone().unwrap();
        (0..10)
            .map(|i| {
                let name = format!("p{i}");
                let scale = Scale::new(20, rules);
                let c = claim_for_create(&mut status, &ws, key(&name), scale, now(), "x");
                c.subset.unwrap()
            })
            .collect()
    };
    let planned = picks(Rules::Planned);
    let count = |v: &[String], s: &str| v.iter().filter(|x| *x == s).count();
    assert_eq!(
        [
            count(&planned, "a"),
            count(&planned, "b"),
            count(&planned, "c")
        ],
        [2, 3, 5]
    );
    assert_eq!(count(&picks(Rules::Reference), "c"), 10);
}

/// Occupancy counts admitted-but-unseen pods, and excludes pods being deleted only once
/// their departure is a fact; the recorded `missingReplicas` follows it (A11, A12).
#[test]
fn occupancy_counts_creating_pods_and_departed_deletions() {
    let ws = ws_with(
        json!([{"name": "a", "maxReplicas": "50%"}, {"name": "b"}]),
        json!([{"name": "a", "replicas": 2, "missingReplicas": 0,
                "creatingPods": {"new": "2024-05-01T10:00:00Z"},
                "deletingPods": {"old1": "2024-05-01T10:00:00Z", "old2": "2024-05-01T10:00:00Z"}},
               {"name": "b", "replicas": 0, "missingReplicas": -1}]),
    );
    let picks = |departed: &BTreeSet<String>| {
        let mut status = ws.status.clone().unwrap();
        let planned = Scale::new(8, Rules::Planned).with_departed(departed);
        let subsets: Vec<String> = (0..4)
            .map(|i| {
                let name = format!("p{i}");
                let c = claim_for_create(&mut status, &ws, key(&name), planned, now(), "x");
                c.subset.unwrap()
            })
            .collect();
        (subsets, status)
    };
    // 8 replicas: max 4. Both old pods gone: occupancy 2 + 1 − 2 = 1, three more fit.
    let gone: BTreeSet<String> = ["old1".to_string(), "old2".to_string()].into();
    let (subsets, mut status) = picks(&gone);
    assert_eq!(subsets, ["a", "a", "a", "b"]);
    assert_eq!(versioned(&status)[0].missing_replicas, 0);
    // Their deletions only asked for (still running): occupancy 3, one more fits.
    assert_eq!(picks(&BTreeSet::new()).0, ["a", "b", "b", "b"]);
    let one: BTreeSet<String> = ["old1".to_string()].into();
    assert_eq!(picks(&one).0, ["a", "a", "b", "b"]);
    // A deletion of a pod whose claim is still in creatingPods is recorded too (its
    // departure cancels the claim); neither frees a slot before it is a fact.
    let planned = Scale::new(8, Rules::Planned).with_departed(&gone);
    assert!(release(&mut status, &ws, key("p0"), "a", planned, now()));
    assert!(!release(&mut status, &ws, key("p0"), "a", planned, now()));
    assert!(release(
        &mut status,
        &ws,
        key("counted"),
        "a",
        planned,
        now()
    ));
    assert_eq!(versioned(&status)[0].missing_replicas, 0);
    let more: BTreeSet<String> = ["old1", "old2", "p0", "counted"].map(String::from).into();
    let mut probe = status.clone();
    let scale = Scale::new(8, Rules::Planned).with_departed(&more);
    let c = claim_for_create(&mut probe, &ws, key("p9"), scale, now(), "x");
    assert_eq!(c.subset.as_deref(), Some("a"));
    assert_eq!(
        versioned(&probe)[0].missing_replicas,
        1,
        "4 − (2 + 4 − 4) − 1"
    );
}

/// A12: no release, return or unclaim makes room in a subset at or above its maximum
/// — here an integer maximum lowered to 2 under 3 counted pods and a claim in flight —
/// whatever `missingReplicas` says, under both rules.
#[test]
fn an_integer_maximum_is_judged_from_the_spec_and_the_occupancy() {
    for rules in [Rules::Planned, Rules::Reference] {
        let ws = ws_with(
            json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}]),
            json!([{"name": "a", "replicas": 3, "missingReplicas": 3,
                    "creatingPods": {"flight": "2024-05-01T10:00:00Z"}},
                   {"name": "b", "replicas": 0, "missingReplicas": -1}]),
        );
        let mut status = ws.status.clone().unwrap();
        let scale = Scale::new(6, rules);
        let c = claim_for_create(&mut status, &ws, key("p1"), scale, now(), "x");
        assert_eq!(c.subset.as_deref(), Some("b"), "{rules:?}: 4 in a, max 2");
        assert!(unclaim(
            &mut status,
            &ws,
            key("flight"),
            "flight",
            "a",
            scale
        ));
        assert_eq!(versioned(&status)[0].missing_replicas, 0, "{rules:?}");
        let c = claim_for_create(&mut status, &ws, key("p2"), scale, now(), "x");
        assert_eq!(c.subset.as_deref(), Some("b"), "{rules:?}: 3 in a, max 2");
        let gone: BTreeSet<String> = ["a-1".to_string(), "a-2".to_string()].into();
        let departed = scale.with_departed(&gone);
        assert!(release(&mut status, &ws, key("a-1"), "a", departed, now()));
        assert!(release(&mut status, &ws, key("a-2"), "a", departed, now()));
        let c = claim_for_create(&mut status, &ws, key("p3"), departed, now(), "x");
        assert_eq!(c.subset.as_deref(), Some("a"), "{rules:?}: 1 left in a");
        assert_eq!(versioned(&status)[0].missing_replicas, 0, "{rules:?}");
    }
}

/// A claim is never answered from a `deletingPods` entry: a pod recreated under the
/// name of one being deleted takes a slot of its own.
#[test]
fn a_pod_recreated_under_a_deleted_pods_name_takes_a_slot_of_its_own() {
    let ws = ws_with(
        json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}]),
        json!([{"name": "a", "replicas": 2, "missingReplicas": 0,
                "deletingPods": {"web-0": "2024-05-01T10:00:00Z"}},
               {"name": "b", "replicas": 0, "missingReplicas": -1}]),
    );
    let mut status = ws.status.clone().unwrap();
    let c = claim_for_create(&mut status, &ws, key("web-0"), reference(0), now(), "x");
    assert_eq!(
        c.subset.as_deref(),
        Some("b"),
        "the old web-0 still holds a"
    );
    let gone: BTreeSet<String> = ["web-0".to_string()].into();
    let mut status = ws.status.clone().unwrap();
    let scale = reference(0).with_departed(&gone);
    let c = claim_for_create(&mut status, &ws, key("web-0"), scale, now(), "x");
    assert_eq!(c.subset.as_deref(), Some("a"), "the old web-0 has departed");
    assert!(c.status_changed, "recorded in creatingPods");
    let again = claim_for_create(&mut status, &ws, key("web-0"), scale, now(), "x");
    assert_eq!(
        (again.subset.as_deref(), again.status_changed),
        (Some("a"), false)
    );
}

/// Issue #17 (4): an unnamed pod's claim is keyed by the request uid; the same request
/// delivered again (an API server retry) claims once and gets the same answer.
#[test]
fn a_redelivered_request_for_an_unnamed_pod_claims_once() {
    let ws = ws_with(
        json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}]),
        json!([{"name": "a", "missingReplicas": 2}, {"name": "b", "missingReplicas": -1}]),
    );
    let mut status = ws.status.clone().unwrap();
    let scale = reference(0);
    let first = claim_for_create(&mut status, &ws, key(""), scale, now(), "req-1");
    let again = claim_for_create(&mut status, &ws, key(""), scale, now(), "req-1");
    assert_eq!(first.subset.as_deref(), Some("a"));
    assert!(first.status_changed && !again.status_changed);
    assert_eq!(
        (again.subset, again.generated_uid),
        (first.subset, first.generated_uid)
    );
    assert_eq!(versioned(&status)[0].missing_replicas, 1);
    assert_eq!(versioned(&status)[0].creating_pods.len(), 1);
    // Another request is another pod.
    let other = claim_for_create(&mut status, &ws, key(""), scale, now(), "req-2");
    assert!(other.status_changed);
    assert_eq!(versioned(&status)[0].missing_replicas, 0);
}

/// Issue #21 (2): best-effort admission starts from the controller's status and adds the
/// pods still labelled pending; the next pod's subset follows from the sum.
#[test]
fn pending_pods_count_on_top_of_the_controllers_status() {
    struct Case {
        name: &'static str,
        /// (pod name, subset) of the pending pods.
        pending: &'static [(&'static str, &'static str)],
        /// Already in creatingPods of subset a (an exact host's claim).
        tracked: &'static [&'static str],
        rules: Rules,
        added: usize,
        next: Option<&'static str>,
    }
    let cases = [
        Case {
            name: "none pending: a has room for one",
            pending: &[],
            tracked: &[],
            rules: Rules::Reference,
            added: 0,
            next: Some("a"),
        },
        Case {
            name: "one pending in a fills it",
            pending: &[("p1", "a")],
            tracked: &[],
            rules: Rules::Reference,
            added: 1,
            next: Some("b"),
        },
        Case {
            name: "a pending pod the status tracks is not counted again",
            pending: &[("p1", "a")],
            tracked: &["p1"],
            rules: Rules::Reference,
            added: 0,
            next: Some("b"),
        },
        Case {
            name: "percentages under planned rules: b (50% of 10) full after two",
            pending: &[("p1", "b"), ("p2", "b"), ("", "a"), ("p3", "gone")],
            tracked: &[],
            rules: Rules::Planned,
            added: 2,
            next: Some("a"),
        },
        Case {
            name: "a and b full: c is unlimited",
            pending: &[("p1", "a"), ("p2", "b"), ("p3", "b")],
            tracked: &[],
            rules: Rules::Planned,
            added: 3,
            next: Some("c"),
        },
    ];
    for case in cases {
        // a: max 4, 3 counted; b: 50% of 10 = 5, 3 counted; c: unlimited.
        let ws = ws_with(
            json!([{"name": "b", "maxReplicas": "50%"}, {"name": "a", "maxReplicas": 4}, {"name": "c"}]),
            json!([{"name": "b", "replicas": 3, "missingReplicas": 2},
                   {"name": "a", "replicas": 3, "missingReplicas": 1},
                   {"name": "c", "replicas": 0, "missingReplicas": -1}]),
        );
        let mut ws = ws;
        // Order a before b for the reference cases, b first for the planned ones.
        if case.rules == Rules::Reference {
            ws.spec.subsets.swap(0, 1);
            let s = ws.status.as_mut().unwrap();
            s.subset_statuses.swap(0, 1);
            s.versioned_subset_statuses
                .get_mut(VERSION_IGNORED)
                .unwrap()
                .swap(0, 1);
        }
        let mut status = ws.status.clone().unwrap();
        for t in case.tracked {
            let a = versioned_statuses(&mut status, &ws, VERSION_IGNORED, 10)
                .iter_mut()
                .find(|s| s.name == "a")
                .unwrap();
            a.creating_pods.insert(t.to_string(), Time(now()));
            a.missing_replicas -= 1;
        }
        let pending: Vec<PendingPod> = case
            .pending
            .iter()
            .map(|(name, subset)| PendingPod {
                name: name.to_string(),
                version: VERSION_IGNORED.to_string(),
                subset: subset.to_string(),
                counted_in: None,
            })
            .collect();
        let scale = Scale::new(10, case.rules);
        let added = count_pending(&mut status, &ws, &pending, scale, now());
        assert_eq!(added, case.added, "{}", case.name);
        let claim = claim_for_create(&mut status, &ws, key("next"), scale, now(), "uid");
        assert_eq!(claim.subset.as_deref(), case.next, "{}", case.name);
    }
}

/// `spread_fields`: what each admission may leave out of its WorkloadSpread still
/// decides as the whole object does — the create path of a pod in every target kind
/// (a StatefulSet's skipping a subset its status marks unschedulable; a release asks
/// only whether its pod was counted), and the spec the counter path reads — and only the
/// counter leaves the status out.
#[test]
fn spread_fields_keep_what_each_admission_reads() {
    use crate::masks::Mask;
    let whole = |kind: &str| -> Value {
        json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "w", "namespace": "default", "uid": "ws-uid"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": "s"},
                "subsets": [{"name": "a", "maxReplicas": 5}, {"name": "b", "maxReplicas": 5}, {"name": "c"}]},
            "status": {"subsetStatuses": [{"name": "a", "replicas": 0, "missingReplicas": 5,
                "creatingPods": {"p1": "2024-05-01T10:00:00Z"},
                "conditions": [{"type": "Schedulable", "status": "False", "reason": "PodUnschedulable"}]}]}})
    };
    let decode = |v: Value| -> WorkloadSpread { serde_json::from_value(v).unwrap() };
    for (spread_use, kind, counter, keeps_status) in [
        (
            SpreadUse::Create {
                target_kind: "Deployment",
            },
            "Deployment",
            true,
            false,
        ),
        (
            SpreadUse::Create {
                target_kind: "StatefulSet",
            },
            "StatefulSet",
            true,
            true,
        ),
        (
            SpreadUse::Create {
                target_kind: "Deployment",
            },
            "Deployment",
            false,
            true,
        ),
        (
            SpreadUse::Create {
                target_kind: "StatefulSet",
            },
            "StatefulSet",
            false,
            true,
        ),
        (SpreadUse::Release, "Deployment", true, false),
        (SpreadUse::Release, "StatefulSet", true, false),
        (SpreadUse::Release, "Deployment", false, true),
    ] {
        let case = format!("{spread_use:?} of a {kind} pod, counter {counter}");
        let full = decode(whole(kind));
        let read = decode(Mask::new(spread_fields(spread_use, counter)).apply(&whole(kind)));
        assert_eq!(read.status.is_some(), keeps_status, "{case}");
        assert_eq!(read.metadata, full.metadata, "{case}");
        assert_eq!(read.spec, full.spec, "{case}");
        for pod in ["s-0", "s-5", "p"] {
            let (got, want) = (create_path(&read, pod), create_path(&full, pod));
            match spread_use {
                // A create injects the subset its path chose.
                SpreadUse::Create { .. } => assert_eq!(got, want, "{case}: {pod}"),
                // A release asks only whether the pod was counted.
                SpreadUse::Release => assert_eq!(
                    got == CreatePath::Counted,
                    want == CreatePath::Counted,
                    "{case}: {pod}"
                ),
            }
        }
    }
}

/// Protocol review F1: a release naming a version the status holds no statuses for
/// (a forged review's labels) records nothing and creates no version: with the
/// controller down nothing would prune it, and each forgery would grow the status.
#[test]
fn a_release_in_an_unknown_version_records_nothing_and_grows_nothing() {
    let ws = ws_with(
        json!([{"name": "a", "maxReplicas": 3}, {"name": "b"}]),
        json!([{"name": "a", "replicas": 3, "missingReplicas": 0},
               {"name": "b", "replicas": 1, "missingReplicas": -1}]),
    );
    let mut status = ws.status.clone().unwrap();
    let forged = PodKey {
        name: "a-1",
        version: "made-up",
    };
    assert!(!release(&mut status, &ws, forged, "a", reference(4), now()));
    assert_eq!(status, ws.status.clone().unwrap(), "nothing written");
    assert!(release(
        &mut status,
        &ws,
        key("a-1"),
        "a",
        reference(4),
        now()
    ));
    assert_eq!(versioned(&status)[0].deleting_pods.len(), 1);
}

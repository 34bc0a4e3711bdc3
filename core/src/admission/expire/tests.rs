use super::*;
use crate::api::VERSION_IGNORED;
use crate::rules::Rules;
use serde_json::{json, Value};

fn ws(a: Value) -> WorkloadSpread {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"subsets": [{"name": "a", "maxReplicas": 4}, {"name": "b"}]},
        "status": {"versionedSubsetStatuses": {VERSION_IGNORED: [a, {"name": "b", "missingReplicas": -1}]}}
    }))
    .unwrap()
}

/// A pod of the namespace: `state` is "runs", "deleted" or "failed"; in `subset`
/// ("" = none) with generated id `uid` ("" = none).
fn pod(name: &str, subset: &str, uid: &str, state: &str) -> Pod {
    let mut matched = json!({"name": "web", "subset": subset});
    if !uid.is_empty() {
        matched["uid"] = json!(uid);
    }
    let mut p =
        json!({"metadata": {"name": name, "annotations": {}}, "status": {"phase": "Running"}});
    if !subset.is_empty() {
        p["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"] =
            json!(matched.to_string());
    }
    match state {
        "deleted" => p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
        "failed" => p["status"]["phase"] = json!("Failed"),
        _ => {}
    }
    serde_json::from_value(p).unwrap()
}

fn entries(keys: &[&str]) -> Value {
    keys.iter()
        .map(|k| (k.to_string(), json!("2026-01-01T00:00:00Z")))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

struct Case {
    name: &'static str,
    replicas: i32,
    creating: &'static [&'static str],
    deleting: &'static [&'static str],
    overdue: &'static [&'static str],
    pods: Vec<Pod>,
    /// (replicas, creating, deleting) after.
    want: (i32, &'static [&'static str], &'static [&'static str]),
}

/// Each overdue entry resolved by the pods' facts leaves the occupancy equal to the pods
/// a holds (counted by the controller's rule: running pods annotated into a).
#[test]
fn overdue_entries_resolve_to_the_pods_they_stand_for() {
    let cases = [
        Case {
            name: "a refused eviction: the intent goes, the pod stays counted",
            replicas: 3,
            creating: &[],
            deleting: &["p1"],
            overdue: &["p1"],
            pods: vec![
                pod("p1", "a", "", "runs"),
                pod("p2", "a", "", "runs"),
                pod("p3", "a", "", "runs"),
            ],
            want: (3, &[], &[]),
        },
        Case {
            name: "a pod deleted after the controller counted it leaves replicas",
            replicas: 3,
            creating: &[],
            deleting: &["p1"],
            overdue: &["p1"],
            pods: vec![
                pod("p1", "a", "", "deleted"),
                pod("p2", "a", "", "runs"),
                pod("p3", "a", "", "runs"),
            ],
            want: (2, &[], &[]),
        },
        Case {
            name: "a pod gone before the controller counted it: claim and deletion go together",
            replicas: 2,
            creating: &["p3"],
            deleting: &["p3"],
            overdue: &["p3"],
            pods: vec![pod("p1", "a", "", "runs"), pod("p2", "a", "", "runs")],
            want: (2, &[], &[]),
        },
        Case {
            name: "a running pod's claim is folded into replicas",
            replicas: 1,
            creating: &["u-2", "p3"],
            deleting: &[],
            overdue: &["u-2", "p3"],
            pods: vec![
                pod("p1", "a", "", "runs"),
                pod("p2", "a", "u-2", "runs"),
                pod("p3", "a", "", "runs"),
            ],
            want: (3, &[], &[]),
        },
        Case {
            name: "a claim whose pod never came, or runs elsewhere, or failed, is dropped",
            replicas: 1,
            creating: &["ghost", "p9", "p8"],
            deleting: &[],
            overdue: &["ghost", "p9", "p8"],
            pods: vec![
                pod("p1", "a", "", "runs"),
                pod("p9", "b", "", "runs"),
                pod("p8", "a", "", "failed"),
            ],
            want: (1, &[], &[]),
        },
        Case {
            name: "entries not yet overdue, and placeholders, are left",
            replicas: 1,
            creating: &["p2", "~h.1"],
            deleting: &["p1"],
            overdue: &["~h.1"],
            pods: vec![pod("p1", "a", "", "deleted"), pod("p2", "a", "", "runs")],
            want: (1, &["p2", "~h.1"], &["p1"]),
        },
        Case {
            name: "a counted pod with a pending deletion and its own claim both overdue",
            replicas: 1,
            creating: &["p2"],
            deleting: &["p2"],
            overdue: &["p2"],
            pods: vec![pod("p1", "a", "", "runs"), pod("p2", "a", "", "runs")],
            want: (2, &[], &[]),
        },
    ];
    for case in cases {
        let a = json!({"name": "a", "replicas": case.replicas, "missingReplicas": 0,
            "creatingPods": entries(case.creating), "deletingPods": entries(case.deleting)});
        let w = ws(a);
        let mut status = w.status.clone().unwrap();
        let overdue = Overdue {
            creating: case.overdue.iter().map(|k| k.to_string()).collect(),
            deleting: case.overdue.iter().map(|k| k.to_string()).collect(),
        };
        let facts = PodFacts::from_pods(&case.pods, "web");
        expire(
            &mut status,
            &w,
            &overdue,
            &facts,
            Scale::new(4, Rules::Planned),
        );
        let a = &status.versioned_subset_statuses[VERSION_IGNORED][0];
        let got = (
            a.replicas,
            a.creating_pods
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            a.deleting_pods
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let want = (case.want.0, case.want.1.to_vec(), case.want.2.to_vec());
        assert_eq!(got, want, "{}", case.name);
        // Resolved entirely: the count is the pods a holds, and the room follows it.
        if a.creating_pods.is_empty() && a.deleting_pods.is_empty() {
            let in_a = case
                .pods
                .iter()
                .filter(|p| is_active(p) && matched(p).is_some_and(|m| m.subset == "a"))
                .count() as i32;
            assert_eq!(a.replicas, in_a, "{}", case.name);
            assert_eq!(a.missing_replicas, (4 - in_a).max(0), "{}", case.name);
        }
    }
}

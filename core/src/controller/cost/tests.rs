//! [`admission_cost`] against the controller's own ranking ([`planned_costs`]): a pod
//! given its cost at admission is not patched once the scale-out settles (#28).

use super::*;
use crate::api::VERSION_IGNORED;
use crate::controller::{reconcile, ReconcileInput, ReconcileOptions, StampedPlaceholders};
use crate::version::VersionedKinds;
use serde_json::{json, Value};

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn spread(subsets: Value) -> WorkloadSpread {
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "ns"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"},
            "subsets": subsets}
    }))
    .unwrap()
}

/// A running, ready pod of `subset` created at `created`, with `cost` when given.
fn pod(name: &str, subset: &str, created: &str, cost: Option<i64>) -> Pod {
    let mut annotations = json!({"apps.kruise.io/matched-workloadspread":
        json!({"name": "ws", "subset": subset}).to_string()});
    if let Some(cost) = cost {
        annotations[POD_DELETION_COST_ANNOTATION] = json!(cost.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u", "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2024-05-01T09:00:00Z"}]}
    }))
    .unwrap()
}

/// Pods admitted one by one into `order`'s subsets, each with the cost
/// [`admission_cost`] gives it on the counts so far; `created(i)` is the i-th pod's
/// creation time and `name(i)` its name.
fn admit(
    ws: &WorkloadSpread,
    order: &[&str],
    created: impl Fn(usize) -> String,
    name: impl Fn(usize) -> String,
) -> Vec<Pod> {
    let mut counts = vec![0usize; ws.spec.subsets.len()];
    let mut pods = Vec::new();
    for (i, subset) in order.iter().enumerate() {
        let g = ws
            .spec
            .subsets
            .iter()
            .position(|s| s.name == *subset)
            .unwrap();
        counts[g] += 1;
        let cost = admission_cost(ws, Rules::Planned, &counts, &[], subset);
        assert!(cost.is_some(), "pod {i}: no cost");
        pods.push(pod(&name(i), subset, &created(i), cost));
    }
    pods
}

/// The controller's patches once the pods settled (replicas reached, none recent).
fn settled_patches(ws: &WorkloadSpread, pods: &[Pod]) -> Vec<CostPatch> {
    let options = ReconcileOptions::default();
    let stamped = StampedPlaceholders::of(ws);
    let input = ReconcileInput {
        ws,
        pods,
        workload_replicas: pods.len() as i32,
        latest_version: VERSION_IGNORED,
        nodes: &BTreeMap::new(),
        versioned_kinds: &VersionedKinds::default(),
        now: now() + SignedDuration::from_secs(3600),
        options: &options,
        placeholders: stamped.view(now()),
        capacity: &crate::controller::capacity::Capacity::NONE,
    };
    reconcile(&input).deletion_costs
}

/// First fit over integer maxima (what a scale-out from zero does): every pod's
/// admission cost is its place in the path, whether the pods were created a second
/// apart or in the same second with names in any order (a burst).
#[test]
fn admission_costs_are_the_settled_ranking() {
    let ws = spread(
        json!([{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": 3}, {"name": "c"}]),
    );
    let order = ["a", "a", "b", "b", "b", "c", "c", "c"];
    let apart = |i: usize| (now() + SignedDuration::from_secs(i as i64)).to_string();
    let same_second = |_: usize| now().to_string();
    // Names in admission order: by name alone the oldest pod would go first.
    let named = |i: usize| format!("p{i}");
    for (case, created) in [
        ("a second apart", &apart as &dyn Fn(usize) -> String),
        ("same second", &same_second),
    ] {
        let pods = admit(&ws, &order, created, named);
        assert_eq!(settled_patches(&ws, &pods), vec![], "{case}");
        // The admission's costs are the planned ones: the newest pod goes first.
        let first = pods.last().unwrap();
        assert_eq!(
            current_cost(first),
            Some(&(PLANNED_COST_BASE - 8).to_string())
        );
    }
}

/// Where the admission's cost is not the settled one (a percentage spread whose path
/// interleaves subsets the scale-out filled one after another), the controller's
/// ranking rewrites it, and the costs then hold.
#[test]
fn the_controller_corrects_what_admission_could_not_know() {
    let ws = spread(
        json!([{"name": "a", "maxReplicas": "30%"}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]),
    );
    let order = ["a", "a", "a", "b", "b", "b", "b", "b", "c", "c"];
    let apart = |i: usize| (now() + SignedDuration::from_secs(i as i64)).to_string();
    let pods = admit(&ws, &order, apart, |i| format!("p{i}"));
    let patches = settled_patches(&ws, &pods);
    assert!(
        !patches.is_empty() && patches.len() < pods.len(),
        "{patches:?}"
    );
    let patched: Vec<Pod> = pods
        .into_iter()
        .map(|mut p| {
            if let Some(c) = patches
                .iter()
                .find(|c| Some(c.pod.as_str()) == p.metadata.name.as_deref())
            {
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(POD_DELETION_COST_ANNOTATION.into(), c.cost.to_string());
            }
            p
        })
        .collect();
    assert_eq!(settled_patches(&ws, &patched), vec![]);
}

/// No cost at admission where the controller decides alone.
#[test]
fn no_admission_cost_outside_the_planned_rules() {
    let ws = spread(json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}]));
    assert_eq!(
        admission_cost(&ws, Rules::Reference, &[1, 0], &[], "a"),
        None
    );
    assert_eq!(
        admission_cost(&ws, Rules::Planned, &[1, 0], &[], "gone"),
        None
    );
    let mut fleet = ws.clone();
    if let Some(t) = fleet.spec.target_ref.as_mut() {
        t.kind = "Fleet".into();
    }
    assert_eq!(
        admission_cost(&fleet, Rules::Planned, &[1, 0], &[], "a"),
        None
    );
    assert_eq!(
        admission_cost(&ws, Rules::Planned, &[1, 0], &[], "a"),
        Some(PLANNED_COST_BASE - 1)
    );
}

/// An unlimited subset's claims are not tracked, so a burst's pods there get their
/// admission cost on a count that lags: several share one cost. Their costs stay in the
/// band of the path's run of steps from that subset, so nothing is patched (#28), and a
/// scale-in by any number of pods — the ReplicaSet taking the lowest costs, ties in any
/// order — still leaves the path's counts. A cost outside its pod's band is patched.
#[test]
fn costs_within_their_subsets_run_are_kept() {
    let ws = spread(
        json!([{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": 3}, {"name": "c"}]),
    );
    let apart = |i: usize| (now() + SignedDuration::from_secs(i as i64)).to_string();
    let mut pods = admit(&ws, &["a", "a", "b", "b", "b"], apart, |i| format!("p{i}"));
    // Four pods into c while the status still counted none there: one cost for all.
    let stale = admission_cost(&ws, Rules::Planned, &[2, 3, 1], &[], "c").unwrap();
    for i in 5..9 {
        pods.push(pod(&format!("p{i}"), "c", &apart(i), Some(stale)));
    }
    assert_eq!(settled_patches(&ws, &pods), vec![]);
    // Every scale-in removes what the path removes from each subset.
    let sizes = [2, 3, 4, 0];
    let path: Vec<usize> = planned_path(&ws, &sizes, &[]).map(|(g, _)| g).collect();
    for ties_newest_first in [true, false] {
        let mut order: Vec<&Pod> = pods.iter().collect();
        order.sort_by(|x, y| {
            let by_name = name(x).cmp(name(y));
            cost_value(x)
                .cmp(&cost_value(y))
                .then(if ties_newest_first {
                    by_name.reverse()
                } else {
                    by_name
                })
        });
        for k in 0..=pods.len() {
            let mut left = sizes.to_vec();
            for &g in &path[..k] {
                left[g] -= 1;
            }
            let mut kept = [0usize; 4];
            for p in &order[k..] {
                let subset = crate::pods::matched(p).unwrap().subset;
                kept[["a", "b", "c"].iter().position(|s| *s == subset).unwrap()] += 1;
            }
            assert_eq!(kept.to_vec(), left, "scale-in by {k}");
        }
    }
    // A pod of a carrying a cost from c's band is out of place: patched.
    pods[0] = pod("p0", "a", &apart(0), Some(stale));
    let patched: Vec<String> = settled_patches(&ws, &pods)
        .into_iter()
        .map(|c| c.pod)
        .collect();
    assert!(patched.contains(&"p0".to_string()), "{patched:?}");
}

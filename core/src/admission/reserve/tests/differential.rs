//! [`decide`] against the rule it replaced: the same decisions, computed by unclaiming
//! the free placeholders on copies of the status and choosing on them, kept here as the
//! oracle. The new one asks the choice with a [`Free`] view instead; they must agree on
//! every decision and on the status a claim leaves.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// The rule as it was: unclaim on clones, choose on them.
fn decide_by_clones(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    claimant: &Claimant<'_>,
    holding: Holding<'_>,
) -> Decision {
    let Claimant {
        pod,
        new_uid,
        candidates,
        scale,
        now,
        may_wait,
    } = *claimant;
    let claim_in = |status: &mut WorkloadSpreadStatus, candidates: &[String]| {
        claim_among(status, ws, pod, candidates, scale, now, new_uid)
    };
    if is_tracked(status, pod, new_uid) {
        return Decision::Claimed(claim_in(status, candidates));
    }
    // Only placeholders this copy holds, young enough to hand out, can be taken: one it
    // lacks belongs to a recreated object or was dropped; an old one may be resolved by
    // another writer before this pod's settle.
    let handout = SignedDuration::from_secs(HANDOUT_SECONDS);
    let stamp = |subset: &str, key: &str| {
        status
            .versioned_subset_statuses
            .get(pod.version)
            .and_then(|v| v.iter().find(|s| s.name == subset))
            .and_then(|s| s.creating_pods.get(key))
            .map(|at| at.0)
    };
    let takeable: Vec<(&str, &str)> = holding
        .unused
        .iter()
        .copied()
        .filter(|(s, k)| stamp(s, k).is_some_and(|at| now.duration_since(at) < handout))
        .collect();
    let own_room = holding
        .unused
        .iter()
        .chain(holding.returning)
        .filter(|(s, k)| stamp(s, k).is_some());
    let mut own = status.clone();
    for (subset, key) in own_room {
        unclaim(&mut own, ws, pod, key, subset, scale);
    }
    let choose = |status: &WorkloadSpreadStatus| {
        let mut scratch = status.clone();
        claim_among(
            &mut scratch,
            ws,
            pod,
            candidates,
            scale,
            Timestamp::UNIX_EPOCH,
            new_uid,
        )
        .subset
    };
    let chosen = choose(&own);
    if may_wait {
        let mut all = own;
        let foreign: Vec<(String, String)> =
            versioned_statuses(&mut all, ws, pod.version, scale.replicas)
                .iter()
                .flat_map(|s| {
                    s.creating_pods
                        .keys()
                        .filter(|k| is_placeholder(k) && !held_by(k, holding.holder))
                        .map(|k| (s.name.clone(), k.clone()))
                })
                .collect();
        for (subset, key) in &foreign {
            unclaim(&mut all, ws, pod, key, subset, scale);
        }
        if !foreign.is_empty() && choose(&all) != chosen {
            return Decision::Wait;
        }
    }
    let Some(subset) = chosen else {
        return Decision::Claimed(claim_in(status, candidates));
    };
    if let Some((_, key)) = takeable.iter().find(|(s, _)| *s == subset) {
        return Decision::Take {
            subset,
            key: key.to_string(),
        };
    }
    // The holder's unused placeholders are no room for a write: claim in the subset the
    // rules chose with them free (they are elsewhere, or too old to hand out).
    let mut restricted = status.clone();
    let claim = claim_in(&mut restricted, std::slice::from_ref(&subset));
    if claim.subset.is_some() {
        *status = restricted;
        return Decision::Claimed(claim);
    }
    if may_wait {
        return Decision::Wait;
    }
    Decision::Claimed(claim_in(status, candidates))
}

const OWN: [&str; 3] = ["~h1.0", "~h1.1", "~h1.2"];
const KEYS: [&str; 7] = ["~h1.0", "~h1.1", "~h1.2", "~h2.0", "~h2.1", "p1", "p2"];

/// A subset's limit: unlimited, an integer or a percentage.
fn max_replicas() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        1 => Just(None),
        3 => (0..6i32).prop_map(|n| Some(json!(n))),
        2 => (0..=100i32).prop_map(|p| Some(json!(format!("{p}%")))),
    ]
}

/// A subset's status: counted replicas, stored missingReplicas, creating keys (indexes
/// into [`KEYS`]) with their ages in seconds, deleting pods.
type SubsetStatus = (i32, i32, BTreeMap<usize, i64>, Vec<bool>);

fn subset_status() -> impl Strategy<Value = SubsetStatus> {
    (
        0..5i32,
        -2..6i32,
        prop::collection::btree_map(0..KEYS.len(), 0..4i64, 0..4),
        prop::collection::vec(any::<bool>(), 0..2),
    )
}

#[derive(Debug, Clone)]
struct Case {
    max: [Option<Value>; 3],
    min: Option<i32>,
    statuses: Option<[SubsetStatus; 3]>,
    replicas: i32,
    reference: bool,
    pod: usize,
    unused: Vec<(usize, usize)>,
    returning: Vec<(usize, usize)>,
    candidates: Vec<bool>,
    may_wait: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        [max_replicas(), max_replicas(), max_replicas()],
        prop::option::of(0..4i32),
        prop::option::weighted(0.9, [subset_status(), subset_status(), subset_status()]),
        (0..12i32, any::<bool>(), 0..3usize),
        prop::collection::vec((0..3usize, 0..OWN.len()), 0..4),
        prop::collection::vec((0..3usize, 0..OWN.len()), 0..2),
        (prop::collection::vec(any::<bool>(), 3), any::<bool>()),
    )
        .prop_map(
            |(max, min, statuses, (replicas, reference, pod), unused, returning, (c, w))| Case {
                max,
                min,
                statuses,
                replicas,
                reference,
                pod,
                unused,
                returning,
                candidates: c,
                may_wait: w,
            },
        )
}

const NAMES: [&str; 3] = ["a", "b", "c"];

fn build(case: &Case) -> WorkloadSpread {
    let subsets: Vec<Value> = (0..3)
        .map(|i| {
            let mut s = json!({"name": NAMES[i]});
            if let Some(m) = &case.max[i] {
                s["maxReplicas"] = m.clone();
            }
            if i == 1 {
                if let Some(min) = case.min {
                    s["minReplicas"] = json!(min);
                }
            }
            s
        })
        .collect();
    let statuses: Option<Vec<Value>> = case.statuses.as_ref().map(|st| {
        st.iter()
            .enumerate()
            .map(|(i, (replicas, missing, creating, deleting))| {
                let creating: serde_json::Map<String, Value> = creating
                    .iter()
                    .map(|(k, age)| (KEYS[*k].to_string(), json!(ago(*age))))
                    .collect();
                let deleting: serde_json::Map<String, Value> = deleting
                    .iter()
                    .enumerate()
                    .map(|(n, _)| (format!("gone-{i}-{n}"), json!(ago(1))))
                    .collect();
                json!({"name": NAMES[i], "replicas": replicas, "missingReplicas": missing,
                    "creatingPods": creating, "deletingPods": deleting})
            })
            .collect()
    });
    let mut status = json!({});
    if let Some(st) = statuses {
        status["versionedSubsetStatuses"] = json!({VERSION_IGNORED: st});
    }
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "ns"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "subsets": subsets},
        "status": status
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn a_free_view_decides_as_unclaiming_on_copies(case in case()) {
        let ws = build(&case);
        let candidates: Vec<String> = NAMES
            .iter()
            .zip(&case.candidates)
            .filter(|(_, on)| **on)
            .map(|(n, _)| n.to_string())
            .collect();
        let departed: BTreeSet<String> = ["gone-0-0", "gone-2-1"].map(String::from).into();
        let rules = if case.reference { Rules::Reference } else { Rules::Planned };
        let claimant = Claimant {
            pod: PodKey { name: ["", "p1", "new"][case.pod], version: VERSION_IGNORED },
            new_uid: "req-uid",
            candidates: &candidates,
            scale: Scale::new(case.replicas, rules).with_departed(&departed),
            now: now(),
            may_wait: case.may_wait,
        };
        let pairs = |v: &[(usize, usize)]| -> Vec<(&str, &str)> {
            v.iter().map(|(s, k)| (NAMES[*s], OWN[*k])).collect()
        };
        let (unused, returning) = (pairs(&case.unused), pairs(&case.returning));
        let holding = Holding { holder: "h1", unused: &unused, returning: &returning };
        let mut by_view = ws.status.clone().unwrap_or_default();
        let mut by_clones = by_view.clone();
        let got = decide(&mut by_view, &ws, &claimant, holding);
        let want = decide_by_clones(&mut by_clones, &ws, &claimant, holding);
        prop_assert_eq!(&got, &want);
        match got {
            Decision::Claimed(_) => prop_assert_eq!(by_view, by_clones),
            // Only a claim changes the status.
            _ => prop_assert_eq!(by_view, ws.status.clone().unwrap_or_default()),
        }
    }
}

//! The scale-in path against an oracle of its own (issue #65): for every k, the state
//! after removing the k lowest-cost pods is within every maximum at `n − k` wherever
//! any state reachable from the pods is, with the least possible excess elsewhere; and
//! it is the plan at `n − k` wherever the plan is one removal away and keeps the levels
//! below as good.

use super::*;
use crate::api::v1beta1::WorkloadSpread;
use crate::percent::scaled_value;
use crate::rules::planned_spread;
use proptest::prelude::*;
use serde_json::{json, Value};

fn spread(subsets: Value) -> WorkloadSpread {
    serde_json::from_value(json!({"metadata": {"name": "ws"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": subsets}}))
    .unwrap()
}

/// The maxima shapes of the issue's sweep.
fn issue_shapes() -> Vec<Value> {
    vec![
        json!([{"name": "zone-a", "maxReplicas": "30%"}, {"name": "zone-b", "maxReplicas": "50%"}, {"name": "zone-c"}]),
        json!([{"name": "zone-a", "maxReplicas": "20%"}, {"name": "zone-b", "maxReplicas": "30%"}, {"name": "zone-c"}]),
        json!([{"name": "zone-a", "maxReplicas": 3}, {"name": "zone-b", "maxReplicas": 4}, {"name": "zone-c"}]),
        json!([{"name": "zone-a", "maxReplicas": "34%"}, {"name": "zone-b", "maxReplicas": "33%"}, {"name": "zone-c", "maxReplicas": "33%"}]),
    ]
}

/// The groups (spec subsets, then pods outside every subset) a scale-in from `sizes`
/// removes from, first removal first.
fn removals(ws: &WorkloadSpread, sizes: &[usize]) -> Vec<usize> {
    ScaleIn::new(ws, sizes, &[]).collect()
}

/// The oracle's own reading of the maxima at `total` pods (`None`: unlimited), one per
/// group (the last group, outside every subset, has none).
fn maxima(ws: &WorkloadSpread, total: usize) -> Vec<Option<usize>> {
    let t = i32::try_from(total).unwrap();
    ws.spec
        .subsets
        .iter()
        .map(|s| {
            let m = s.max_replicas.as_ref()?;
            Some(usize::try_from(scaled_value(m, t).unwrap_or(0)).unwrap_or(0))
        })
        .chain([None])
        .collect()
}

/// Pods above their subset's maximum in `x` (one count per group) at `level` pods.
fn excess(ws: &WorkloadSpread, x: &[usize], level: usize) -> usize {
    x.iter()
        .zip(maxima(ws, level))
        .map(|(&n, max)| max.map_or(0, |m| n.saturating_sub(m)))
        .sum()
}

/// The least excess at `level` of any state of `level` pods reachable from `from` by
/// removals: every state `x ≤ from` has `excess ≥ level − Σ min(from, max)`, and a
/// state reaching it exists (fill each group up to `min(from, max)`, then the rest).
fn least_excess(ws: &WorkloadSpread, from: &[usize], level: usize) -> usize {
    let within: usize = from
        .iter()
        .zip(maxima(ws, level))
        .map(|(&n, max)| max.map_or(n, |m| n.min(m)))
        .sum();
    level.saturating_sub(within)
}

/// The plan at `level` per group.
fn plan_at(ws: &WorkloadSpread, level: usize) -> Vec<usize> {
    let p = planned_spread(ws, level);
    p.subsets.iter().copied().chain([p.unplaced]).collect()
}

/// The states the path walks through: `states[m]` holds `m` pods.
fn states(sizes: &[usize], path: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = sizes.iter().sum();
    let mut x = sizes.to_vec();
    let mut out = vec![x.clone()];
    for &g in path {
        assert!(x[g] > 0, "a removal from an empty group {g}");
        x[g] -= 1;
        out.push(x.clone());
    }
    assert_eq!(out.len(), n + 1, "the path removes every pod");
    out.reverse();
    out
}

/// The checks of the module doc for a scale-in from `sizes`; `sample` levels get the
/// on-plan check (every level when `None`). Returns the first failure.
fn check(ws: &WorkloadSpread, sizes: &[usize], sample: Option<&[usize]>) -> Result<(), String> {
    let n: usize = sizes.iter().sum();
    let path = removals(ws, sizes);
    let states = states(sizes, &path);
    let least: Vec<usize> = (0..=n).map(|m| least_excess(ws, sizes, m)).collect();
    for m in 0..n {
        let got = excess(ws, &states[m], m);
        if got != least[m] {
            return Err(format!(
                "from {sizes:?} ({n} pods) to {m}: {:?} is {got} above the maxima {:?}, \
                 the least reachable is {} (plan {:?})",
                states[m],
                maxima(ws, m),
                least[m],
                plan_at(ws, m)
            ));
        }
    }
    let all: Vec<usize> = (0..n).collect();
    for &m in sample.unwrap_or(&all) {
        let plan = plan_at(ws, m);
        let reachable = plan.iter().zip(&states[m + 1]).all(|(p, x)| p <= x);
        // The plan keeps every level below as good as the pods allow.
        let keeps = reachable && (0..m).all(|l| least_excess(ws, &plan, l) == least[l]);
        if keeps && states[m] != plan {
            return Err(format!(
                "from {sizes:?} to {m}: {:?}, the plan {plan:?} was one removal away from {:?}",
                states[m],
                states[m + 1]
            ));
        }
    }
    Ok(())
}

/// The spread admission gives `n` pods created from none, per group.
fn on_plan(ws: &WorkloadSpread, n: usize) -> Vec<usize> {
    plan_at(ws, n)
}

/// Deterministic table: the issue's scale-ins end on the counts below (zone-a, b, c).
#[test]
fn the_issues_scale_ins_end_within_every_maximum() {
    let ws = spread(issue_shapes()[0].clone());
    // (from, to, counts at `to`, pods above a maximum at `to`)
    let cases: [(usize, usize, [usize; 3], usize); 6] = [
        (600, 60, [18, 30, 12], 0),
        // On the way: 62 on plan, 61 off it (the plan 19/31/11 would force 60 above).
        (600, 62, [19, 31, 12], 0),
        (600, 61, [19, 30, 12], 0),
        (3000, 300, [90, 150, 60], 0),
        (62, 60, [18, 30, 12], 0),
        // 19 / 31 / 11 at 61: every 60 of them leave zone-a above 18 or zone-b above 30
        // (zone-c would need 12); the least excess is one pod.
        (61, 60, [19, 30, 11], 1),
    ];
    for (from, to, want, above) in cases {
        let sizes = on_plan(&ws, from);
        let states = states(&sizes, &removals(&ws, &sizes));
        assert_eq!(states[to][..3], want, "{from} → {to}");
        assert_eq!(excess(&ws, &states[to], to), above, "{from} → {to}");
        assert_eq!(least_excess(&ws, &sizes, to), above, "{from} → {to}");
    }
}

/// The issue's sweep: scale-ins from 61, 100 and 600 pods on plan to every lower count
/// under the four shapes; a count ends above a maximum only where no set of the pods
/// can be within every maximum (one per shape with rounded-up percentages: 61 → 60).
#[test]
fn the_sweep_ends_above_a_maximum_only_where_no_state_is_within() {
    let (mut cases, mut above, mut unavoidable, mut off_plan) = (0, vec![], vec![], 0);
    for (i, shape) in issue_shapes().into_iter().enumerate() {
        let ws = spread(shape);
        for from in [61, 100, 600] {
            let sizes = on_plan(&ws, from);
            let states = states(&sizes, &removals(&ws, &sizes));
            for (to, state) in states.iter().enumerate().take(from) {
                cases += 1;
                off_plan += usize::from(*state != plan_at(&ws, to));
                if excess(&ws, state, to) > 0 {
                    above.push((i, from, to));
                }
                if least_excess(&ws, &sizes, to) > 0 {
                    unavoidable.push((i, from, to));
                }
            }
        }
    }
    eprintln!(
        "sweep: {cases} scale-ins, {off_plan} off plan, {} end above a maximum, {} must: \
         {unavoidable:?}",
        above.len(),
        unavoidable.len()
    );
    assert_eq!(cases, 3044);
    assert_eq!(above, unavoidable);
    // 61 → 60 under 30 %/50 %/rest (19/31/11, zone-c would need 12) and 20 %/30 %/rest
    // (13/19/29 against maxima 12/18: zone-c would need 30).
    assert_eq!(unavoidable, [(0, 61, 60), (1, 61, 60)]);
}

/// A spread of maxima (and minimums) as validation admits them: 2–5 subsets, integers
/// or percentages, minimums not above the maximum (percent minimums summing to at most
/// 100 %), an unlimited last subset or not.
fn shape() -> impl Strategy<Value = Value> {
    let subset = (any::<bool>(), 0u32..=100, prop::option::of(0u32..=100));
    let random = (prop::collection::vec(subset, 2..=5), any::<bool>()).prop_map(
        |(subsets, unlimited_last)| {
            let k = subsets.len();
            let mut min_pct = 0;
            let out: Vec<Value> = subsets
                .into_iter()
                .enumerate()
                .map(|(i, (percent, max, min))| {
                    let mut s = json!({"name": format!("s{i}")});
                    let unlimited = unlimited_last && i == k - 1;
                    let (max, min) = match percent && !unlimited {
                        true => (max, min.map(|m| m.min(max).min(100 - min_pct))),
                        false => (max / 2, min.map(|m| (m / 4).min(max / 2))),
                    };
                    if !unlimited {
                        s["maxReplicas"] = match percent {
                            true => json!(format!("{max}%")),
                            false => json!(max),
                        };
                    }
                    if let Some(m) = min {
                        if percent && !unlimited {
                            min_pct += m;
                            s["minReplicas"] = json!(format!("{m}%"));
                        } else {
                            s["minReplicas"] = json!(m);
                        }
                    }
                    s
                })
                .collect();
            Value::Array(out)
        },
    );
    prop_oneof![
        1 => prop::sample::select(issue_shapes()),
        3 => random,
    ]
}

/// Replica counts up to 10 000, the sweep's values and their targets among them.
fn replicas() -> impl Strategy<Value = usize> {
    prop_oneof![
        prop::sample::select(vec![60, 61, 100, 300, 600, 3000]),
        0usize..=200,
        0usize..=10_000,
    ]
}

/// The levels whose on-plan check a large scale-in samples: the issue's targets, the
/// top, the bottom and `extra`.
fn sampled(n: usize, extra: &[usize]) -> Vec<usize> {
    let mut levels: Vec<usize> = [0, 1, 59, 60, 61, 299, 300, n.saturating_sub(2)]
        .into_iter()
        .chain(extra.iter().map(|e| e % n.max(1)))
        .filter(|&m| m < n)
        .collect();
    levels.sort_unstable();
    levels.dedup();
    levels
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// From the spread on plan at `n`, every scale-in by k pods, k = 0..n.
    #[test]
    fn every_scale_in_from_the_plan_stays_within_every_maximum(
        shape in shape(), n in replicas(), extra in prop::collection::vec(any::<usize>(), 24),
    ) {
        let ws = spread(shape);
        let sizes = on_plan(&ws, n);
        let sample = (n > 700).then(|| sampled(n, &extra));
        if let Err(e) = check(&ws, &sizes, sample.as_deref()) {
            return Err(TestCaseError::fail(format!("{e}\nsubsets {}", json!(ws.spec.subsets))));
        }
    }
}

/// Pods per group (spec subsets of `shape`, then outside every subset) in any spread:
/// above maxima, below them, with pods outside every subset.
fn any_sizes(shape: Value) -> impl Strategy<Value = (Value, Vec<usize>)> {
    let groups = shape.as_array().map_or(0, Vec::len) + 1;
    let outside = prop_oneof![3 => Just(0usize), 1 => 0usize..20];
    (
        Just(shape),
        prop::collection::vec(0usize..400, groups - 1),
        outside,
    )
        .prop_map(|(shape, mut sizes, outside)| {
            sizes.push(outside);
            (shape, sizes)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// From any pods (a burst above a maximum, subsets short of their plan, pods outside
    /// every subset): the same checks.
    #[test]
    fn every_scale_in_from_any_pods_keeps_the_least_excess(
        (shape, sizes) in shape().prop_flat_map(any_sizes),
    ) {
        let ws = spread(shape);
        if let Err(e) = check(&ws, &sizes, None) {
            return Err(TestCaseError::fail(format!("{e}\nsubsets {}", json!(ws.spec.subsets))));
        }
    }

    /// The path from any state on it is its own tail: a scale-in by the lowest costs
    /// leaves pods whose costs are still their places (nothing to rewrite).
    #[test]
    fn a_scale_in_continues_the_path_it_was_on(
        (shape, sizes) in shape().prop_flat_map(any_sizes), cut in any::<usize>(),
    ) {
        let ws = spread(shape);
        let path = removals(&ws, &sizes);
        let n = path.len();
        let k = cut % (n + 1);
        let states = states(&sizes, &path);
        prop_assert_eq!(removals(&ws, &states[n - k]), &path[k..]);
    }

    /// Pods of other versions stay while this version's scale in; the maxima bound the
    /// subsets' totals at the workload's total: every total is within its maximum
    /// wherever this version's pods allow it, and above it elsewhere by no more than
    /// the other versions' pods force plus the least this version's can.
    #[test]
    fn other_versions_share_the_maxima(
        (shape, sizes) in shape().prop_flat_map(any_sizes),
        others in prop::collection::vec(0usize..60, 6),
    ) {
        let ws = spread(shape);
        let others = &others[..sizes.len()];
        let path: Vec<usize> = ScaleIn::new(&ws, &sizes, others).collect();
        let states = states(&sizes, &path);
        let o: usize = others.iter().sum();
        for (m, x) in states.iter().enumerate().take(path.len()) {
            let maxima = maxima(&ws, m + o);
            let total: Vec<usize> = x.iter().zip(others).map(|(a, b)| a + b).collect();
            let above: usize = total.iter().zip(&maxima)
                .map(|(&n, max)| max.map_or(0, |m| n.saturating_sub(m))).sum();
            let forced: usize = others.iter().zip(&maxima)
                .map(|(&n, max)| max.map_or(0, |m| n.saturating_sub(m))).sum();
            let within: usize = sizes.iter().zip(others).zip(&maxima)
                .map(|((&n, &other), max)| max.map_or(n, |m| n.min(m.saturating_sub(other))))
                .sum();
            prop_assert_eq!(above, forced + m.saturating_sub(within), "at {} of {:?}: {:?}", m, sizes, x);
        }
    }
}

//! Which rules decide the moments of change: the room of a percentage subset at
//! admission and the deletion costs the controller writes.
//!
//! [`Rules::Planned`] (the default) lands scale-out and scale-in on the planned spread
//! at once; [`Rules::Reference`] is OpenKruise's exact behaviour (stale `missingReplicas`
//! for percentages until the controller catches up, costs by subset index), kept for
//! users who depend on it and for the ported reference tests. `docs/semantics.md` has
//! the differences, step by step.

use crate::api::v1beta1::WorkloadSpread;
use crate::percent::scaled_value;
use serde::{Deserialize, Serialize};

/// The rule set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rules {
    /// Percentage rooms from the workload's current replicas; deletion costs that rank
    /// the whole scale-in path.
    #[default]
    Planned,
    /// OpenKruise's rules.
    Reference,
}

impl Rules {
    /// The name used in settings and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Rules::Planned => "planned",
            Rules::Reference => "reference",
        }
    }
}

impl std::str::FromStr for Rules {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "planned" => Ok(Rules::Planned),
            "reference" => Ok(Rules::Reference),
            other => Err(format!(
                "unknown rules {other:?}: use \"planned\" (default) or \"reference\""
            )),
        }
    }
}

/// Pods per spec subset (in spec order) and pods left without a subset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    pub subsets: Vec<usize>,
    pub unplaced: usize,
}

/// The spread admission gives `replicas` pods created from none (the planner's answer
/// for a fresh scale to `replicas`): subsets below their `minReplicas` first, in spec
/// order, then each subset up to its `maxReplicas`, all scaled to `replicas`
/// (percentages rounded up); an unlimited subset takes whatever reaches it, and what
/// no subset takes is unplaced. Invalid values count as 0.
pub fn planned_spread(ws: &WorkloadSpread, replicas: usize) -> Spread {
    planned_spread_holding(ws, replicas, &[])
}

/// [`planned_spread`] when some subsets take no new pods (marked unschedulable):
/// `held[i] = Some(n)` keeps subset `i` at `n` pods (at most its maximum) and fills the
/// others around it; `None` (or a missing entry) is a subset admission may fill. The
/// target both the best-effort choice (`admission::best_effort`) and rebalancing
/// (`controller::rebalance`) aim at.
pub fn planned_spread_holding(
    ws: &WorkloadSpread,
    replicas: usize,
    held: &[Option<usize>],
) -> Spread {
    let total = i32::try_from(replicas).unwrap_or(i32::MAX);
    let scale = |v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| {
        scaled_value(v, total).map_or(0, |n| usize::try_from(n).unwrap_or(0))
    };
    let max: Vec<Option<usize>> = ws
        .spec
        .subsets
        .iter()
        .map(|s| s.max_replicas.as_ref().map(scale))
        .collect();
    let held_at = |i: usize| held.get(i).copied().flatten();
    let mut counts = vec![0usize; ws.spec.subsets.len()];
    let mut left = replicas;
    for (i, count) in counts.iter_mut().enumerate() {
        if let Some(n) = held_at(i) {
            let take = n.min(max[i].unwrap_or(usize::MAX)).min(left);
            *count = take;
            left -= take;
        }
    }
    for (i, s) in ws.spec.subsets.iter().enumerate() {
        if held_at(i).is_some() {
            continue;
        }
        let min = s.min_replicas.as_ref().map_or(0, scale);
        let take = min.min(max[i].unwrap_or(usize::MAX)).min(left);
        counts[i] = take;
        left -= take;
    }
    for (i, count) in counts.iter_mut().enumerate() {
        if held_at(i).is_some() {
            continue;
        }
        let room = max[i].map_or(usize::MAX, |m| m.saturating_sub(*count));
        let take = room.min(left);
        *count += take;
        left -= take;
    }
    Spread {
        subsets: counts,
        unplaced: left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws(subsets: serde_json::Value) -> WorkloadSpread {
        serde_json::from_value(json!({"metadata": {"name": "ws"}, "spec": {"subsets": subsets}}))
            .unwrap()
    }

    #[test]
    fn planned_spread_fills_minimums_then_maxima_in_order() {
        let pct = ws(json!([{"name": "a", "maxReplicas": "30%"},
            {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]));
        let mins = ws(json!([{"name": "a", "maxReplicas": 4, "minReplicas": 2},
            {"name": "b", "maxReplicas": 5, "minReplicas": 2}, {"name": "c"}]));
        let bounded = ws(json!([{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": 3}]));
        // (spec, replicas, subsets, unplaced)
        let cases: [(&WorkloadSpread, usize, Vec<usize>, usize); 10] = [
            (&pct, 0, vec![0, 0, 0], 0),
            (&pct, 1, vec![1, 0, 0], 0),
            (&pct, 4, vec![2, 2, 0], 0),
            (&pct, 6, vec![2, 3, 1], 0),
            (&pct, 7, vec![3, 4, 0], 0),
            (&pct, 10, vec![3, 5, 2], 0),
            (&mins, 3, vec![2, 1, 0], 0),
            (&mins, 10, vec![4, 5, 1], 0),
            (&bounded, 4, vec![2, 2], 0),
            (&bounded, 9, vec![2, 3], 4),
        ];
        for (ws, replicas, subsets, unplaced) in cases {
            assert_eq!(
                planned_spread(ws, replicas),
                Spread { subsets, unplaced },
                "{replicas} replicas of {:?}",
                ws.spec
                    .subsets
                    .iter()
                    .map(|s| &s.max_replicas)
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn held_subsets_keep_their_pods_and_the_others_fill_around_them() {
        let pct = ws(json!([{"name": "a", "maxReplicas": "30%"},
            {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]));
        let mins = ws(json!([{"name": "a", "maxReplicas": 4, "minReplicas": 2},
            {"name": "b", "maxReplicas": 5, "minReplicas": 2}, {"name": "c"}]));
        // (spec, replicas, held, subsets, unplaced)
        type Case<'a> = (
            &'a WorkloadSpread,
            usize,
            Vec<Option<usize>>,
            Vec<usize>,
            usize,
        );
        let cases: [Case; 6] = [
            (&pct, 10, vec![], vec![3, 5, 2], 0),
            (&pct, 10, vec![Some(0)], vec![0, 5, 5], 0),
            (&pct, 10, vec![Some(1), None, None], vec![1, 5, 4], 0),
            // Held above its maximum: kept at the maximum.
            (&pct, 10, vec![Some(7)], vec![3, 5, 2], 0),
            (&pct, 10, vec![None, Some(0), Some(0)], vec![3, 0, 0], 7),
            (&mins, 6, vec![Some(0)], vec![0, 5, 1], 0),
        ];
        for (ws, replicas, held, subsets, unplaced) in cases {
            assert_eq!(
                planned_spread_holding(ws, replicas, &held),
                Spread { subsets, unplaced },
                "{replicas} replicas, held {held:?}"
            );
        }
    }

    #[test]
    fn rules_parse_and_print() {
        for r in [Rules::Planned, Rules::Reference] {
            assert_eq!(r.as_str().parse::<Rules>(), Ok(r));
            assert_eq!(serde_json::to_value(r).unwrap(), json!(r.as_str()));
        }
        assert!("kruise".parse::<Rules>().unwrap_err().contains("planned"));
        assert_eq!(Rules::default(), Rules::Planned);
    }
}

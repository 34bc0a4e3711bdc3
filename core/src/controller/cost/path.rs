//! The planned scale-in path (issue #65): the order in which the planned costs
//! let a ReplicaSet remove pods, one group (spec subset, or the pods outside every
//! subset) per step, from the pods that exist down to none.
//!
//! # The rule
//!
//! Going down one pod at a time, from `m` pods to `m − 1`, the step removes a pod of
//! a group that keeps **every level below as good as the pods allow**: at every count
//! `l < m`, no subset is left above its maximum at `l` where some `l` of the pods that
//! exist are within every maximum, and elsewhere as few pods are above a maximum as
//! any `l` of them can be. Among the groups that do, the step removes from the one
//! furthest above its maximum at `m − 1`, then furthest above the plan at `m − 1`
//! ([`planned_spread`]: minimums first, then each subset up to its maximum, in order),
//! then above its minimum, then the later group (pods outside every subset first, then
//! later subsets: the reference's order). That choice is always one of the states one
//! removal away, among those allowed, closest to the plan at `m − 1` (least `Σ |pods −
//! planned|`): a group above its maximum is above the plan, and removing a pod of a
//! group above the plan brings the state one closer. Step by step, not optimised over
//! the whole path.
//!
//! So where the plan at `m − 1` is one removal away and keeps the levels below as good,
//! the step lands on it (it is the only group above the plan, by one); where the plans
//! are not nested — percentages round up: 61 pods under 30 %/50 %/rest plan 19/31/11,
//! 60 plan 18/30/12 — the path leaves the plan where it must not stay on it (at 61:
//! 19/30/12, one removal from 18/30/12) rather than leave a subset above its maximum.
//!
//! # Why a step always exists, and the levels stay as good
//!
//! Maxima scale monotonically: `max_g(l) ≤ max_g(l + 1)` (integers are constant,
//! `⌈p·l/100⌉` grows with `l`, invalid or negative values count as 0 at every level).
//! For a state `x` (pods per group) let `S_x(l) = Σ_g min(x_g, max_g(l)) − l`. Any
//! state `y ≤ x` of `l` pods is above the maxima by `Σ_g max(0, y_g − max_g(l)) = l −
//! Σ_g min(y_g, max_g(l)) ≥ −S_x(l)`, and filling each group up to `min(x_g,
//! max_g(l))` first reaches it; so `E_x(l) = max(0, −S_x(l))` is the least excess at
//! `l` reachable from `x`. Let `c` be the pods that exist; the path keeps `E_x = E_c`
//! at every level below the current one. A level `l` is *tight* when `S_x(l) ≤ 0`.
//! Removing a pod of group `g` lowers `S_x(l)` by one exactly where `x_g ≤ max_g(l)`,
//! and leaves it elsewhere; it raises `E_x(l)` only at a tight level where `x_g ≤
//! max_g(l)`. Let `H` be the highest tight level below `m`: `g` keeps every level iff
//! `x_g > max_g(H)` (then, by monotony, `x_g > max_g(l)` at every `l ≤ H`, and levels
//! above `H` have `S ≥ 1`). Such a `g` exists: `Σ_g min(x_g, max_g(H)) ≤ H < m = Σ_g
//! x_g`. With no tight level, any group with pods keeps them. By induction the state at
//! every level `l` has excess `E_c(l)`: zero wherever any `l` of the pods are within
//! every maximum, the least possible elsewhere. Every step is forced by nothing but
//! the state, so the path from a state on it is its own tail: a scale-in rewrites no
//! remaining pod's cost.
//!
//! Groups without a maximum (unlimited subsets, pods outside every subset) count as
//! unbounded. Pods of other versions of the workload (`others`, per group) stay as they
//! are while this version's pods are removed: the maxima bound each subset's total, so
//! this version's share at `l` is the maximum at `l + Σ others` less the others' pods
//! there, and the plan is the plan at that total less them.
//!
//! The tight levels are kept in a tree over levels (range add, highest index at most
//! zero): `O(n·(groups + log n))` for `n` pods.

use crate::api::v1beta1::WorkloadSpread;
use crate::percent::Scaler;
use crate::rules::planned_spread;

/// The scale-in path over groups holding `sizes` pods (spec subsets in order, then the
/// pods outside every subset), beside `others` pods of other versions per group (empty:
/// none): the group each step removes a pod from, first step first.
pub(super) struct ScaleIn<'a> {
    ws: &'a WorkloadSpread,
    left: Vec<usize>,
    others: Vec<usize>,
    others_total: usize,
    /// `caps[g][l]`: group `g`'s share of its maximum at `l` of this version's pods
    /// (`usize::MAX`: unbounded), for `l` in `0..=n`.
    caps: Vec<Vec<usize>>,
    slack: Levels,
    level: usize,
}

impl<'a> ScaleIn<'a> {
    pub(super) fn new(ws: &'a WorkloadSpread, sizes: &[usize], others: &[usize]) -> Self {
        let groups = ws.spec.subsets.len() + 1;
        let mut left = sizes.to_vec();
        left.resize(groups, 0);
        let mut others = others.to_vec();
        others.resize(groups, 0);
        let others_total: usize = others.iter().sum();
        let n: usize = left.iter().sum();
        let caps: Vec<Vec<usize>> = (0..groups)
            .map(|g| {
                let max = ws.spec.subsets.get(g).and_then(|s| s.max_replicas.as_ref());
                let max = max.map(|m| Scaler::of(m).ok());
                (0..=n)
                    .map(|l| share(max, l + others_total, others[g]))
                    .collect()
            })
            .collect();
        let initial: Vec<i64> = (0..n)
            .map(|l| {
                let within: usize = (0..groups).map(|g| left[g].min(caps[g][l])).sum();
                signed(within) - signed(l)
            })
            .collect();
        ScaleIn {
            ws,
            left,
            others,
            others_total,
            caps,
            slack: Levels::new(&initial),
            level: n,
        }
    }

    /// The plan at `level` pods of this version, per group: the plan at the workload's
    /// total, less the other versions' pods.
    fn plan(&self, level: usize) -> Vec<usize> {
        let p = planned_spread(self.ws, level + self.others_total);
        p.subsets
            .iter()
            .copied()
            .chain([p.unplaced])
            .zip(&self.others)
            .map(|(want, other)| want.saturating_sub(*other))
            .collect()
    }

    /// Group `g`'s minimum at `level` pods of this version (0 outside every subset).
    fn minimum(&self, g: usize, level: usize) -> usize {
        let min = self
            .ws
            .spec
            .subsets
            .get(g)
            .and_then(|s| s.min_replicas.as_ref());
        min.map_or(0, |m| {
            scaled(Scaler::of(m).ok(), level + self.others_total).saturating_sub(self.others[g])
        })
    }
}

impl Iterator for ScaleIn<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let below = self.level.checked_sub(1)?;
        // The highest tight level below the current one (module doc): only groups above
        // their share there keep every level as good.
        let tight = self.slack.highest_at_most_zero(below);
        let plan = self.plan(below);
        let keeps = |g: usize| tight.is_none_or(|h| self.left[g] > self.caps[g][h]);
        let rank = |g: usize| {
            let held = self.left[g];
            (
                held.saturating_sub(self.caps[g][below]),
                signed(held) - signed(plan[g]),
                held > self.minimum(g, below),
                g,
            )
        };
        let candidates = (0..self.left.len()).filter(|&g| self.left[g] > 0);
        // A keeping group always exists (module doc); the fallback keeps the path whole.
        let g = candidates
            .clone()
            .filter(|&g| keeps(g))
            .max_by_key(|&g| rank(g))
            .or_else(|| candidates.max_by_key(|&g| rank(g)))?;
        // The levels where this group is within its share lose one pod within.
        let held = self.left[g];
        let from = self.caps[g][..=below].partition_point(|&cap| cap < held);
        if from <= below {
            self.slack.add(from, below, -1);
        }
        self.left[g] -= 1;
        self.level = below;
        Some(g)
    }
}

/// A maximum's share for one version at `total` pods of the workload, less `others`
/// pods of other versions in the subset (`None`: no maximum, unbounded, `usize::MAX`;
/// `Some(None)`: an invalid one, 0).
fn share(max: Option<Option<Scaler>>, total: usize, others: usize) -> usize {
    max.map_or(usize::MAX, |m| scaled(m, total).saturating_sub(others))
}

/// A parsed int-or-percent at `total` (percentages rounded up); invalid or negative: 0.
fn scaled(v: Option<Scaler>, total: usize) -> usize {
    let total = i32::try_from(total).unwrap_or(i32::MAX);
    v.map_or(0, |s| usize::try_from(s.at(total)).unwrap_or(0))
}

fn signed(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Values per level with "add to a range" and "the highest level at most `hi` whose
/// value is ≤ 0", both `O(log n)` (a segment tree; each node's minimum includes its
/// own pending add, not its ancestors').
struct Levels {
    len: usize,
    min: Vec<i64>,
    add: Vec<i64>,
}

impl Levels {
    fn new(values: &[i64]) -> Self {
        let len = values.len();
        let mut t = Levels {
            len,
            min: vec![0; 4 * len.max(1)],
            add: vec![0; 4 * len.max(1)],
        };
        if len > 0 {
            t.build(1, 0, len - 1, values);
        }
        t
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, values: &[i64]) {
        if lo == hi {
            self.min[node] = values[lo];
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * node, lo, mid, values);
        self.build(2 * node + 1, mid + 1, hi, values);
        self.min[node] = self.min[2 * node].min(self.min[2 * node + 1]);
    }

    /// Adds `delta` to the levels `from..=to`.
    fn add(&mut self, from: usize, to: usize, delta: i64) {
        if self.len > 0 && from <= to {
            self.add_in(1, 0, self.len - 1, from, to.min(self.len - 1), delta);
        }
    }

    fn add_in(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, delta: i64) {
        if to < lo || hi < from {
            return;
        }
        if from <= lo && hi <= to {
            self.add[node] += delta;
            self.min[node] += delta;
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_in(2 * node, lo, mid, from, to, delta);
        self.add_in(2 * node + 1, mid + 1, hi, from, to, delta);
        self.min[node] = self.add[node] + self.min[2 * node].min(self.min[2 * node + 1]);
    }

    /// The highest level `≤ hi` whose value is at most 0.
    fn highest_at_most_zero(&self, hi: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.find(1, 0, self.len - 1, hi, 0)
    }

    fn find(&self, node: usize, lo: usize, hi: usize, bound: usize, above: i64) -> Option<usize> {
        if lo > bound || self.min[node] + above > 0 {
            return None;
        }
        if lo == hi {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        let inner = above + self.add[node];
        self.find(2 * node + 1, mid + 1, hi, bound, inner)
            .or_else(|| self.find(2 * node, lo, mid, bound, inner))
    }
}

#[cfg(test)]
mod tests;

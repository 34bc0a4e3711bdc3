//! The subset choice (`getSuitableSubset`, preceded by the `minReplicas` extension), on
//! a status as it stands or with some `creatingPods` entries counted as free
//! ([`Free`]): how [`super::reserve::decide`] asks "where would this pod go were these
//! placeholders room?" without unclaiming them on copies of the status.

use super::reserve::{held_by, is_placeholder};
use super::room::{occupancy, room_left_freeing};
use super::{initial_subset_statuses, Scale};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::percent::scaled_value;

/// The `creatingPods` entries a choice counts as room instead of pods: a holder's own
/// placeholders, `(subset, key)`, and with [`Free::and_foreign`] every placeholder of
/// another holder too. An entry counts only in the subset that records it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Free<'a> {
    own: &'a [(&'a str, &'a str)],
    /// Every placeholder not held by this holder is free too.
    foreign_of: Option<&'a str>,
}

impl<'a> Free<'a> {
    /// Nothing counted as free: the status as it stands.
    pub const NONE: Free<'static> = Free {
        own: &[],
        foreign_of: None,
    };

    /// The entries `own` (subset, key) counted as free.
    pub fn own(own: &'a [(&'a str, &'a str)]) -> Self {
        Free {
            own,
            foreign_of: None,
        }
    }

    /// Also every placeholder of a holder other than `holder`.
    pub fn and_foreign(self, holder: &'a str) -> Self {
        Free {
            foreign_of: Some(holder),
            ..self
        }
    }

    fn is_free(&self, subset: &str, key: &str) -> bool {
        self.own.iter().any(|(s, k)| *s == subset && *k == key)
            || self
                .foreign_of
                .is_some_and(|h| is_placeholder(key) && !held_by(key, h))
    }

    /// How many of `s`'s `creatingPods` entries are free.
    pub(crate) fn count(&self, s: &WorkloadSpreadSubsetStatus) -> i64 {
        let free = s
            .creating_pods
            .keys()
            .filter(|k| self.is_free(&s.name, k))
            .count();
        i64::try_from(free).unwrap_or(i64::MAX)
    }
}

/// The first schedulable subset still below its minimum (and with room), else the first
/// schedulable subset with room ([`super::room`]), among those `allowed`, with `free`'s
/// entries counted as room. Returns the index and whether it was chosen to fill a
/// minimum.
pub(crate) fn choose_subset(
    statuses: &[WorkloadSpreadSubsetStatus],
    ws: &WorkloadSpread,
    scale: Scale,
    allowed: &impl Fn(&str) -> bool,
    free: Free<'_>,
) -> Option<(usize, bool)> {
    let replicas = scale.replicas;
    let has_room = |s: &WorkloadSpreadSubsetStatus| {
        allowed(&s.name)
            && !s.is_unschedulable()
            && room_left_freeing(ws, s, scale, free.count(s)).is_none_or(|room| room > 0)
    };
    let below_min = |s: &WorkloadSpreadSubsetStatus| {
        let Some(spec) = ws.subset(&s.name) else {
            return false;
        };
        let Some(min) = spec
            .min_replicas
            .as_ref()
            .and_then(|m| scaled_value(m, replicas).ok())
        else {
            return false;
        };
        occupancy(s, scale.departed) - free.count(s) < i64::from(min)
    };
    let for_min = statuses.iter().position(|s| has_room(s) && below_min(s));
    for_min
        .map(|i| (i, true))
        .or_else(|| statuses.iter().position(has_room).map(|i| (i, false)))
}

/// The subset a new pod of `version` would be placed in among `candidates` on `status`
/// with `free`'s entries counted as room, without changing anything (a pod the status
/// tracks already is the caller's to answer first).
pub fn chosen_subset(
    status: &WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    version: &str,
    candidates: &[String],
    scale: Scale,
    free: Free<'_>,
) -> Option<String> {
    let initial;
    let statuses = match status.versioned_subset_statuses.get(version) {
        Some(v) if !v.is_empty() => v,
        _ => {
            initial = initial_subset_statuses(ws, scale.replicas);
            &initial
        }
    };
    let allowed = |name: &str| candidates.iter().any(|c| c == name);
    choose_subset(statuses, ws, scale, &allowed, free).map(|(i, _)| statuses[i].name.clone())
}

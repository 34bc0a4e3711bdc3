//! A subset's room: the one rule every admission, reservation and status write applies
//! (`docs/semantics.md`, A11 and A12).
//!
//! * **Occupancy** is what the status records, with a deletion counted only as a fact:
//!   `replicas + |creatingPods| − |deletingPods whose pod has departed|`. A
//!   `deletingPods` entry is an *intent* — a DELETE or eviction was admitted — and the
//!   API server may still refuse it (a PodDisruptionBudget, a later admission plugin), or
//!   the review may be forged. It frees its pod's slot only once the caller has seen the
//!   pod's departure stored ([`Departed`]: terminating, terminal or gone).
//! * **The maximum** is the spec's, for the workload's current replicas, for every
//!   limited subset: integers as written, percentages scaled. Under the reference rules
//!   a percentage subset must also have `missingReplicas > 0` as the controller last
//!   computed it (OpenKruise's spill, kept), but never more room than the maximum.
//! * `missingReplicas` written by an admission is the room left, `max − occupancy`
//!   (never below 0): no release, return or unclaim makes room in a subset at or above
//!   its maximum, and a lowered maximum takes effect at the next admission.

use super::Scale;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadSubsetStatus};
use crate::percent::scaled_value;
use crate::rules::Rules;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeSet;

/// The pods (by name) whose departure the caller has seen stored by the API server:
/// deleted (a `deletionTimestamp`), finished (Succeeded/Failed) or gone. Only their
/// `deletingPods` entries free slots. Empty — no departure confirmed — is always safe:
/// a subset then looks fuller than it may be (a spill, never an overfill).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Departed<'a>(Option<&'a BTreeSet<String>>);

impl<'a> Departed<'a> {
    /// No departure confirmed.
    pub const NONE: Departed<'static> = Departed(None);

    pub fn of(names: &'a BTreeSet<String>) -> Self {
        Departed(Some(names))
    }

    /// Whether pod `name`'s departure is a fact.
    pub fn contains(&self, name: &str) -> bool {
        self.0.is_some_and(|n| n.contains(name))
    }
}

/// Pods in a subset as the status records them, deletions counted as facts only.
pub(crate) fn occupancy(s: &WorkloadSpreadSubsetStatus, departed: Departed<'_>) -> i64 {
    let gone = s
        .deleting_pods
        .keys()
        .filter(|k| departed.contains(k))
        .count();
    i64::from(s.replicas) + s.creating_pods.len() as i64 - gone as i64
}

/// The `deletingPods` entries of `s` whose departure is not confirmed: the intents that
/// would give the subset room were they facts.
pub fn unconfirmed<'s>(
    s: &'s WorkloadSpreadSubsetStatus,
    departed: Departed<'_>,
) -> impl Iterator<Item = &'s str> + 's {
    let departed = departed.0.cloned();
    s.deleting_pods
        .keys()
        .map(String::as_str)
        .filter(move |k| !departed.as_ref().is_some_and(|d| d.contains(*k)))
}

/// A subset's limit for the current replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    Unlimited,
    /// The maximum; `stored` when the reference rules also require the stored
    /// `missingReplicas` to be positive (a percentage).
    Max {
        max: i32,
        stored: bool,
    },
}

/// The limit of status subset `s` by the spec (a subset no longer in the spec has none
/// left: no room).
pub(crate) fn limit(ws: &WorkloadSpread, s: &WorkloadSpreadSubsetStatus, scale: Scale) -> Limit {
    let Some(spec) = ws.subset(&s.name) else {
        return Limit::Max {
            max: 0,
            stored: false,
        };
    };
    match &spec.max_replicas {
        None => Limit::Unlimited,
        Some(m @ IntOrString::Int(_)) => Limit::Max {
            max: scaled_value(m, scale.replicas).unwrap_or(0),
            stored: false,
        },
        Some(m @ IntOrString::String(_)) => Limit::Max {
            max: scaled_value(m, scale.replicas).unwrap_or(0),
            stored: scale.rules == Rules::Reference,
        },
    }
}

/// How many more pods fit into `s` (`None`: unlimited).
pub(crate) fn room_left(
    ws: &WorkloadSpread,
    s: &WorkloadSpreadSubsetStatus,
    scale: Scale,
) -> Option<i64> {
    room_left_freeing(ws, s, scale, 0)
}

/// [`room_left`] with `freed` of the subset's `creatingPods` entries counted as free,
/// exactly as if they had been unclaimed one by one (`admission::unclaim`): the
/// occupancy drops by `freed`, and under the reference rules' stored `missingReplicas`
/// each one gives back at most one slot (`recount_missing` with +1, which lifts a
/// stored value below −1 to 0 first).
pub(crate) fn room_left_freeing(
    ws: &WorkloadSpread,
    s: &WorkloadSpreadSubsetStatus,
    scale: Scale,
    freed: i64,
) -> Option<i64> {
    match limit(ws, s, scale) {
        Limit::Unlimited => None,
        Limit::Max { max, stored } => {
            let room = (i64::from(max) - occupancy(s, scale.departed) + freed).max(0);
            let missing = i64::from(s.missing_replicas);
            let missing = match freed {
                0 => missing,
                _ => (missing + 1).max(0) + freed - 1,
            };
            Some(match stored {
                true => room.min(missing.max(0)),
                false => room,
            })
        }
    }
}

/// Sets `missingReplicas` of `s` after its entries changed: the room left by the
/// maximum; under the reference rules for a percentage, also at most the stored value
/// moved by `stored_delta` (−1 for a claim, +1 for a returned claim). Unlimited: −1.
pub(crate) fn recount_missing(
    ws: &WorkloadSpread,
    s: &mut WorkloadSpreadSubsetStatus,
    scale: Scale,
    stored_delta: i32,
) {
    match limit(ws, s, scale) {
        Limit::Unlimited => s.missing_replicas = -1,
        Limit::Max { max, stored } => {
            let room = (i64::from(max) - occupancy(s, scale.departed)).max(0);
            let room = i32::try_from(room).unwrap_or(i32::MAX);
            s.missing_replicas = match stored {
                true => room.min(s.missing_replicas.saturating_add(stored_delta).max(0)),
                false => room,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn status(replicas: i32, creating: &[&str], deleting: &[&str]) -> WorkloadSpreadSubsetStatus {
        let at = Time(crate::Timestamp::UNIX_EPOCH);
        WorkloadSpreadSubsetStatus {
            name: "a".into(),
            replicas,
            creating_pods: creating
                .iter()
                .map(|k| (k.to_string(), at.clone()))
                .collect(),
            deleting_pods: deleting
                .iter()
                .map(|k| (k.to_string(), at.clone()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_deletion_frees_its_slot_only_once_its_departure_is_a_fact() {
        let s = status(3, &["new"], &["old-1", "old-2"]);
        let none = BTreeSet::new();
        let one: BTreeSet<String> = ["old-1".to_string()].into();
        let other: BTreeSet<String> = ["elsewhere".to_string()].into();
        let cases = [
            ("no fact", Departed::NONE, 4, vec!["old-1", "old-2"]),
            (
                "an empty set",
                Departed::of(&none),
                4,
                vec!["old-1", "old-2"],
            ),
            ("one departed", Departed::of(&one), 3, vec!["old-2"]),
            (
                "a pod not deleting here",
                Departed::of(&other),
                4,
                vec!["old-1", "old-2"],
            ),
        ];
        for (what, departed, want, open) in cases {
            assert_eq!(occupancy(&s, departed), want, "{what}");
            assert_eq!(
                unconfirmed(&s, departed).collect::<Vec<_>>(),
                open,
                "{what}"
            );
        }
    }
}

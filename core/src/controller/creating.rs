//! Claims whose pods never appear, dropped early (issue #30, item 1).
//!
//! A `creatingPods` entry holds a slot from the admission that claimed it until the pod
//! is counted, or until the creating window (30 s) expires it. A pod that will never
//! exist — refused after the webhook answered, or a forged admission request — holds
//! the slot all that time; a flood of them fills every subset. Past `early` (shorter
//! than the window) an entry whose pod neither the cache nor a *live* read of the
//! namespace shows is dropped: the admission that claimed it has ended by then (the
//! webhook's timeout is 10 s), so its pod exists by then or never will.
//!
//! The trade-off (`docs/operations.md`, Security): a pod whose admission chain takes
//! longer than `early` after our webhook answered (slow webhooks after ours) loses its
//! slot until the controller counts it, and another pod may take that slot meanwhile.
//! `early` must exceed the admission chain's duration; 0 disables the early drop.

use crate::admission::reserve::is_placeholder;
use crate::admission::reserve::stale::Sightings;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::pods::{matched, name, reservation};
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use std::collections::BTreeSet;

/// What to do about entries past the early window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EarlyCheck {
    /// Entries past `early` that no pod of `pods` carries: confirm with a live read.
    pub unseen: BTreeSet<String>,
    /// When the next entry reaches `early` (reconcile again then).
    pub next: Option<SignedDuration>,
}

fn subset_statuses(
    status: &WorkloadSpreadStatus,
) -> impl Iterator<Item = &WorkloadSpreadSubsetStatus> {
    status
        .subset_statuses
        .iter()
        .chain(status.versioned_subset_statuses.values().flatten())
}

/// The keys a pod carries in `creatingPods`: its generated uid, its name (a release
/// records the claim of a pod being deleted under its name) and the placeholder it took.
pub fn keys_of(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let uid = matched(pod).and_then(|m| m.uid);
    uid.into_iter()
        .chain(std::iter::once(name(pod).to_string()))
        .chain(reservation(pod).map(str::to_string))
}

/// Entries (not placeholders: they have their own rules) seen for longer than `early`
/// (`sightings`, judged at `now` on the clock they were observed with) whose pod is not
/// among `pods` (the namespace's cached pods).
pub fn early_check<'p>(
    ws: &WorkloadSpread,
    pods: impl IntoIterator<Item = &'p Pod>,
    sightings: &Sightings,
    now: Timestamp,
    early: SignedDuration,
) -> EarlyCheck {
    let mut check = EarlyCheck::default();
    let Some(status) = ws.status.as_ref() else {
        return check;
    };
    // The entries to look for first (a handful, usually none), then one pass over the
    // pods that copies none of them: a reconcile runs per pod event, and the namespace
    // may hold thousands of pods.
    let mut pending: BTreeSet<&str> = subset_statuses(status)
        .flat_map(|s| s.creating_pods.keys())
        .map(String::as_str)
        .filter(|k| !is_placeholder(k))
        .collect();
    if pending.is_empty() {
        return check;
    }
    for pod in pods {
        for key in keys_of(pod) {
            pending.remove(key.as_str());
        }
        if pending.is_empty() {
            return check;
        }
    }
    for key in pending {
        // Aged from when this controller first saw the entry, on its own clock: never by
        // the host's stamp (another machine's clock).
        let left = early - sightings.age(key, now);
        if left.is_negative() || left.is_zero() {
            check.unseen.insert(key.to_string());
        } else if check.next.is_none_or(|n| left < n) {
            check.next = Some(left);
        }
    }
    check
}

/// Entries — placeholders included — seen for their window or longer (`window` for a
/// pod's claim, `placeholder_window` for a placeholder) that no pod of `pods` (the cache)
/// carries: the reconcile would expire them. Before it does, the controller reads the
/// namespace live: one a pod carries means the cache is behind (the pod exists and the
/// entry stands for it), and the reconcile waits for the cache instead of freeing a
/// slot its pod holds.
pub fn expiring<'p>(
    ws: &WorkloadSpread,
    pods: impl IntoIterator<Item = &'p Pod>,
    sightings: &Sightings,
    now: Timestamp,
    (window, placeholder_window): (SignedDuration, SignedDuration),
) -> BTreeSet<String> {
    let Some(status) = ws.status.as_ref() else {
        return BTreeSet::new();
    };
    let mut due: BTreeSet<&str> = subset_statuses(status)
        .flat_map(|s| s.creating_pods.keys())
        .map(String::as_str)
        .filter(|k| {
            let window = match is_placeholder(k) {
                true => placeholder_window,
                false => window,
            };
            sightings.age(k, now) >= window
        })
        .collect();
    if due.is_empty() {
        return BTreeSet::new();
    }
    for pod in pods {
        for key in keys_of(pod) {
            due.remove(key.as_str());
        }
    }
    due.into_iter().map(str::to_string).collect()
}

/// The keys of `unseen` that no pod of a live read of the namespace carries.
pub fn absent(unseen: &BTreeSet<String>, live: &[Pod]) -> BTreeSet<String> {
    let present: BTreeSet<String> = live.iter().flat_map(keys_of).collect();
    unseen.difference(&present).cloned().collect()
}

/// Removes `keys` from every subset's `creatingPods` (the reconcile then recounts the
/// subsets without them); returns how many distinct keys were removed.
pub fn drop_creating(status: &mut WorkloadSpreadStatus, keys: &BTreeSet<String>) -> usize {
    let mut dropped = BTreeSet::new();
    let all = status
        .subset_statuses
        .iter_mut()
        .chain(status.versioned_subset_statuses.values_mut().flatten());
    for s in all {
        for key in keys {
            if s.creating_pods.remove(key).is_some() {
                dropped.insert(key.clone());
            }
        }
    }
    dropped.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::reserve::stale::Sightings;
    use serde_json::json;

    fn ws(entries: &[(&str, &str)]) -> WorkloadSpread {
        let creating: serde_json::Map<String, serde_json::Value> = entries
            .iter()
            .map(|(k, t)| (k.to_string(), json!(t)))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "ws", "namespace": "n"},
            "spec": {"subsets": [{"name": "a", "maxReplicas": 5}]},
            "status": {
                "subsetStatuses": [{"name": "a", "replicas": 0, "missingReplicas": 2,
                                    "creatingPods": creating.clone()}],
                "versionedSubsetStatuses": {"v1": [{"name": "a", "replicas": 0,
                    "missingReplicas": 2, "creatingPods": creating}]}
            }
        }))
        .unwrap()
    }

    fn pod(name: &str, uid: Option<&str>) -> Pod {
        let matched = match uid {
            Some(u) => format!(r#"{{"name":"ws","subset":"a","uid":"{u}"}}"#),
            None => r#"{"name":"ws","subset":"a"}"#.to_string(),
        };
        serde_json::from_value(json!({"metadata": {"name": name,
            "annotations": {"apps.kruise.io/matched-workloadspread": matched}}}))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn secs(n: i64) -> SignedDuration {
        SignedDuration::from_secs(n)
    }

    #[test]
    fn only_old_entries_without_a_pod_are_unseen() {
        let w = ws(&[
            ("forged-uid", "2026-01-01T00:00:00Z"),
            ("web-1", "2026-01-01T00:00:00Z"),
            ("young", "2026-01-01T00:00:08Z"),
            ("~host-a.1", "2026-01-01T00:00:00Z"),
            ("generated-uid", "2026-01-01T00:00:00Z"),
        ]);
        let cached = [pod("web-1", None), pod("web-x7k2", Some("generated-uid"))];
        // This controller saw them as the stamps say (its clock agreeing with the host's).
        let mut seen = Sightings::default();
        let status = w.status.as_ref().unwrap();
        seen.observe_creating(status, at("2026-01-01T00:00:00Z"));
        let mut young = Sightings::default();
        young.observe_creating(status, at("2026-01-01T00:00:08Z"));
        let mut both = seen.clone();
        both.observe_creating(status, at("2026-01-01T00:00:08Z"));
        let check = early_check(&w, &cached, &seen, at("2026-01-01T00:00:12Z"), secs(10));
        assert_eq!(
            check.unseen,
            BTreeSet::from(["forged-uid".to_string(), "young".to_string()])
        );
        // A stamp an hour old counts for nothing: the age is this controller's sighting.
        let check = early_check(&w, &cached, &young, at("2026-01-01T00:00:12Z"), secs(10));
        assert!(check.unseen.is_empty(), "{check:?}");
        assert_eq!(
            check.next,
            Some(secs(6)),
            "seen at :08, 10 s reached at :18"
        );
        assert_eq!(both, seen, "first sightings are kept");
    }

    #[test]
    fn entries_past_their_window_without_a_cached_pod_are_expiring() {
        let w = ws(&[
            ("late", "2026-01-01T00:00:00Z"),
            ("web-1", "2026-01-01T00:00:00Z"),
            ("~host-a.1", "2026-01-01T00:00:00Z"),
            ("~host-a.2", "2026-01-01T00:00:00Z"),
        ]);
        let mut seen = Sightings::default();
        seen.observe_creating(w.status.as_ref().unwrap(), at("2026-01-01T00:00:00Z"));
        let mut named = pod("web-2", None);
        named.metadata.annotations.as_mut().unwrap().insert(
            crate::admission::reserve::RESERVATION_ANNOTATION.into(),
            "~host-a.2".into(),
        );
        let cached = [pod("web-1", None), named];
        let windows = (secs(30), secs(40));
        let check = |t| expiring(&w, &cached, &seen, at(t), windows);
        assert!(check("2026-01-01T00:00:29Z").is_empty());
        assert_eq!(
            check("2026-01-01T00:00:30Z"),
            BTreeSet::from(["late".to_string()])
        );
        assert_eq!(
            check("2026-01-01T00:00:40Z"),
            BTreeSet::from(["late".to_string(), "~host-a.1".to_string()])
        );
    }

    #[test]
    fn a_pod_the_live_read_finds_keeps_its_slot() {
        let unseen = BTreeSet::from(["late".to_string(), "forged".to_string()]);
        let live = [pod("late", None)];
        assert_eq!(
            absent(&unseen, &live),
            BTreeSet::from(["forged".to_string()])
        );
    }

    #[test]
    fn dropping_frees_the_slot_in_every_status() {
        let mut w = ws(&[
            ("forged", "2026-01-01T00:00:00Z"),
            ("keep", "2026-01-01T00:00:00Z"),
        ]);
        let status = w.status.as_mut().unwrap();
        let n = drop_creating(status, &BTreeSet::from(["forged".to_string()]));
        assert_eq!(n, 1);
        for s in subset_statuses(status) {
            assert_eq!(s.creating_pods.keys().collect::<Vec<_>>(), vec!["keep"]);
        }
    }
}

//! Entries nobody recounted: what a host does with `creatingPods` and `deletingPods`
//! entries the controller has left for far longer than its windows (it is down, or cut
//! off). Without it every admission and every deletion adds an entry that stays until
//! the controller is back; the status grows with churn until etcd refuses the object,
//! and then every claim fails (#40). Each entry is resolved by the facts a consistent
//! read of the namespace's pods gives, so that the occupancy stays exactly what the pods
//! are (`docs/counter-protocol.md`, *Entries nobody recounted*):
//!
//! * a deletion whose pod has departed leaves the count: with its pod's own claim (both
//!   removed: a release records the claim under the pod's name beside its deletion), or
//!   from `replicas` (the pod was counted there);
//! * a deletion whose pod still runs was refused or never stored: the intent is dropped
//!   (the pod stays counted where it is);
//! * a claim whose pod runs in its subset is folded into `replicas`; one whose pod runs
//!   elsewhere (the same request answered twice) is dropped; one whose pod departed or
//!   never appeared is dropped (with the pod's deletion, if recorded).
//!
//! Only entries the caller has seen for its expiry (by its own monotonic clock) are
//! touched; placeholders have their own rules (`reserve::stale`). The controller, when
//! it comes back, recounts everything from the pods.

use super::reserve::is_placeholder;
use super::room::recount_missing;
use super::Scale;
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::pods::{is_active, matched, name};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};

/// What a consistent read says of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fact {
    name: String,
    /// Not deleted and not finished.
    runs: bool,
    /// The subset of this WorkloadSpread its matched annotation names.
    subset: Option<String>,
}

/// The namespace's pods as a consistent read listed them, by name and by generated id.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    by_key: BTreeMap<String, Fact>,
}

impl PodFacts {
    /// Facts from `pods` (every pod of the namespace, read consistently) for
    /// WorkloadSpread `ws_name`.
    pub fn from_pods<'p>(pods: impl IntoIterator<Item = &'p Pod>, ws_name: &str) -> Self {
        let mut by_key = BTreeMap::new();
        for pod in pods {
            let m = matched(pod).filter(|m| m.name == ws_name);
            let fact = Fact {
                name: name(pod).to_string(),
                runs: is_active(pod),
                subset: m.as_ref().map(|m| m.subset.clone()),
            };
            if let Some(uid) = m.and_then(|m| m.uid) {
                by_key.insert(uid, fact.clone());
            }
            by_key.insert(fact.name.clone(), fact);
        }
        PodFacts { by_key }
    }

    fn get(&self, key: &str) -> Option<&Fact> {
        self.by_key.get(key)
    }
}

/// The entries the caller has seen for longer than its expiry.
#[derive(Clone, Debug, Default)]
pub struct Overdue {
    pub creating: BTreeSet<String>,
    pub deleting: BTreeSet<String>,
}

impl Overdue {
    pub fn is_empty(&self) -> bool {
        self.creating.is_empty() && self.deleting.is_empty()
    }
}

/// What [`expire`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Entries turned into counted replicas (or taken out of them).
    pub folded: usize,
    /// Entries removed without changing the count.
    pub dropped: usize,
}

/// Resolves the `overdue` entries of every versioned subset status by `pods` (module
/// doc). The occupancy of each subset is then the pods it holds, as the controller would
/// count them.
pub fn expire(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    overdue: &Overdue,
    pods: &PodFacts,
    scale: Scale,
) -> Expired {
    let mut done = Expired::default();
    for statuses in status.versioned_subset_statuses.values_mut() {
        for s in statuses.iter_mut() {
            let before = (s.replicas, s.creating_pods.len(), s.deleting_pods.len());
            deletions(s, overdue, pods, &mut done);
            claims(s, overdue, pods, &mut done);
            if before != (s.replicas, s.creating_pods.len(), s.deleting_pods.len()) {
                recount_missing(ws, s, scale, 0);
            }
        }
    }
    done
}

fn deletions(
    s: &mut WorkloadSpreadSubsetStatus,
    overdue: &Overdue,
    pods: &PodFacts,
    done: &mut Expired,
) {
    let due: Vec<String> = s
        .deleting_pods
        .keys()
        .filter(|k| overdue.deleting.contains(*k))
        .cloned()
        .collect();
    for pod in due {
        let runs = pods.get(&pod).is_some_and(|f| f.runs && f.name == pod);
        s.deleting_pods.remove(&pod);
        if runs {
            // Refused (a budget), or never stored: the pod keeps its slot.
            done.dropped += 1;
        } else if s.creating_pods.remove(&pod).is_some() {
            // Counted by its own claim: both go.
            done.dropped += 2;
        } else {
            s.replicas = (s.replicas - 1).max(0);
            done.folded += 1;
        }
    }
}

fn claims(
    s: &mut WorkloadSpreadSubsetStatus,
    overdue: &Overdue,
    pods: &PodFacts,
    done: &mut Expired,
) {
    let due: Vec<String> = s
        .creating_pods
        .keys()
        .filter(|k| !is_placeholder(k) && overdue.creating.contains(*k))
        .cloned()
        .collect();
    for key in due {
        let fact = pods.get(&key);
        s.creating_pods.remove(&key);
        match fact {
            Some(f) if f.runs && f.subset.as_deref() == Some(s.name.as_str()) => {
                s.replicas = s.replicas.saturating_add(1);
                done.folded += 1;
            }
            Some(f) if !f.runs => {
                let pair = s.deleting_pods.remove(&f.name).is_some();
                done.dropped += 1 + usize::from(pair);
            }
            _ => done.dropped += 1,
        }
    }
}

#[cfg(test)]
mod tests;

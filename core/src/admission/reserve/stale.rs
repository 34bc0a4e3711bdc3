//! Stale placeholders (`docs/counter-protocol.md`, *What a crash leaves*): a placeholder
//! that a writer has seen for longer than [`PLACEHOLDER_TTL_SECONDS`] belongs to a holder
//! that died or lost the API server. Whoever writes the status next *resolves* it: a
//! placeholder some pod names (the holder handed it out and never settled it) is settled
//! to that pod's key — the pod exists, so its slot stays taken. One no pod names is
//! dropped, its slot freed, only once seen for [`PLACEHOLDER_DROP_SECONDS`]: a pod
//! admitted into it may still be on its way through the admission chain.
//!
//! Age is measured by the reader's own monotonic clock from when it first saw the
//! placeholder ([`Sightings`]; callers pass a process-local monotonic time), never by
//! comparing the holder's stamp with another machine's clock, nor across a step of the
//! reader's wall clock: a reader sees a placeholder no earlier than its write landed, so a
//! placeholder is stale for a reader at least [`PLACEHOLDER_TTL_SECONDS`] after its
//! write, and its holder hands it out only within [`super::HANDOUT_SECONDS`] of writing
//! it.

use super::{is_placeholder, reservation_label_value, settle, Settled};
use super::{PLACEHOLDER_DROP_SECONDS, PLACEHOLDER_TTL_SECONDS, RESERVATION_LABEL};
use crate::admission::{unclaim, PodKey, Scale};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::pods::{matched, name, reservation};
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use std::collections::{BTreeMap, BTreeSet};

/// When this process first saw each placeholder of one WorkloadSpread, by its own clock.
/// Holds only the placeholders of the last status observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sightings {
    first: BTreeMap<String, Timestamp>,
}

impl Sightings {
    /// Records the placeholders of `status` not seen before as seen `now`, and forgets
    /// those it no longer holds.
    pub fn observe(&mut self, status: &WorkloadSpreadStatus, now: Timestamp) {
        let present: BTreeSet<&str> = all_placeholders(status).map(|(k, _)| k).collect();
        self.first.retain(|k, _| present.contains(k.as_str()));
        for key in present {
            self.first.entry(key.to_string()).or_insert(now);
        }
    }

    /// As [`Sightings::observe`], for every `creatingPods` key (pods' entries too): the
    /// controller ages a claim whose pod never appears by its own clock, not the host's
    /// stamp.
    pub fn observe_creating(&mut self, status: &WorkloadSpreadStatus, now: Timestamp) {
        let present: BTreeSet<&str> = status
            .versioned_subset_statuses
            .values()
            .flatten()
            .chain(&status.subset_statuses)
            .flat_map(|s| s.creating_pods.keys())
            .map(String::as_str)
            .collect();
        self.first.retain(|k, _| present.contains(k.as_str()));
        for key in present {
            self.first.entry(key.to_string()).or_insert(now);
        }
    }

    /// As [`Sightings::observe`], for any set of keys (a host's claims and deletions,
    /// `admission::expire`).
    pub fn observe_keys<'k>(&mut self, keys: impl IntoIterator<Item = &'k String>, now: Timestamp) {
        let present: BTreeSet<&str> = keys.into_iter().map(String::as_str).collect();
        self.first.retain(|k, _| present.contains(k.as_str()));
        for key in present {
            self.first.entry(key.to_string()).or_insert(now);
        }
    }

    /// Sightings as if each placeholder had been seen when its holder stamped it: for a
    /// reader with no history of its own (an offline reconcile of a saved object), on
    /// the assumption that the clocks agree.
    pub fn from_stamps(status: &WorkloadSpreadStatus) -> Self {
        let first = all_placeholders(status)
            .map(|(k, at)| (k.to_string(), at))
            .collect();
        Sightings { first }
    }

    /// How long `key` has been seen (zero when never).
    pub fn age(&self, key: &str, now: Timestamp) -> SignedDuration {
        self.seen_for(key, now).unwrap_or(SignedDuration::ZERO)
    }

    /// How long `key` has been seen; `None` when it never was.
    pub fn seen_for(&self, key: &str, now: Timestamp) -> Option<SignedDuration> {
        self.first.get(key).map(|at| now.duration_since(*at))
    }

    /// Placeholders remembered.
    pub fn len(&self) -> usize {
        self.first.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

/// Every placeholder of `status` with its stamp, in the versioned statuses (where hosts
/// write them) and the aggregate ones.
fn all_placeholders(status: &WorkloadSpreadStatus) -> impl Iterator<Item = (&str, Timestamp)> {
    status
        .versioned_subset_statuses
        .values()
        .flatten()
        .chain(&status.subset_statuses)
        .flat_map(|s| s.creating_pods.iter())
        .filter(|(k, _)| is_placeholder(k))
        .map(|(k, at)| (k.as_str(), at.0))
}

/// Every placeholder of the versioned statuses: (version, subset, key).
fn placeholders(status: &WorkloadSpreadStatus) -> impl Iterator<Item = (&str, &str, &str)> {
    status
        .versioned_subset_statuses
        .iter()
        .flat_map(|(version, subsets)| {
            subsets.iter().flat_map(move |s| {
                s.creating_pods
                    .keys()
                    .filter(|k| is_placeholder(k))
                    .map(move |k| (version.as_str(), s.name.as_str(), k.as_str()))
            })
        })
}

/// A placeholder seen for longer than [`PLACEHOLDER_TTL_SECONDS`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stale {
    pub version: String,
    pub subset: String,
    pub key: String,
    /// Seen for [`PLACEHOLDER_DROP_SECONDS`] too: dropped when no pod names it.
    pub droppable: bool,
}

/// The stale placeholders of `status` by `sightings` (observed on it first), except
/// those `keep` names (the caller's own, which it settles or returns itself).
pub fn stale(
    status: &WorkloadSpreadStatus,
    sightings: &Sightings,
    now: Timestamp,
    keep: impl Fn(&str) -> bool,
) -> Vec<Stale> {
    let ttl = SignedDuration::from_secs(PLACEHOLDER_TTL_SECONDS);
    stale_after(status, sightings, now, ttl, keep)
}

/// As [`stale`] with another lifetime (the controller's is shorter when its creating
/// window is).
pub fn stale_after(
    status: &WorkloadSpreadStatus,
    sightings: &Sightings,
    now: Timestamp,
    ttl: SignedDuration,
    keep: impl Fn(&str) -> bool,
) -> Vec<Stale> {
    let drop = SignedDuration::from_secs(PLACEHOLDER_DROP_SECONDS).max(ttl);
    placeholders(status)
        .filter(|(_, _, key)| sightings.age(key, now) > ttl && !keep(key))
        .map(|(version, subset, key)| Stale {
            version: version.to_string(),
            subset: subset.to_string(),
            key: key.to_string(),
            droppable: sightings.age(key, now) > drop,
        })
        .collect()
}

/// The label selector listing exactly the pods that may name one of `stale` (`None`
/// when there is nothing to list).
pub fn reservation_selector(stale: &[Stale]) -> Option<String> {
    let values: BTreeSet<&str> = stale
        .iter()
        .filter_map(|s| reservation_label_value(&s.key))
        .collect();
    if values.is_empty() {
        return None;
    }
    let list: Vec<&str> = values.into_iter().collect();
    Some(format!("{RESERVATION_LABEL} in ({})", list.join(",")))
}

/// The placeholder `pod` names, when its annotation and its label agree (a pod template
/// carrying a copied annotation names nothing).
pub fn named_by(pod: &Pod) -> Option<&str> {
    let placeholder = reservation(pod).filter(|r| is_placeholder(r))?;
    let label = pod.metadata.labels.as_ref()?.get(RESERVATION_LABEL)?;
    (reservation_label_value(placeholder) == Some(label.as_str())).then_some(placeholder)
}

/// A pod admitted into a placeholder: which one, in which subset, and the pod's
/// `creatingPods` key (its generated id, else its name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    pub placeholder: String,
    pub subset: String,
    pub key: String,
}

/// The placeholders of WorkloadSpread `ws_name` that `pods` name. A pod names one when
/// its reservation annotation is a placeholder and its matched annotation names this
/// WorkloadSpread (the subset it was injected for).
pub fn namings(pods: &[Pod], ws_name: &str) -> Vec<Naming> {
    pods.iter()
        .filter_map(|pod| {
            let placeholder = named_by(pod)?;
            let m = matched(pod).filter(|m| m.name == ws_name)?;
            let key = m.uid.unwrap_or_else(|| name(pod).to_string());
            (!key.is_empty()).then(|| Naming {
                placeholder: placeholder.to_string(),
                subset: m.subset,
                key,
            })
        })
        .collect()
}

/// The placeholders `pods` name ([`named_by`]; whatever WorkloadSpread they belong to: a
/// placeholder key is unique).
pub fn named_placeholders<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(named_by)
        .map(str::to_string)
        .collect()
}

/// What [`resolve`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Placeholders a pod named, now that pod's key (or freed: the key was there).
    pub settled: usize,
    /// Placeholders no pod named, their slots freed.
    pub dropped: usize,
}

/// Resolves `stale` placeholders of `status`: one that a pod names in the same subset is
/// settled to the pod's key; the others are dropped once [`Stale::droppable`]. `named` is
/// `None` when the pods could not be listed: then nothing is dropped (a placeholder whose
/// pod may exist is never freed; the caller tries again on its next write).
pub fn resolve(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    stale: &[Stale],
    named: Option<&[Naming]>,
    scale: Scale,
    now: Timestamp,
) -> Resolved {
    let mut done = Resolved::default();
    let Some(named) = named else {
        return done;
    };
    for s in stale {
        let naming = named
            .iter()
            .find(|n| n.placeholder == s.key && n.subset == s.subset);
        match naming {
            Some(n) => {
                let at = (s.version.as_str(), s.subset.as_str());
                let r = settle(status, ws, at, &s.key, &n.key, scale, now);
                if !matches!(r, Settled::Gone | Settled::Kept) {
                    done.settled += 1;
                }
            }
            None if s.droppable => {
                let pod = PodKey {
                    name: "",
                    version: &s.version,
                };
                if unclaim(status, ws, pod, &s.key, &s.subset, scale) {
                    done.dropped += 1;
                }
            }
            None => {}
        }
    }
    done
}

#[cfg(test)]
mod tests;

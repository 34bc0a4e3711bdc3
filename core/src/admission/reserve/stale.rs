//! Stale placeholders (`docs/counter-protocol.md`, *What a crash leaves*): a placeholder
//! that a writer has seen for longer than [`PLACEHOLDER_TTL_SECONDS`] belongs to a holder
//! that died or lost the API server. Whoever writes the status next *resolves* it: a
//! placeholder some pod names (the holder handed it out and never settled it) is settled
//! to that pod's key — the pod exists, so its slot stays taken — and every other one is
//! dropped, its slot freed.
//!
//! Age is measured by the reader's own clock from when it first saw the placeholder
//! ([`Sightings`]), never by comparing the holder's stamp with another machine's clock:
//! a reader sees a placeholder no earlier than its write landed, so whatever the skew
//! between machines, a placeholder is stale for a reader at least
//! [`PLACEHOLDER_TTL_SECONDS`] after its write, and its holder hands it out only within
//! [`super::HANDOUT_SECONDS`] of its own stamp (taken before the write).

use super::RESERVATION_HOLDER_LABEL;
use super::{holder_of, is_placeholder, settle, Settled, PLACEHOLDER_TTL_SECONDS};
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
        self.first
            .get(key)
            .map_or(SignedDuration::ZERO, |at| now.duration_since(*at))
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
    placeholders(status)
        .filter(|(_, _, key)| sightings.age(key, now) > ttl && !keep(key))
        .map(|(version, subset, key)| Stale {
            version: version.to_string(),
            subset: subset.to_string(),
            key: key.to_string(),
        })
        .collect()
}

/// The label selector listing the pods that may name one of `stale`: the pods admitted
/// into a placeholder of one of their holders (`None` when there is nothing to list).
pub fn holder_selector(stale: &[Stale]) -> Option<String> {
    let holders: BTreeSet<&str> = stale.iter().filter_map(|s| holder_of(&s.key)).collect();
    if holders.is_empty() {
        return None;
    }
    let list: Vec<&str> = holders.into_iter().collect();
    Some(format!(
        "{RESERVATION_HOLDER_LABEL} in ({})",
        list.join(",")
    ))
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
            let placeholder = reservation(pod).filter(|r| is_placeholder(r))?;
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

/// The placeholders `pods` name in their reservation annotation (whatever
/// WorkloadSpread they belong to: a placeholder key is unique).
pub fn named_placeholders<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(|p| reservation(p).filter(|r| is_placeholder(r)))
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
/// settled to the pod's key; the others are dropped. `named` is `None` when the pods
/// could not be listed: then nothing is dropped (a placeholder whose pod may exist is
/// never freed; the caller tries again on its next write).
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
                if r != Settled::Gone {
                    done.settled += 1;
                }
            }
            None => {
                let pod = PodKey {
                    name: "",
                    version: &s.version,
                };
                if unclaim(status, ws, pod, &s.key, &s.subset, scale) {
                    done.dropped += 1;
                }
            }
        }
    }
    done
}

#[cfg(test)]
mod tests;

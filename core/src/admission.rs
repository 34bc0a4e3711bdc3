//! Admission decisions for pods (reference §3.3, §3.4, §3.7): which subset a new pod
//! goes to, and the status bookkeeping (`creatingPods`, `deletingPods`,
//! `missingReplicas`) for creations, deletions and evictions.
//!
//! Callers skip dry-run requests entirely (no injection, no status change), as the
//! reference does.
//!
//! A subset's room is its maximum (integers as written, percentages scaled to the
//! workload's *current* replicas) minus its occupancy as the status records it, a
//! deletion counted only once its departure is a fact ([`room`]): pods created right
//! after a scale land on the planned spread before the controller recomputes
//! `missingReplicas`, and an admitted DELETE or eviction frees nothing the API server
//! has not stored. Under [`Rules::Reference`] a percentage subset also needs the stored
//! `missingReplicas` (OpenKruise's spill at the moment of change).

use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::api::{PENDING_LABEL, PENDING_VALUE};
use crate::percent::scaled_value;
use crate::pods::{controller_of, is_active, matched};
use crate::rules::Rules;
use crate::version::{pod_version, VersionedKinds};
use crate::workload::{owned_by_target, ObjectRef, OwnerLookupError, WorkloadKinds};
use crate::Timestamp;
use choose::choose_subset;
pub use choose::{chosen_subset, Free};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use room::{limit, recount_missing, Limit};
pub use room::{unconfirmed, Departed};
use std::collections::BTreeSet;

/// `initializedSubsetStatuses`: one entry per spec subset, `missingReplicas` = the scaled
/// `maxReplicas` (percentages rounded up) or -1 when unlimited.
pub fn initial_subset_statuses(
    ws: &WorkloadSpread,
    workload_replicas: i32,
) -> Vec<WorkloadSpreadSubsetStatus> {
    ws.spec
        .subsets
        .iter()
        .map(|s| WorkloadSpreadSubsetStatus {
            name: s.name.clone(),
            missing_replicas: match &s.max_replicas {
                None => -1,
                Some(m) => scaled_value(m, workload_replicas).unwrap_or(0),
            },
            ..Default::default()
        })
        .collect()
}

/// Whether the subset percentages need the workload's replica count (`hasPercentSubset`).
pub fn needs_workload_replicas(ws: &WorkloadSpread) -> bool {
    ws.spec.subsets.iter().any(|s| {
        [&s.max_replicas, &s.min_replicas]
            .into_iter()
            .flatten()
            .any(|v| matches!(v, IntOrString::String(p) if p.ends_with('%')))
    })
}

/// The pod being admitted.
#[derive(Clone, Copy, Debug)]
pub struct PodKey<'a> {
    /// `metadata.name`, empty when the pod uses `generateName`.
    pub name: &'a str,
    /// `version::pod_version` of the pod.
    pub version: &'a str,
}

/// A subset choice for a pod being created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    /// The subset to inject, `None` to admit the pod unchanged (no subset has room).
    pub subset: Option<String>,
    /// Generated id recorded in creatingPods (and in the pod's annotation) for unnamed pods.
    pub generated_uid: Option<String>,
    /// Whether the status was modified and must be written.
    pub status_changed: bool,
}

/// How a create is decided: no status involved, or a read-modify-write of the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreatePath {
    /// Single unlimited subset, or a StatefulSet (ordinal ranges): decided without status.
    Stateless(Option<String>),
    /// Decide with `claim_for_create` on the latest status.
    Counted,
}

/// `acquireSuitableSubset`'s shortcut and StatefulSet path.
pub fn create_path(ws: &WorkloadSpread, pod_name: &str) -> CreatePath {
    let subsets = &ws.spec.subsets;
    if subsets.len() == 1 && subsets[0].max_replicas.is_none() {
        return CreatePath::Stateless(Some(subsets[0].name.clone()));
    }
    if ws
        .spec
        .target_ref
        .as_ref()
        .is_some_and(|t| t.kind == "StatefulSet")
    {
        return CreatePath::Stateless(statefulset_subset(ws, pod_name));
    }
    CreatePath::Counted
}

/// What a pod admission does with its WorkloadSpread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpreadUse<'a> {
    /// Choose a subset for a pod of a workload of this kind (`spec.targetRef.kind`).
    Create { target_kind: &'a str },
    /// Give back the slot of a departing pod.
    Release,
}

/// The fields of a pod's WorkloadSpread an admission reads, as a field mask
/// (`masks`; empty: the whole object). With the counter, none of the status: the counter
/// keeps the counts and reads the stored status itself, and whether a pod is counted
/// ([`create_path`]) is told from the spec — except a StatefulSet's create, whose
/// ordinal ranges skip the subsets its status marks unschedulable. Without the counter,
/// the status is what the admission counts on. The status is most of a busy spread's
/// bytes (every creating and deleting pod), read at each admission (#43).
pub fn spread_fields(spread_use: SpreadUse<'_>, counter: bool) -> &'static [&'static str] {
    match (spread_use, counter) {
        (_, false) => &[],
        (
            SpreadUse::Create {
                target_kind: "StatefulSet",
            },
            true,
        ) => &[],
        (SpreadUse::Create { .. } | SpreadUse::Release, true) => {
            crate::masks::WORKLOADSPREAD_SPEC_FIELDS
        }
    }
}

/// Ordinal of a StatefulSet pod name (`<parent>-<n>`), -1 when it has none.
pub fn pod_ordinal(name: &str) -> i64 {
    let Some((_parent, digits)) = name.rsplit_once('-') else {
        return -1;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return -1;
    }
    digits.parse::<i32>().map_or(-1, i64::from)
}

/// Subsets own consecutive ordinal ranges of size `maxReplicas` (unlimited = rest);
/// subsets marked unschedulable in the aggregate status are skipped.
fn statefulset_subset(ws: &WorkloadSpread, pod_name: &str) -> Option<String> {
    let ordinal = pod_ordinal(pod_name);
    let aggregate = ws
        .status
        .as_ref()
        .map(|s| s.subset_statuses.as_slice())
        .unwrap_or_default();
    let mut threshold: i64 = 0;
    for subset in &ws.spec.subsets {
        let unschedulable = aggregate
            .iter()
            .any(|s| s.name == subset.name && s.is_unschedulable());
        if unschedulable {
            continue;
        }
        threshold = threshold.saturating_add(match &subset.max_replicas {
            None => i64::from(i32::MAX),
            Some(IntOrString::Int(i)) => i64::from(*i),
            Some(IntOrString::String(s)) => s.parse::<i64>().unwrap_or(0),
        });
        if ordinal < threshold {
            return Some(subset.name.clone());
        }
    }
    None
}

/// The versioned subset statuses of `version`, initialised from the spec if absent.
pub fn versioned_statuses<'s>(
    status: &'s mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    version: &str,
    workload_replicas: i32,
) -> &'s mut Vec<WorkloadSpreadSubsetStatus> {
    let entry = status
        .versioned_subset_statuses
        .entry(version.to_string())
        .or_default();
    if entry.is_empty() {
        *entry = initial_subset_statuses(ws, workload_replicas);
    }
    entry
}

/// The subset whose `creatingPods` records `key` (a pod name or generated id): an
/// admission already claimed there. A `deletingPods` entry answers no claim: it stands
/// for a pod whose deletion was asked — perhaps an earlier pod of the same name, whose
/// slot is not the new pod's.
fn claimed_subset(statuses: &[WorkloadSpreadSubsetStatus], key: &str) -> Option<String> {
    if key.is_empty() {
        return None;
    }
    statuses
        .iter()
        .find(|s| s.creating_pods.contains_key(key))
        .map(|s| s.name.clone())
}

/// Whether pod `name`'s deletion is recorded in any subset of the version.
fn deletion_recorded(statuses: &[WorkloadSpreadSubsetStatus], name: &str) -> bool {
    statuses.iter().any(|s| s.deleting_pods.contains_key(name))
}

/// The workload's replica count and the rules that scale percentages with it, and the
/// departures the caller has confirmed (deletions that free slots, [`room`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale<'d> {
    /// The workload's current replicas (0 when unknown or not needed).
    pub replicas: i32,
    pub rules: Rules,
    pub departed: Departed<'d>,
}

impl Scale<'static> {
    /// No departure confirmed: every `deletingPods` entry is an intent.
    pub fn new(replicas: i32, rules: Rules) -> Self {
        Scale {
            replicas,
            rules,
            departed: Departed::NONE,
        }
    }
}

impl Scale<'_> {
    /// The same scale with `departed` confirmed.
    pub fn with_departed(self, departed: &BTreeSet<String>) -> Scale<'_> {
        Scale {
            replicas: self.replicas,
            rules: self.rules,
            departed: Departed::of(departed),
        }
    }

    /// The same scale without confirmed departures (to keep beyond their borrow).
    pub fn detached(self) -> Scale<'static> {
        Scale::new(self.replicas, self.rules)
    }
}

/// `updateSubsetForPod(Create)` on `status` (the latest one the caller has): idempotent
/// for a pod already tracked, first schedulable subset with room otherwise (subsets
/// below their `minReplicas` first), recording the pod in creatingPods.
pub fn claim_for_create(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    scale: Scale,
    now: Timestamp,
    new_uid: &str,
) -> Claim {
    claim_with(status, ws, pod, scale, now, new_uid, |_| true)
}

/// The counter capability's claim rule: `claim_for_create` restricted to `candidates`
/// (the guest's preference list), applied by the host on the latest status.
pub fn claim_among(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    candidates: &[String],
    scale: Scale,
    now: Timestamp,
    new_uid: &str,
) -> Claim {
    let allowed = |name: &str| candidates.iter().any(|c| c == name);
    claim_with(status, ws, pod, scale, now, new_uid, allowed)
}

fn claim_with(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    scale: Scale,
    now: Timestamp,
    new_uid: &str,
    allowed: impl Fn(&str) -> bool,
) -> Claim {
    let statuses = versioned_statuses(status, ws, pod.version, scale.replicas);
    if let Some(subset) = claimed_subset(statuses, pod.name) {
        return Claim {
            subset: Some(subset),
            generated_uid: None,
            status_changed: false,
        };
    }
    // An unnamed pod is tracked by its generated id (the admission request's uid): the
    // same request delivered again claims nothing more and gets the same answer.
    if pod.name.is_empty() && !new_uid.is_empty() {
        if let Some(subset) = claimed_subset(statuses, new_uid) {
            return Claim {
                subset: Some(subset),
                generated_uid: Some(new_uid.to_string()),
                status_changed: false,
            };
        }
    }
    let Some((i, for_min)) = choose_subset(statuses, ws, scale, &allowed, Free::NONE) else {
        return Claim::default();
    };
    let chosen = &mut statuses[i];
    // Unlimited subsets are not tracked (#1066) unless filling a minReplicas, which
    // needs the count of pods admitted since the controller last looked.
    if limit(ws, chosen, scale) == Limit::Unlimited && !for_min {
        return Claim {
            subset: Some(chosen.name.clone()),
            generated_uid: None,
            status_changed: false,
        };
    }
    let (key, uid) = if pod.name.is_empty() {
        (new_uid.to_string(), Some(new_uid.to_string()))
    } else {
        (pod.name.to_string(), None)
    };
    chosen.creating_pods.insert(key, Time(now));
    recount_missing(ws, chosen, scale, -1);
    Claim {
        subset: Some(chosen.name.clone()),
        generated_uid: uid,
        status_changed: true,
    }
}

/// `updateSubsetForPod(Delete|Eviction)`: records the pod in `deletingPods` of its
/// subset — an *intent*: the slot is freed only once the pod's departure is a fact
/// ([`room`]; a refused eviction, a refused or forged DELETE frees nothing). Recorded
/// for a pod whose own claim is still in `creatingPods` too (its departure then cancels
/// that claim). Unlimited subsets record nothing (#1066). Returns whether the status
/// changed. A version the status holds no statuses for counts no pod: nothing is
/// recorded there, and none is created (a forged version would grow the status).
pub fn release(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    subset: &str,
    scale: Scale,
    now: Timestamp,
) -> bool {
    let Some(statuses) = status
        .versioned_subset_statuses
        .get_mut(pod.version)
        .filter(|s| !s.is_empty())
    else {
        return false;
    };
    if pod.name.is_empty() || deletion_recorded(statuses, pod.name) {
        return false;
    }
    let Some(s) = statuses.iter_mut().find(|s| s.name == subset) else {
        return false;
    };
    if limit(ws, s, scale) == Limit::Unlimited {
        return false;
    }
    s.deleting_pods.insert(pod.name.to_string(), Time(now));
    recount_missing(ws, s, scale, 0);
    true
}

/// Undoes a claim whose pod will not be created (the guest refused it after claiming):
/// removes the pod's `creatingPods` entry (`key`: its name, or the generated id of an
/// unnamed pod) from `subset` and frees the slot — room only where the subset is below
/// its maximum. Returns whether the status changed.
pub fn unclaim(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    key: &str,
    subset: &str,
    scale: Scale,
) -> bool {
    let statuses = versioned_statuses(status, ws, pod.version, scale.replicas);
    let Some(s) = statuses.iter_mut().find(|s| s.name == subset) else {
        return false;
    };
    if s.creating_pods.remove(key).is_none() {
        return false;
    }
    recount_missing(ws, s, scale, 1);
    true
}

/// A pod a best-effort admission placed that the status may not count yet (it carries
/// [`crate::api::PENDING_LABEL`]): its name, version and the subset it was placed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingPod {
    pub name: String,
    pub version: String,
    pub subset: String,
    /// The controller's stamp: which status counts the pod ([`best_effort::CountedIn`]).
    pub counted_in: Option<best_effort::CountedIn>,
}

/// The active pods among `pods` labelled pending (value `"true"`) and placed into a
/// subset of WorkloadSpread `ws_name`: what [`count_pending`] adds.
pub fn pending_pods(pods: &[Pod], ws_name: &str, kinds: &VersionedKinds) -> Vec<PendingPod> {
    labelled_pending(pods, ws_name)
        .map(|(p, m)| PendingPod {
            name: p.metadata.name.clone().unwrap_or_default(),
            version: pod_version(
                p.metadata.labels.as_ref(),
                controller_of(p).map(|o| o.kind).as_deref(),
                kinds,
            ),
            subset: m.subset,
            counted_in: best_effort::CountedIn::of(p),
        })
        .collect()
}

/// [`pending_pods`] among the pods `ws`'s workload owns. The label and the annotation
/// are plain metadata anyone allowed to create or patch pods can set: a labelled pod of
/// another owner (or of none) must not make a subset look full. `controller_of` returns
/// an owner object's controller reference (the caller GETs it). A pod whose owner is
/// gone is not counted; one whose owner cannot be read for another reason is (a
/// subset then looks fuller for a moment, never emptier).
pub fn owned_pending_pods(
    pods: &[Pod],
    ws: &WorkloadSpread,
    workload_kinds: &WorkloadKinds,
    versioned: &VersionedKinds,
    mut owner_controller: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Vec<PendingPod> {
    let owned: Vec<Pod> = labelled_pending(pods, ws.name())
        .filter(|(p, _)| {
            let Some(controller) = controller_of(p) else {
                return false;
            };
            match owned_by_target(ws, &controller, workload_kinds, &mut owner_controller) {
                Ok(owned) => owned,
                Err(OwnerLookupError::NotFound(_)) => false,
                Err(OwnerLookupError::Other(_)) => true,
            }
        })
        .map(|(p, _)| p.clone())
        .collect();
    pending_pods(&owned, ws.name(), versioned)
}

/// The active pods labelled pending whose matched annotation names `ws_name`.
fn labelled_pending<'p>(
    pods: &'p [Pod],
    ws_name: &'p str,
) -> impl Iterator<Item = (&'p Pod, crate::annotation::MatchedWorkloadSpread)> + 'p {
    pods.iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(PENDING_LABEL))
                .is_some_and(|v| v == PENDING_VALUE)
        })
        .filter(|p| is_active(p))
        .filter_map(move |p| Some((p, matched(p).filter(|m| m.name == ws_name)?)))
}

/// Best-effort admission on the controller's last status: adds each pending pod to its
/// subset's occupancy, as a creating pod, unless the status already tracks it (an
/// exact host's claim) or the controller's stamp says this version of the status counts
/// it ([`best_effort::CountedIn::covers`]) — the pods admitted since the controller's
/// last count. A pod the status counts as a replica before its stamp is seen is counted
/// twice: the subset looks fuller for that moment, never emptier. Returns how many were
/// added.
pub fn count_pending(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pending: &[PendingPod],
    scale: Scale,
    now: Timestamp,
) -> usize {
    let mut added = 0;
    let uncounted = pending
        .iter()
        .filter(|p| !p.name.is_empty())
        .filter(|p| !p.counted_in.as_ref().is_some_and(|c| c.covers(ws)));
    for pod in uncounted {
        let statuses = versioned_statuses(status, ws, &pod.version, scale.replicas);
        if claimed_subset(statuses, &pod.name).is_some() {
            continue;
        }
        let Some(s) = statuses.iter_mut().find(|s| s.name == pod.subset) else {
            continue;
        };
        s.creating_pods.insert(pod.name.clone(), Time(now));
        recount_missing(ws, s, scale, -1);
        added += 1;
    }
    added
}

pub mod best_effort;
mod choose;
pub mod expire;
pub mod reserve;
pub mod room;
#[cfg(test)]
mod tests;

/// The full create decision on a WorkloadSpread as read: the subset, the generated id,
/// and the new status when it must be written (`None` = no write).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateDecision {
    pub subset: Option<String>,
    pub generated_uid: Option<String>,
    pub new_status: Option<WorkloadSpreadStatus>,
}

/// `acquireSuitableSubset` for a create, on the given object and its status.
pub fn decide_create(
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    scale: Scale,
    now: Timestamp,
    new_uid: &str,
) -> CreateDecision {
    match create_path(ws, pod.name) {
        CreatePath::Stateless(subset) => CreateDecision {
            subset,
            ..Default::default()
        },
        CreatePath::Counted => {
            let mut status = ws.status.clone().unwrap_or_default();
            let claim = claim_for_create(&mut status, ws, pod, scale, now, new_uid);
            CreateDecision {
                subset: claim.subset,
                generated_uid: claim.generated_uid,
                new_status: claim.status_changed.then_some(status),
            }
        }
    }
}

/// The delete/eviction decision: the new status when it must be written.
pub fn decide_release(
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    subset: &str,
    scale: Scale,
    now: Timestamp,
) -> Option<WorkloadSpreadStatus> {
    if !matches!(create_path(ws, pod.name), CreatePath::Counted) {
        return None;
    }
    let mut status = ws.status.clone().unwrap_or_default();
    release(&mut status, ws, pod, subset, scale, now).then_some(status)
}

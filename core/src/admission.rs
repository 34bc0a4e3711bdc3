//! Admission decisions for pods (reference §3.3, §3.4, §3.7): which subset a new pod
//! goes to, and the status bookkeeping (`creatingPods`, `deletingPods`,
//! `missingReplicas`) for creations, deletions and evictions.
//!
//! Callers skip dry-run requests entirely (no injection, no status change), as the
//! reference does.
//!
//! Under [`Rules::Planned`] a percentage subset's room is its maximum scaled to the
//! workload's *current* replicas minus its occupancy as the status records it
//! (`replicas + |creatingPods| − |deletingPods|`), so pods created right after a scale
//! land on the planned spread before the controller recomputes `missingReplicas`.
//! Integer subsets (and [`Rules::Reference`]) use `missingReplicas` as the reference does.

use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubsetStatus};
use crate::api::{PENDING_LABEL, PENDING_VALUE};
use crate::percent::scaled_value;
use crate::pods::{controller_of, is_active, matched};
use crate::rules::Rules;
use crate::version::{pod_version, VersionedKinds};
use crate::workload::{owned_by_target, ObjectRef, OwnerLookupError, WorkloadKinds};
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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

fn tracked_subset(statuses: &[WorkloadSpreadSubsetStatus], pod_name: &str) -> Option<String> {
    if pod_name.is_empty() {
        return None;
    }
    statuses
        .iter()
        .find(|s| s.creating_pods.contains_key(pod_name) || s.deleting_pods.contains_key(pod_name))
        .map(|s| s.name.clone())
}

/// The workload's replica count and the rules that scale percentages with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The workload's current replicas (0 when unknown or not needed).
    pub replicas: i32,
    pub rules: Rules,
}

impl Scale {
    pub fn new(replicas: i32, rules: Rules) -> Self {
        Scale { replicas, rules }
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
    if let Some(subset) = tracked_subset(statuses, pod.name) {
        return Claim {
            subset: Some(subset),
            generated_uid: None,
            status_changed: false,
        };
    }
    // An unnamed pod is tracked by its generated id (the admission request's uid): the
    // same request delivered again claims nothing more and gets the same answer.
    if pod.name.is_empty() && !new_uid.is_empty() {
        if let Some(subset) = tracked_subset(statuses, new_uid) {
            return Claim {
                subset: Some(subset),
                generated_uid: Some(new_uid.to_string()),
                status_changed: false,
            };
        }
    }
    let Some((i, for_min)) = choose_subset(statuses, ws, scale, &allowed) else {
        return Claim::default();
    };
    let chosen = &mut statuses[i];
    // Unlimited subsets are not tracked (#1066) unless filling a minReplicas, which
    // needs the count of pods admitted since the controller last looked.
    if chosen.missing_replicas == -1 && !for_min {
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
    match planned_max(ws, chosen, scale) {
        Some(max) => chosen.missing_replicas = missing_for(max, chosen),
        None if chosen.missing_replicas > 0 => chosen.missing_replicas -= 1,
        None => {}
    }
    Claim {
        subset: Some(chosen.name.clone()),
        generated_uid: uid,
        status_changed: true,
    }
}

/// `getSuitableSubset`, preceded by the `minReplicas` extension: the first schedulable
/// subset still below its minimum (and with room) wins; otherwise the first schedulable
/// subset with room (`missingReplicas > 0` or unlimited). Returns the index and
/// whether it was chosen to fill a minimum.
fn choose_subset(
    statuses: &[WorkloadSpreadSubsetStatus],
    ws: &WorkloadSpread,
    scale: Scale,
    allowed: &impl Fn(&str) -> bool,
) -> Option<(usize, bool)> {
    let replicas = scale.replicas;
    let room = |s: &WorkloadSpreadSubsetStatus| match planned_max(ws, s, scale) {
        Some(max) => i64::from(max) > occupancy(s),
        None => s.missing_replicas > 0 || s.missing_replicas == -1,
    };
    let has_room =
        |s: &WorkloadSpreadSubsetStatus| allowed(&s.name) && !s.is_unschedulable() && room(s);
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
        let count = match planned_max(ws, s, scale) {
            Some(_) => occupancy(s),
            None => subset_count(s, spec.max_replicas.as_ref(), replicas),
        };
        count < i64::from(min)
    };
    let for_min = statuses.iter().position(|s| has_room(s) && below_min(s));
    for_min
        .map(|i| (i, true))
        .or_else(|| statuses.iter().position(has_room).map(|i| (i, false)))
}

/// Under [`Rules::Planned`], a percentage subset's maximum scaled to the current
/// replicas; `None` where `missingReplicas` decides (integers, unlimited, reference).
fn planned_max(ws: &WorkloadSpread, s: &WorkloadSpreadSubsetStatus, scale: Scale) -> Option<i32> {
    if scale.rules != Rules::Planned {
        return None;
    }
    let max = ws.subset(&s.name)?.max_replicas.as_ref()?;
    match max {
        IntOrString::String(_) => Some(scaled_value(max, scale.replicas).unwrap_or(0)),
        IntOrString::Int(_) => None,
    }
}

/// The planned deletion cost of a pod a claim placed in `subset`
/// ([`crate::controller::cost::admission_cost`]), for the admission to write in its
/// patch: the pods of `version` per subset are the status's occupancy, less `unused`
/// (the subsets of placeholders held and not taken: slots, not pods), plus the pod
/// itself where the status does not record it under `key` (an unlimited subset, which
/// claims do not track, or a placeholder the pod is taking, then also in `unused`).
pub fn claimed_pod_cost(
    ws: &WorkloadSpread,
    rules: Rules,
    status: &WorkloadSpreadStatus,
    version: &str,
    subset: &str,
    key: &str,
    unused: &[&str],
) -> Option<i64> {
    let statuses = status.versioned_subset_statuses.get(version);
    let counts: Vec<usize> = ws
        .spec
        .subsets
        .iter()
        .map(|spec| {
            let s = statuses.and_then(|v| v.iter().find(|s| s.name == spec.name));
            let mut n = s.map_or(0, occupancy);
            n -= unused.iter().filter(|u| **u == spec.name).count() as i64;
            let recorded = s.is_some_and(|s| s.creating_pods.contains_key(key));
            if spec.name == subset && !recorded {
                n += 1;
            }
            usize::try_from(n).unwrap_or(0)
        })
        .collect();
    crate::controller::cost::admission_cost(ws, rules, &counts, subset)
}

/// Pods in a subset as its status records them: counted by the controller, plus
/// admitted since, minus deleted since.
fn occupancy(s: &WorkloadSpreadSubsetStatus) -> i64 {
    i64::from(s.replicas) + s.creating_pods.len() as i64 - s.deleting_pods.len() as i64
}

/// `missingReplicas` of a percentage subset with maximum `max` (never below 0).
fn missing_for(max: i32, s: &WorkloadSpreadSubsetStatus) -> i32 {
    let missing = (i64::from(max) - occupancy(s)).max(0);
    i32::try_from(missing).unwrap_or(i32::MAX)
}

/// Pods currently counted in a subset from the webhook's point of view.
fn subset_count(s: &WorkloadSpreadSubsetStatus, max: Option<&IntOrString>, replicas: i32) -> i64 {
    match max.and_then(|m| scaled_value(m, replicas).ok()) {
        Some(max) if s.missing_replicas >= 0 => i64::from(max) - i64::from(s.missing_replicas),
        _ => occupancy(s),
    }
}

/// `updateSubsetForPod(Delete|Eviction)`: records the pod in deletingPods of its subset
/// and frees its slot. Returns whether the status changed.
pub fn release(
    status: &mut WorkloadSpreadStatus,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    subset: &str,
    scale: Scale,
    now: Timestamp,
) -> bool {
    let statuses = versioned_statuses(status, ws, pod.version, scale.replicas);
    if tracked_subset(statuses, pod.name).is_some() {
        return false;
    }
    let Some(s) = statuses.iter_mut().find(|s| s.name == subset) else {
        return false;
    };
    if s.missing_replicas == -1 {
        return false;
    }
    s.deleting_pods.insert(pod.name.to_string(), Time(now));
    match planned_max(ws, s, scale) {
        Some(max) => s.missing_replicas = missing_for(max, s),
        None => s.missing_replicas = s.missing_replicas.saturating_add(1),
    }
    true
}

/// Undoes a claim whose pod will not be created (the guest refused it after claiming):
/// removes the pod's `creatingPods` entry (`key`: its name, or the generated id of an
/// unnamed pod) from `subset` and frees the slot. Returns whether the status changed.
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
    match planned_max(ws, s, scale) {
        Some(max) => s.missing_replicas = missing_for(max, s),
        None if s.missing_replicas >= 0 => {
            s.missing_replicas = s.missing_replicas.saturating_add(1)
        }
        None => {}
    }
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
        if tracked_subset(statuses, &pod.name).is_some() {
            continue;
        }
        let Some(s) = statuses.iter_mut().find(|s| s.name == pod.subset) else {
            continue;
        };
        s.creating_pods.insert(pod.name.clone(), Time(now));
        match planned_max(ws, s, scale) {
            Some(max) => s.missing_replicas = missing_for(max, s),
            None if s.missing_replicas > 0 => s.missing_replicas -= 1,
            None => {}
        }
        added += 1;
    }
    added
}

pub mod best_effort;
pub mod reserve;
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

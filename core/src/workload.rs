//! Which workloads a WorkloadSpread can target, how their pods are matched through the
//! owner chain (reference §3.2), and how their replica count is read (§3.5).

use crate::api::v1beta1::{TargetFilter, TargetReference, WorkloadSpread};
use crate::replicas::{builtin_replicas, replicas_at_path, replicas_from_paths, PathError};
use crate::selector::{Labels, Selector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A reference to an object by apiVersion, kind and name (an owner reference or a targetRef).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl From<&TargetReference> for ObjectRef {
    fn from(t: &TargetReference) -> Self {
        ObjectRef {
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            name: t.name.clone(),
        }
    }
}

/// The group of an apiVersion (`schema.ParseGroupVersion`): `v1` → `""`, `apps/v1` → `apps`.
pub fn parse_group(api_version: &str) -> Result<&str, String> {
    if api_version.is_empty() || api_version == "/" {
        return Ok("");
    }
    let mut parts = api_version.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_version), None, _) => Ok(""),
        (Some(group), Some(_version), None) => Ok(group),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// `isReferenceEqual` without the owner walk: same group (any version), kind and name.
pub fn reference_equal(target: &ObjectRef, owner: &ObjectRef) -> Result<bool, String> {
    refers_to_object(&target.api_version, &target.kind, &target.name, owner)
}

/// [`reference_equal`] on a target given by its parts (nothing copied per spread tried).
fn refers_to_object(
    api_version: &str,
    kind: &str,
    name: &str,
    owner: &ObjectRef,
) -> Result<bool, String> {
    let tg = parse_group(api_version)?;
    let og = parse_group(&owner.api_version)?;
    Ok(tg == og && kind == owner.kind && name == owner.name)
}

/// A group and kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
}

/// A custom workload kind (replaces the reference's `kruise-configuration` whitelist).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomWorkload {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    /// Dot-separated path of the replica count; empty means 0.
    #[serde(default)]
    pub replicas_path: String,
    /// Intermediate owner kinds between the pods and this workload.
    #[serde(default)]
    pub sub_resources: Vec<GroupKind>,
}

/// Built-in workload kinds plus configured custom ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadKinds {
    pub custom: Vec<CustomWorkload>,
}

const BUILTIN_OWNERS: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps.kruise.io", "CloneSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("apps", "StatefulSet"),
    ("apps.kruise.io", "StatefulSet"),
];

impl WorkloadKinds {
    /// Whether pods owned by an object of this kind can be matched (and its own owner
    /// followed): built-in kinds, custom kinds and their sub-resources.
    pub fn is_owner_kind(&self, r: &ObjectRef) -> bool {
        let Ok(group) = parse_group(&r.api_version) else {
            return false;
        };
        BUILTIN_OWNERS
            .iter()
            .any(|(g, k)| *g == group && *k == r.kind)
            || self.custom.iter().any(|c| {
                (c.group == group && c.kind == r.kind)
                    || c.sub_resources
                        .iter()
                        .any(|s| s.group == group && s.kind == r.kind)
            })
    }

    /// The custom entry for a group/kind.
    pub fn custom(&self, group: &str, kind: &str) -> Option<&CustomWorkload> {
        self.custom
            .iter()
            .find(|c| c.group == group && c.kind == kind)
    }

    /// The workload's replica count used for percentages: `targetFilter.replicasPathList`
    /// if set, else the built-in field, else the custom kind's `replicasPath`, else 0.
    pub fn workload_replicas(
        &self,
        target: &TargetReference,
        filter: Option<&TargetFilter>,
        workload: &Value,
    ) -> Result<i32, PathError> {
        if let Some(paths) = filter
            .map(|f| &f.replicas_path_list)
            .filter(|p| !p.is_empty())
        {
            return replicas_from_paths(workload, paths);
        }
        let group = parse_group(&target.api_version).unwrap_or_default();
        if BUILTIN_OWNERS
            .iter()
            .any(|(g, k)| *g == group && *k == target.kind)
        {
            return Ok(builtin_replicas(&target.kind, workload).unwrap_or(0));
        }
        match self.custom(group, &target.kind) {
            Some(c) => Ok(replicas_at_path(workload, &c.replicas_path).unwrap_or(0)),
            None => Ok(0),
        }
    }
}

/// `IsPodSelected`. A filter without a selector selects every pod of the workload, in
/// both the webhook and the controller (the reference's webhook selects none; see
/// docs/semantics.md). An invalid selector is an error.
pub fn is_pod_selected(filter: Option<&TargetFilter>, labels: &Labels) -> Result<bool, String> {
    match filter.and_then(|f| f.selector.as_ref()) {
        None => Ok(true),
        Some(sel) => Ok(Selector::from_label_selector(sel)?.matches(labels)),
    }
}

/// Failure to look up an owner while walking a pod's owner chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerLookupError {
    /// The owner does not exist: pod admission fails (reference behaviour since #1807).
    NotFound(String),
    /// Any other failure: this WorkloadSpread is skipped and the next one tried.
    Other(String),
}

/// A targetRef's parts, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetParts<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

/// What matching reads of a WorkloadSpread: its name, whether it is being deleted, its
/// target and target filter. Whole spreads and [`SpreadTarget`]s are matched by the one
/// rule below.
pub trait Targeting {
    fn name(&self) -> &str;
    fn is_deleting(&self) -> bool;
    fn target(&self) -> Option<TargetParts<'_>>;
    fn target_filter(&self) -> Option<&TargetFilter>;
}

impl Targeting for WorkloadSpread {
    fn name(&self) -> &str {
        WorkloadSpread::name(self)
    }
    fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
    fn target(&self) -> Option<TargetParts<'_>> {
        self.spec.target_ref.as_ref().map(|t| TargetParts {
            api_version: &t.api_version,
            kind: &t.kind,
            name: &t.name,
        })
    }
    fn target_filter(&self) -> Option<&TargetFilter> {
        self.spec.target_filter.as_ref()
    }
}

/// A WorkloadSpread pruned to what matching reads: the shape of one listed with the
/// field masks `masks::WORKLOADSPREAD_TARGET_FIELDS` (a whole WorkloadSpread decodes to
/// the same value: the other fields are skipped). Its strings borrow from the answer
/// they are decoded from, so a list of a thousand costs no copy of them. A pod's spread
/// is looked for among these; only the one that matches is then read whole.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct SpreadTarget<'a> {
    #[serde(default, borrow)]
    pub metadata: SpreadTargetMeta<'a>,
    #[serde(default, borrow)]
    pub spec: SpreadTargetSpec<'a>,
}

/// The metadata a [`SpreadTarget`] keeps.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadTargetMeta<'a> {
    #[serde(default, borrow)]
    pub name: Cow<'a, str>,
    #[serde(default)]
    pub deletion_timestamp: Option<Time>,
}

/// The spec a [`SpreadTarget`] keeps.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadTargetSpec<'a> {
    #[serde(default, borrow)]
    pub target_ref: Option<SpreadTargetRef<'a>>,
    #[serde(default)]
    pub target_filter: Option<TargetFilter>,
}

/// A targetRef as a [`SpreadTarget`] holds it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadTargetRef<'a> {
    #[serde(default, borrow)]
    pub api_version: Cow<'a, str>,
    #[serde(default, borrow)]
    pub kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub name: Cow<'a, str>,
}

impl<'a> SpreadTarget<'a> {
    /// What matching reads of a whole WorkloadSpread (borrowed from it).
    pub fn of(ws: &'a WorkloadSpread) -> Self {
        SpreadTarget {
            metadata: SpreadTargetMeta {
                name: Cow::Borrowed(WorkloadSpread::name(ws)),
                deletion_timestamp: ws.metadata.deletion_timestamp.clone(),
            },
            spec: SpreadTargetSpec {
                target_ref: ws.spec.target_ref.as_ref().map(|t| SpreadTargetRef {
                    api_version: Cow::Borrowed(&t.api_version),
                    kind: Cow::Borrowed(&t.kind),
                    name: Cow::Borrowed(&t.name),
                }),
                target_filter: ws.spec.target_filter.clone(),
            },
        }
    }

    /// Whether `ws` read whole is still this spread as it was listed: same name,
    /// target, filter and deletion state, so matching it gives the same answer (a spread
    /// recreated alike gives it too). False when it changed between the two reads.
    pub fn still_describes(&self, ws: &WorkloadSpread) -> bool {
        *self == SpreadTarget::of(ws)
    }
}

impl Targeting for SpreadTarget<'_> {
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
    fn target(&self) -> Option<TargetParts<'_>> {
        self.spec.target_ref.as_ref().map(|t| TargetParts {
            api_version: &t.api_version,
            kind: &t.kind,
            name: &t.name,
        })
    }
    fn target_filter(&self) -> Option<&TargetFilter> {
        self.spec.target_filter.as_ref()
    }
}

/// Outcome of matching a pod against the WorkloadSpreads of its namespace.
#[derive(Debug, PartialEq)]
pub struct MatchOutcome<'a, W = WorkloadSpread> {
    pub workloadspread: Option<&'a W>,
    /// Skipped WorkloadSpreads and why (to log).
    pub warnings: Vec<String>,
}

/// `HandlePodCreation` matching: the first WorkloadSpread (list order, not deleting)
/// whose target is the pod's controller or an ancestor reached through known owner
/// kinds, and whose targetFilter selects the pod. `controller_of` returns the
/// controller reference of an owner object (the caller GETs it lazily); each owner is
/// looked up once however many WorkloadSpreads are tried (a failed lookup is tried
/// again for the next one, as the reference does).
pub fn find_matching_workloadspread<'a, W: Targeting>(
    wss: &'a [W],
    pod_controller: &ObjectRef,
    pod_labels: &Labels,
    kinds: &WorkloadKinds,
    controller_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<MatchOutcome<'a, W>, String> {
    let mut warnings = Vec::new();
    if !kinds.is_owner_kind(pod_controller) {
        return Ok(MatchOutcome {
            workloadspread: None,
            warnings,
        });
    }
    let mut owners = Owners {
        kinds,
        chain: vec![pod_controller.clone()],
        complete: false,
        controller_of,
    };
    for ws in wss {
        let Some(target) = ws.target() else {
            continue;
        };
        if ws.is_deleting() {
            continue;
        }
        match refers_to(target, &mut owners) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(OwnerLookupError::NotFound(what)) => return Err(what),
            Err(OwnerLookupError::Other(why)) => {
                warnings.push(format!("WorkloadSpread {}: {why}", ws.name()));
                continue;
            }
        }
        match is_pod_selected(ws.target_filter(), pod_labels) {
            Ok(true) => {
                return Ok(MatchOutcome {
                    workloadspread: Some(ws),
                    warnings,
                })
            }
            Ok(false) => {}
            Err(e) => warnings.push(format!(
                "WorkloadSpread {}: invalid targetFilter: {e}",
                ws.name()
            )),
        }
    }
    Ok(MatchOutcome {
        workloadspread: None,
        warnings,
    })
}

/// Whether `controller` (a pod's controller reference) is `ws`'s target or reaches it
/// through known owner kinds — the owner walk of [`find_matching_workloadspread`] for
/// one WorkloadSpread, without its `targetFilter` (for pods `ws` already placed).
pub fn owned_by_target<W: Targeting>(
    ws: &W,
    controller: &ObjectRef,
    kinds: &WorkloadKinds,
    controller_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<bool, OwnerLookupError> {
    let Some(target) = ws.target() else {
        return Ok(false);
    };
    if !kinds.is_owner_kind(controller) {
        return Ok(false);
    }
    let mut owners = Owners {
        kinds,
        chain: vec![controller.clone()],
        complete: false,
        controller_of,
    };
    refers_to(target, &mut owners)
}

/// The pod's controller and every controller above it through known owner kinds: the
/// chain [`find_matching_workloadspread`] walks, looked up whole (empty when the pod's
/// controller is not a kind a WorkloadSpread can reach). A WorkloadSpread can match the
/// pod only if its `targetRef` names one of them, which lets a host narrow the candidates
/// by `spec.targetRef.name` before the rule runs on them.
pub fn owner_chain(
    pod_controller: &ObjectRef,
    kinds: &WorkloadKinds,
    controller_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<Vec<ObjectRef>, OwnerLookupError> {
    if !kinds.is_owner_kind(pod_controller) {
        return Ok(vec![]);
    }
    let mut owners = Owners {
        kinds,
        chain: vec![pod_controller.clone()],
        complete: false,
        controller_of,
    };
    let mut i = 0;
    while i < OWNER_CHAIN_MAX && owners.get(i)?.is_some() {
        i += 1;
    }
    owners.chain.truncate(OWNER_CHAIN_MAX);
    Ok(owners.chain)
}

/// The field a WorkloadSpread's candidates are selected by (a selectable field of the
/// CRD): its target's name.
pub const TARGET_NAME_FIELD: &str = "spec.targetRef.name";

/// Owner chains are short; the bound guards against reference cycles.
const OWNER_CHAIN_MAX: usize = 16;

/// The pod's controller and its controllers above it, looked up as far as needed and
/// remembered: the chain ends at an owner of an unknown kind or without a controller.
struct Owners<'k, F> {
    kinds: &'k WorkloadKinds,
    /// Never empty: the pod's controller first.
    chain: Vec<ObjectRef>,
    complete: bool,
    controller_of: F,
}

impl<F> Owners<'_, F>
where
    F: FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
{
    /// The `i`-th owner (0: the pod's controller); `None` past the chain's end.
    fn get(&mut self, i: usize) -> Result<Option<&ObjectRef>, OwnerLookupError> {
        while self.chain.len() <= i && !self.complete {
            let Some(last) = self.chain.last() else {
                break;
            };
            if !self.kinds.is_owner_kind(last) {
                self.complete = true;
                break;
            }
            match (self.controller_of)(last)? {
                Some(next) => self.chain.push(next),
                None => self.complete = true,
            }
        }
        Ok(self.chain.get(i))
    }
}

fn refers_to<F>(
    target: TargetParts<'_>,
    owners: &mut Owners<'_, F>,
) -> Result<bool, OwnerLookupError>
where
    F: FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
{
    for i in 0..OWNER_CHAIN_MAX {
        let Some(current) = owners.get(i)? else {
            return Ok(false);
        };
        let (version, kind, name) = (target.api_version, target.kind, target.name);
        if refers_to_object(version, kind, name, current).map_err(OwnerLookupError::Other)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The pod template used to validate subset patches: the workload's
/// `spec.template`, plus one PVC volume per `volumeClaimTemplates` entry for CloneSet
/// and StatefulSet (the controller adds those volumes to every pod).
pub fn pod_template_for_validation(kind: &str, workload: &Value) -> Option<Value> {
    let mut template = workload["spec"]["template"].clone();
    if !template.is_object() {
        return None;
    }
    if matches!(kind, "CloneSet" | "StatefulSet") {
        let claims: Vec<Value> = workload["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .map(|n| serde_json::json!({"name": n, "persistentVolumeClaim": {"claimName": n}}))
            .collect();
        if !claims.is_empty() {
            let spec = template
                .as_object_mut()?
                .entry("spec")
                .or_insert_with(|| Value::Object(Default::default()));
            let volumes = spec
                .as_object_mut()?
                .entry("volumes")
                .or_insert_with(|| Value::Array(vec![]));
            volumes.as_array_mut()?.extend(claims);
        }
    }
    Some(template)
}

#[cfg(test)]
mod tests;

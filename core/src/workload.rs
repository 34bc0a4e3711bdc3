//! Which workloads a WorkloadSpread can target, how their pods are matched through the
//! owner chain (reference §3.2), and how their replica count is read (§3.5).

use crate::api::v1beta1::{TargetFilter, TargetReference, WorkloadSpread};
use crate::replicas::{builtin_replicas, replicas_at_path, replicas_from_paths, PathError};
use crate::selector::{Labels, Selector};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [_version] => Ok(""),
        [group, _version] => Ok(group),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// `isReferenceEqual` without the owner walk: same group (any version), kind and name.
pub fn reference_equal(target: &ObjectRef, owner: &ObjectRef) -> Result<bool, String> {
    let tg = parse_group(&target.api_version)?;
    let og = parse_group(&owner.api_version)?;
    Ok(tg == og && target.kind == owner.kind && target.name == owner.name)
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

/// Outcome of matching a pod against the WorkloadSpreads of its namespace.
#[derive(Debug, PartialEq)]
pub struct MatchOutcome<'a> {
    pub workloadspread: Option<&'a WorkloadSpread>,
    /// Skipped WorkloadSpreads and why (to log).
    pub warnings: Vec<String>,
}

/// `HandlePodCreation` matching: the first WorkloadSpread (list order, not deleting)
/// whose target is the pod's controller or an ancestor reached through known owner
/// kinds, and whose targetFilter selects the pod. `controller_of` returns the
/// controller reference of an owner object (the caller GETs it lazily).
pub fn find_matching_workloadspread<'a>(
    wss: &'a [WorkloadSpread],
    pod_controller: &ObjectRef,
    pod_labels: &Labels,
    kinds: &WorkloadKinds,
    mut controller_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<MatchOutcome<'a>, String> {
    let mut warnings = Vec::new();
    if !kinds.is_owner_kind(pod_controller) {
        return Ok(MatchOutcome {
            workloadspread: None,
            warnings,
        });
    }
    for ws in wss {
        let Some(target) = ws.spec.target_ref.as_ref() else {
            continue;
        };
        if ws.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let target = ObjectRef::from(target);
        match refers_to(&target, pod_controller, kinds, &mut controller_of) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(OwnerLookupError::NotFound(what)) => return Err(what),
            Err(OwnerLookupError::Other(why)) => {
                warnings.push(format!("WorkloadSpread {}: {why}", ws.name()));
                continue;
            }
        }
        match is_pod_selected(ws.spec.target_filter.as_ref(), pod_labels) {
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
pub fn owned_by_target(
    ws: &WorkloadSpread,
    controller: &ObjectRef,
    kinds: &WorkloadKinds,
    mut controller_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<bool, OwnerLookupError> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(false);
    };
    if !kinds.is_owner_kind(controller) {
        return Ok(false);
    }
    refers_to(
        &ObjectRef::from(target),
        controller,
        kinds,
        &mut controller_of,
    )
}

fn refers_to(
    target: &ObjectRef,
    owner: &ObjectRef,
    kinds: &WorkloadKinds,
    controller_of: &mut impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
) -> Result<bool, OwnerLookupError> {
    let mut current = owner.clone();
    // Owner chains are short; the bound guards against reference cycles.
    for _ in 0..16 {
        if reference_equal(target, &current).map_err(OwnerLookupError::Other)? {
            return Ok(true);
        }
        if !kinds.is_owner_kind(&current) {
            return Ok(false);
        }
        match controller_of(&current)? {
            Some(next) => current = next,
            None => return Ok(false),
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

//! Pod and workload "versions" keying `versionedSubsetStatuses` (reference §3.8).

use crate::api::VERSION_IGNORED;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Label set by the Deployment controller on ReplicaSets and their pods.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// Label set by StatefulSet / CloneSet controllers.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";

/// Workload kinds (lower-case) whose pods get a versioned status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionedKinds(BTreeSet<String>);

impl Default for VersionedKinds {
    /// `deployment,replicaset`, the reference's `--ws-enabled-versioned-status` default.
    fn default() -> Self {
        Self::new(["deployment", "replicaset"])
    }
}

impl VersionedKinds {
    /// Kinds are lower-cased; `deployment` implies `replicaset` (its pods' direct owner).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(kinds: I) -> Self {
        let mut set: BTreeSet<String> = kinds
            .into_iter()
            .map(|k| k.as_ref().trim().to_ascii_lowercase())
            .filter(|k| !k.is_empty())
            .collect();
        if set.contains("deployment") {
            set.insert("replicaset".into());
        }
        VersionedKinds(set)
    }

    /// Whether an object of `kind` owned by a controller of `owner_kind` is versioned.
    pub fn enabled(&self, kind: &str, owner_kind: Option<&str>) -> bool {
        self.0.contains(&kind.to_ascii_lowercase())
            || owner_kind.is_some_and(|k| self.0.contains(&k.to_ascii_lowercase()))
    }
}

/// Short form of a controller-revision-hash: the part after the last `-`.
pub fn short_revision(hash: &str) -> &str {
    hash.rsplit_once('-').map_or(hash, |(_, h)| h)
}

/// `GetPodVersion`: pod-template-hash, else short controller-revision-hash, else
/// `versionIgnored`; always `versionIgnored` when the pod's owner kind is not versioned.
pub fn pod_version(
    labels: Option<&BTreeMap<String, String>>,
    owner_kind: Option<&str>,
    kinds: &VersionedKinds,
) -> String {
    if !kinds.enabled("Pod", owner_kind) {
        return VERSION_IGNORED.to_string();
    }
    labelled_version(labels)
}

/// The version a pod's labels give when its kind is versioned: pod-template-hash, else
/// short controller-revision-hash, else `versionIgnored`.
pub fn labelled_version(labels: Option<&BTreeMap<String, String>>) -> String {
    let label = |k: &str| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty());
    if let Some(h) = label(POD_TEMPLATE_HASH_LABEL) {
        return h.clone();
    }
    if let Some(h) = label(CONTROLLER_REVISION_HASH_LABEL) {
        return short_revision(h).to_string();
    }
    VERSION_IGNORED.to_string()
}

/// The latest version of a workload could not be determined (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("latest version of {kind} not found: {reason}")]
pub struct VersionNotFound {
    pub kind: String,
    pub reason: String,
}

/// `GetWorkloadVersion` for a workload given as JSON. For a Deployment pass its
/// ReplicaSets (any order); the one controlled by it whose template equals the
/// Deployment's (ignoring `pod-template-hash`) gives the version.
pub fn workload_version(
    workload: &Value,
    replica_sets: &[Value],
    kinds: &VersionedKinds,
) -> Result<String, VersionNotFound> {
    let kind = workload["kind"].as_str().unwrap_or_default();
    let owner_kind = controller_kind(workload);
    if !kinds.enabled(kind, owner_kind.as_deref()) {
        return Ok(VERSION_IGNORED.to_string());
    }
    let not_found = |reason: &str| VersionNotFound {
        kind: kind.to_string(),
        reason: reason.to_string(),
    };
    match kind {
        "ReplicaSet" => Ok(workload["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL]
            .as_str()
            .unwrap_or_default()
            .to_string()),
        "CloneSet" => {
            let generation = workload["metadata"]["generation"].as_i64().unwrap_or(0);
            let observed = workload["status"]["observedGeneration"]
                .as_i64()
                .unwrap_or(0);
            if generation > observed {
                return Err(not_found(
                    "status.observedGeneration is behind metadata.generation",
                ));
            }
            let rev = workload["status"]["updateRevision"]
                .as_str()
                .unwrap_or_default();
            Ok(short_revision(rev).to_string())
        }
        "Deployment" => deployment_version(workload, replica_sets)
            .ok_or_else(|| not_found("no ReplicaSet matches the Deployment's pod template")),
        _ => Ok(VERSION_IGNORED.to_string()),
    }
}

fn controller_kind(obj: &Value) -> Option<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == Value::Bool(true))
        .and_then(|r| r["kind"].as_str().map(str::to_owned))
}

fn deployment_version(deployment: &Value, replica_sets: &[Value]) -> Option<String> {
    let uid = deployment["metadata"]["uid"].as_str()?;
    let want = template_without_hash(&deployment["spec"]["template"]);
    replica_sets
        .iter()
        .filter(|rs| rs["metadata"]["deletionTimestamp"].is_null())
        .filter(|rs| {
            rs["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["controller"] == Value::Bool(true) && r["uid"] == uid)
                })
        })
        .find(|rs| template_without_hash(&rs["spec"]["template"]) == want)
        .and_then(|rs| rs["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL].as_str())
        .map(str::to_owned)
}

/// The template without the hash label and without nulls (`creationTimestamp: null`
/// is in raw API JSON but not in re-serialised typed objects; both mean "unset").
fn template_without_hash(template: &Value) -> Value {
    let mut t = without_nulls(template);
    if let Some(labels) = t
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("labels");
            }
        }
    }
    t
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deployment_version_ignores_nulls() {
        let d = json!({"kind": "Deployment", "metadata": {"uid": "d"},
            "spec": {"template": {"metadata": {"creationTimestamp": null, "labels": {"app": "w"}}, "spec": {"containers": []}}}});
        let rs = json!({"kind": "ReplicaSet", "metadata": {"labels": {"pod-template-hash": "h"},
                "ownerReferences": [{"controller": true, "uid": "d"}]},
            "spec": {"template": {"metadata": {"labels": {"app": "w", "pod-template-hash": "h"}}, "spec": {"containers": []}}}});
        assert_eq!(deployment_version(&d, &[rs]).as_deref(), Some("h"));
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pod_versions() {
        // TestGetPodVersion: pods owned by a Deployment's ReplicaSet unless noted.
        let kinds = VersionedKinds::default();
        let rs = Some("ReplicaSet");
        let cases = [
            (
                labels(&[(CONTROLLER_REVISION_HASH_LABEL, "5474f59575")]),
                rs,
                "5474f59575",
            ),
            (
                labels(&[(CONTROLLER_REVISION_HASH_LABEL, "workload-xyz-5474f59575")]),
                rs,
                "5474f59575",
            ),
            (
                labels(&[(POD_TEMPLATE_HASH_LABEL, "5474f59575")]),
                rs,
                "5474f59575",
            ),
            (
                labels(&[
                    (POD_TEMPLATE_HASH_LABEL, "5474f59575"),
                    (CONTROLLER_REVISION_HASH_LABEL, "x-1"),
                ]),
                rs,
                "5474f59575",
            ),
            (
                labels(&[
                    (POD_TEMPLATE_HASH_LABEL, "5474f59575"),
                    (CONTROLLER_REVISION_HASH_LABEL, "x-1"),
                ]),
                Some("CloneSet"),
                VERSION_IGNORED,
            ),
            (labels(&[]), rs, VERSION_IGNORED),
        ];
        for (l, owner, want) in cases {
            assert_eq!(
                pod_version(Some(&l), owner, &kinds),
                want,
                "{l:?} {owner:?}"
            );
        }
    }

    fn rs(name: &str, hash: &str, owner_uid: &str, version_label: &str) -> Value {
        json!({"kind": "ReplicaSet", "metadata": {"name": name, "labels": {POD_TEMPLATE_HASH_LABEL: hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "workload", "uid": owner_uid, "controller": true}]},
            "spec": {"template": {"metadata": {"labels": {"version": version_label, POD_TEMPLATE_HASH_LABEL: hash}}}}})
    }

    #[test]
    fn workload_versions() {
        // TestGetWorkloadVersion with versioning enabled for deployment, replicaset, cloneset.
        let kinds = VersionedKinds::new(["deployment", "replicaset", "cloneset"]);
        let r = rs("rs", "5474f59575", "u", "v1");
        assert_eq!(workload_version(&r, &[], &kinds).unwrap(), "5474f59575");
        let cs = |gen: i64, observed: i64| {
            json!({"kind": "CloneSet", "metadata": {"generation": gen},
                "status": {"observedGeneration": observed, "updateRevision": "workload-5474f59575"}})
        };
        assert_eq!(
            workload_version(&cs(5, 5), &[], &kinds).unwrap(),
            "5474f59575"
        );
        assert!(workload_version(&cs(6, 5), &[], &kinds).is_err());
        let d = json!({"kind": "Deployment", "metadata": {"uid": "d-uid"},
            "spec": {"template": {"metadata": {"labels": {"version": "v5"}}}}});
        let all: Vec<Value> = (1..=5)
            .map(|i| {
                rs(
                    &format!("workload{i}"),
                    &format!("version-{i}"),
                    "d-uid",
                    &format!("v{i}"),
                )
            })
            .collect();
        assert_eq!(workload_version(&d, &all, &kinds).unwrap(), "version-5");
        assert!(workload_version(&d, &all[..4], &kinds).is_err());
        let other_owner = rs("x", "version-5", "other", "v5");
        assert!(workload_version(&d, &[other_owner], &kinds).is_err());
        let asts = json!({"kind": "StatefulSet", "apiVersion": "apps.kruise.io/v1beta1"});
        assert_eq!(
            workload_version(&asts, &[], &kinds).unwrap(),
            VERSION_IGNORED
        );
    }
}

//! `apps.kruise.io/v1alpha1` WorkloadSpread (served, not stored) and its conversion to
//! and from v1beta1. Differences: two subset field names and the condition type.

use super::v1beta1 as beta;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use beta::{AdaptiveStrategy, ScheduleStrategy, TargetFilter, TargetReference};

/// `apiVersion` of this version.
pub const API_VERSION: &str = "apps.kruise.io/v1alpha1";

/// A v1alpha1 WorkloadSpread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpread {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WorkloadSpreadSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadSpreadStatus>,
}

/// v1alpha1 spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub target_ref: Option<TargetReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_filter: Option<TargetFilter>,
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub subsets: Vec<WorkloadSpreadSubset>,
    #[serde(default, skip_serializing_if = "is_default_strategy")]
    pub schedule_strategy: ScheduleStrategy,
}

fn is_default_strategy(s: &ScheduleStrategy) -> bool {
    *s == ScheduleStrategy::default()
}

/// v1alpha1 subset (`requiredNodeSelectorTerm`, `preferredNodeSelectorTerms`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSubset {
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_node_selector_term: Option<NodeSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_selector_terms: Vec<PreferredSchedulingTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<IntOrString>,
    /// Extension (not in OpenKruise), see v1beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "crd",
        schemars(schema_with = "super::preserve_unknown_object")
    )]
    pub patch: Option<serde_json::Value>,
}

/// v1alpha1 status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subset_statuses: Vec<WorkloadSpreadSubsetStatus>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versioned_subset_statuses: BTreeMap<String, Vec<WorkloadSpreadSubsetStatus>>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// v1alpha1 subset status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSubsetStatus {
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub name: String,
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub replicas: i32,
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub missing_replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WorkloadSpreadSubsetCondition>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub creating_pods: BTreeMap<String, Time>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleting_pods: BTreeMap<String, Time>,
}

/// v1alpha1 subset condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSubsetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn api_version_or(v: &str, target: &str) -> String {
    if v.is_empty() {
        String::new()
    } else {
        target.to_string()
    }
}

impl From<WorkloadSpread> for beta::WorkloadSpread {
    fn from(ws: WorkloadSpread) -> Self {
        beta::WorkloadSpread {
            api_version: api_version_or(&ws.api_version, beta::API_VERSION),
            kind: ws.kind,
            metadata: ws.metadata,
            spec: ws.spec.into(),
            status: ws.status.map(Into::into),
        }
    }
}

impl From<beta::WorkloadSpread> for WorkloadSpread {
    fn from(ws: beta::WorkloadSpread) -> Self {
        WorkloadSpread {
            api_version: api_version_or(&ws.api_version, API_VERSION),
            kind: ws.kind,
            metadata: ws.metadata,
            spec: ws.spec.into(),
            status: ws.status.map(Into::into),
        }
    }
}

impl From<WorkloadSpreadSpec> for beta::WorkloadSpreadSpec {
    fn from(s: WorkloadSpreadSpec) -> Self {
        beta::WorkloadSpreadSpec {
            target_ref: s.target_ref,
            target_filter: s.target_filter,
            subsets: s.subsets.into_iter().map(Into::into).collect(),
            schedule_strategy: s.schedule_strategy,
        }
    }
}

impl From<beta::WorkloadSpreadSpec> for WorkloadSpreadSpec {
    fn from(s: beta::WorkloadSpreadSpec) -> Self {
        WorkloadSpreadSpec {
            target_ref: s.target_ref,
            target_filter: s.target_filter,
            subsets: s.subsets.into_iter().map(Into::into).collect(),
            schedule_strategy: s.schedule_strategy,
        }
    }
}

impl From<WorkloadSpreadSubset> for beta::WorkloadSpreadSubset {
    fn from(s: WorkloadSpreadSubset) -> Self {
        beta::WorkloadSpreadSubset {
            name: s.name,
            required_node_selector: s.required_node_selector_term,
            preferred_node_selector: s.preferred_node_selector_terms,
            tolerations: s.tolerations,
            max_replicas: s.max_replicas,
            min_replicas: s.min_replicas,
            patch: s.patch,
        }
    }
}

impl From<beta::WorkloadSpreadSubset> for WorkloadSpreadSubset {
    fn from(s: beta::WorkloadSpreadSubset) -> Self {
        WorkloadSpreadSubset {
            name: s.name,
            required_node_selector_term: s.required_node_selector,
            preferred_node_selector_terms: s.preferred_node_selector,
            tolerations: s.tolerations,
            max_replicas: s.max_replicas,
            min_replicas: s.min_replicas,
            patch: s.patch,
        }
    }
}

fn convert_map<A, B: From<A>>(m: BTreeMap<String, Vec<A>>) -> BTreeMap<String, Vec<B>> {
    m.into_iter()
        .map(|(k, v)| (k, v.into_iter().map(Into::into).collect()))
        .collect()
}

impl From<WorkloadSpreadStatus> for beta::WorkloadSpreadStatus {
    fn from(s: WorkloadSpreadStatus) -> Self {
        beta::WorkloadSpreadStatus {
            observed_generation: s.observed_generation,
            subset_statuses: s.subset_statuses.into_iter().map(Into::into).collect(),
            versioned_subset_statuses: convert_map(s.versioned_subset_statuses),
        }
    }
}

impl From<beta::WorkloadSpreadStatus> for WorkloadSpreadStatus {
    fn from(s: beta::WorkloadSpreadStatus) -> Self {
        WorkloadSpreadStatus {
            observed_generation: s.observed_generation,
            subset_statuses: s.subset_statuses.into_iter().map(Into::into).collect(),
            versioned_subset_statuses: convert_map(s.versioned_subset_statuses),
        }
    }
}

impl From<WorkloadSpreadSubsetStatus> for beta::WorkloadSpreadSubsetStatus {
    fn from(s: WorkloadSpreadSubsetStatus) -> Self {
        beta::WorkloadSpreadSubsetStatus {
            name: s.name,
            replicas: s.replicas,
            missing_replicas: s.missing_replicas,
            conditions: s.conditions.into_iter().map(Into::into).collect(),
            creating_pods: s.creating_pods,
            deleting_pods: s.deleting_pods,
        }
    }
}

impl From<beta::WorkloadSpreadSubsetStatus> for WorkloadSpreadSubsetStatus {
    fn from(s: beta::WorkloadSpreadSubsetStatus) -> Self {
        WorkloadSpreadSubsetStatus {
            name: s.name,
            replicas: s.replicas,
            missing_replicas: s.missing_replicas,
            conditions: s.conditions.into_iter().map(Into::into).collect(),
            creating_pods: s.creating_pods,
            deleting_pods: s.deleting_pods,
        }
    }
}

impl From<WorkloadSpreadSubsetCondition> for beta::SubsetCondition {
    /// An empty alpha reason becomes `Unknown` (metav1.Condition requires one).
    fn from(c: WorkloadSpreadSubsetCondition) -> Self {
        beta::SubsetCondition {
            type_: c.type_,
            status: c.status,
            observed_generation: 0,
            last_transition_time: c.last_transition_time,
            reason: if c.reason.is_empty() {
                "Unknown".to_string()
            } else {
                c.reason
            },
            message: c.message,
        }
    }
}

impl From<beta::SubsetCondition> for WorkloadSpreadSubsetCondition {
    /// `observedGeneration` has no alpha field and is dropped.
    fn from(c: beta::SubsetCondition) -> Self {
        WorkloadSpreadSubsetCondition {
            type_: c.type_,
            status: c.status,
            last_transition_time: c.last_transition_time,
            reason: c.reason,
            message: c.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alpha_fixture() -> serde_json::Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "default"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "targetFilter": {"selector": {"matchLabels": {"a": "b"}}, "replicasPathList": ["spec.replicas"]},
                "subsets": [{
                    "name": "a",
                    "requiredNodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    "preferredNodeSelectorTerms": [{"weight": 5, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}],
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                    "maxReplicas": "50%",
                    "patch": {"metadata": {"labels": {"s": "a"}}}
                }, {"name": "b"}],
                "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30, "disableSimulationSchedule": true}}
            },
            "status": {
                "observedGeneration": 3,
                "subsetStatuses": [{"name": "a", "replicas": 1, "missingReplicas": 2,
                    "conditions": [{"type": "Schedulable", "status": "True", "reason": "OK", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
                    "creatingPods": {"p1": "2024-01-01T00:00:00Z"}, "deletingPods": {"p2": "2024-01-01T00:00:01Z"}}],
                "versionedSubsetStatuses": {"v1": [{"name": "a", "replicas": 0, "missingReplicas": -1,
                    "conditions": [{"type": "Schedulable", "status": "False", "message": "no nodes"}]}]}
            }
        })
    }

    #[test]
    fn alpha_to_beta_renames_fields_and_defaults_reason() {
        let alpha: WorkloadSpread = serde_json::from_value(alpha_fixture()).unwrap();
        let beta: beta::WorkloadSpread = alpha.clone().into();
        let v = serde_json::to_value(&beta).unwrap();
        assert_eq!(v["apiVersion"], "apps.kruise.io/v1beta1");
        let s = &v["spec"]["subsets"][0];
        assert_eq!(
            s["requiredNodeSelector"]["matchExpressions"][0]["key"],
            "zone"
        );
        assert_eq!(s["preferredNodeSelector"][0]["weight"], 5);
        assert!(s.get("requiredNodeSelectorTerm").is_none());
        let vc = &v["status"]["versionedSubsetStatuses"]["v1"][0]["conditions"][0];
        assert_eq!(vc["reason"], "Unknown");
        assert_eq!(vc["message"], "no nodes");
        assert_eq!(
            v["status"]["subsetStatuses"][0]["conditions"][0]["reason"],
            "OK"
        );
    }

    #[test]
    fn round_trip_is_lossless_when_reasons_are_set() {
        let mut fixture = alpha_fixture();
        fixture["status"]["versionedSubsetStatuses"]["v1"][0]["conditions"][0]["reason"] =
            json!("Drained");
        let alpha: WorkloadSpread = serde_json::from_value(fixture.clone()).unwrap();
        let back: WorkloadSpread = beta::WorkloadSpread::from(alpha.clone()).into();
        assert_eq!(back, alpha);
        assert_eq!(serde_json::to_value(&back).unwrap(), fixture);
    }

    #[test]
    fn nil_parts_do_not_panic_and_stay_nil() {
        let alpha = WorkloadSpread::default();
        let beta: beta::WorkloadSpread = alpha.clone().into();
        assert!(beta.spec.subsets.is_empty());
        assert!(beta.status.is_none());
        assert_eq!(WorkloadSpread::from(beta), alpha);
        let status = beta::WorkloadSpreadStatus {
            subset_statuses: vec![beta::WorkloadSpreadSubsetStatus::default()],
            ..Default::default()
        };
        let a: WorkloadSpreadStatus = status.clone().into();
        assert_eq!(beta::WorkloadSpreadStatus::from(a), status);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn name() -> impl Strategy<Value = String> {
            "[a-z]{1,6}"
        }

        fn subset() -> impl Strategy<Value = beta::WorkloadSpreadSubset> {
            (name(), prop::option::of(0i32..50), prop::option::of(name()), any::<bool>()).prop_map(|(n, max, zone, patch)| {
                let mut s = json!({"name": n});
                if let Some(m) = max {
                    s["maxReplicas"] = json!(m);
                }
                if let Some(z) = zone {
                    s["requiredNodeSelector"] = json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]});
                    s["preferredNodeSelector"] = json!([{"weight": 3, "preference": {"matchExpressions": [{"key": "z", "operator": "In", "values": [z]}]}}]);
                }
                if patch {
                    s["patch"] = json!({"metadata": {"labels": {"x": "y"}}});
                }
                serde_json::from_value(s).unwrap()
            })
        }

        fn subset_status() -> impl Strategy<Value = beta::WorkloadSpreadSubsetStatus> {
            (
                name(),
                0i32..9,
                -1i32..9,
                prop::option::of(("True|False", name())),
                prop::collection::btree_map(name(), 0i64..1000, 0..3),
            )
                .prop_map(|(n, replicas, missing, cond, creating)| {
                    beta::WorkloadSpreadSubsetStatus {
                        name: n,
                        replicas,
                        missing_replicas: missing,
                        conditions: cond
                            .into_iter()
                            .map(|(status, reason)| beta::SubsetCondition {
                                type_: "Schedulable".into(),
                                status,
                                reason,
                                ..Default::default()
                            })
                            .collect(),
                        creating_pods: creating
                            .into_iter()
                            .map(|(k, secs)| {
                                (k, Time(crate::Timestamp::from_second(secs).unwrap()))
                            })
                            .collect(),
                        ..Default::default()
                    }
                })
        }

        proptest! {
            /// beta → alpha → beta is the identity when conditions carry no observedGeneration
            /// (alpha has no such field) — the only lossy part, as in the reference.
            #[test]
            fn beta_alpha_beta_round_trip(
                subsets in prop::collection::vec(subset(), 0..4),
                statuses in prop::collection::vec(subset_status(), 0..3),
                versioned in prop::collection::btree_map(name(), prop::collection::vec(subset_status(), 1..3), 0..2),
            ) {
                let ws = beta::WorkloadSpread {
                    api_version: beta::API_VERSION.into(),
                    spec: beta::WorkloadSpreadSpec { subsets, ..Default::default() },
                    status: Some(beta::WorkloadSpreadStatus { observed_generation: 2, subset_statuses: statuses, versioned_subset_statuses: versioned }),
                    ..Default::default()
                };
                let alpha: WorkloadSpread = ws.clone().into();
                let json = serde_json::to_value(&alpha).unwrap();
                let parsed: WorkloadSpread = serde_json::from_value(json).unwrap();
                prop_assert_eq!(beta::WorkloadSpread::from(parsed), ws);
            }
        }
    }
}

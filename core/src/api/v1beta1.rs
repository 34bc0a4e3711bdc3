//! `apps.kruise.io/v1beta1` WorkloadSpread — the storage (hub) version.

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `apiVersion` of this version.
pub const API_VERSION: &str = "apps.kruise.io/v1beta1";

/// A WorkloadSpread object.
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

/// Desired spreading of one workload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSpec {
    /// The workload (same namespace) whose pods are spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub target_ref: Option<TargetReference>,
    /// Which of the workload's pods are managed, and how to count its replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_filter: Option<TargetFilter>,
    /// Ordered subsets; earlier subsets are filled first and emptied last.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub subsets: Vec<WorkloadSpreadSubset>,
    /// `Fixed` (default) or `Adaptive` (reschedule unschedulable pods).
    #[serde(default, skip_serializing_if = "ScheduleStrategy::is_empty")]
    pub schedule_strategy: ScheduleStrategy,
}

/// Reference to the target workload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct TargetReference {
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub kind: String,
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub name: String,
}

/// Selects the managed pods and where the workload's replica count lives.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct TargetFilter {
    /// Pods of the workload matching this selector are managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Dot-separated paths into the workload; their integer sum is the replica count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas_path_list: Vec<String>,
}

/// Schedule strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct ScheduleStrategy {
    /// `Adaptive`, `Fixed` or empty (= Fixed).
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "crd", schemars(extend("enum" = ["Adaptive", "Fixed", ""])))]
    pub type_: String,
    /// Rescheduling settings for `Adaptive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveStrategy>,
}

impl ScheduleStrategy {
    fn is_empty(&self) -> bool {
        self.type_.is_empty() && self.adaptive.is_none()
    }

    /// `rescheduleCriticalSeconds` when rescheduling is on (Adaptive, set, > 0).
    pub fn reschedule_seconds(&self) -> Option<i64> {
        if self.type_ != super::STRATEGY_ADAPTIVE {
            return None;
        }
        let secs = self.adaptive.as_ref()?.reschedule_critical_seconds?;
        (secs > 0).then_some(i64::from(secs))
    }
}

/// Adaptive rescheduling settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct AdaptiveStrategy {
    /// Accepted for compatibility; has no effect (as in the reference).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_simulation_schedule: bool,
    /// Pods unschedulable this long after creation are rescheduled to a later subset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_critical_seconds: Option<i32>,
}

/// One subset (zone, node pool, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSubset {
    /// Unique name within the WorkloadSpread.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub name: String,
    /// ANDed into every required node selector term of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_node_selector: Option<NodeSelectorTerm>,
    /// Appended to the pod's preferred node affinity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_selector: Vec<PreferredSchedulingTerm>,
    /// Appended to the pod's tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Maximum pods in this subset: an integer or a percentage of the workload's replicas.
    /// Absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<IntOrString>,
    /// Extension (not in OpenKruise): pods this subset keeps before later subsets are
    /// served on scale-out and before it gives pods up on scale-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<IntOrString>,
    /// Strategic merge patch applied to pods admitted into this subset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "crd",
        schemars(schema_with = "super::preserve_unknown_object")
    )]
    pub patch: Option<serde_json::Value>,
}

/// Observed state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadStatus {
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// Aggregate over all pod versions, in spec order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subset_statuses: Vec<WorkloadSpreadSubsetStatus>,
    /// Per pod version (pod-template-hash, short controller-revision-hash or `versionIgnored`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versioned_subset_statuses: BTreeMap<String, Vec<WorkloadSpreadSubsetStatus>>,
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Observed state of one subset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct WorkloadSpreadSubsetStatus {
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub name: String,
    /// Active pods observed in the subset.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub replicas: i32,
    /// Pods still missing; 0 = full; -1 = unlimited.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(required))]
    pub missing_replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "crd", schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])))]
    pub conditions: Vec<SubsetCondition>,
    /// Pods admitted but not yet observed: pod name (or generated id) → admission time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub creating_pods: BTreeMap<String, Time>,
    /// Pods whose deletion was admitted but not yet observed: pod name → time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleting_pods: BTreeMap<String, Time>,
}

/// A `metav1.Condition` on a subset (own type so that a missing timestamp stays lossless).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct SubsetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    #[serde(default)]
    pub last_transition_time: Option<Time>,
    // omitempty as in the reference: API servers reject an empty message here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl WorkloadSpreadSubsetStatus {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: &str) -> Option<&SubsetCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// True when the subset carries `Schedulable=False`.
    pub fn is_unschedulable(&self) -> bool {
        self.condition(super::CONDITION_SCHEDULABLE)
            .is_some_and(|c| c.status == "False")
    }
}

impl WorkloadSpread {
    /// `metadata.name` or "".
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace` or "".
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The spec subset with the given name.
    pub fn subset(&self, name: &str) -> Option<&WorkloadSpreadSubset> {
        self.spec.subsets.iter().find(|s| s.name == name)
    }
}

//! `apps.kruise.io` WorkloadSpread API: v1beta1 (storage, used everywhere inside this
//! crate) and v1alpha1 (served, converted losslessly to and from v1beta1).

pub mod convert;
pub mod v1alpha1;
pub mod v1beta1;

/// API group of WorkloadSpread.
pub const GROUP: &str = "apps.kruise.io";
/// Kind name.
pub const KIND: &str = "WorkloadSpread";
/// Annotation (value [`CRD_PROVIDER`]) on the CRD this project ships: OpenKruise's CRD has
/// the same name and group, and the host must not point that one's conversion at itself.
pub const CRD_PROVIDER_ANNOTATION: &str = "workloadspread.io/provider";
/// The value of [`CRD_PROVIDER_ANNOTATION`].
pub const CRD_PROVIDER: &str = "workloadspread";
/// Plural resource name.
pub const PLURAL: &str = "workloadspreads";

/// Pod annotation naming the WorkloadSpread and subset a pod was admitted into.
pub const MATCHED_WORKLOADSPREAD_ANNOTATION: &str = "apps.kruise.io/matched-workloadspread";
/// Scale-in priority annotation read by ReplicaSet / CloneSet controllers.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Pod label (value `"true"`) a best-effort admission adds to the pod it places: the
/// WorkloadSpread status does not count the pod yet. The controller removes it once a
/// status write that counts the pod has succeeded (`docs/counter-protocol.md`).
pub const PENDING_LABEL: &str = "workloadspread.io/pending";
/// The one selector best-effort admissions list pending pods with (fixed: policy-server
/// keeps a reflector per distinct selector).
pub const PENDING_SELECTOR: &str = "workloadspread.io/pending=true";
/// The value of [`PENDING_LABEL`].
pub const PENDING_VALUE: &str = "true";
/// Pod annotation the controller writes on a pod labelled [`PENDING_LABEL`] once a
/// status write that counts the pod has succeeded: which WorkloadSpread (uid) and from
/// which `resourceVersion` on its status counts the pod
/// (`admission::best_effort::CountedIn`). A best-effort admission that reads that
/// version or a newer one does not add the pod again; one reading an older version
/// does. The label and this annotation are removed together, a grace period later
/// (`docs/counter-protocol.md`, *Best-effort by size*).
pub const COUNTED_ANNOTATION: &str = "workloadspread.io/counted";
/// WorkloadSpread annotation turning rebalancing on (`"true"`) or off (`"false"`) for
/// this WorkloadSpread, whatever the controller's default (`controller::rebalance`).
pub const REBALANCE_ANNOTATION: &str = "workloadspread.io/rebalance";
/// Version key used for pods whose workload kind has no versioned status.
pub const VERSION_IGNORED: &str = "versionIgnored";
/// Pod annotation naming the placeholder a pod was admitted into
/// (`admission::reserve`).
pub const RESERVATION_ANNOTATION: &str = "workloadspread.io/reservation";
/// Pod label naming the placeholder the pod took (`admission::reserve::reservation_label_value`):
/// whoever finds placeholders stale lists the pods by it and settles the ones a pod names
/// instead of dropping them.
pub const RESERVATION_LABEL: &str = "workloadspread.io/reservation";
/// Pod label binding the bundled host's re-invocation token to its pod: a random id, new in
/// every first answer (`host/src/webhook/reinvoke.rs`; security review R12). A copy on an
/// incoming pod is stripped; changing it afterwards is refused (`files/pod-metadata.cel`).
pub const ADMISSION_LABEL: &str = "workloadspread.io/admission";
/// Subset name the controller uses for pods that belong to no spec subset.
pub const FAKE_SUBSET_NAME: &str = "kruise.io/workloadspread-fake-subset-name";
/// WorkloadSpread annotation: do not patch subset metadata into adopted existing pods.
pub const IGNORE_PATCH_EXISTING_PODS_ANNOTATION: &str =
    "workloadspread.kruise.io/ignore-patch-existing-pods-metadata";
/// Deployment annotation whose change signals a new rollout.
pub const DEPLOYMENT_REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Subset condition type.
pub const CONDITION_SCHEDULABLE: &str = "Schedulable";
/// Reason of `Schedulable=False`.
pub const REASON_POD_UNSCHEDULABLE: &str = "PodUnschedulable";
/// Reason of `Schedulable=True`.
pub const REASON_SUFFICIENT: &str = "Sufficient";
/// Schedule strategy type that enables rescheduling.
pub const STRATEGY_ADAPTIVE: &str = "Adaptive";
/// Schedule strategy type without rescheduling (same as empty).
pub const STRATEGY_FIXED: &str = "Fixed";

/// Decodes a WorkloadSpread manifest of either served version (by its `apiVersion`;
/// anything but `apps.kruise.io/v1alpha1` is read as v1beta1) into the storage version.
pub fn decode_workloadspread(
    object: &serde_json::Value,
) -> Result<v1beta1::WorkloadSpread, serde_json::Error> {
    let version = match object["apiVersion"].as_str() {
        Some("apps.kruise.io/v1alpha1") => "v1alpha1",
        _ => "v1beta1",
    };
    decode_workloadspread_as(object, version)
}

/// Decodes a WorkloadSpread served as `version` (an admission request's kind version:
/// `v1alpha1`, anything else is read as v1beta1) into the storage version.
pub fn decode_workloadspread_as(
    object: &serde_json::Value,
    version: &str,
) -> Result<v1beta1::WorkloadSpread, serde_json::Error> {
    if version == "v1alpha1" {
        <v1alpha1::WorkloadSpread as serde::Deserialize>::deserialize(object).map(Into::into)
    } else {
        <v1beta1::WorkloadSpread as serde::Deserialize>::deserialize(object)
    }
}

#[cfg(feature = "crd")]
pub(crate) fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A subset's required selector as each served version spells it, and what the
    /// storage version holds after decoding (by the object's apiVersion, or by the
    /// version an admission request names).
    #[test]
    fn both_served_versions_decode_into_storage() {
        let term =
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]});
        let alpha = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "w"},
            "spec": {"subsets": [{"name": "a", "requiredNodeSelectorTerm": term}]}});
        let beta = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "w"},
            "spec": {"subsets": [{"name": "a", "requiredNodeSelector": term}]}});
        let selector = |ws: &v1beta1::WorkloadSpread| {
            serde_json::to_value(&ws.spec.subsets[0].required_node_selector).unwrap()
        };
        let cases = [
            ("v1alpha1 by apiVersion", decode_workloadspread(&alpha)),
            ("v1beta1 by apiVersion", decode_workloadspread(&beta)),
            (
                "v1alpha1 as named",
                decode_workloadspread_as(&alpha, "v1alpha1"),
            ),
            (
                "v1beta1 as named",
                decode_workloadspread_as(&beta, "v1beta1"),
            ),
        ];
        for (case, decoded) in cases {
            let ws = decoded.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(selector(&ws), term, "{case}");
        }
        // Read as the other version, the selector is not found.
        let crossed = decode_workloadspread_as(&alpha, "v1beta1").unwrap();
        assert_eq!(selector(&crossed), serde_json::Value::Null);
    }
}

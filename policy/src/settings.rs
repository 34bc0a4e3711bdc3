//! Policy settings, as given in a `ClusterAdmissionPolicy` or `--settings-json`.

use kubewarden_policy_sdk::settings::Validatable;
use serde::{Deserialize, Serialize};

/// How per-subset counters are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Use the host's counter capability when it is offered, best effort otherwise.
    #[default]
    Auto,
    /// Require the host's counter capability; fail when it is missing.
    Exact,
    /// Decide from the WorkloadSpread status and the workload's current pods.
    BestEffort,
}

/// What to do when a lookup through the host (owner, workload, WorkloadSpread) fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LookupFailure {
    /// Reject the request with the reason, like the reference implementation.
    #[default]
    Reject,
    /// Admit the pod without any injection and say so in an audit annotation.
    AdmitUnmodified,
}

/// How the WorkloadSpreads a pod or a new WorkloadSpread may concern are found (#31).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpreadLookup {
    /// One list of the namespace's WorkloadSpreads pruned by a fixed field mask: one
    /// stable request, so Kubewarden's policy-server keeps one reflector for it; the
    /// cost grows with the WorkloadSpreads in the namespace.
    #[default]
    List,
    /// One list per name on the pod's owner chain, selected by `spec.targetRef.name` (a
    /// selectable field of the CRD): the cost does not grow with the WorkloadSpreads in
    /// the namespace. For hosts that answer field selectors from one cache (the bundled
    /// host); policy-server would keep a reflector per workload name. A host that cannot
    /// answer one gets the list instead.
    TargetName,
}

use workloadspread_core::rules::Rules;
use workloadspread_core::version::VersionedKinds;
use workloadspread_core::workload::WorkloadKinds;
/// A custom workload kind that WorkloadSpreads may target (replaces the reference
/// implementation's ConfigMap whitelist).
pub use workloadspread_core::workload::{CustomWorkload, GroupKind};

/// The policy's settings; every field has a default, so `{}` is valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Settings {
    pub mode: Mode,
    pub on_lookup_failure: LookupFailure,
    /// Workload kinds (lower-case) whose pods are counted per version
    /// (`--ws-enabled-versioned-status` in the reference).
    pub versioned_status_kinds: Vec<String>,
    pub custom_workloads: Vec<CustomWorkload>,
    /// How percentage subsets are scaled at admission: "planned" (default: from the
    /// workload's current replicas) or "reference" (OpenKruise's `missingReplicas`).
    pub rules: Rules,
    /// Whether the WorkloadSpread CRD converts v1alpha1 through a webhook (the bundled
    /// host's `/convert`; the chart sets it in bundled mode). Without one (Kubewarden) the
    /// API server would prune a v1alpha1 object's node selector terms, so such objects
    /// are refused.
    pub conversion_webhook: bool,
    /// How WorkloadSpreads are found: `list` (default) or `target-name`.
    pub spread_lookup: SpreadLookup,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Auto,
            on_lookup_failure: LookupFailure::Reject,
            versioned_status_kinds: vec!["deployment".into(), "replicaset".into()],
            custom_workloads: Vec::new(),
            rules: Rules::default(),
            conversion_webhook: false,
            spread_lookup: SpreadLookup::List,
        }
    }
}

impl Settings {
    /// Whether admissions count through the counter capability when a host offers it
    /// (`offered`): `best-effort` never does, and lists the namespace's pending pods at
    /// each admission instead. (`pods::use_counter` also asks the host's protocol.)
    pub fn counts_with_counter(&self, offered: bool) -> bool {
        offered && self.mode != Mode::BestEffort
    }

    /// Built-in workload kinds plus the configured custom ones.
    pub fn workload_kinds(&self) -> WorkloadKinds {
        WorkloadKinds {
            custom: self.custom_workloads.clone(),
        }
    }

    /// Kinds whose pods get versioned subset statuses.
    pub fn versioned_kinds(&self) -> VersionedKinds {
        VersionedKinds::new(&self.versioned_status_kinds)
    }
}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for (i, kind) in self.versioned_status_kinds.iter().enumerate() {
            if kind.trim().is_empty() {
                errors.push(format!("versionedStatusKinds[{i}]: must not be empty"));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, w) in self.custom_workloads.iter().enumerate() {
            errors.extend(validate_custom_workload(w).map(|e| format!("customWorkloads[{i}].{e}")));
            if !seen.insert((w.group.as_str(), w.kind.as_str())) {
                errors.push(format!(
                    "customWorkloads[{i}]: duplicate entry for {}/{}",
                    w.group, w.kind
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

fn validate_custom_workload(w: &CustomWorkload) -> impl Iterator<Item = String> {
    let mut errors = Vec::new();
    if w.kind.is_empty() {
        errors.push("kind: must not be empty".to_string());
    }
    if !w.replicas_path.is_empty() && w.replicas_path.split('.').any(str::is_empty) {
        errors.push(format!(
            "replicasPath: {:?} has an empty segment (use dot-separated keys, e.g. spec.replicas)",
            w.replicas_path
        ));
    }
    for (j, sub) in w.sub_resources.iter().enumerate() {
        if sub.kind.is_empty() {
            errors.push(format!("subResources[{j}].kind: must not be empty"));
        }
    }
    errors.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Settings, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn empty_object_gives_defaults() {
        let s = parse("{}").unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.versioned_status_kinds, ["deployment", "replicaset"]);
        assert!(s.validate().is_ok());
    }

    #[test]
    fn modes_and_lookup_failure_parse_kebab_case() {
        let s = parse(r#"{"mode":"best-effort","onLookupFailure":"admit-unmodified"}"#).unwrap();
        assert_eq!(s.mode, Mode::BestEffort);
        assert_eq!(s.on_lookup_failure, LookupFailure::AdmitUnmodified);
        assert!(parse(r#"{"mode":"fast"}"#).is_err());
    }

    #[test]
    fn rules_default_to_planned_and_parse() {
        assert_eq!(parse("{}").unwrap().rules, Rules::Planned);
        let s = parse(r#"{"rules":"reference"}"#).unwrap();
        assert_eq!(s.rules, Rules::Reference);
        assert!(parse(r#"{"rules":"kruise"}"#).is_err());
    }

    #[test]
    fn spread_lookup_defaults_to_the_list_and_parses() {
        assert_eq!(parse("{}").unwrap().spread_lookup, SpreadLookup::List);
        let s = parse(r#"{"spreadLookup":"target-name"}"#).unwrap();
        assert_eq!(s.spread_lookup, SpreadLookup::TargetName);
        assert!(parse(r#"{"spreadLookup":"index"}"#).is_err());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = parse(r#"{"mod":"exact"}"#).unwrap_err().to_string();
        assert!(err.contains("unknown field `mod`"), "{err}");
    }

    #[test]
    fn invalid_custom_workloads_are_reported_with_paths() {
        let s = parse(
            r#"{"customWorkloads":[
                {"group":"game.kruise.io","kind":"GameServerSet","replicasPath":"spec..replicas"},
                {"group":"game.kruise.io","kind":"GameServerSet","subResources":[{"group":"x"}]},
                {"group":"x","kind":""}],
              "versionedStatusKinds":[" "]}"#,
        )
        .unwrap();
        let err = s.validate().unwrap_err();
        for want in [
            "versionedStatusKinds[0]: must not be empty",
            "customWorkloads[0].replicasPath",
            "customWorkloads[1]: duplicate entry for game.kruise.io/GameServerSet",
            "customWorkloads[1].subResources[0].kind",
            "customWorkloads[2].kind: must not be empty",
        ] {
            assert!(err.contains(want), "missing {want:?} in {err}");
        }
    }
}

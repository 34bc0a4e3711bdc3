//! Host capabilities offered to the guest: Kubewarden's `kubernetes/*` reads and
//! `tracing/log`, and this project's `workloadspread/counter/*` (see
//! `docs/counter-protocol.md`), with an allow-list like Kubewarden's.

mod error;
mod selector;

pub use error::{HostCallError, ProviderError, HOST_CALL_ERROR_KINDS};
pub(crate) use selector::parse_selector;
use serde_json::Value;

/// Answers a guest's host call with bytes, or why it failed (the guest gets
/// [`HostCallError::guest_text`] through `__host_error`).
pub trait Capabilities: Send + Sync {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError>;

    /// `__console_log` output.
    fn log(&self, message: &str) {
        tracing::info!(target: "policy", "{message}");
    }
}

/// A Kubernetes read (payloads of Kubewarden's `kubernetes/*` operations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeRead {
    Get {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        /// Kubewarden's `field_masks`: dotted paths the answer is pruned to (none: whole).
        field_masks: Vec<String>,
    },
    List {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
        /// Kubewarden's `field_selector` (`workloadspread_core::fields`).
        field_selector: Option<String>,
        field_masks: Vec<String>,
    },
}

impl KubeRead {
    /// Parses `kubernetes/get_resource`, `list_resources_by_namespace`, `list_resources_all`.
    pub fn parse(operation: &str, payload: &[u8]) -> Result<Self, HostCallError> {
        let v: Value = serde_json::from_slice(payload)
            .map_err(|e| HostCallError::Invalid(format!("invalid {operation} request: {e}")))?;
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        let required = |k: &str| {
            s(k).ok_or_else(|| HostCallError::Invalid(format!("{operation}: missing {k}")))
        };
        let field_masks: Vec<String> = v["field_masks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_owned))
            .collect();
        match operation {
            "get_resource" => Ok(KubeRead::Get {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: s("namespace"),
                name: required("name")?,
                field_masks,
            }),
            "list_resources_by_namespace" => Ok(KubeRead::List {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: Some(required("namespace")?),
                label_selector: s("label_selector"),
                field_selector: s("field_selector"),
                field_masks,
            }),
            "list_resources_all" => Ok(KubeRead::List {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: None,
                label_selector: s("label_selector"),
                field_selector: s("field_selector"),
                field_masks,
            }),
            other => Err(HostCallError::Unknown(format!(
                "operation kubernetes/{other}"
            ))),
        }
    }

    /// The answer's pruning (`field_masks`; empty keeps objects whole).
    pub fn mask(&self) -> workloadspread_core::masks::Mask {
        match self {
            KubeRead::Get { field_masks, .. } | KubeRead::List { field_masks, .. } => {
                workloadspread_core::masks::Mask::new(field_masks)
            }
        }
    }

    /// (apiVersion, kind) read.
    pub fn resource(&self) -> (&str, &str) {
        match self {
            KubeRead::Get {
                api_version, kind, ..
            }
            | KubeRead::List {
                api_version, kind, ..
            } => (api_version, kind),
        }
    }
}

/// Which host calls a policy may make (Kubewarden's `hostCapabilities` patterns and
/// `contextAwareResources`).
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    /// `namespace/operation` patterns, `*` and `prefix/*` allowed; empty = all.
    pub capabilities: Vec<String>,
    /// (apiVersion, kind) the policy may read; `None` = any.
    pub resources: Option<Vec<(String, String)>>,
    /// (group, kind) readable in any version: the custom workload kinds of the
    /// settings, which the policy must read to find a pod's workload.
    pub group_kinds: Vec<(String, String)>,
}

impl AllowList {
    pub fn permits_capability(&self, namespace: &str, operation: &str) -> bool {
        let name = format!("{namespace}/{operation}");
        self.capabilities.is_empty()
            || self.capabilities.iter().any(|p| {
                p == "*"
                    || *p == name
                    || p.strip_suffix("/*")
                        .is_some_and(|prefix| name.starts_with(&format!("{prefix}/")))
            })
    }

    pub fn permits_resource(&self, api_version: &str, kind: &str) -> bool {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.resources
            .as_ref()
            .is_none_or(|r| r.iter().any(|(a, k)| a == api_version && k == kind))
            || self
                .group_kinds
                .iter()
                .any(|(g, k)| g == group && k == kind)
    }

    /// Grants the custom workload kinds of policy `settings` (`customWorkloads` and
    /// their `subResources`).
    pub fn with_custom_workloads(mut self, settings: &serde_json::Value) -> Self {
        for w in settings["customWorkloads"].as_array().into_iter().flatten() {
            let owners =
                std::iter::once(w).chain(w["subResources"].as_array().into_iter().flatten());
            for gk in owners {
                if let (Some(g), Some(k)) = (gk["group"].as_str(), gk["kind"].as_str()) {
                    self.group_kinds.push((g.to_string(), k.to_string()));
                }
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubewarden_payloads() {
        let get = KubeRead::parse(
            "get_resource",
            br#"{"api_version":"apps/v1","kind":"ReplicaSet","name":"rs","namespace":"ns","disable_cache":true}"#,
        )
        .unwrap();
        assert_eq!(get.resource(), ("apps/v1", "ReplicaSet"));
        assert!(KubeRead::parse("get_resource", br#"{"kind":"X"}"#)
            .unwrap_err()
            .to_string()
            .contains("missing api_version"));
        assert!(KubeRead::parse("can_i", b"{}")
            .unwrap_err()
            .to_string()
            .contains("unknown operation"));
    }

    #[test]
    fn allow_list_patterns() {
        let a = AllowList {
            capabilities: vec!["kubernetes/get_resource".into(), "oci/*".into()],
            resources: None,
            group_kinds: vec![],
        };
        assert!(a.permits_capability("kubernetes", "get_resource"));
        assert!(!a.permits_capability("kubernetes", "list_resources_all"));
        assert!(a.permits_capability("oci", "v1/verify"));
        assert!(AllowList::default().permits_capability("anything", "x"));
        let r = AllowList {
            capabilities: vec![],
            resources: Some(vec![("v1".into(), "Pod".into())]),
            group_kinds: vec![],
        };
        assert!(r.permits_resource("v1", "Pod") && !r.permits_resource("apps/v1", "Deployment"));
        let custom = r.with_custom_workloads(&serde_json::json!({"customWorkloads": [
            {"group": "example.io", "kind": "Fleet", "subResources": [{"group": "example.io", "kind": "Squad"}]}]}));
        assert!(custom.permits_resource("example.io/v2", "Fleet"));
        assert!(custom.permits_resource("example.io/v1", "Squad"));
        assert!(!custom.permits_resource("other.io/v1", "Fleet"));
    }
}

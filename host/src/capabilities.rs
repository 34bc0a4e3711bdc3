//! Host capabilities offered to the guest: Kubewarden's `kubernetes/*` reads and
//! `tracing/log`, and this project's `workloadspread/counter/*` (see
//! `docs/counter-protocol.md`), with an allow-list like Kubewarden's.

use serde_json::Value;

/// Answers a guest's host call with bytes, or an error text for `__host_error`.
pub trait Capabilities: Send + Sync {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String>;

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
    },
    List {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    },
}

impl KubeRead {
    /// Parses `kubernetes/get_resource`, `list_resources_by_namespace`, `list_resources_all`.
    pub fn parse(operation: &str, payload: &[u8]) -> Result<Self, String> {
        let v: Value = serde_json::from_slice(payload)
            .map_err(|e| format!("invalid {operation} request: {e}"))?;
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        let required = |k: &str| s(k).ok_or_else(|| format!("{operation}: missing {k}"));
        match operation {
            "get_resource" => Ok(KubeRead::Get {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: s("namespace"),
                name: required("name")?,
            }),
            "list_resources_by_namespace" => Ok(KubeRead::List {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: Some(required("namespace")?),
                label_selector: s("label_selector"),
            }),
            "list_resources_all" => Ok(KubeRead::List {
                api_version: required("api_version")?,
                kind: required("kind")?,
                namespace: None,
                label_selector: s("label_selector"),
            }),
            other => Err(format!("unknown operation kubernetes/{other}")),
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
        self.resources
            .as_ref()
            .is_none_or(|r| r.iter().any(|(a, k)| a == api_version && k == kind))
    }
}

/// Error text matching Kubewarden's for a denied capability.
pub fn denied(namespace: &str, operation: &str) -> String {
    format!("Policy has not been granted access to the '{namespace}/{operation}' host capability")
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
            .contains("missing api_version"));
        assert!(KubeRead::parse("can_i", b"{}")
            .unwrap_err()
            .contains("unknown operation"));
    }

    #[test]
    fn allow_list_patterns() {
        let a = AllowList {
            capabilities: vec!["kubernetes/get_resource".into(), "oci/*".into()],
            resources: None,
        };
        assert!(a.permits_capability("kubernetes", "get_resource"));
        assert!(!a.permits_capability("kubernetes", "list_resources_all"));
        assert!(a.permits_capability("oci", "v1/verify"));
        assert!(AllowList::default().permits_capability("anything", "x"));
        let r = AllowList {
            capabilities: vec![],
            resources: Some(vec![("v1".into(), "Pod".into())]),
        };
        assert!(r.permits_resource("v1", "Pod") && !r.permits_resource("apps/v1", "Deployment"));
    }
}

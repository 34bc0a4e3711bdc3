//! Why a host call failed: one type for every capability provider (`serve`'s cluster
//! index and counter, `run`'s state, a replayed session), turned into the guest's text in
//! one place ([`HostCallError::guest_text`]) and counted by kind
//! ([`HostCallError::metric_label`]).

use workloadspread_core::hostcall::{self, ErrorCode};

/// A provider's own failure carried through the seam (the counter's `CommitError`):
/// what the guest decides on and how it is counted come with it.
pub trait ProviderError: std::error::Error + Send + Sync + 'static {
    /// The code the guest decides on, if any.
    fn code(&self) -> Option<ErrorCode>;
    /// The `kind` label it is counted under.
    fn metric_label(&self) -> &'static str;
}

/// Every `kind` label a failed host call is counted under
/// ([`HostCallError::metric_label`], the counter's [`ProviderError::metric_label`]): the
/// host exports each series at 0 from the start, so that `rate()` and `increase()` see the
/// first failure of a kind (a series born with it would not).
pub const HOST_CALL_ERROR_KINDS: [&str; 15] = [
    "Denied",
    "Unknown",
    "Invalid",
    "NotFound",
    "Recreated",
    "Api",
    "Internal",
    "Recorded",
    "Gone",
    "Read",
    "Write",
    "Conflict",
    "Timeout",
    "Stopped",
    "NoAnswer",
];

/// A failed host call.
#[derive(Debug, thiserror::Error)]
pub enum HostCallError {
    /// The policy's `hostCapabilities` do not grant the call (Kubewarden's words).
    #[error("Policy has not been granted access to the '{namespace}/{operation}' host capability")]
    CapabilityDenied {
        namespace: String,
        operation: String,
    },
    /// The policy's `contextAwareResources` do not grant the kind (Kubewarden's words).
    #[error("Policy has not been granted access to Kubernetes resource {api_version} {kind}")]
    ResourceDenied { api_version: String, kind: String },
    /// A binding or operation this host does not offer.
    #[error("unknown {0}")]
    Unknown(String),
    /// A request the host cannot parse (payload, selector).
    #[error("{0}")]
    Invalid(String),
    /// The object does not exist: `what` names it (`apps/v1 ReplicaSet ns/web-1`).
    #[error("{what} not found")]
    NotFound { what: String },
    /// The object the call names was deleted and created again (its uid changed).
    #[error("{what} was recreated (uid changed)")]
    Recreated { what: String },
    /// The API server failed, or gave no answer in time: `doing` says what was asked.
    #[error("{doing}: {reason}")]
    Api { doing: String, reason: String },
    /// The counter could not commit the operation.
    #[error("{0}")]
    Counter(Box<dyn ProviderError>),
    /// An answer could not be encoded.
    #[error("encoding the answer: {0}")]
    Encode(#[from] serde_json::Error),
    /// A call made outside an evaluation, or the host's own state failed.
    #[error("{0}")]
    Internal(String),
    /// A recorded session's error, passed on word for word (it may carry another host's
    /// code or words).
    #[error("{0}")]
    Recorded(String),
}

impl HostCallError {
    /// `namespace/operation` not granted.
    pub fn capability_denied(namespace: &str, operation: &str) -> Self {
        HostCallError::CapabilityDenied {
            namespace: namespace.to_string(),
            operation: operation.to_string(),
        }
    }

    /// `api_version kind` not granted.
    pub fn resource_denied(api_version: &str, kind: &str) -> Self {
        HostCallError::ResourceDenied {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// An unknown binding.
    pub fn unknown_binding(binding: &str) -> Self {
        HostCallError::Unknown(format!("binding {binding}"))
    }

    /// `api_version kind [namespace/]name` does not exist.
    pub fn not_found(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        let ns = namespace.map(|n| format!("{n}/")).unwrap_or_default();
        HostCallError::NotFound {
            what: format!("{api_version} {kind} {ns}{name}"),
        }
    }

    /// The API server failed at `doing`.
    pub fn api(doing: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        HostCallError::Api {
            doing: doing.into(),
            reason: reason.to_string(),
        }
    }

    /// The code the guest decides on (`workloadspread_core::hostcall`), if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            HostCallError::NotFound { .. } => Some(ErrorCode::NotFound),
            HostCallError::Counter(e) => e.code(),
            _ => None,
        }
    }

    /// The text the guest gets (`__host_error`): the code in front when there is one.
    /// The only place a host call's failure becomes text.
    pub fn guest_text(&self) -> String {
        match self.code() {
            Some(code) => hostcall::coded(code, &self.to_string()),
            None => self.to_string(),
        }
    }

    /// The `kind` label of `workloadspread_host_host_call_errors_total` (one of
    /// [`HOST_CALL_ERROR_KINDS`]).
    pub fn metric_label(&self) -> &'static str {
        match self {
            HostCallError::CapabilityDenied { .. } | HostCallError::ResourceDenied { .. } => {
                "Denied"
            }
            HostCallError::Unknown(_) => "Unknown",
            HostCallError::Invalid(_) => "Invalid",
            HostCallError::NotFound { .. } => "NotFound",
            HostCallError::Recreated { .. } => "Recreated",
            HostCallError::Api { .. } => "Api",
            HostCallError::Counter(e) => e.metric_label(),
            HostCallError::Encode(_) | HostCallError::Internal(_) => "Internal",
            HostCallError::Recorded(_) => "Recorded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind a host call failure is counted under is one the host exports at 0
    /// (the counter's own kinds: `counter::error`'s test).
    #[test]
    fn every_kind_is_exported_from_the_start() {
        let all = [
            HostCallError::capability_denied("kubernetes", "get_resource"),
            HostCallError::resource_denied("v1", "Secret"),
            HostCallError::unknown_binding("nope"),
            HostCallError::Invalid("selector".into()),
            HostCallError::not_found("v1", "Pod", Some("ns"), "p"),
            HostCallError::Recreated { what: "w".into() },
            HostCallError::api("reading", "timeout"),
            HostCallError::Encode(serde_json::from_str::<u8>("x").unwrap_err()),
            HostCallError::Internal("outside an evaluation".into()),
            HostCallError::Recorded("recorded".into()),
        ];
        for e in all {
            let kind = e.metric_label();
            assert!(
                HOST_CALL_ERROR_KINDS.contains(&kind),
                "{e}: kind {kind} not exported"
            );
        }
    }

    #[test]
    fn the_guest_gets_a_code_only_where_it_decides_on_one() {
        let missing = HostCallError::not_found("apps/v1", "ReplicaSet", Some("ns"), "web-1");
        assert_eq!(
            missing.guest_text(),
            "[workloadspread:NotFound] apps/v1 ReplicaSet ns/web-1 not found"
        );
        assert!(hostcall::is_not_found(&missing.guest_text()));
        let cluster_scoped = HostCallError::not_found("v1", "Node", None, "n1");
        assert_eq!(cluster_scoped.to_string(), "v1 Node n1 not found");
        // Kubewarden's words for a denial, uncoded, and not "not found".
        let denied = HostCallError::capability_denied("kubernetes", "can_i");
        assert_eq!(
            denied.guest_text(),
            "Policy has not been granted access to the 'kubernetes/can_i' host capability"
        );
        assert!(!hostcall::is_not_found(&denied.guest_text()));
        let timeout = HostCallError::api("reading apps/v1 ReplicaSet web-1", "timed out");
        assert_eq!(
            timeout.guest_text(),
            "reading apps/v1 ReplicaSet web-1: timed out"
        );
        assert_eq!(timeout.metric_label(), "Api");
        // A recorded session's text is passed on as it was, whatever it says.
        let recorded = HostCallError::Recorded("error: replicasets.apps \"x\" not found".into());
        assert_eq!(recorded.code(), None);
        assert!(hostcall::is_not_found(&recorded.guest_text()));
    }
}

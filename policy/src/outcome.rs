//! The policy's answer, independent of the SDK's wire types.

use crate::settings::{LookupFailure, Settings};
use serde_json::Value;
use std::collections::BTreeMap;

// Audit annotation keys are plain names: the API server records them as
// `<webhook name>/<key>` (e.g. `pods.workloadspread.io/mode`) and drops a key that
// already has a prefix ("annotation key has invalid format").

/// Audit annotation: how the subset counters were kept for this request.
pub const AUDIT_MODE: &str = "mode";
/// Audit annotation: the WorkloadSpread and subset chosen.
pub const AUDIT_SUBSET: &str = "subset";
/// Audit annotation: why the pod was admitted unmodified after a failed lookup.
pub const AUDIT_LOOKUP_FAILURE: &str = "lookup-failure";

/// What to answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Accept {
        audit: BTreeMap<String, String>,
        warnings: Vec<String>,
    },
    Mutate {
        object: Value,
        audit: BTreeMap<String, String>,
    },
    Reject {
        message: String,
        code: u16,
    },
}

impl Outcome {
    pub fn accept() -> Self {
        Outcome::Accept {
            audit: BTreeMap::new(),
            warnings: vec![],
        }
    }

    pub fn accept_with(audit: &[(&str, String)]) -> Self {
        Outcome::Accept {
            audit: to_map(audit),
            warnings: vec![],
        }
    }

    pub fn reject(message: impl Into<String>, code: u16) -> Self {
        Outcome::Reject {
            message: message.into(),
            code,
        }
    }

    /// A failed lookup, answered as the `onLookupFailure` setting says.
    pub fn lookup_failure(settings: &Settings, context: &str, err: &dyn std::fmt::Display) -> Self {
        let message = format!("WorkloadSpread: {context}: {err}");
        match settings.on_lookup_failure {
            LookupFailure::Reject => Outcome::reject(message, 500),
            LookupFailure::AdmitUnmodified => Outcome::Accept {
                audit: to_map(&[(AUDIT_LOOKUP_FAILURE, message.clone())]),
                warnings: vec![format!(
                    "admitted without WorkloadSpread injection: {message}"
                )],
            },
        }
    }
}

pub(crate) fn to_map(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

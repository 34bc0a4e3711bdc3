//! What the policy asks of its host: Kubernetes reads (Kubewarden's `kubernetes/*`
//! capabilities) and, optionally, this project's counter capability. A trait so the
//! decision code runs natively in tests with an in-memory cluster.

use serde_json::Value;
use std::fmt;

/// A failed host call, with what was asked and why it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    /// e.g. `get apps/v1 ReplicaSet default/web-abc`.
    pub what: String,
    pub reason: String,
}

impl HostError {
    /// Whether the host said the object does not exist: by the code this project's
    /// hosts send (`workloadspread_core::hostcall`), else by other hosts' words.
    pub fn is_not_found(&self) -> bool {
        workloadspread_core::hostcall::is_not_found(&self.reason)
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.what, self.reason)
    }
}

/// Reads and counter calls the policy needs.
pub trait Host {
    /// GET one object (namespaced when `namespace` is given).
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, HostError>;
    /// [`Host::get`] pruned to `fields` (Kubewarden's `field_masks`; empty: the whole
    /// object). A host may ignore the mask: callers read only those fields.
    fn get_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        fields: &[&str],
    ) -> Result<Value, HostError> {
        let _ = fields;
        self.get(api_version, kind, namespace, name)
    }
    /// LIST objects of a kind in a namespace, optionally by label selector.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, HostError>;
    /// LIST objects of a kind in a namespace, optionally by label selector, each pruned
    /// to `fields` (Kubewarden's `field_masks`). A host may ignore the mask: callers read
    /// only those fields.
    fn list_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<Value>, HostError> {
        let _ = fields;
        self.list(api_version, kind, namespace, label_selector)
    }
    /// [`Host::list_fields`] as the answer's bytes (a `List`), for callers that decode
    /// the items straight into their own type: no `serde_json::Value` of every item in
    /// between (with a thousand items that copy is most of the cost).
    fn list_fields_json(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<u8>, HostError> {
        let items = self.list_fields(api_version, kind, namespace, label_selector, fields)?;
        serde_json::to_vec(&serde_json::json!({ "items": items })).map_err(|e| HostError {
            what: format!("list {api_version} {kind} in {namespace}"),
            reason: e.to_string(),
        })
    }
    /// [`Host::list_fields_json`] of the objects `field_selector` selects (Kubewarden's
    /// `field_selector`). A host that cannot answer it fails, and callers list without
    /// one; a host that ignores it answers more objects than selected, which callers
    /// must tolerate.
    fn list_fields_json_selected(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        field_selector: &str,
        fields: &[&str],
    ) -> Result<Vec<u8>, HostError> {
        let _ = (fields, field_selector);
        Err(HostError {
            what: format!("list {api_version} {kind} in {namespace}"),
            reason: "field selectors are not supported by this host".into(),
        })
    }
    /// Calls the counter capability (binding `workloadspread`, namespace `counter`).
    fn counter(&self, operation: &str, payload: &Value) -> Result<Value, HostError>;
}

/// A waPC-style host call: (binding, namespace, operation, payload) → answer bytes.
pub type CallFn<'a> = dyn Fn(&str, &str, &str, &[u8]) -> Result<Vec<u8>, String> + 'a;

/// The `Host` over a host-call function: builds Kubewarden's payloads and decodes the
/// answers. The guest passes waPC's `host_call`; a native embedder (e.g. the bundled
/// host's benchmark) passes its capabilities directly.
pub struct CallHost<'a>(pub &'a CallFn<'a>);

/// The real host, through waPC host calls.
pub fn wapc_host() -> CallHost<'static> {
    CallHost(&|b, n, o, p| {
        kubewarden_policy_sdk::wapc_guest::host_call(b, n, o, p).map_err(|e| e.to_string())
    })
}

impl CallHost<'_> {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &Value,
        what: &str,
    ) -> Result<Value, HostError> {
        let answer = self.call_bytes(binding, namespace, operation, payload, what)?;
        serde_json::from_slice(&answer).map_err(|e| HostError {
            what: what.to_string(),
            reason: format!("invalid answer: {e}"),
        })
    }

    /// The host's answer to `payload`, undecoded.
    fn call_bytes(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &Value,
        what: &str,
    ) -> Result<Vec<u8>, HostError> {
        let err = |reason: String| HostError {
            what: what.to_string(),
            reason,
        };
        let bytes = serde_json::to_vec(payload).map_err(|e| err(e.to_string()))?;
        (self.0)(binding, namespace, operation, &bytes).map_err(err)
    }

    /// Kubewarden's `list_resources_by_namespace` payload with `field_masks`: sorted
    /// and unique, as the SDK's BTreeSet serialises them (recorded sessions compare
    /// requests exactly).
    fn masked_list_payload(
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Value {
        let masks: std::collections::BTreeSet<&str> = fields.iter().copied().collect();
        serde_json::json!({
            "api_version": api_version, "kind": kind, "namespace": namespace,
            "label_selector": label_selector, "field_masks": masks,
        })
    }
    /// `kubernetes/list_resources_by_namespace` with `payload`; the List's items, moved
    /// out of the answer (with thousands of pods a copy is a large part of the cost).
    fn list_by_namespace(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        payload: &Value,
    ) -> Result<Vec<Value>, HostError> {
        let what = format!("list {api_version} {kind} in {namespace}");
        let mut list = self.call(
            "kubewarden",
            "kubernetes",
            "list_resources_by_namespace",
            payload,
            &what,
        )?;
        match list.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => Ok(items),
            _ => Ok(vec![]),
        }
    }
}

impl Host for CallHost<'_> {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, HostError> {
        let payload = serde_json::json!({
            "api_version": api_version, "kind": kind, "name": name, "namespace": namespace,
            // Owners and workloads change; a 5 s old copy would skew percentages.
            "disable_cache": true,
        });
        let what = format!(
            "get {api_version} {kind} {}{name}",
            namespace.map(|n| format!("{n}/")).unwrap_or_default()
        );
        self.call("kubewarden", "kubernetes", "get_resource", &payload, &what)
    }

    fn get_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        fields: &[&str],
    ) -> Result<Value, HostError> {
        if fields.is_empty() {
            return self.get(api_version, kind, namespace, name);
        }
        // Sorted and unique, as the SDK's BTreeSet serialises them.
        let masks: std::collections::BTreeSet<&str> = fields.iter().copied().collect();
        let payload = serde_json::json!({
            "api_version": api_version, "kind": kind, "name": name, "namespace": namespace,
            "disable_cache": true, "field_masks": masks,
        });
        let what = format!(
            "get {api_version} {kind} {}{name}",
            namespace.map(|n| format!("{n}/")).unwrap_or_default()
        );
        self.call("kubewarden", "kubernetes", "get_resource", &payload, &what)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, HostError> {
        let payload = serde_json::json!({
            "api_version": api_version, "kind": kind, "namespace": namespace, "label_selector": label_selector,
        });
        self.list_by_namespace(api_version, kind, namespace, &payload)
    }

    fn list_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<Value>, HostError> {
        let payload =
            Self::masked_list_payload(api_version, kind, namespace, label_selector, fields);
        self.list_by_namespace(api_version, kind, namespace, &payload)
    }

    fn list_fields_json(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<u8>, HostError> {
        let payload =
            Self::masked_list_payload(api_version, kind, namespace, label_selector, fields);
        self.call_bytes(
            "kubewarden",
            "kubernetes",
            "list_resources_by_namespace",
            &payload,
            &format!("list {api_version} {kind} in {namespace}"),
        )
    }

    fn list_fields_json_selected(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        field_selector: &str,
        fields: &[&str],
    ) -> Result<Vec<u8>, HostError> {
        let mut payload = Self::masked_list_payload(api_version, kind, namespace, None, fields);
        payload["field_selector"] = Value::String(field_selector.to_string());
        self.call_bytes(
            "kubewarden",
            "kubernetes",
            "list_resources_by_namespace",
            &payload,
            &format!("list {api_version} {kind} in {namespace} where {field_selector}"),
        )
    }

    fn counter(&self, operation: &str, payload: &Value) -> Result<Value, HostError> {
        use workloadspread_core::counter::{BINDING, NAMESPACE};
        self.call(
            BINDING,
            NAMESPACE,
            operation,
            payload,
            &format!("{BINDING}/{NAMESPACE}/{operation}"),
        )
    }
}

//! Cluster state from files: an in-memory API that answers the policy's reads and
//! keeps WorkloadSpread counters (the counter capability) for offline `run`.

use crate::capabilities::{denied, AllowList, Capabilities, KubeRead};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Mutex;
use workloadspread_core::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use workloadspread_core::counter::{self, ClaimRequest, ReleaseRequest};
use workloadspread_core::selector::Selector;
use workloadspread_core::workload::parse_group;
use workloadspread_core::Timestamp;

/// Objects loaded from YAML/JSON files (multi-document, `kind: List` and
/// `kubectl get -o yaml` dumps accepted).
pub struct ClusterState {
    objects: Mutex<Vec<Value>>,
    allow: AllowList,
    counter: bool,
    now: Timestamp,
}

impl ClusterState {
    pub fn new(objects: Vec<Value>, allow: AllowList, counter: bool, now: Timestamp) -> Self {
        ClusterState {
            objects: Mutex::new(objects),
            allow,
            counter,
            now,
        }
    }

    /// Loads every `.yaml`, `.yml` and `.json` file of `path` (a file or a directory).
    pub fn load_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
        let mut files = vec![];
        if path.is_dir() {
            for entry in std::fs::read_dir(path)? {
                let p = entry?.path();
                if matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                ) {
                    files.push(p);
                }
            }
            files.sort();
        } else {
            files.push(path.to_path_buf());
        }
        let mut objects = vec![];
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let v: Value = serde::Deserialize::deserialize(doc)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                flatten(v, &mut objects);
            }
        }
        Ok(objects)
    }

    /// The WorkloadSpreads as they are now (for `--output-state`).
    pub fn workloadspreads(&self) -> Vec<Value> {
        self.lock()
            .iter()
            .filter(|o| o["kind"] == "WorkloadSpread")
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let read = KubeRead::parse(operation, payload)?;
        let (api_version, kind) = read.resource();
        if !self.allow.permits_resource(api_version, kind) {
            return Err(format!(
                "Policy has not been granted access to Kubernetes resource {api_version} {kind}"
            ));
        }
        let objects = self.lock();
        let answer = match &read {
            KubeRead::Get {
                api_version,
                kind,
                namespace,
                name,
            } => objects
                .iter()
                .find(|o| {
                    same_kind(o, api_version, kind)
                        && in_namespace(o, namespace.as_deref())
                        && o["metadata"]["name"] == name.as_str()
                })
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "{api_version} {kind} {}{name} not found",
                        namespace
                            .as_deref()
                            .map(|n| format!("{n}/"))
                            .unwrap_or_default()
                    )
                })?,
            KubeRead::List {
                api_version,
                kind,
                namespace,
                label_selector,
            } => {
                let selector = parse_selector(label_selector.as_deref())?;
                let items: Vec<Value> = objects
                    .iter()
                    .filter(|o| {
                        same_kind(o, api_version, kind) && in_namespace(o, namespace.as_deref())
                    })
                    .filter(|o| selector.as_ref().is_none_or(|s| s.matches(&labels(o))))
                    .cloned()
                    .collect();
                json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items})
            }
        };
        serde_json::to_vec(&answer).map_err(|e| e.to_string())
    }

    fn counter_call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let answer = match operation {
            counter::OP_HELLO => json!(counter::Hello {
                protocol: counter::PROTOCOL_VERSION
            }),
            counter::OP_CLAIM => {
                let req: ClaimRequest =
                    serde_json::from_slice(payload).map_err(|e| format!("invalid claim: {e}"))?;
                let answer = self.with_workloadspread(&req.workload_spread, |ws, now| {
                    counter::apply_claim(ws, &req, now)
                })?;
                json!(answer)
            }
            counter::OP_RELEASE => {
                let req: ReleaseRequest =
                    serde_json::from_slice(payload).map_err(|e| format!("invalid release: {e}"))?;
                let answer = self.with_workloadspread(&req.workload_spread, |ws, now| {
                    counter::apply_release(ws, &req, now)
                })?;
                json!(answer)
            }
            other => return Err(format!("unknown operation workloadspread/counter/{other}")),
        };
        serde_json::to_vec(&answer).map_err(|e| e.to_string())
    }

    /// Applies `f` to a WorkloadSpread's status and stores the result.
    fn with_workloadspread<R>(
        &self,
        key: &counter::WorkloadSpreadKey,
        f: impl FnOnce(&WorkloadSpread, Timestamp) -> (WorkloadSpreadStatus, R),
    ) -> Result<R, String> {
        let mut objects = self.lock();
        let slot = objects
            .iter_mut()
            .find(|o| {
                o["kind"] == "WorkloadSpread"
                    && o["metadata"]["namespace"] == key.namespace.as_str()
                    && o["metadata"]["name"] == key.name.as_str()
            })
            .ok_or_else(|| format!("WorkloadSpread {}/{} not found", key.namespace, key.name))?;
        let ws: WorkloadSpread = serde_json::from_value(slot.clone())
            .map_err(|e| format!("WorkloadSpread {}: {e}", key.name))?;
        if key
            .uid
            .as_ref()
            .is_some_and(|u| ws.metadata.uid.as_ref() != Some(u))
        {
            return Err(format!(
                "WorkloadSpread {}/{} was recreated (uid changed)",
                key.namespace, key.name
            ));
        }
        let (status, result) = f(&ws, self.now);
        slot["status"] = serde_json::to_value(&status).map_err(|e| e.to_string())?;
        Ok(result)
    }
}

impl Capabilities for ClusterState {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        match (binding, namespace) {
            ("kubewarden", "tracing") => Ok(vec![]),
            ("kubewarden", "kubernetes")
                if !self.allow.permits_capability(namespace, operation) =>
            {
                Err(denied(namespace, operation))
            }
            ("kubewarden", "kubernetes") => self.read(operation, payload),
            (counter::BINDING, counter::NAMESPACE) if self.counter => {
                self.counter_call(operation, payload)
            }
            _ => Err(format!("unknown binding {binding}")),
        }
    }
}

fn flatten(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Null => {}
        Value::Object(ref m)
            if m.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k == "List" || k.ends_with("List"))
                && m.contains_key("items") =>
        {
            for item in m["items"].as_array().cloned().unwrap_or_default() {
                flatten(item, out);
            }
        }
        other => out.push(other),
    }
}

fn same_kind(o: &Value, api_version: &str, kind: &str) -> bool {
    let group = |v: &str| parse_group(v).unwrap_or(v).to_string();
    o["kind"] == kind && group(o["apiVersion"].as_str().unwrap_or_default()) == group(api_version)
}

fn in_namespace(o: &Value, namespace: Option<&str>) -> bool {
    namespace.is_none_or(|n| o["metadata"]["namespace"].as_str().unwrap_or("default") == n)
}

fn labels(o: &Value) -> workloadspread_core::selector::Labels {
    serde_json::from_value(o["metadata"]["labels"].clone()).unwrap_or_default()
}

/// `a=b,c=d` label selectors (equality only, which is what the policy sends).
pub(crate) fn parse_selector(s: Option<&str>) -> Result<Option<Selector>, String> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let mut match_labels = std::collections::BTreeMap::new();
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("unsupported label selector {s:?}"))?;
        match_labels.insert(
            k.trim_end_matches('=').trim().to_string(),
            v.trim().to_string(),
        );
    }
    let sel = k8s_openapi_label_selector(match_labels);
    Selector::from_label_selector(&sel).map(Some)
}

fn k8s_openapi_label_selector(
    labels: std::collections::BTreeMap<String, String>,
) -> workloadspread_core::LabelSelector {
    workloadspread_core::LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    }
}

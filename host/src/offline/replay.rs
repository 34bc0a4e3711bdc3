//! `run --replay-host-capabilities-interactions FILE`: answers the policy's Kubernetes
//! reads from a kwctl session file, in order; each recorded request must equal the
//! live one (kwctl's rule). The counter capability is not offered (kwctl has none).

use crate::capabilities::{Capabilities, HostCallError};
use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

#[derive(Debug, Deserialize)]
struct Exchange {
    #[serde(rename = "type")]
    type_: String,
    request: String,
    response: Response,
}

#[derive(Debug, Deserialize)]
struct Response {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// A recorded request: kwctl's tag and its fields.
#[derive(Debug, PartialEq)]
struct Recorded {
    tag: String,
    fields: Value,
}

/// Replays a session; remaining exchanges can be listed afterwards.
pub struct Replay {
    exchanges: Mutex<VecDeque<(Recorded, Response)>>,
}

impl Replay {
    pub fn load(text: &str) -> Result<Self> {
        let raw: Vec<Exchange> = serde_yaml::from_str(text).context("parsing the session file")?;
        let mut exchanges = VecDeque::new();
        for (i, e) in raw.into_iter().enumerate() {
            anyhow::ensure!(
                e.type_ == "Exchange",
                "exchange {i}: unknown type {:?}",
                e.type_
            );
            exchanges.push_back((
                parse_request(&e.request).with_context(|| format!("exchange {i}"))?,
                e.response,
            ));
        }
        Ok(Replay {
            exchanges: Mutex::new(exchanges),
        })
    }

    /// Exchanges the policy did not make.
    pub fn leftovers(&self) -> usize {
        self.exchanges.lock().map(|q| q.len()).unwrap_or(0)
    }
}

fn parse_request(text: &str) -> Result<Recorded> {
    match serde_yaml::from_str::<serde_yaml::Value>(text)? {
        serde_yaml::Value::Tagged(t) => Ok(Recorded {
            tag: t.tag.to_string().trim_start_matches('!').to_string(),
            fields: serde_json::to_value(&t.value)?,
        }),
        other => anyhow::bail!("request without a !Tag: {other:?}"),
    }
}

/// kwctl's request tag for a `kubernetes/*` operation.
fn tag_of(operation: &str) -> Option<&'static str> {
    match operation {
        "get_resource" => Some("KubernetesGetResource"),
        "list_resources_by_namespace" => Some("KubernetesListResourceNamespace"),
        "list_resources_all" => Some("KubernetesListResourceAll"),
        _ => None,
    }
}

/// Field-by-field equality where an absent field equals `null`.
fn same_fields(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.keys()
        .chain(b.keys())
        .all(|k| a.get(k).unwrap_or(&Value::Null) == b.get(k).unwrap_or(&Value::Null))
}

impl Capabilities for Replay {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        if (binding, namespace) == ("kubewarden", "tracing") {
            return Ok(vec![]);
        }
        let tag = match (binding, namespace) {
            ("kubewarden", "kubernetes") => tag_of(operation),
            _ => None,
        }
        .ok_or_else(|| HostCallError::unknown_binding(binding))?;
        let live: Value = serde_json::from_slice(payload)
            .map_err(|e| HostCallError::Invalid(format!("invalid request: {e}")))?;
        let mut queue = self
            .exchanges
            .lock()
            .map_err(|_| HostCallError::Internal("replay state poisoned".into()))?;
        let (recorded, response) = queue.pop_front().ok_or_else(|| {
            HostCallError::Internal(format!(
                "Replay error: no recorded exchange left for {tag} {live}"
            ))
        })?;
        if recorded.tag != tag || !same_fields(&recorded.fields, &live) {
            return Err(HostCallError::Internal(format!(
                "Replay error: unexpected request {tag} {live}, the session expected {} {}",
                recorded.tag, recorded.fields
            )));
        }
        match response.type_.as_str() {
            "Success" => Ok(response.payload.unwrap_or_default().into_bytes()),
            _ => Err(HostCallError::Recorded(
                response.message.unwrap_or_else(|| "recorded error".into()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = r#"
- type: Exchange
  request: |
    !KubernetesGetResource
    api_version: v1
    kind: Namespace
    name: team-a
    namespace: null
    disable_cache: false
  response:
    type: Success
    payload: '{"kind":"Namespace"}'
- type: Exchange
  request: |
    !KubernetesGetResource
    api_version: v1
    kind: Namespace
    name: gone
  response:
    type: Error
    message: not found
"#;

    #[test]
    fn answers_in_order_and_checks_requests() {
        let r = Replay::load(SESSION).unwrap();
        let get = |name: &str| {
            let p = serde_json::json!({"api_version": "v1", "kind": "Namespace", "name": name, "disable_cache": false});
            r.call(
                "kubewarden",
                "kubernetes",
                "get_resource",
                p.to_string().as_bytes(),
            )
        };
        assert_eq!(get("team-a").unwrap(), br#"{"kind":"Namespace"}"#);
        let err = get("other").unwrap_err().to_string();
        assert!(err.contains("unexpected request"), "{err}");
        assert_eq!(r.leftovers(), 0);
        let r = Replay::load(SESSION).unwrap();
        assert!(r
            .call("workloadspread", "counter", "v1/hello", b"{}")
            .unwrap_err()
            .to_string()
            .contains("unknown binding"));
    }
}

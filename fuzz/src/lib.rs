//! Shared pieces of the fuzz targets: an in-memory cluster answering the policy's host
//! calls from `policy/test_data/cluster.yaml`, and input splitting.

use serde_json::{json, Value};
use std::sync::OnceLock;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::counter;
use workloadspread_policy::host::{Host, HostError};

/// The policy fixtures' cluster (Deployment, ReplicaSet, WorkloadSpread, pods).
pub fn fixture_objects() -> &'static [Value] {
    static OBJECTS: OnceLock<Vec<Value>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        let text = include_str!("../../policy/test_data/cluster.yaml");
        serde_yaml::Deserializer::from_str(text)
            .filter_map(|d| serde::Deserialize::deserialize(d).ok())
            .collect()
    })
}

/// Answers reads from [`fixture_objects`] and grants every counter claim, so the
/// policy's decision and injection paths run to the end.
pub struct FixtureHost;

impl Host for FixtureHost {
    fn get(&self, _: &str, kind: &str, ns: Option<&str>, name: &str) -> Result<Value, HostError> {
        fixture_objects()
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && ns.is_none_or(|n| o["metadata"]["namespace"] == n)
            })
            .cloned()
            .ok_or_else(|| HostError {
                what: format!("get {kind} {name}"),
                reason: "not found".into(),
            })
    }

    fn list(
        &self,
        _: &str,
        kind: &str,
        ns: &str,
        _: Option<&str>,
    ) -> Result<Vec<Value>, HostError> {
        Ok(fixture_objects()
            .iter()
            .filter(|o| o["kind"] == kind && o["metadata"]["namespace"] == ns)
            .cloned()
            .collect())
    }

    /// The host's side of the counter protocol, on the fixture WorkloadSpread's status
    /// (nothing is written back: every call sees the fixture).
    fn counter(&self, operation: &str, payload: &Value) -> Result<Value, HostError> {
        let err = |reason: String| HostError {
            what: format!("counter {operation}"),
            reason,
        };
        let ws_for = |key: &counter::WorkloadSpreadKey| -> Result<WorkloadSpread, HostError> {
            let v = self.get("", "WorkloadSpread", Some(&key.namespace), &key.name)?;
            serde_json::from_value(v).map_err(|e| err(e.to_string()))
        };
        let now = workloadspread_core::timestamp_since_epoch(std::time::Duration::from_secs(
            1_700_000_000,
        ));
        let answer = match operation {
            counter::OP_HELLO => json!(counter::Hello {
                protocol: counter::PROTOCOL_VERSION
            }),
            counter::OP_CLAIM => {
                let req: counter::ClaimRequest =
                    serde_json::from_value(payload.clone()).map_err(|e| err(e.to_string()))?;
                json!(counter::apply_claim(&ws_for(&req.workload_spread)?, &req, now, &Default::default()).1)
            }
            counter::OP_RELEASE => {
                let req: counter::ReleaseRequest =
                    serde_json::from_value(payload.clone()).map_err(|e| err(e.to_string()))?;
                json!(counter::apply_release(&ws_for(&req.workload_spread)?, &req, now).1)
            }
            counter::OP_UNCLAIM => {
                let req: counter::UnclaimRequest =
                    serde_json::from_value(payload.clone()).map_err(|e| err(e.to_string()))?;
                json!(counter::apply_unclaim(&ws_for(&req.workload_spread)?, &req).1)
            }
            other => return Err(err(format!("unknown operation {other}"))),
        };
        Ok(answer)
    }
}

/// Splits fuzz input at the first NUL byte into two UTF-8 texts (lossy).
pub fn split2(data: &[u8]) -> (String, String) {
    let cut = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let rest = data.get(cut + 1..).unwrap_or_default();
    (
        String::from_utf8_lossy(&data[..cut]).into_owned(),
        String::from_utf8_lossy(rest).into_owned(),
    )
}

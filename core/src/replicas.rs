//! Replica counts of a workload: built-in kinds, `targetFilter.replicasPathList`, and
//! custom kinds' replicas paths (reference §3.5).

use serde_json::Value;
use thiserror::Error;

/// A replicas path could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    #[error("path {0:?} not exists")]
    NotExists(String),
    #[error("index {0} out of range")]
    OutOfRange(String),
    #[error("invalid index {0:?}")]
    BadIndex(String),
    #[error("object is not deep enough")]
    NotDeepEnough,
    #[error("object type error")]
    TypeError,
}

/// `NestedField[int64]` on a JSON object: map keys and numeric slice indexes.
pub fn nested_i64(obj: &Value, path: &[&str]) -> Result<i64, PathError> {
    let mut cur = obj;
    for part in path {
        cur = match cur {
            Value::Object(m) => m
                .get(*part)
                .ok_or_else(|| PathError::NotExists((*part).to_string()))?,
            Value::Array(items) => {
                let i = crate::percent::parse_go_int(part)
                    .ok_or_else(|| PathError::BadIndex((*part).to_string()))?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| items.get(i))
                    .ok_or_else(|| PathError::OutOfRange(i.to_string()))?
            }
            _ => return Err(PathError::NotDeepEnough),
        };
    }
    cur.as_i64().ok_or(PathError::TypeError)
}

/// `GetReplicasFromObject`: `""` → 0; otherwise the integer at the dot-separated path
/// (truncated to 32 bits like the reference's `int32(...)`).
pub fn replicas_at_path(obj: &Value, path: &str) -> Result<i32, PathError> {
    if path.is_empty() {
        return Ok(0);
    }
    let parts: Vec<&str> = path.split('.').collect();
    nested_i64(obj, &parts).map(|v| v as i32)
}

/// Sum of the replicas at each path (`targetFilter.replicasPathList`).
pub fn replicas_from_paths(obj: &Value, paths: &[String]) -> Result<i32, PathError> {
    paths.iter().try_fold(0i32, |acc, p| {
        Ok(acc.wrapping_add(replicas_at_path(obj, p)?))
    })
}

/// Replicas of a built-in workload kind: `spec.replicas` (Deployment, ReplicaSet,
/// StatefulSet, CloneSet; API default 1) or `spec.parallelism` (Job; default 1).
/// `None` for other kinds.
pub fn builtin_replicas(kind: &str, obj: &Value) -> Option<i32> {
    let field = match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "CloneSet" => "replicas",
        "Job" => "parallelism",
        _ => return None,
    };
    Some(
        obj["spec"][field]
            .as_i64()
            .map_or(1, |v| v.clamp(0, i64::from(i32::MAX)) as i32),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replicas_from_object() {
        // TestGetReplicasFromObject
        let obj = json!({"spec": {"replicas": 5, "replicaSlice": [1, 2], "stringField": "5"}});
        assert_eq!(replicas_at_path(&obj, ""), Ok(0));
        assert_eq!(
            replicas_at_path(&obj, "spec.not.exist"),
            Err(PathError::NotExists("not".into()))
        );
        assert_eq!(
            replicas_at_path(&obj, "spec.not.exist")
                .unwrap_err()
                .to_string(),
            "path \"not\" not exists"
        );
        assert_eq!(
            replicas_at_path(&obj, "spec.stringField"),
            Err(PathError::TypeError)
        );
        assert_eq!(replicas_at_path(&obj, "spec.replicas"), Ok(5));
        assert_eq!(replicas_at_path(&obj, "spec.replicaSlice.1"), Ok(2));
        // TestGetReplicasFromWorkloadWithTargetFilter
        assert_eq!(replicas_from_paths(&obj, &[]), Ok(0));
        let paths = [
            "spec.replicas",
            "spec.replicaSlice.0",
            "spec.replicaSlice.1",
        ]
        .map(String::from);
        assert_eq!(replicas_from_paths(&obj, &paths), Ok(8));
        assert!(replicas_from_paths(&obj, &["spec.nope".to_string()]).is_err());
    }

    #[test]
    fn nested_field() {
        // TestNestedField
        let obj = json!({"m": [1, "1"]});
        assert_eq!(nested_i64(&obj, &["m", "0"]), Ok(1));
        assert!(nested_i64(&obj, &["n"]).is_err());
        assert_eq!(nested_i64(&obj, &["m", "1"]), Err(PathError::TypeError));
        assert_eq!(
            nested_i64(&obj, &["m", "0", "n"]),
            Err(PathError::NotDeepEnough)
        );
        assert!(matches!(
            nested_i64(&obj, &["m", "a"]),
            Err(PathError::BadIndex(_))
        ));
        for i in ["10", "9223372036854775807", "-1"] {
            assert!(
                matches!(nested_i64(&obj, &["m", i]), Err(PathError::OutOfRange(_))),
                "{i}"
            );
        }
        let ud = json!({"spec": {"topology": {"subsets": [{"name": "a", "replicas": 5}]}}});
        assert_eq!(
            replicas_at_path(&ud, "spec.topology.subsets.0.replicas"),
            Ok(5)
        );
    }

    #[test]
    fn builtin_kinds() {
        assert_eq!(
            builtin_replicas("Deployment", &json!({"spec": {"replicas": 5}})),
            Some(5)
        );
        assert_eq!(
            builtin_replicas("Job", &json!({"spec": {"parallelism": 3}})),
            Some(3)
        );
        assert_eq!(builtin_replicas("Job", &json!({"spec": {}})), Some(1));
        assert_eq!(builtin_replicas("GameServerSet", &json!({})), None);
    }
}

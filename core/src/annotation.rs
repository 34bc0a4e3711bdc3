//! The `apps.kruise.io/matched-workloadspread` pod annotation.

use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

/// Value of the matched-workloadspread annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MatchedWorkloadSpread {
    /// WorkloadSpread name.
    pub name: String,
    /// Subset name.
    pub subset: String,
    /// Generated id used as the creatingPods key when the pod had no name at admission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// The annotation is not a JSON object with string `name`/`subset`/`uid`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid {} annotation {value:?}: {reason}",
    crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION
)]
pub struct AnnotationError {
    pub value: String,
    pub reason: String,
}

impl MatchedWorkloadSpread {
    /// Parses the annotation like Go's `encoding/json`: keys match case-insensitively,
    /// unknown keys and `null` values are ignored.
    pub fn parse(value: &str) -> Result<Self, AnnotationError> {
        let err = |reason: String| AnnotationError {
            value: value.to_string(),
            reason,
        };
        let parsed: Value = serde_json::from_str(value).map_err(|e| err(e.to_string()))?;
        let Value::Object(map) = parsed else {
            return Err(err("not a JSON object".into()));
        };
        let mut out = MatchedWorkloadSpread::default();
        for (key, v) in map {
            let slot = match key.to_ascii_lowercase().as_str() {
                "name" => &mut out.name,
                "subset" => &mut out.subset,
                "uid" => out.uid.get_or_insert_with(String::new),
                _ => continue,
            };
            match v {
                Value::String(s) => *slot = s,
                Value::Null => {}
                other => return Err(err(format!("field {key:?} must be a string, got {other}"))),
            }
        }
        if out.uid.as_deref() == Some("") {
            out.uid = None;
        }
        Ok(out)
    }

    /// The annotation value: `{"name":..,"subset":..[,"uid":..]}`.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The annotation of a pod (from its `metadata.annotations`), if present and non-empty.
    pub fn from_annotations(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<Result<Self, AnnotationError>> {
        let v = annotations?.get(crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION)?;
        (!v.is_empty()).then(|| Self::parse(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_case_insensitive_and_lenient() {
        let a = MatchedWorkloadSpread::parse(r#"{"Name":"test-ws","Subset":"subset-b"}"#).unwrap();
        assert_eq!(
            (a.name.as_str(), a.subset.as_str(), a.uid),
            ("test-ws", "subset-b", None)
        );
        let b =
            MatchedWorkloadSpread::parse(r#"{"name":"w","subset":"s","uid":"u","x":1}"#).unwrap();
        assert_eq!(b.uid.as_deref(), Some("u"));
        let c = MatchedWorkloadSpread::parse(r#"{"name":null}"#).unwrap();
        assert_eq!(c, MatchedWorkloadSpread::default());
    }

    #[test]
    fn parse_errors_say_why() {
        for bad in ["", "[]", "{", r#"{"name":1}"#] {
            let e = MatchedWorkloadSpread::parse(bad).unwrap_err();
            assert!(
                e.to_string()
                    .contains("apps.kruise.io/matched-workloadspread"),
                "{e}"
            );
        }
    }

    #[test]
    fn written_form_is_lowercase_in_order() {
        let mut a = MatchedWorkloadSpread {
            name: "test-ws".into(),
            subset: "subset-a".into(),
            uid: None,
        };
        assert_eq!(
            a.to_annotation(),
            r#"{"name":"test-ws","subset":"subset-a"}"#
        );
        a.uid = Some("1234".into());
        assert_eq!(
            a.to_annotation(),
            r#"{"name":"test-ws","subset":"subset-a","uid":"1234"}"#
        );
    }
}

//! Field errors formatted like `k8s.io/apimachinery/pkg/util/validation/field`.

use serde_json::Value;
use std::fmt;

/// The kind of a field error (`field.ErrorType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    Forbidden,
    NotSupported,
    Duplicate,
    NotFound,
    Internal,
}

impl ErrorType {
    fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotFound => "Not found",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// One validation failure at a field path, e.g. `spec.subsets[0].maxReplicas`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub type_: ErrorType,
    pub path: String,
    /// The offending value (`Value::Null` when not applicable).
    pub value: Value,
    pub detail: String,
}

impl FieldError {
    fn new(type_: ErrorType, path: &str, value: Value, detail: impl Into<String>) -> Self {
        FieldError {
            type_,
            path: path.to_string(),
            value,
            detail: detail.into(),
        }
    }
    pub fn required(path: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, path, Value::Null, detail)
    }
    pub fn invalid(path: &str, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, path, value.into(), detail)
    }
    pub fn forbidden(path: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, path, Value::Null, detail)
    }
    pub fn not_supported(path: &str, value: impl Into<Value>, valid: &[&str]) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| format!("{v:?}")).collect();
        let detail = format!("supported values: {}", quoted.join(", "));
        Self::new(ErrorType::NotSupported, path, value.into(), detail)
    }
    pub fn duplicate(path: &str, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, path, value.into(), "")
    }
    pub fn not_found(path: &str, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, path, value.into(), "")
    }
    pub fn internal(path: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, path, Value::Null, detail)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.type_.as_str())?;
        let shows_value = !matches!(
            self.type_,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::Internal
        );
        if shows_value {
            match &self.value {
                Value::Null => write!(f, ": null")?,
                Value::String(s) => write!(f, ": {s:?}")?,
                other => write!(f, ": {other}")?,
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Joins errors the way `ErrorList.ToAggregate().Error()` does.
pub fn aggregate(errors: &[FieldError]) -> String {
    let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if msgs.len() == 1 {
        msgs[0].clone()
    } else {
        format!("[{}]", msgs.join(", "))
    }
}

/// Builds child paths: `path("spec").child("subsets").index(0)`.
#[derive(Clone, Debug)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{}", self.0, name))
        }
    }
    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{}]", self.0, i))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_apimachinery() {
        let p = Path::new("spec")
            .child("subsets")
            .index(0)
            .child("maxReplicas");
        let e = FieldError::invalid(p.as_str(), "0.2%", "maxReplicas is not valid for subset");
        assert_eq!(
            e.to_string(),
            "spec.subsets[0].maxReplicas: Invalid value: \"0.2%\": maxReplicas is not valid for subset"
        );
        let r = FieldError::required("spec.targetRef", "no targetRef defined in WorkloadSpread");
        assert_eq!(
            r.to_string(),
            "spec.targetRef: Required value: no targetRef defined in WorkloadSpread"
        );
        let n = FieldError::not_supported("x", "Foo", &["Equal", "Exists"]);
        assert_eq!(
            n.to_string(),
            "x: Unsupported value: \"Foo\": supported values: \"Equal\", \"Exists\""
        );
        assert_eq!(
            FieldError::invalid("w", 101, "must be in the range 1-100").to_string(),
            "w: Invalid value: 101: must be in the range 1-100"
        );
        assert_eq!(aggregate(&[r.clone(), e.clone()]), format!("[{r}, {e}]"));
    }
}

//! The label selector of a List read: equalities only (`a=b,c=d`), which is all the
//! policy sends; any other is refused with the reason.

use super::HostCallError;
use serde_json::Value;

/// An equality label selector (`a=b,c=d`), which is all the policy sends; matched
/// without copying an object's labels (a list can cover thousands of pods).
#[derive(Debug, PartialEq)]
pub(crate) struct LabelEquality(Vec<(String, String)>);

impl LabelEquality {
    /// Whether labels looked up by `get` hold every pair.
    pub(crate) fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|(k, v)| get(k) == Some(v.as_str()))
    }

    /// [`Self::matches`] on an object as JSON.
    pub(crate) fn matches_value(&self, o: &Value) -> bool {
        self.matches(|k| o["metadata"]["labels"][k].as_str())
    }
}

/// Parses `a=b,c=d` (`==` too); any other selector is refused with the reason.
pub(crate) fn parse_selector(s: Option<&str>) -> Result<Option<LabelEquality>, HostCallError> {
    let Some(s) = s.filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    let mut pairs = Vec::new();
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| unsupported_selector(s))?;
        let (k, v) = (k.trim(), v.trim_start_matches('=').trim());
        if k.is_empty() || k.ends_with('!') {
            return Err(unsupported_selector(s));
        }
        pairs.push((k.to_string(), v.to_string()));
    }
    Ok(Some(LabelEquality(pairs)))
}

fn unsupported_selector(s: &str) -> HostCallError {
    HostCallError::Invalid(format!("unsupported label selector {s:?}: only k=v pairs"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_selectors_match_without_copying_labels() {
        let sel = parse_selector(Some("app=web, workloadspread.io/pending==true"))
            .unwrap()
            .unwrap();
        let pod = |labels: Value| json!({"metadata": {"labels": labels}});
        assert!(sel.matches_value(&pod(
            json!({"app": "web", "workloadspread.io/pending": "true", "x": "y"})
        )));
        assert!(!sel.matches_value(&pod(json!({"app": "web"}))));
        assert!(!sel.matches_value(&pod(
            json!({"app": "db", "workloadspread.io/pending": "true"})
        )));
        assert!(!sel.matches_value(&json!({"metadata": {}})));
        assert_eq!(parse_selector(Some(" ")).unwrap(), None);
        for refused in ["app", "app!=web", "=web", "app in (web)"] {
            assert!(parse_selector(Some(refused)).is_err(), "{refused}");
        }
    }
}

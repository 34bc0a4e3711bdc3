//! Field selectors as the API server applies them to a custom resource: `path=value`,
//! `path==value` and `path!=value` requirements, comma-separated, all of which must hold
//! (`k8s.io/apimachinery/pkg/fields`), on `metadata.name`, `metadata.namespace` and the
//! CRD's `selectableFields` (dotted JSON paths). A field the object lacks reads as the
//! empty string, as the API server's field set has it. `\`, `,` and `=` in a value are
//! escaped with a backslash; keys and values are taken as written (no trimming).

use serde_json::Value;

/// One requirement: the field at `path` equals (or not) `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; the empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<Requirement>,
}

impl FieldSelector {
    /// Parses `text` (`None` or blank: everything).
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return Ok(FieldSelector::default());
        };
        let requirements = split_terms(text)
            .into_iter()
            .map(|part| requirement(&part).ok_or_else(|| invalid(text, &part)))
            .collect::<Result<_, _>>()?;
        Ok(FieldSelector { requirements })
    }

    /// A selector of one requirement, `path=value` (the value escaped as needed).
    pub fn equals(path: &str, value: &str) -> String {
        let mut out = String::with_capacity(path.len() + value.len() + 1);
        out.push_str(path);
        out.push('=');
        for c in value.chars() {
            if matches!(c, '\\' | ',' | '=') {
                out.push('\\');
            }
            out.push(c);
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value when the selector is exactly one equality on `path` (what an index on
    /// that field answers alone).
    pub fn equality_on(&self, path: &str) -> Option<&str> {
        match self.requirements.as_slice() {
            [r] if r.equal && r.path == path => Some(&r.value),
            _ => None,
        }
    }

    /// Whether the object whose field at a dotted path `field` gives holds every
    /// requirement (`None`: the object lacks the field).
    pub fn matches<'a>(&self, field: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| (field(&r.path).unwrap_or("") == r.value) == r.equal)
    }

    /// [`FieldSelector::matches`] on a whole object (fields that are not strings read
    /// as absent).
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(|path| at_path(object, path))
    }
}

/// The string at dotted `path` in `object`.
pub fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a str> {
    path.split('.')
        .try_fold(object, |v, key| v.get(key))
        .and_then(Value::as_str)
}

fn invalid(text: &str, part: &str) -> String {
    format!("invalid field selector {text:?}: {part:?} is not field=value, field==value or field!=value")
}

/// `part` as a requirement: split at the first operator, `!=`, `==` or `=` tried in that
/// order at each position (apimachinery's `splitTerm`).
fn requirement(part: &str) -> Option<Requirement> {
    let (at, op, equal) = part.char_indices().find_map(|(i, _)| {
        let rest = &part[i..];
        [("!=", false), ("==", true), ("=", true)]
            .into_iter()
            .find(|(op, _)| rest.starts_with(op))
            .map(|(op, equal)| (i, op, equal))
    })?;
    let path = &part[..at];
    if path.is_empty() {
        return None;
    }
    Some(Requirement {
        path: path.to_string(),
        value: unescape(&part[at + op.len()..])?,
        equal,
    })
}

/// `text` split at each `,` not escaped by a backslash (escapes kept), empty terms
/// dropped.
fn split_terms(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in text.chars() {
        let Some(last) = parts.last_mut() else {
            break;
        };
        if escaped {
            last.push(c);
            escaped = false;
        } else if c == '\\' {
            last.push(c);
            escaped = true;
        } else if c == ',' {
            parts.push(String::new());
        } else {
            last.push(c);
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// The value with its escapes resolved; `None`, as the API server refuses them, for an
/// escape of anything but `\`, `,` or `=`, an unescaped `,` or `=`, or a trailing `\`.
fn unescape(value: &str) -> Option<String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return None,
            },
            ',' | '=' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requirements_all_hold_and_absent_fields_read_empty() {
        let ws = json!({"metadata": {"name": "web-spread", "namespace": "demo"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "web"}}});
        // (selector, selects)
        let cases: [(&str, bool); 13] = [
            ("", true),
            ("spec.targetRef.name=web", true),
            ("spec.targetRef.name==web", true),
            ("spec.targetRef.name=api", false),
            ("spec.targetRef.name!=api", true),
            ("spec.targetRef.name!=web", false),
            (
                "spec.targetRef.name=web,spec.targetRef.kind=Deployment",
                true,
            ),
            (
                "spec.targetRef.name=web,spec.targetRef.kind=StatefulSet",
                false,
            ),
            ("metadata.name=web-spread,metadata.namespace=demo", true),
            ("spec.targetFilter.name=", true),
            ("spec.targetFilter.name!=", false),
            ("spec.targetRef=web", false),
            ("spec.targetRef.name=we\\,b", false),
        ];
        for (text, selects) in cases {
            let s = FieldSelector::parse(Some(text)).unwrap();
            assert_eq!(s.matches_object(&ws), selects, "{text}");
        }
    }

    #[test]
    fn one_equality_is_what_an_index_answers() {
        let one = |t: &str| FieldSelector::parse(Some(t)).unwrap();
        assert_eq!(one("spec.x=a").equality_on("spec.x"), Some("a"));
        assert_eq!(one("spec.x==a").equality_on("spec.x"), Some("a"));
        assert_eq!(one("spec.x!=a").equality_on("spec.x"), None);
        assert_eq!(one("spec.x=a,spec.y=b").equality_on("spec.x"), None);
        assert_eq!(one("spec.y=a").equality_on("spec.x"), None);
    }

    #[test]
    fn escapes_round_trip_and_bad_selectors_are_refused() {
        assert_eq!(
            FieldSelector::parse(Some("metadata.name=a,,")),
            FieldSelector::parse(Some("metadata.name=a")),
            "empty terms are dropped"
        );
        let odd = json!({"spec": {"x": "a,b=c\\d"}});
        let text = FieldSelector::equals("spec.x", "a,b=c\\d");
        assert_eq!(text, "spec.x=a\\,b\\=c\\\\d");
        assert!(FieldSelector::parse(Some(&text))
            .unwrap()
            .matches_object(&odd));
        for bad in ["name", "=web", "spec.x=a\\b", "spec.x=a=b", "spec.x=a\\"] {
            assert!(FieldSelector::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}

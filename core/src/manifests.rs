//! Kubernetes objects from the YAML or JSON text users hand to the tools: multi-document
//! streams, `kubectl get -o yaml|json` lists (`List`, `PodList`, …) and top-level
//! sequences, flattened into one list of objects in document order. Empty documents
//! are skipped. One rule for every tool (offline `run`, `reconcile --offline`, `plan`,
//! the playground), so a file one of them accepts means the same to the others.

use serde::Deserialize;
use serde_json::{Map, Value};

/// Every object of a YAML (or JSON) stream, lists and sequences flattened.
///
/// The error carries the line and column of the offending document
/// (`serde_yaml::Error::location`).
pub fn objects_from_yaml(text: &str) -> Result<Vec<Value>, serde_yaml::Error> {
    let mut objects = vec![];
    for document in serde_yaml::Deserializer::from_str(text) {
        flatten_into(Value::deserialize(document)?, &mut objects);
    }
    Ok(objects)
}

/// A list object (`kind: List`, `PodList`, …) that carries its `items`.
fn is_list(object: &Map<String, Value>) -> bool {
    let kind = object.get("kind").and_then(Value::as_str);
    kind.is_some_and(|k| k.ends_with("List")) && object.get("items").is_some_and(Value::is_array)
}

fn flatten_into(value: Value, out: &mut Vec<Value>) {
    match value {
        Value::Null => {}
        Value::Array(items) => items.into_iter().for_each(|i| flatten_into(i, out)),
        Value::Object(mut list) if is_list(&list) => {
            if let Some(Value::Array(items)) = list.remove("items") {
                items.into_iter().for_each(|i| flatten_into(i, out));
            }
        }
        object => out.push(object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(text: &str) -> Vec<String> {
        objects_from_yaml(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    #[test]
    fn flattens_every_shape_users_produce() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("one document", "kind: Pod\nmetadata: {name: a}\n", &["a"]),
            (
                "multi-document with empty documents",
                "---\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: Pod\nmetadata: {name: b}\n",
                &["a", "b"],
            ),
            (
                "kubectl get -o yaml (kind: List)",
                "apiVersion: v1\nkind: List\nitems:\n- {kind: Pod, metadata: {name: a}}\n- {kind: Node, metadata: {name: n}}\n",
                &["a", "n"],
            ),
            (
                "a typed list from the API (PodList)",
                r#"{"kind": "PodList", "items": [{"kind": "Pod", "metadata": {"name": "a"}}]}"#,
                &["a"],
            ),
            (
                "a top-level JSON array",
                r#"[{"kind": "Pod", "metadata": {"name": "a"}}, {"kind": "Pod", "metadata": {"name": "b"}}]"#,
                &["a", "b"],
            ),
            (
                "a list inside a sequence inside a list",
                "kind: List\nitems:\n- [{kind: PodList, items: [{kind: Pod, metadata: {name: a}}]}]\n",
                &["a"],
            ),
            ("an empty list", "kind: List\nitems: []\n", &[]),
            ("an empty stream", "", &[]),
        ];
        for (what, text, expected) in cases {
            assert_eq!(names(text), *expected, "{what}");
        }
    }

    #[test]
    fn a_kind_ending_in_list_without_items_is_an_object() {
        let objects = objects_from_yaml("kind: NetworkPolicyList\nmetadata: {name: x}\n").unwrap();
        assert_eq!(
            objects,
            vec![json!({"kind": "NetworkPolicyList", "metadata": {"name": "x"}})]
        );
    }

    #[test]
    fn errors_name_the_line() {
        let err = objects_from_yaml("kind: Pod\n---\nkind: [unclosed\n").unwrap_err();
        let line = err.location().map(|l| l.line());
        assert_eq!(line, Some(4), "{err}");
    }
}

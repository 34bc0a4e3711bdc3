//! Label selectors, node selector terms, preferred scheduling scores and taint
//! toleration — the scheduling predicates the controller needs to adopt existing pods.

use crate::names::{is_qualified_name, is_valid_label_value};
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A validated label selector (`metav1.LabelSelectorAsSelector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<(String, Op, Vec<String>)>,
}

impl Selector {
    /// Converts and validates; the error text matches the Go library's.
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(requirement(k, Op::In, vec![v.clone()], true)?);
        }
        for expr in sel.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Op::In,
                "NotIn" => Op::NotIn,
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid pod selector operator")),
            };
            requirements.push(requirement(
                &expr.key,
                op,
                expr.values.clone().unwrap_or_default(),
                false,
            )?);
        }
        Ok(Selector { requirements })
    }

    /// True when every requirement holds (an empty selector selects everything).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|(k, op, values)| {
            let v = labels.get(k);
            match op {
                Op::In => v.is_some_and(|v| values.contains(v)),
                Op::NotIn => v.is_none_or(|v| !values.contains(v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
            }
        })
    }
}

fn requirement(
    key: &str,
    op: Op,
    values: Vec<String>,
    exact: bool,
) -> Result<(String, Op, Vec<String>), String> {
    let errs = is_qualified_name(key);
    if !errs.is_empty() {
        return Err(format!("invalid label key {key:?}: {}", errs.join("; ")));
    }
    match op {
        Op::In | Op::NotIn if values.is_empty() => {
            return Err("for 'in', 'notin' operators, values set can't be empty".into())
        }
        Op::In if exact && values.len() != 1 => {
            return Err("exact-match compatibility requires one single value".into())
        }
        Op::Exists | Op::DoesNotExist if !values.is_empty() => {
            return Err("values set must be empty for exists and does not exist".into())
        }
        _ => {}
    }
    for v in &values {
        let errs = is_valid_label_value(v);
        if !errs.is_empty() {
            return Err(format!(
                "invalid label value: {v:?}: at key: {key:?}: {}",
                errs.join("; ")
            ));
        }
    }
    Ok((key.to_string(), op, values))
}

/// A node as the scheduling predicates see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
}

impl From<&k8s_openapi::api::core::v1::Node> for NodeInfo {
    fn from(n: &k8s_openapi::api::core::v1::Node) -> Self {
        NodeInfo {
            name: n.metadata.name.clone().unwrap_or_default(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            taints: n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
        }
    }
}

fn expression_matches(req: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(|v| int(v)), values) else {
                return false;
            };
            let Some(bound) = int(bound) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether a node matches one term (`matchExpressions` on labels AND `matchFields` on
/// `metadata.name`). A term with no requirements matches nothing, like the scheduler.
pub fn node_matches_term(node: &NodeInfo, term: &NodeSelectorTerm) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let field_ok = |f: &NodeSelectorRequirement| {
        f.key == "metadata.name"
            && matches!(f.operator.as_str(), "In" | "NotIn")
            && expression_matches(f, Some(&node.name))
    };
    exprs
        .iter()
        .all(|e| expression_matches(e, node.labels.get(&e.key)))
        && fields.iter().all(field_ok)
}

/// Terms are ORed.
pub fn node_matches_any_term(node: &NodeInfo, terms: &[NodeSelectorTerm]) -> bool {
    terms.iter().any(|t| node_matches_term(node, t))
}

/// Sum of the weights of the preferred terms the node matches.
pub fn preferred_score(node: &NodeInfo, terms: &[PreferredSchedulingTerm]) -> i64 {
    terms
        .iter()
        .filter(|t| node_matches_term(node, &t.preference))
        .map(|t| i64::from(t.weight))
        .sum()
}

/// `Toleration.ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or_default();
    if key != taint.key && !(key.is_empty() && operator == "Exists") {
        return false;
    }
    match operator {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// The first taint (any effect) none of the tolerations tolerates.
pub fn first_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[&Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector() {
        // TestIsPodSelected
        let s = Selector::from_label_selector(&sel(json!({"matchLabels": {"app": "selected"}})))
            .unwrap();
        assert!(s.matches(&labels(&[("app", "selected")])));
        assert!(!s.matches(&labels(&[("app", "not-selected")])));
        let err = Selector::from_label_selector(&sel(
            json!({"matchExpressions": [{"key": "app", "operator": "Invalid"}]}),
        ))
        .unwrap_err();
        assert_eq!(err, "\"Invalid\" is not a valid pod selector operator");
        let err = Selector::from_label_selector(&sel(
            json!({"matchExpressions": [{"key": "app", "operator": "In"}]}),
        ))
        .unwrap_err();
        assert!(err.contains("values set can't be empty"), "{err}");
        let empty = Selector::from_label_selector(&LabelSelector::default()).unwrap();
        assert!(empty.matches(&Labels::new()));
        let ex = Selector::from_label_selector(&sel(json!({"matchExpressions": [
            {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "DoesNotExist"}, {"key": "c", "operator": "NotIn", "values": ["x"]}]}))).unwrap();
        assert!(ex.matches(&labels(&[("a", "1")])));
        assert!(!ex.matches(&labels(&[("a", "1"), ("c", "x")])));
    }

    fn term(v: serde_json::Value) -> NodeSelectorTerm {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_terms() {
        let node = NodeInfo {
            name: "n1".into(),
            labels: labels(&[("zone", "a"), ("cpu", "8")]),
            taints: vec![],
        };
        let cases = [
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["4"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "cpu", "operator": "Lt", "values": ["4"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["x"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
                true,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}),
                false,
            ),
            (
                json!({"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["n1"]}]}),
                false,
            ),
            (json!({}), false),
        ];
        for (t, want) in cases {
            assert_eq!(node_matches_term(&node, &term(t.clone())), want, "{t}");
        }
    }

    #[test]
    fn taints() {
        let taint: Taint =
            serde_json::from_value(json!({"key": "k", "value": "v", "effect": "NoSchedule"}))
                .unwrap();
        let tol = |v: serde_json::Value| -> Toleration { serde_json::from_value(v).unwrap() };
        assert!(tolerates(&tol(json!({"key": "k", "value": "v"})), &taint));
        assert!(tolerates(
            &tol(json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"})),
            &taint
        ));
        assert!(tolerates(&tol(json!({"operator": "Exists"})), &taint));
        assert!(!tolerates(&tol(json!({"key": "k", "value": "w"})), &taint));
        assert!(!tolerates(
            &tol(json!({"key": "k", "operator": "Exists", "effect": "NoExecute"})),
            &taint
        ));
        let t = tol(json!({"key": "k", "value": "w"}));
        assert_eq!(
            first_untolerated_taint(std::slice::from_ref(&taint), &[&t]),
            Some(&taint)
        );
    }
}

//! Kubernetes strategic merge patch (SMP) for Pods.
//!
//! Mirrors `k8s.io/apimachinery/pkg/util/strategicpatch` applying a patch with the
//! `corev1.Pod` struct as schema (`StrategicMergePatch(original, patch, corev1.Pod{})`):
//! maps merge recursively, `null` deletes a key, lists with `patchStrategy=merge` merge by
//! their `patchMergeKey` (or as a set for primitives), every other list is replaced.
//! Directives: `$patch: replace|delete` (maps and list items), `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>`. The element order of
//! merged lists follows the reference algorithm (`normalizeElementOrder`).
//!
//! Works on `serde_json::Value` so fields unknown to this crate's Pod types survive.
//! Difference: a map or list under a field the Pod schema does not know is merged
//! without a strategy (maps merge, lists replace) where Go fails with "unable to find
//! api field"; see `docs/semantics.md`.
//!
//! Here: the directives and the merge of maps and lists; which fields merge by which
//! key: `smp/schema.rs`; the order merged lists come out in: `smp/order.rs`.

mod order;
mod schema;

use order::{normalize_element_order, partition};
use schema::FieldMeta;
pub use schema::Schema;
use serde_json::{Map, Value};
use thiserror::Error;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Why a strategic merge patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SmpError {
    #[error("invalid JSON document")]
    BadJsonDoc,
    #[error("lists of lists are not supported")]
    ListOfLists,
    #[error("invalid patch format of primitive list")]
    BadPrimitiveList,
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    #[error("unknown patch type: {directive} in map: {map}")]
    BadPatchType { directive: String, map: String },
    #[error("expected a {expected}, but received a {actual}")]
    BadArgType {
        expected: &'static str,
        actual: &'static str,
    },
    #[error("list element types are not identical")]
    MixedListElements,
    #[error("no elements in any of the given slices")]
    EmptyLists,
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    #[error("cannot merge lists without merge key for {0}")]
    NoMergeKeyForList(String),
    #[error("the order in the patch list doesn't match the $setElementOrder list")]
    SetElementOrderMismatch,
}

/// Applies `patch` to a Pod (`original`), both JSON objects.
pub fn patch_pod(original: &Value, patch: &Value) -> Result<Value, SmpError> {
    apply(original, patch, Schema::Pod)
}

/// Applies `patch` to `original` with the given root schema.
pub fn apply(original: &Value, patch: &Value, schema: Schema) -> Result<Value, SmpError> {
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        return Err(SmpError::BadJsonDoc);
    };
    merge_map(o.clone(), p.clone(), schema).map(Value::Object)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `==` on decoded JSON scalars (all numbers are float64).
fn go_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Schema,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => Ok(patch),
            Some("delete") => Ok(Map::new()),
            _ => Err(SmpError::BadPatchType {
                directive: directive.to_string(),
                map: Value::Object(patch).to_string(),
            }),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_orders(&mut original, &mut patch, schema)?;
    for (key, patch_value) in patch {
        let (key, is_delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => match rest.strip_prefix('/') {
                Some(field) => (field.to_string(), true),
                None => return Err(SmpError::BadPrimitiveList),
            },
            None => (key, false),
        };
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(current) = original.remove(&key) else {
            original.insert(key, patch_value);
            continue;
        };
        let merged = merge_value(current, patch_value, schema.field(&key), is_delete_list)?;
        original.insert(key, merged);
    }
    Ok(original)
}

fn merge_value(
    current: Value,
    patch: Value,
    meta: FieldMeta,
    is_delete_list: bool,
) -> Result<Value, SmpError> {
    match (current, patch) {
        (Value::Object(o), Value::Object(p)) => merge_map(o, p, meta.schema).map(Value::Object),
        (Value::Array(o), Value::Array(p)) if meta.merge => {
            merge_slice(o, p, meta, is_delete_list).map(Value::Array)
        }
        (_, patch) => Ok(patch),
    }
}

fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(SmpError::BadRetainKeys);
    };
    let listed = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        let directive =
            k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER);
        if !v.is_null() && !directive && !listed(k) {
            return Err(SmpError::BadRetainKeys);
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merge that list now and order it as the directive says.
fn merge_set_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Schema,
) -> Result<(), SmpError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let order_value = patch.remove(&key).unwrap_or(Value::Null);
        let Value::Array(order) = order_value else {
            return Err(bad_arg("[]interface {}", &order_value));
        };
        let field = key
            .strip_prefix(SET_ELEMENT_ORDER)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or(SmpError::BadSetElementOrder)?
            .to_string();
        let original_list = as_list(original.get(&field))?;
        let patch_list = as_list(patch.get(&field))?;
        let meta = schema.field(&field);
        validate_patch_with_set_order(patch_list.as_deref().unwrap_or(&[]), &order, meta)?;
        let merged = match (original_list.clone(), patch_list.clone()) {
            (Some(o), None) => o,
            (None, Some(p)) => p,
            (Some(o), Some(p)) => {
                if meta.merge {
                    merge_slice(o, p, meta, false)?
                } else {
                    p
                }
            }
            (None, None) => continue,
        };
        let (in_order, server_only) = partition(&merged, &order, meta.merge_key)?;
        let is_map = element_is_map(
            original_list.as_deref().unwrap_or(&[]),
            patch_list.as_deref().unwrap_or(&[]),
        )?;
        let server_order = original_list.unwrap_or_default();
        let both = normalize_element_order(
            in_order,
            server_only,
            &order,
            &server_order,
            meta.merge_key.filter(|_| is_map),
        )?;
        original.insert(field.clone(), Value::Array(both));
        patch.remove(&field);
    }
    Ok(())
}

fn as_list(v: Option<&Value>) -> Result<Option<Vec<Value>>, SmpError> {
    match v {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(other) => Err(bad_arg("[]interface {}", other)),
    }
}

fn bad_arg(expected: &'static str, actual: &Value) -> SmpError {
    SmpError::BadArgType {
        expected,
        actual: type_name(actual),
    }
}

fn validate_patch_with_set_order(
    patch: &[Value],
    order: &[Value],
    meta: FieldMeta,
) -> Result<(), SmpError> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = match meta.merge_key {
        Some(_) => {
            let mut keep = Vec::new();
            for v in patch {
                let m = v.as_object().ok_or_else(|| bad_arg("map", v))?;
                if m.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                    keep.push(v);
                }
            }
            keep
        }
        None => patch.iter().collect(),
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi].get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(non_delete[pi], &order[oi], meta.merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(SmpError::SetElementOrderMismatch);
    }
    Ok(())
}

fn merge_key_value_equal(a: &Value, b: &Value, key: Option<&str>) -> Result<bool, SmpError> {
    let Some(key) = key else {
        return Ok(go_eq(a, b));
    };
    let ka = map_key(a, key)?;
    let kb = map_key(b, key)?;
    Ok(go_eq(ka, kb))
}

fn map_key<'a>(v: &'a Value, key: &str) -> Result<&'a Value, SmpError> {
    let m = v.as_object().ok_or_else(|| bad_arg("map", v))?;
    m.get(key).ok_or_else(|| SmpError::NoMergeKey {
        map: v.to_string(),
        key: key.to_string(),
    })
}

/// `sliceElementType`: true when the elements are maps; errors on mixed or nested lists.
fn element_is_map(a: &[Value], b: &[Value]) -> Result<bool, SmpError> {
    let mut kind: Option<&'static str> = None;
    for v in a.iter().chain(b) {
        if v.is_array() {
            return Err(SmpError::ListOfLists);
        }
        let t = type_name(v);
        match kind {
            None => kind = Some(t),
            Some(k) if k != t => return Err(SmpError::MixedListElements),
            Some(_) => {}
        }
    }
    match kind {
        Some("<nil>") | None => Err(SmpError::EmptyLists),
        Some(k) => Ok(k == "map[string]interface {}"),
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    meta: FieldMeta,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let is_map = element_is_map(&original, &patch)?;
    if !is_map {
        if is_delete_list {
            return Ok(delete_from_slice(original, &patch));
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        let merged = deduplicate_scalars(both);
        let (in_patch, server_only) = partition(&merged, &patch, None)?;
        return normalize_element_order(in_patch, server_only, &patch, &original, None);
    }
    let key = meta
        .merge_key
        .ok_or_else(|| SmpError::NoMergeKeyForList(format!("{:?}", meta.schema)))?;
    let (original, patch) = merge_slice_with_special_elements(original, patch, key)?;
    let merged = merge_slice_without_special_elements(original.clone(), &patch, key, meta)?;
    let (in_patch, server_only) = partition(&merged, &patch, Some(key))?;
    normalize_element_order(in_patch, server_only, &patch, &original, Some(key))
}

/// Handles `$patch: delete|replace` items; returns the new original and the plain patch items.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut plain_items = Vec::new();
    let mut replace = false;
    for item in patch {
        let Some(m) = item.as_object() else {
            return Err(bad_arg("map", &item));
        };
        match m.get(DIRECTIVE) {
            None => plain_items.push(item),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let value = map_key(&item, key)?.clone();
                    original = delete_matching(original, key, &value)?;
                }
                Some("replace") => replace = true,
                Some("merge") => return Err(SmpError::MergeDirectiveInList),
                _ => {
                    return Err(SmpError::BadPatchType {
                        directive: d.to_string(),
                        map: item.to_string(),
                    })
                }
            },
        }
    }
    if replace {
        return Ok((plain_items, Vec::new()));
    }
    Ok((original, plain_items))
}

fn delete_matching(list: Vec<Value>, key: &str, value: &Value) -> Result<Vec<Value>, SmpError> {
    let mut kept = Vec::with_capacity(list.len());
    for item in list {
        let m = item.as_object().ok_or(SmpError::BadArgType {
            expected: "map",
            actual: "non-map",
        })?;
        if !m.get(key).is_some_and(|v| go_eq(v, value)) {
            kept.push(item);
        }
    }
    Ok(kept)
}

fn find_by_key(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>, SmpError> {
    for (i, item) in list.iter().enumerate() {
        let m = item.as_object().ok_or_else(|| bad_arg("map", item))?;
        if m.get(key).is_some_and(|v| go_eq(v, value)) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &str,
    meta: FieldMeta,
) -> Result<Vec<Value>, SmpError> {
    for item in patch {
        let value = map_key(item, key)?;
        match find_by_key(&original, key, value)? {
            Some(i) => {
                let current = std::mem::take(&mut original[i]);
                let (Value::Object(o), Value::Object(p)) = (current, item.clone()) else {
                    return Err(bad_arg("map", item));
                };
                original[i] = Value::Object(merge_map(o, p, meta.schema)?);
            }
            None => original.push(item.clone()),
        }
    }
    Ok(original)
}

fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    current
        .into_iter()
        .filter(|v| !to_delete.iter().any(|d| go_eq(d, v)))
        .collect()
}

/// Go's in-place deduplication: a duplicate is overwritten by the current last element.
fn deduplicate_scalars(mut s: Vec<Value>) -> Vec<Value> {
    let mut i = 0;
    while s.len() > 1 && i < s.len() - 1 {
        let mut j = i + 1;
        while j < s.len() {
            if go_eq(&s[i], &s[j]) {
                let last = s.len() - 1;
                s.swap(j, last);
                s.truncate(last);
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    s
}

#[cfg(test)]
mod tests;

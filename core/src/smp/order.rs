//! The element order of merged lists, as the reference algorithm leaves it
//! (`normalizeElementOrder`): patch items in the patch's (or `$setElementOrder`'s) order,
//! server-only items interleaved in the server's order.

use super::{find_by_key, go_eq, map_key, SmpError, DIRECTIVE};
use serde_json::Value;
use std::cmp::Ordering;

/// Splits `merged` into items present in `by` (by merge key, or value) and the rest.
pub(super) fn partition(
    merged: &[Value],
    by: &[Value],
    key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut present = Vec::new();
    let mut rest = Vec::new();
    for v in merged {
        let found = match key {
            None => by.iter().any(|b| go_eq(b, v)),
            Some(k) => find_by_key(by, k, map_key(v, k)?)?.is_some(),
        };
        if found {
            present.push(v.clone());
        } else {
            rest.push(v.clone());
        }
    }
    Ok((present, rest))
}

fn index_of(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    let val = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let target = val(item);
    list.iter().position(|v| go_eq(&val(v), &target))
}

pub(super) fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, SmpError> {
    let patch = normalize_slice_order(patch, patch_order, key)?;
    let server_only = normalize_slice_order(server_only, server_order, key)?;
    Ok(merge_sorted_slice(server_only, patch, server_order, key))
}

fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, SmpError> {
    let (mut to_sort, to_delete) = match key {
        Some(k) => {
            for v in to_sort.iter().chain(order) {
                map_key(v, k)?;
            }
            to_sort.into_iter().partition::<Vec<_>, _>(|v| {
                v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete")
            })
        }
        None => (to_sort, Vec::new()),
    };
    // Go's sort.SliceStable comparator: "less" unless both are found and ordered.
    let less = |a: &Value, b: &Value| match (index_of(order, a, key), index_of(order, b, key)) {
        (Some(ia), Some(ib)) => ia < ib,
        _ => true,
    };
    insertion_sort(&mut to_sort, less);
    to_sort.extend(to_delete);
    Ok(to_sort)
}

fn insertion_sort(v: &mut [Value], less: impl Fn(&Value, &Value) -> bool) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && less(&v[j], &v[j - 1]) {
            v.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Interleaves server-only items into the patch items, keeping both relative orders.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let less = |l: &Value, r: &Value| -> bool {
        match (
            index_of(server_order, l, key),
            index_of(server_order, r, key),
        ) {
            (Some(li), Some(ri)) => li.cmp(&ri) == Ordering::Less,
            _ => false,
        }
    };
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut li, mut ri) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        match (li.peek(), ri.peek()) {
            (Some(l), Some(r)) => {
                if less(l, r) {
                    out.extend(li.next());
                } else {
                    out.extend(ri.next());
                }
            }
            (Some(_), None) => out.extend(li.next()),
            (None, Some(_)) => out.extend(ri.next()),
            (None, None) => break,
        }
    }
    out
}

//! Each case states the documented Kubernetes behaviour it checks
//! (docs: "Update API Objects in Place Using kubectl patch", SMP design docs, and
//! `strategicpatch` apply tests). `e2e/testkit/tests/smp_differential.rs` replays these
//! cases against a real API server.

use super::*;
use serde_json::json;

/// (name, original pod, patch, expected result)
pub(crate) fn cases() -> Vec<(&'static str, Value, Value, Value)> {
    vec![
        (
            "maps merge recursively, null deletes a key",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"b": null, "c": "3"}, "annotations": {"x": "y"}}}),
            json!({"metadata": {"labels": {"a": "1", "c": "3"}, "annotations": {"x": "y"}}}),
        ),
        (
            // As in the kubectl-patch docs: the patch's new container comes first.
            "containers merge by name; new entries before server-only ones",
            json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}}),
            json!({"spec": {"containers": [{"name": "sidecar", "resources": {"limits": {"cpu": "2", "memory": "8000Mi"}}}]}}),
            json!({"spec": {"containers": [{"name": "sidecar", "resources": {"limits": {"cpu": "2", "memory": "8000Mi"}}},
                {"name": "nginx", "image": "nginx:1"}]}}),
        ),
        (
            "matching container is merged field by field",
            json!({"spec": {"containers": [{"name": "app", "image": "a:1", "args": ["x"]}]}}),
            json!({"spec": {"containers": [{"name": "app", "image": "a:2"}]}}),
            json!({"spec": {"containers": [{"name": "app", "image": "a:2", "args": ["x"]}]}}),
        ),
        (
            "lists without a strategy (tolerations) are replaced",
            json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}),
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
        ),
        (
            "primitive lists without a strategy (args) are replaced",
            json!({"spec": {"containers": [{"name": "c", "args": ["a", "b"]}]}}),
            json!({"spec": {"containers": [{"name": "c", "args": ["z"]}]}}),
            json!({"spec": {"containers": [{"name": "c", "args": ["z"]}]}}),
        ),
        (
            "env merges by name; patch order first, then server-only items",
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "9"}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "9"}, {"name": "B", "value": "2"}]}]}}),
        ),
        (
            "ports merge by numeric containerPort",
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}]}]}}),
        ),
        (
            "$patch: delete on a list item removes the matching entry",
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
            json!({"spec": {"containers": [{"name": "b"}]}}),
        ),
        (
            "$patch: replace in a list replaces the whole list",
            json!({"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"name": "c", "emptyDir": {}}, {"$patch": "replace"}]}}),
            json!({"spec": {"volumes": [{"name": "c", "emptyDir": {}}]}}),
        ),
        (
            "$patch: replace in a map replaces the map",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"c": "3", "$patch": "replace"}}}),
            json!({"metadata": {"labels": {"c": "3"}}}),
        ),
        (
            "$patch: delete in a map empties it",
            json!({"spec": {"nodeSelector": {"a": "1"}, "hostname": "h"}}),
            json!({"spec": {"nodeSelector": {"$patch": "delete"}}}),
            json!({"spec": {"nodeSelector": {}, "hostname": "h"}}),
        ),
        (
            "$retainKeys drops keys not listed (volume source switch)",
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}, "$retainKeys": ["hostPath", "name"]}]}}),
            json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}}),
        ),
        (
            "finalizers (merge strategy, primitives) form a set",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        ),
        (
            "$deleteFromPrimitiveList removes values from a merging primitive list",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"finalizers": ["a", "c"]}}),
        ),
        (
            "$setElementOrder orders the merged list",
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                "containers": [{"name": "a", "image": "x"}]}}),
            json!({"spec": {"containers": [{"name": "c"}, {"name": "a", "image": "x"}, {"name": "b"}]}}),
        ),
        (
            "imagePullSecrets merge by name",
            json!({"spec": {"imagePullSecrets": [{"name": "a"}]}}),
            json!({"spec": {"imagePullSecrets": [{"name": "b"}]}}),
            json!({"spec": {"imagePullSecrets": [{"name": "b"}, {"name": "a"}]}}),
        ),
        (
            "volumeMounts merge by mountPath",
            json!({"spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/a"}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "w", "mountPath": "/a"}, {"name": "v", "mountPath": "/b"}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "w", "mountPath": "/a"}, {"name": "v", "mountPath": "/b"}]}]}}),
        ),
        (
            "node affinity terms (no strategy) are replaced",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}}}}),
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "b", "operator": "Exists"}]}]}}}}}),
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "b", "operator": "Exists"}]}]}}}}}),
        ),
        (
            "a scalar patch value replaces a map",
            json!({"spec": {"priorityClassName": "high", "priority": 10}}),
            json!({"spec": {"priorityClassName": "low"}}),
            json!({"spec": {"priorityClassName": "low", "priority": 10}}),
        ),
    ]
}

#[test]
fn reference_cases() {
    for (name, original, patch, expected) in cases() {
        let got = patch_pod(&original, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn errors() {
    let pod = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "a"}]}});
    let cases = [
        (
            json!({"spec": {"containers": [{"image": "x"}]}}),
            "does not contain declared merge key: name",
        ),
        (
            json!({"metadata": {"labels": {"$patch": "merge"}}}),
            "unknown patch type",
        ),
        (
            json!({"spec": {"containers": [{"name": "b", "$patch": "merge"}]}}),
            "merging lists cannot yet be specified",
        ),
        (
            json!({"spec": {"containers": [{"name": "a"}, "x"]}}),
            "list element types are not identical",
        ),
        (
            json!({"spec": {"$retainKeys": ["a"], "hostname": "x"}}),
            "retainKeys",
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            "primitive list",
        ),
    ];
    for (patch, want) in cases {
        let err = match patch_pod(&pod, &patch) {
            Ok(v) => panic!("{patch} should fail, got {v}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{patch}: {err}");
    }
    assert_eq!(patch_pod(&json!([]), &json!({})), Err(SmpError::BadJsonDoc));
}

#[test]
fn deduplicate_matches_go_in_place_algorithm() {
    // Go overwrites a duplicate with the last element: [a b a c] -> [a b c].
    let got = deduplicate_scalars(vec![json!("a"), json!("b"), json!("a"), json!("c")]);
    assert_eq!(got, vec![json!("a"), json!("b"), json!("c")]);
    let got = deduplicate_scalars(vec![json!("a"), json!("a"), json!("b"), json!("c")]);
    assert_eq!(got, vec![json!("a"), json!("c"), json!("b")]);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            "[a-c]{1,2}".prop_map(Value::from),
            (0i64..4).prop_map(Value::from),
            any::<bool>().prop_map(Value::from)
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn container() -> impl Strategy<Value = Value> {
        ("[a-e]", "[a-z]{1,3}").prop_map(|(n, img)| json!({"name": n, "image": img}))
    }

    proptest! {
        #[test]
        fn empty_patch_is_identity(v in prop::collection::btree_map("[a-f]", json_value(), 0..5)) {
            let original = Value::Object(v.into_iter().collect());
            prop_assert_eq!(patch_pod(&original, &json!({})).unwrap(), original);
        }

        #[test]
        fn merge_key_lists_keep_unrelated_entries(
            original in prop::collection::vec(container(), 0..5),
            patch in prop::collection::vec(container(), 0..5),
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let original: Vec<Value> = original.into_iter()
                .filter(|c| seen.insert(c["name"].as_str().map(str::to_owned))).collect();
            let pod = json!({"spec": {"containers": original}});
            let got = patch_pod(&pod, &json!({"spec": {"containers": patch.clone()}})).unwrap();
            let merged = got["spec"]["containers"].as_array().unwrap();
            for c in original {
                let patched = patch.iter().any(|p| p["name"] == c["name"]);
                let present = merged.iter().find(|m| m["name"] == c["name"]);
                prop_assert!(present.is_some());
                if !patched {
                    prop_assert_eq!(present.unwrap(), &c);
                }
            }
        }
    }
}

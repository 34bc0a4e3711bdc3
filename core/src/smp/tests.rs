//! Each case in `testdata/smp_cases.json` states the documented Kubernetes behaviour it
//! checks (docs: "Update API Objects in Place Using kubectl patch", the SMP design docs).

use super::*;
use serde_json::json;

/// Shared with `e2e/testkit/tests/core_differential.rs`, which replays every case
/// against a real API server.
const CASES: &str = include_str!("../../testdata/smp_cases.json");

fn cases() -> Value {
    serde_json::from_str(CASES).expect("testdata/smp_cases.json is valid JSON")
}

#[test]
fn reference_cases() {
    for case in cases()["apply"].as_array().unwrap() {
        let name = &case["name"];
        let got =
            patch_pod(&case["original"], &case["patch"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, case["expected"], "{name}");
    }
}

#[test]
fn errors() {
    for case in cases()["errors"].as_array().unwrap() {
        let want = case["message"].as_str().unwrap();
        let err = match patch_pod(&case["original"], &case["patch"]) {
            Ok(v) => panic!("{} should fail, got {v}", case["name"]),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{}: {err}", case["name"]);
    }
    let bad_prefix = patch_pod(
        &json!({"metadata": {}}),
        &json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
    );
    assert_eq!(bad_prefix, Err(SmpError::BadPrimitiveList));
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

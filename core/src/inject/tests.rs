use super::*;
use serde_json::json;

fn ws(subset: Value) -> WorkloadSpread {
    serde_json::from_value(json!({"metadata": {"name": "w"}, "spec": {"subsets": [subset]}}))
        .unwrap()
}

#[test]
fn required_term_is_anded_into_every_existing_term() {
    let ws = ws(
        json!({"name": "a", "requiredNodeSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}),
    );
    let mut pod = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}});
    inject(&mut pod, &ws, "a", None).unwrap();
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(terms[0]["matchExpressions"].as_array().unwrap().len(), 2);
    assert_eq!(
        terms[1]["matchExpressions"],
        json!([{"key": "zone", "operator": "In", "values": ["a"]}])
    );
    assert_eq!(terms[1]["matchFields"].as_array().unwrap().len(), 1);
}

#[test]
fn tolerations_are_appended_without_dedup_and_affinity_materialised() {
    let ws = ws(json!({"name": "a", "tolerations": [{"key": "k", "operator": "Exists"}]}));
    let mut pod = json!({"metadata": {"name": "p"}, "spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}});
    inject(&mut pod, &ws, "a", None).unwrap();
    assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
    assert_eq!(pod["spec"]["affinity"], json!({"nodeAffinity": {}}));
    assert_eq!(pod["metadata"]["labels"], json!({}));
}

#[test]
fn patch_cannot_override_the_matched_annotation_and_errors_are_reported() {
    let w = ws(
        json!({"name": "a", "patch": {"metadata": {"annotations": {"apps.kruise.io/matched-workloadspread": "x"}}}}),
    );
    let mut pod = json!({"spec": {}});
    inject(&mut pod, &w, "a", None).unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        r#"{"name":"w","subset":"a"}"#
    );
    let bad = ws(json!({"name": "a", "patch": {"spec": {"containers": [{"image": "x"}]}}}));
    let mut pod = json!({"spec": {"containers": [{"name": "c"}]}});
    let err = inject(&mut pod, &bad, "a", None).unwrap_err().to_string();
    assert!(
        err.contains("subset \"a\"") && err.contains("merge key"),
        "{err}"
    );
    assert_eq!(
        inject(&mut json!([]), &bad, "a", None),
        Err(InjectError::NotAnObject)
    );
}

#[test]
fn unknown_pod_fields_survive() {
    let w = ws(
        json!({"name": "a", "patch": {"spec": {"containers": [{"name": "c", "image": "new"}]}}}),
    );
    let mut pod = json!({"spec": {"futureField": {"x": 1}, "containers": [{"name": "c", "image": "old", "futureContainerField": true}]}});
    inject(&mut pod, &w, "a", None).unwrap();
    assert_eq!(pod["spec"]["futureField"], json!({"x": 1}));
    assert_eq!(
        pod["spec"]["containers"][0],
        json!({"name": "c", "image": "new", "futureContainerField": true})
    );
}

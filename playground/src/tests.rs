use super::*;
use crate::examples::EXAMPLES;

fn counts(step: &PlanStep) -> Vec<usize> {
    step.subsets.iter().map(|s| s.pods).collect()
}

fn example(id: &str) -> &'static examples::Example {
    EXAMPLES.iter().find(|e| e.id == id).unwrap()
}

#[test]
fn every_example_is_valid_and_plans_every_step() {
    for e in EXAMPLES {
        let p = plan(e.manifest, e.steps, e.nodes);
        assert!(p.validation.valid, "{}: {:?}", e.id, p.validation.problems);
        assert_eq!(p.steps.len(), e.steps.split(',').count(), "{}", e.id);
        for step in &p.steps {
            assert_eq!(step.pods.len() as i32, step.replicas, "{}", e.id);
        }
    }
}

#[test]
fn examples_plan_the_documented_shapes() {
    let z = plan(
        example("zones").manifest,
        "0,10,4,12",
        example("zones").nodes,
    );
    let shapes: Vec<Vec<usize>> = z.steps.iter().map(counts).collect();
    // 10 → 4: over-max pods of zone-a (max 2) and zone-b (max 2) and zone-c go first.
    assert_eq!(
        shapes,
        [vec![0, 0, 0], vec![3, 5, 2], vec![2, 2, 0], vec![4, 6, 2]]
    );
    assert!(z.steps[1].pods.iter().all(|p| p.node.is_some()));
    assert_eq!(z.nodes.len(), 4);

    let e = plan(example("elastic").manifest, "130,90", "");
    assert_eq!(counts(&e.steps[0]), [100, 30]);
    assert_eq!(counts(&e.steps[1]), [90, 0]);

    let a = plan(example("adaptive").manifest, "6", example("adaptive").nodes);
    assert_eq!(counts(&a.steps[0]), [0, 3, 3]);
    assert_eq!(a.steps[0].rescheduled.len(), 3);
    assert!(a.steps[0].subsets[0].unschedulable);

    let m = plan(example("min-replicas").manifest, "4", "");
    assert_eq!(counts(&m.steps[0]), [2, 2, 0]);
}

#[test]
fn the_wrapper_plans_exactly_what_core_plans() {
    let e = example("percent");
    let ws = decode_workloadspread(&serde_yaml::from_str(e.manifest).unwrap()).unwrap();
    let expected = workloadspread_core::plan::plan(&ws, &[5, 10, 3, 20]);
    assert_eq!(plan(e.manifest, e.steps, "").steps, expected);
}

#[test]
fn field_errors_carry_their_path() {
    let bad = example("zones")
        .manifest
        .replace("maxReplicas: 30%", "maxReplicas: 130%");
    let v = validate(&bad);
    assert!(!v.valid);
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert_eq!(v.problems[0].path, "spec.subsets[0].maxReplicas");
    assert!(v.problems[0]
        .message
        .contains("spec.subsets[0].maxReplicas"));
    // An invalid manifest yields no plan.
    assert!(plan(&bad, "3", "").steps.is_empty());
}

#[test]
fn patches_are_validated_against_the_included_workload() {
    let bad = example("arch").manifest.replace(
        "- name: main\n          image: registry",
        "- name: Main_1\n          image: registry",
    );
    let v = validate(&bad);
    assert!(!v.valid);
    assert!(
        v.problems[0].path.starts_with("spec.subsets[0].patch"),
        "{:?}",
        v.problems
    );
    assert_eq!(
        validate(example("arch").manifest).workload_replicas,
        Some(10)
    );
}

#[test]
fn syntax_and_input_errors_are_located() {
    let v = validate("apiVersion: apps.kruise.io/v1beta1\nkind: WorkloadSpread\nspec: [\n");
    assert_eq!(
        (v.problems[0].input, v.problems[0].line.is_some()),
        ("manifest", true)
    );
    let v = validate("apiVersion: v1\nkind: Pod\n");
    assert!(v.problems[0].message.contains("kind: WorkloadSpread"));
    let v = validate("apiVersion: apps/v1\nkind: WorkloadSpread\n");
    assert_eq!(v.problems[0].path, "apiVersion");

    let zones = example("zones").manifest;
    let p = plan(zones, "3,x", "");
    assert_eq!(p.validation.problems[0].input, "steps");
    assert!(p.steps.is_empty());
    assert!(plan(zones, "", "").validation.problems[0]
        .message
        .contains("at least one"));
    assert!(plan(zones, "5000", "").validation.problems[0]
        .message
        .contains("outside"));
    let p = plan(
        zones,
        "3",
        "- {apiVersion: v1, kind: Pod, metadata: {name: x}}",
    );
    assert_eq!(p.validation.problems[0].input, "nodes");
    // Steps written with arrows, as the docs do.
    assert_eq!(plan(zones, "0 → 10 → 4", "").steps.len(), 3);
}

#[test]
fn wasm_exports_return_json() {
    let out: Value =
        serde_json::from_str(&wasm::plan(example("zones").manifest, "10", "")).unwrap();
    assert_eq!(out["steps"][0]["subsets"][1]["pods"], 5);
    assert_eq!(out["validation"]["valid"], true);
    let ex: Value = serde_json::from_str(&wasm::examples()).unwrap();
    assert_eq!(ex.as_array().unwrap().len(), EXAMPLES.len());
    let v: Value = serde_json::from_str(&wasm::validate("kind: [")).unwrap();
    assert_eq!(v["valid"], false);
}

//! Ported from `workloadspread_validation_test.go` (§5.3 of the reference spec).

use super::*;
use crate::workload::CustomWorkload;
use serde_json::{json, Value};

fn subset(name: &str, zone: &str, max: Option<Value>) -> Value {
    let mut s = json!({
        "name": name,
        "requiredNodeSelector": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]},
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
        "patch": {"metadata": {"annotations": {"subset": name}}}
    });
    if let Some(m) = max {
        s["maxReplicas"] = m;
    }
    s
}

fn demo() -> Value {
    json!({
        "metadata": {"name": "workloadSpread", "namespace": "default"},
        "spec": {
            "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo"},
            "subsets": [subset("subset-a", "zone-a", Some(json!(50))), subset("subset-b", "zone-b", Some(json!(50))),
                subset("subset-c", "zone-c", None)]
        }
    })
}

fn ws(v: Value) -> WorkloadSpread {
    serde_json::from_value(v).unwrap()
}

fn errors(v: Value) -> Vec<FieldError> {
    let kinds = WorkloadKinds::default();
    let ctx = ValidationContext {
        workload_template: None,
        others: &[],
        kinds: &kinds,
    };
    validate_create(&ws(v), &ctx)
}

fn edit(f: impl FnOnce(&mut Value)) -> Value {
    let mut v = demo();
    f(&mut v);
    v
}

#[test]
fn valid_workloadspreads() {
    let cases: Vec<(&str, Value)> = vec![
        ("demo", demo()),
        (
            "cloneset 50/nil NotIn, Fixed",
            edit(|v| {
                v["spec"]["subsets"] = json!([
                {"name": "a", "maxReplicas": 50, "requiredNodeSelector": {"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["x"]}]}},
                {"name": "b"}]);
                v["spec"]["scheduleStrategy"] = json!({"type": "Fixed"});
            }),
        ),
        (
            "native statefulset",
            edit(|v| {
                v["spec"]["targetRef"] =
                    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s"});
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": 50}, {"name": "b"}]);
            }),
        ),
        (
            "advanced statefulset v1alpha1",
            edit(|v| {
                v["spec"]["targetRef"] = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "StatefulSet", "name": "s"});
            }),
        ),
        (
            "advanced statefulset v1beta1",
            edit(|v| {
                v["spec"]["targetRef"] = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet", "name": "s"});
            }),
        ),
        (
            "deployment, preferred 20, resource patch, adaptive",
            edit(|v| {
                v["spec"]["targetRef"] =
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"});
                v["spec"]["subsets"][0]["preferredNodeSelector"] = json!([{"weight": 20, "preference": {"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}}]);
                v["spec"]["subsets"][0]["patch"] = json!({"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}});
                v["spec"]["scheduleStrategy"] = json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30, "disableSimulationSchedule": true}});
            }),
        ),
        (
            "job 50%/50%",
            edit(|v| {
                v["spec"]["targetRef"] =
                    json!({"apiVersion": "batch/v1", "kind": "Job", "name": "j"});
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "50%"}, {"name": "b", "maxReplicas": "50%"}]);
            }),
        ),
        (
            "job 50%/50%/nil adaptive",
            edit(|v| {
                v["spec"]["targetRef"] =
                    json!({"apiVersion": "batch/v1", "kind": "Job", "name": "j"});
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "50%"}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]);
                v["spec"]["scheduleStrategy"] =
                    json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30}});
            }),
        ),
        (
            "single subset",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "only"}]);
            }),
        ),
        (
            "minReplicas within max",
            edit(|v| {
                v["spec"]["subsets"][0]["minReplicas"] = json!(10);
            }),
        ),
    ];
    for (name, v) in cases {
        let errs = errors(v);
        assert!(errs.is_empty(), "{name}: {errs:?}");
    }
}

#[test]
fn invalid_workloadspreads() {
    let sts_asts =
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "StatefulSet", "name": "s"});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "no targetRef",
            edit(|v| {
                v["spec"].as_object_mut().unwrap().remove("targetRef");
            }),
            "spec.targetRef",
        ),
        (
            "empty apiVersion",
            edit(|v| {
                v["spec"]["targetRef"]["apiVersion"] = json!("");
            }),
            "spec.targetRef",
        ),
        (
            "empty kind",
            edit(|v| {
                v["spec"]["targetRef"]["kind"] = json!("");
            }),
            "spec.targetRef",
        ),
        (
            "empty name",
            edit(|v| {
                v["spec"]["targetRef"]["name"] = json!("");
            }),
            "spec.targetRef",
        ),
        (
            "no subsets",
            edit(|v| {
                v["spec"].as_object_mut().unwrap().remove("subsets");
            }),
            "spec.subsets",
        ),
        (
            "statefulset rollouts group",
            edit(|v| {
                v["spec"]["targetRef"] = json!({"apiVersion": "rollouts.kruise.io/v2", "kind": "StatefulSet", "name": "s"});
            }),
            "spec.targetRef",
        ),
        (
            "advanced sts with percent",
            edit(|v| {
                v["spec"]["targetRef"] = sts_asts.clone();
                v["spec"]["subsets"][0]["maxReplicas"] = json!("50%");
                v["spec"]["subsets"][1]["maxReplicas"] = json!("50%");
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "subset[0] no name",
            edit(|v| {
                v["spec"]["subsets"][0]["name"] = json!("");
            }),
            "spec.subsets[0].name",
        ),
        (
            "subset[1] no name",
            edit(|v| {
                v["spec"]["subsets"][1]["name"] = json!("");
            }),
            "spec.subsets[1].name",
        ),
        (
            "duplicate names",
            edit(|v| {
                v["spec"]["subsets"][1]["name"] = json!("subset-a");
            }),
            "spec.subsets[1].name",
        ),
        (
            "required Exists with values",
            edit(|v| {
                v["spec"]["subsets"][0]["requiredNodeSelector"]["matchExpressions"][0]
                    ["operator"] = json!("Exists");
            }),
            "spec.subsets[0].requiredNodeSelector.matchExpressions[0].values",
        ),
        (
            "preferred weight 101",
            edit(|v| {
                v["spec"]["subsets"][0]["preferredNodeSelector"] = json!([{"weight": 101, "preference": {"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}}]);
            }),
            "spec.subsets[0].preferredNodeSelector[0].weight",
        ),
        (
            "preferred Exists with values",
            edit(|v| {
                v["spec"]["subsets"][0]["preferredNodeSelector"] = json!([{"weight": 50, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists", "values": ["a"]}]}}]);
            }),
            "spec.subsets[0].preferredNodeSelector[0].preference.matchExpressions[0].values",
        ),
        (
            "max -100",
            edit(|v| {
                v["spec"]["subsets"][0]["maxReplicas"] = json!(-100);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "max 0.2%",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "0.2%"}, {"name": "b"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "max 50.2%",
            edit(|v| {
                v["spec"]["subsets"] =
                    json!([{"name": "a", "maxReplicas": "50.2%"}, {"name": "b"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "max 101%",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "101%"}, {"name": "b"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "max -1%",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "-1%"}, {"name": "b"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "40% + 70%",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "40%"}, {"name": "b", "maxReplicas": "70%"}]);
            }),
            "spec.subsets[1].maxReplicas",
        ),
        (
            "40%+20%+20% last set",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "40%"}, {"name": "b", "maxReplicas": "20%"}, {"name": "c", "maxReplicas": "20%"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "strategy random",
            edit(|v| {
                v["spec"]["scheduleStrategy"] = json!({"type": "random"});
            }),
            "spec.scheduleStrategy.type",
        ),
        (
            "adaptive -1",
            edit(|v| {
                v["spec"]["scheduleStrategy"] =
                    json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": -1}});
            }),
            "spec.scheduleStrategy.adaptive.rescheduleCriticalSeconds",
        ),
        (
            "adaptive -20",
            edit(|v| {
                v["spec"]["scheduleStrategy"] =
                    json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": -20}});
            }),
            "spec.scheduleStrategy.adaptive.rescheduleCriticalSeconds",
        ),
        (
            "fixed + adaptive",
            edit(|v| {
                v["spec"]["scheduleStrategy"] =
                    json!({"type": "Fixed", "adaptive": {"rescheduleCriticalSeconds": 20}});
            }),
            "spec.scheduleStrategy.type",
        ),
        (
            "adaptive with last max",
            edit(|v| {
                v["spec"]["subsets"][2]["maxReplicas"] = json!(5);
                v["spec"]["scheduleStrategy"] =
                    json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 20}});
            }),
            "spec.scheduleStrategy.adaptive",
        ),
        (
            "invalid target filter",
            edit(|v| {
                v["spec"]["targetFilter"] =
                    json!({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}});
            }),
            "spec.targetFilter",
        ),
        // Deliberate difference (quirk 13): the reference accepted "50" as 50%.
        (
            "string max without %",
            edit(|v| {
                v["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": "50"}, {"name": "b"}]);
            }),
            "spec.subsets[0].maxReplicas",
        ),
        (
            "minReplicas above max",
            edit(|v| {
                v["spec"]["subsets"][0]["minReplicas"] = json!(51);
            }),
            "spec.subsets[0].minReplicas",
        ),
        (
            "minReplicas type differs",
            edit(|v| {
                v["spec"]["subsets"][0]["minReplicas"] = json!("10%");
            }),
            "spec.subsets[0].minReplicas",
        ),
        (
            "custom kind not configured",
            edit(|v| {
                v["spec"]["targetRef"] = json!({"apiVersion": "mock.kruise.io/v1", "kind": "GameServerSet", "name": "g"});
            }),
            "spec.targetRef",
        ),
    ];
    for (name, v, path) in cases {
        let errs = errors(v);
        assert!(
            errs.iter().any(|e| e.path == path),
            "{name}: want {path}, got {errs:?}"
        );
    }
}

#[test]
fn messages_match_reference() {
    let e = errors(edit(|v| {
        v["spec"]["subsets"] =
            json!([{"name": "a", "maxReplicas": "40%"}, {"name": "b", "maxReplicas": "70%"}]);
    }));
    assert_eq!(e[0].to_string(), "spec.subsets[1].maxReplicas: Invalid value: \"70%\": the sum of all subset's maxReplicas exceeds 100% is no permitted");
    // No upper bound (reference: 147 s for three subsets); negative values are rejected.
    let long = edit(|v| {
        v["spec"]["scheduleStrategy"] =
            json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 900}});
    });
    assert!(errors(long).is_empty());
    let e = errors(edit(|v| {
        v["spec"]["scheduleStrategy"] =
            json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": -1}});
    }));
    assert_eq!(e[0].to_string(), "spec.scheduleStrategy.adaptive.rescheduleCriticalSeconds: Invalid value: -1: rescheduleCriticalSeconds < 0 is not permitted");
    assert_eq!(
        errors(edit(|v| {
            v["spec"].as_object_mut().unwrap().remove("subsets");
        }))[0]
            .to_string(),
        "spec.subsets: Required value: subsets number must >= 1 in WorkloadSpread"
    );
}

#[test]
fn custom_kinds_are_permitted_when_configured() {
    let kinds = WorkloadKinds {
        custom: vec![CustomWorkload {
            group: "mock.kruise.io".into(),
            kind: "GameServerSet".into(),
            ..Default::default()
        }],
    };
    let v = edit(|v| {
        v["spec"]["targetRef"] =
            json!({"apiVersion": "mock.kruise.io/v1", "kind": "GameServerSet", "name": "g"});
    });
    let ctx = ValidationContext {
        workload_template: None,
        others: &[],
        kinds: &kinds,
    };
    assert!(validate_create(&ws(v), &ctx).is_empty());
}

#[test]
fn target_ref_update_and_conflict() {
    let kinds = WorkloadKinds::default();
    let ctx = ValidationContext {
        workload_template: None,
        others: &[],
        kinds: &kinds,
    };
    let old = ws(demo());
    for change in [
        ("apiVersion", "apps/v1"),
        ("kind", "Deployment"),
        ("name", "other"),
    ] {
        let new = ws(edit(|v| {
            v["spec"]["targetRef"][change.0] = json!(change.1);
        }));
        let errs = validate_update(&new, &old, &ctx);
        assert!(
            errs.iter()
                .any(|e| e.detail == "change TargetReference is not permitted for WorkloadSpread"),
            "{change:?}"
        );
    }
    let version_only = ws(edit(|v| {
        v["spec"]["targetRef"]["apiVersion"] = json!("apps.kruise.io/v1beta1");
    }));
    assert!(validate_update(&version_only, &old, &ctx).is_empty());
    // TestValidateWorkloadSpreadConflict
    let other = |name: &str, api: &str, kind: &str, target: &str| {
        ws(json!({"metadata": {"name": name},
        "spec": {"targetRef": {"apiVersion": api, "kind": kind, "name": target}, "subsets": [{"name": "a"}]}}))
    };
    let whole = [
        other("o1", "apps/v1", "CloneSet", "demo"),
        other("o2", "apps.kruise.io/v1", "Deployment", "demo"),
        other("o3", "apps.kruise.io/v1", "CloneSet", "x"),
    ];
    let others: Vec<SpreadTarget<'_>> = whole.iter().map(SpreadTarget::of).collect();
    let ctx = ValidationContext {
        workload_template: None,
        others: &others,
        kinds: &kinds,
    };
    assert!(validate_create(&old, &ctx).is_empty());
    let o4 = other("o4", "apps.kruise.io/v1beta1", "CloneSet", "demo");
    let others = [SpreadTarget::of(&o4)];
    let ctx = ValidationContext {
        workload_template: None,
        others: &others,
        kinds: &kinds,
    };
    let errs = validate_create(&old, &ctx);
    assert_eq!(errs.len(), 1);
    assert!(errs[0]
        .detail
        .contains("in conflict with other WorkloadSpread o4"));
}

#[test]
fn patch_validated_against_workload_template() {
    // Test_validateWorkloadSpreadSubsets: volume claim templates become volumes.
    let kinds = WorkloadKinds::default();
    let workload = |claim: &str| {
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx",
        "volumeMounts": [{"name": "vol-1--0", "mountPath": "/data"}]}]}},
        "volumeClaimTemplates": [{"metadata": {"name": claim}}]}})
    };
    for (claim, want) in [("vol-1--0", 0), ("bad-boy", 1)] {
        let w = workload(claim);
        let template = crate::workload::pod_template_for_validation("CloneSet", &w).unwrap();
        let ctx = ValidationContext {
            workload_template: Some(&template),
            others: &[],
            kinds: &kinds,
        };
        let errs = validate_create(&ws(demo()), &ctx);
        // The demo has three subsets with patches: each is checked.
        assert_eq!(errs.len(), want * 3, "{claim}: {errs:?}");
        if want == 1 {
            assert_eq!(
                errs[0].to_string(),
                "spec.subsets[0].patch.containers[0].volumeMounts[0].name: Not found: \"vol-1--0\""
            );
        }
    }
    let template = json!({"spec": {"containers": [{"name": "main", "image": "nginx"}]}});
    let ctx = ValidationContext {
        workload_template: Some(&template),
        others: &[],
        kinds: &kinds,
    };
    let bad = edit(|v| {
        v["spec"]["subsets"][0]["patch"] =
            json!({"spec": {"containers": [{"name": "main", "$patch": "merge"}]}});
    });
    let errs = validate_create(&ws(bad), &ctx);
    assert!(
        errs[0].detail.starts_with("failed to merge patch: "),
        "{errs:?}"
    );
    let bad_type = edit(|v| {
        v["spec"]["subsets"][0]["patch"] = json!({"spec": {"containers": "x"}});
    });
    let errs = validate_create(&ws(bad_type), &ctx);
    assert!(
        errs[0].detail.starts_with("failed to unmarshal: "),
        "{errs:?}"
    );
}

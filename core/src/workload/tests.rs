use super::*;
use serde_json::json;

fn r(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

#[test]
fn reference_equality() {
    // TestIsReferenceEqual
    let t = r("apps.kruise.io/v1alpha1", "CloneSet", "cs");
    assert_eq!(
        reference_equal(&t, &r("apps.kruise.io/v1alpha1", "CloneSet", "cs")),
        Ok(true)
    );
    assert_eq!(
        reference_equal(&t, &r("apps.kruise.io/v1beta1", "CloneSet", "cs")),
        Ok(true)
    );
    assert_eq!(
        reference_equal(&t, &r("apps/v1", "CloneSet", "cs")),
        Ok(false)
    );
    assert_eq!(
        reference_equal(&t, &r("apps.kruise.io/v1alpha1", "CloneSet", "other")),
        Ok(false)
    );
    let bad = r("apps.kruise.io/v1alpha1/yahaha", "CloneSet", "cs");
    let e = reference_equal(&bad, &t).unwrap_err();
    assert!(e.contains("unexpected GroupVersion string: apps.kruise.io/v1alpha1/yahaha"));
    assert!(reference_equal(&t, &bad).is_err());
}

fn ws(name: &str, target: ObjectRef) -> WorkloadSpread {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"targetRef": target, "subsets": [{"name": "a"}]}}))
    .unwrap()
}

fn game_kinds() -> WorkloadKinds {
    WorkloadKinds {
        custom: vec![CustomWorkload {
            group: "mock.kruise.io".into(),
            kind: "GameServerSet".into(),
            replicas_path: "spec.replicas".into(),
            sub_resources: vec![GroupKind {
                group: "mock.kruise.io".into(),
                kind: "GameServer".into(),
            }],
        }],
    }
}

#[test]
fn owner_chain_matching() {
    // TestIsReferenceEqual2
    let kinds = game_kinds();
    let gs = r("mock.kruise.io/v1", "GameServer", "gs");
    let gss = r("mock.kruise.io/v1", "GameServerSet", "gss");
    let owners = |o: &ObjectRef| -> Result<Option<ObjectRef>, OwnerLookupError> {
        match o.kind.as_str() {
            "GameServer" => Ok(Some(r("mock.kruise.io/v1", "GameServerSet", "gss"))),
            "CloneSet" => Err(OwnerLookupError::NotFound(format!(
                "CloneSet {} not found",
                o.name
            ))),
            _ => Ok(None),
        }
    };
    let labels = Labels::new();
    let cs = r("apps.kruise.io/v1alpha1", "CloneSet", "cs");
    let list = [ws("w-cs", cs.clone())];
    let m = find_matching_workloadspread(&list, &cs, &labels, &kinds, owners).unwrap();
    assert_eq!(m.workloadspread.map(|w| w.name()), Some("w-cs"));
    let list = [ws("w-gss", gss.clone())];
    let m = find_matching_workloadspread(&list, &gs, &labels, &kinds, owners).unwrap();
    assert_eq!(m.workloadspread.map(|w| w.name()), Some("w-gss"));
    // pod→CloneSet whose object is missing while the WS targets a GameServerSet: admission error.
    assert!(find_matching_workloadspread(&list, &cs, &labels, &kinds, owners).is_err());
    // Unknown owner kind: no match, no error.
    let unknown = r("unknownCRD", "GameServer", "gs");
    let m = find_matching_workloadspread(&list, &unknown, &labels, &kinds, owners).unwrap();
    assert!(m.workloadspread.is_none());
}

#[test]
fn rs_to_deployment_and_filters() {
    let kinds = WorkloadKinds::default();
    let rs = r("apps/v1", "ReplicaSet", "web-abc");
    let owners = |_: &ObjectRef| Ok(Some(r("apps/v1", "Deployment", "web")));
    let mut w = ws("w", r("apps/v1", "Deployment", "web"));
    let labels: Labels = [("app".to_string(), "x".to_string())].into();
    let list = [w.clone()];
    assert!(
        find_matching_workloadspread(&list, &rs, &labels, &kinds, owners)
            .unwrap()
            .workloadspread
            .is_some()
    );
    // A filter with no selector selects every pod (documented choice).
    w.spec.target_filter = Some(TargetFilter {
        selector: None,
        replicas_path_list: vec!["spec.replicas".into()],
    });
    let list = [w.clone()];
    assert!(
        find_matching_workloadspread(&list, &rs, &labels, &kinds, owners)
            .unwrap()
            .workloadspread
            .is_some()
    );
    w.spec.target_filter =
        Some(serde_json::from_value(json!({"selector": {"matchLabels": {"app": "y"}}})).unwrap());
    let list = [w.clone()];
    assert!(
        find_matching_workloadspread(&list, &rs, &labels, &kinds, owners)
            .unwrap()
            .workloadspread
            .is_none()
    );
    w.spec.target_filter = Some(
        serde_json::from_value(
            json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}),
        )
        .unwrap(),
    );
    let list = [w];
    let m = find_matching_workloadspread(&list, &rs, &labels, &kinds, owners).unwrap();
    assert!(m.workloadspread.is_none());
    assert_eq!(m.warnings.len(), 1);
}

#[test]
fn built_in_owner_kinds() {
    // TestFilterReference
    let kinds = WorkloadKinds::default();
    assert!(kinds.is_owner_kind(&r("apps.kruise.io/v1alpha1", "CloneSet", "x")));
    assert!(kinds.is_owner_kind(&r("apps/v1", "ReplicaSet", "x")));
    assert!(!kinds.is_owner_kind(&r("v1", "ReplicationController", "x")));
}

#[test]
fn workload_replicas() {
    // TestGetWorkloadReplicas
    let kinds = WorkloadKinds {
        custom: vec![CustomWorkload {
            group: "apps.kruise.io".into(),
            kind: "DaemonSet".into(),
            replicas_path: "spec.minReadySeconds".into(),
            sub_resources: vec![],
        }],
    };
    let t = |api: &str, kind: &str| TargetReference {
        api_version: api.into(),
        kind: kind.into(),
        name: "w".into(),
    };
    let obj = json!({"spec": {"replicas": 5, "parallelism": 3, "minReadySeconds": 1, "revisionHistoryLimit": 2}});
    assert_eq!(
        kinds.workload_replicas(&t("apps/v1", "Deployment"), None, &obj),
        Ok(5)
    );
    assert_eq!(
        kinds.workload_replicas(&t("apps.kruise.io/v1alpha1", "StatefulSet"), None, &obj),
        Ok(5)
    );
    assert_eq!(
        kinds.workload_replicas(&t("apps.kruise.io/v1alpha1", "DaemonSet"), None, &obj),
        Ok(1)
    );
    let filter = TargetFilter {
        selector: None,
        replicas_path_list: vec!["spec.revisionHistoryLimit".into()],
    };
    assert_eq!(
        kinds.workload_replicas(
            &t("apps.kruise.io/v1alpha1", "DaemonSet"),
            Some(&filter),
            &obj
        ),
        Ok(2)
    );
    let sel_only = TargetFilter::default();
    assert_eq!(
        kinds.workload_replicas(
            &t("apps.kruise.io/v1alpha1", "DaemonSet"),
            Some(&sel_only),
            &obj
        ),
        Ok(1)
    );
    assert_eq!(
        kinds.workload_replicas(&t("batch/v1", "Job"), None, &obj),
        Ok(3)
    );
    assert_eq!(
        kinds.workload_replicas(&t("x.io/v1", "Unknown"), None, &obj),
        Ok(0)
    );
}

#[test]
fn validation_template_gets_claim_volumes() {
    let cs = json!({"spec": {"template": {"spec": {"containers": [{"name": "c"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "vol-1--0"}}]}});
    let t = pod_template_for_validation("CloneSet", &cs).unwrap();
    assert_eq!(
        t["spec"]["volumes"][0],
        json!({"name": "vol-1--0", "persistentVolumeClaim": {"claimName": "vol-1--0"}})
    );
    assert!(
        pod_template_for_validation("Deployment", &cs).unwrap()["spec"]
            .get("volumes")
            .is_none()
    );
    assert!(pod_template_for_validation("Deployment", &json!({})).is_none());
}

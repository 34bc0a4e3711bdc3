use super::*;
use serde::Deserialize;
use serde_json::{json, Value};

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

/// A WorkloadSpread as the API server holds it: what matching reads, plus everything
/// else a field mask drops (subsets, status, labels, annotations, finalizers).
fn stored_spread(
    name: &str,
    target: Option<Value>,
    filter: Option<Value>,
    deleting: bool,
) -> Value {
    let mut v = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
            "generation": 3, "resourceVersion": "4711", "creationTimestamp": "2026-11-24T09:00:00Z",
            "labels": {"team": "payments"}, "finalizers": ["example.com/keep"],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"}},
        "spec": {"subsets": [
            {"name": "zone-a", "maxReplicas": 3, "patch": {"metadata": {"labels": {"zone": "a"}}},
             "requiredNodeSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"name": "zone-b"}],
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30}}},
        "status": {"observedGeneration": 3, "subsetStatuses": [
            {"name": "zone-a", "replicas": 3, "missingReplicas": 0},
            {"name": "zone-b", "replicas": 7, "missingReplicas": -1}]}});
    if let Some(t) = target {
        v["spec"]["targetRef"] = t;
    }
    if let Some(f) = filter {
        v["spec"]["targetFilter"] = f;
    }
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!("2026-11-24T10:00:00Z");
    }
    v
}

fn target(api_version: &str, kind: &str, name: &str) -> Option<Value> {
    Some(json!({"apiVersion": api_version, "kind": kind, "name": name}))
}

/// The masked lookup (spreads listed with `masks::WORKLOADSPREAD_TARGET_FIELDS`,
/// decoded into `SpreadTarget`s as the policy decodes the host's answer) picks the same
/// WorkloadSpread as matching the whole objects, with the same warnings and errors, on a
/// table of targets: every built-in kind, custom kinds and their sub-resources, targets
/// written in another version of their group, StatefulSets of both groups, target
/// filters that select, do not select or are invalid, deleting spreads, spreads without
/// a target, a target with an unparseable apiVersion, two spreads of one workload (the
/// first in list order wins), owners missing or without a controller.
#[test]
fn masked_lookup_picks_the_same_workloadspread_as_whole_objects() {
    use crate::masks::{Mask, WORKLOADSPREAD_TARGET_FIELDS};
    let canary = json!({"selector": {"matchLabels": {"track": "canary"}}});
    let game = json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["game"]}]},
        "replicasPathList": ["spec.replicas"]});
    let whole: Vec<Value> = vec![
        stored_spread("no-target", None, None, false),
        stored_spread("bad-group", target("a/b/c", "CloneSet", "cs"), None, false),
        stored_spread(
            "cs-alpha",
            target("apps.kruise.io/v1alpha1", "CloneSet", "cs"),
            None,
            false,
        ),
        stored_spread(
            "sts-native",
            target("apps/v1", "StatefulSet", "db"),
            None,
            false,
        ),
        stored_spread(
            "sts-kruise",
            target("apps.kruise.io/v1beta1", "StatefulSet", "db"),
            None,
            false,
        ),
        stored_spread(
            "web-deleting",
            target("apps/v1", "Deployment", "web"),
            None,
            true,
        ),
        stored_spread(
            "web-canary",
            target("apps/v1", "Deployment", "web"),
            Some(canary),
            false,
        ),
        stored_spread(
            "web",
            target("apps/v1beta1", "Deployment", "web"),
            None,
            false,
        ),
        stored_spread(
            "rs-direct",
            target("apps/v1", "ReplicaSet", "api-7f"),
            None,
            false,
        ),
        stored_spread("job", target("batch/v1", "Job", "report"), None, false),
        stored_spread(
            "gss",
            target("mock.kruise.io/v1", "GameServerSet", "gss"),
            Some(game),
            false,
        ),
        stored_spread(
            "bad-filter",
            target("apps/v1", "Deployment", "bad"),
            Some(json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}})),
            false,
        ),
        stored_spread(
            "cs-beta-second",
            target("apps.kruise.io/v1beta1", "CloneSet", "cs"),
            None,
            false,
        ),
    ];
    let wss: Vec<WorkloadSpread> = whole
        .iter()
        .map(|v| serde_json::from_value(v.clone()).unwrap())
        .collect();
    // The host's answer to the masked list, decoded as the policy decodes it.
    let mask = Mask::new(WORKLOADSPREAD_TARGET_FIELDS);
    let answer = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpreadList",
        "items": whole.iter().map(|v| mask.apply(v)).collect::<Vec<_>>()});
    let answer = serde_json::to_vec(&answer).unwrap();
    #[derive(Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        items: Vec<SpreadTarget<'a>>,
    }
    let masked = serde_json::from_slice::<List>(&answer).unwrap().items;
    let whole_bytes = serde_json::to_vec(&whole).unwrap().len();
    assert!(
        answer.len() * 3 < whole_bytes,
        "{} of {whole_bytes} bytes",
        answer.len()
    );
    for (m, w) in masked.iter().zip(&wss) {
        assert!(m.still_describes(w), "{m:?}");
    }

    let owners = |o: &ObjectRef| -> Result<Option<ObjectRef>, OwnerLookupError> {
        match (o.kind.as_str(), o.name.as_str()) {
            ("ReplicaSet", "web-5d") => Ok(Some(r("apps/v1", "Deployment", "web"))),
            ("ReplicaSet", "api-7f") => Ok(Some(r("apps/v1", "Deployment", "api"))),
            ("ReplicaSet", "bad-1") => Ok(Some(r("apps/v1", "Deployment", "bad"))),
            ("ReplicaSet", "flaky-1") => Err(OwnerLookupError::Other("timed out".into())),
            ("ReplicaSet", "gone-1") => Err(OwnerLookupError::NotFound("gone-1 not found".into())),
            ("GameServer", "gs-1") => Ok(Some(r("mock.kruise.io/v1", "GameServerSet", "gss"))),
            _ => Ok(None),
        }
    };
    let kinds = game_kinds();
    // (pod's controller, pod labels, the spread it belongs to; Err: admission error)
    type Row<'a> = (
        ObjectRef,
        Vec<(&'a str, &'a str)>,
        Result<Option<&'a str>, ()>,
    );
    let table: Vec<Row> = vec![
        (
            r("apps.kruise.io/v1beta1", "CloneSet", "cs"),
            vec![],
            Ok(Some("cs-alpha")),
        ),
        (
            r("apps.kruise.io/v1alpha1", "CloneSet", "cs"),
            vec![],
            Ok(Some("cs-alpha")),
        ),
        (
            r("apps/v1", "StatefulSet", "db"),
            vec![],
            Ok(Some("sts-native")),
        ),
        (
            r("apps.kruise.io/v1beta1", "StatefulSet", "db"),
            vec![],
            Ok(Some("sts-kruise")),
        ),
        (
            r("apps/v1", "ReplicaSet", "web-5d"),
            vec![("track", "canary")],
            Ok(Some("web-canary")),
        ),
        (
            r("apps/v1", "ReplicaSet", "web-5d"),
            vec![("track", "stable")],
            Ok(Some("web")),
        ),
        (r("apps/v1", "Deployment", "web"), vec![], Ok(Some("web"))),
        (
            r("apps/v1", "ReplicaSet", "api-7f"),
            vec![],
            Ok(Some("rs-direct")),
        ),
        (r("batch/v1", "Job", "report"), vec![], Ok(Some("job"))),
        (
            r("mock.kruise.io/v1", "GameServer", "gs-1"),
            vec![("tier", "game")],
            Ok(Some("gss")),
        ),
        (
            r("mock.kruise.io/v1", "GameServer", "gs-1"),
            vec![("tier", "web")],
            Ok(None),
        ),
        (
            r("mock.kruise.io/v1", "GameServerSet", "gss"),
            vec![("tier", "game")],
            Ok(Some("gss")),
        ),
        (r("apps/v1", "ReplicaSet", "bad-1"), vec![], Ok(None)),
        (r("apps/v1", "ReplicaSet", "flaky-1"), vec![], Ok(None)),
        (r("apps/v1", "ReplicaSet", "orphan"), vec![], Ok(None)),
        (r("apps/v1", "ReplicaSet", "gone-1"), vec![], Err(())),
        (r("apps/v1", "DaemonSet", "web"), vec![], Ok(None)),
        (r("apps/v1", "Deployment", "other"), vec![], Ok(None)),
    ];
    for (controller, labels, expected) in table {
        let labels: Labels = labels
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let by_whole = find_matching_workloadspread(&wss, &controller, &labels, &kinds, owners)
            .map(|m| (m.workloadspread.map(|w| w.name().to_string()), m.warnings));
        let by_mask = find_matching_workloadspread(&masked, &controller, &labels, &kinds, owners)
            .map(|m| (m.workloadspread.map(|w| w.name().to_string()), m.warnings));
        assert_eq!(by_mask, by_whole, "{controller:?} {labels:?}");
        let picked = by_whole.as_ref().map(|(w, _)| w.as_deref()).map_err(|_| ());
        assert_eq!(picked, expected, "{controller:?} {labels:?}");
    }
}

/// However many WorkloadSpreads are tried, each owner of the pod is looked up once.
#[test]
fn owners_are_looked_up_once_however_many_spreads_are_tried() {
    let others: Vec<WorkloadSpread> = (0..1000)
        .map(|i| {
            ws(
                &format!("other-{i}"),
                r("apps/v1", "Deployment", &format!("other-{i}")),
            )
        })
        .chain([ws("web", r("apps/v1", "Deployment", "web"))])
        .collect();
    let lookups = std::cell::Cell::new(0);
    let owners = |o: &ObjectRef| -> Result<Option<ObjectRef>, OwnerLookupError> {
        lookups.set(lookups.get() + 1);
        Ok((o.kind == "ReplicaSet").then(|| r("apps/v1", "Deployment", "web")))
    };
    let rs = r("apps/v1", "ReplicaSet", "web-5d");
    let kinds = WorkloadKinds::default();
    let m = find_matching_workloadspread(&others, &rs, &Labels::new(), &kinds, owners).unwrap();
    assert_eq!(m.workloadspread.map(|w| w.name()), Some("web"));
    // ReplicaSet → Deployment web, and Deployment web → no controller.
    assert_eq!(lookups.get(), 2);
}

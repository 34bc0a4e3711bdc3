use super::*;
use crate::api::PENDING_VALUE;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn ws() -> WorkloadSpread {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "ws-uid", "resourceVersion": "200"},
        "spec": {"subsets": [{"name": "a"}]}}))
    .unwrap()
}

fn stamp(uid: &str, rv: &str, secs_ago: i64) -> CountedIn {
    CountedIn {
        uid: uid.into(),
        resource_version: rv.into(),
        at: Time(now() - SignedDuration::from_secs(secs_ago)),
    }
}

/// A pod named `name`, labelled pending with `label` (None: not labelled), matched into
/// WorkloadSpread `ws`, with an optional stamp and phase, possibly being deleted.
fn pod(
    name: &str,
    label: Option<&str>,
    ws: &str,
    stamp: Option<&CountedIn>,
    phase: &str,
    deleting: bool,
) -> Pod {
    let mut annotations = json!({"apps.kruise.io/matched-workloadspread":
        format!(r#"{{"name":"{ws}","subset":"a"}}"#)});
    if let Some(s) = stamp {
        annotations[COUNTED_ANNOTATION] = json!(s.to_annotation());
    }
    let labels = match label {
        Some(v) => json!({PENDING_LABEL: v, "app": "web"}),
        None => json!({"app": "web"}),
    };
    let mut p = json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"phase": phase}});
    if deleting {
        p["metadata"]["deletionTimestamp"] = json!("2024-05-01T09:59:00Z");
    }
    serde_json::from_value(p).unwrap()
}

/// Issue #26 (2): a pod is stamped once the written status counts it, unlabelled a
/// grace later once the controller's own watch has shown that status; a pod the status
/// does not count keeps its label (an owner not cached yet), whatever it names.
#[test]
fn pending_pods_are_stamped_then_unlabelled_after_the_grace() {
    let fresh = stamp("ws-uid", "150", 1);
    let due = stamp("ws-uid", "150", 6);
    let unseen = stamp("ws-uid", "250", 6);
    let foreign = stamp("old-uid", "150", 60);
    // (case, pod, counted by the written status, expected patch, requeue seconds)
    type Case = (&'static str, Pod, bool, Option<PendingPatch>, Option<i64>);
    let cases: Vec<Case> = vec![
        (
            "counted, no stamp: stamp with the written version",
            pod("p", Some(PENDING_VALUE), "web", None, "Running", false),
            true,
            Some(PendingPatch::Stamp(stamp("ws-uid", "190", 0))),
            Some(5),
        ),
        (
            "any label value counts as labelled",
            pod("p", Some("x"), "web", None, "Pending", false),
            true,
            Some(PendingPatch::Stamp(stamp("ws-uid", "190", 0))),
            Some(5),
        ),
        (
            "stamped a second ago: wait for the grace",
            pod(
                "p",
                Some(PENDING_VALUE),
                "web",
                Some(&fresh),
                "Running",
                false,
            ),
            true,
            None,
            Some(4),
        ),
        (
            "stamped 6 s ago, version seen: unlabel",
            pod(
                "p",
                Some(PENDING_VALUE),
                "web",
                Some(&due),
                "Running",
                false,
            ),
            true,
            Some(PendingPatch::Unlabel),
            None,
        ),
        (
            "stamped 6 s ago, the watch has not shown that version yet",
            pod(
                "p",
                Some(PENDING_VALUE),
                "web",
                Some(&unseen),
                "Running",
                false,
            ),
            true,
            None,
            Some(1),
        ),
        (
            "stamp of a deleted WorkloadSpread of the same name: stamp again",
            pod(
                "p",
                Some(PENDING_VALUE),
                "web",
                Some(&foreign),
                "Running",
                false,
            ),
            true,
            Some(PendingPatch::Stamp(stamp("ws-uid", "190", 0))),
            Some(5),
        ),
        (
            "not counted (owner not cached yet): keeps its label",
            pod("p", Some(PENDING_VALUE), "web", None, "Running", false),
            false,
            None,
            None,
        ),
        (
            "not counted even when stamped long ago",
            pod(
                "p",
                Some(PENDING_VALUE),
                "web",
                Some(&due),
                "Running",
                false,
            ),
            false,
            None,
            None,
        ),
        (
            "another WorkloadSpread's pod",
            pod("p", Some(PENDING_VALUE), "db", None, "Running", false),
            true,
            None,
            None,
        ),
        (
            "not labelled",
            pod("p", None, "web", None, "Running", false),
            true,
            None,
            None,
        ),
        (
            "finished: admissions ignore it, unlabel at once",
            pod("p", Some(PENDING_VALUE), "web", None, "Succeeded", false),
            false,
            Some(PendingPatch::Unlabel),
            None,
        ),
        (
            "being deleted: left alone",
            pod("p", Some(PENDING_VALUE), "web", None, "Running", true),
            true,
            None,
            None,
        ),
    ];
    let ws = ws();
    for (name, pod, counted, patch, requeue) in cases {
        let counted: BTreeSet<String> = if counted {
            ["p".to_string()].into()
        } else {
            BTreeSet::new()
        };
        let plan = plan_pending(&PendingInput {
            ws: &ws,
            namespace_pods: std::slice::from_ref(&pod),
            counted: &counted,
            written_version: "190",
            observed_version: "200",
            now: now(),
            grace: PENDING_GRACE,
        });
        let want: Vec<(String, PendingPatch)> =
            patch.into_iter().map(|p| ("p".to_string(), p)).collect();
        assert_eq!(plan.patches, want, "{name}");
        assert_eq!(
            plan.requeue_after,
            requeue.map(SignedDuration::from_secs),
            "{name}"
        );
    }
}

#[test]
fn counted_pods_are_the_active_selected_pods_placed_in_this_workloadspread() {
    let mut ws = ws();
    ws.spec.target_filter =
        Some(serde_json::from_value(json!({"selector": {"matchLabels": {"app": "web"}}})).unwrap());
    let mut unselected = pod("unselected", None, "web", None, "Running", false);
    unselected.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
    let pods = [
        pod("running", None, "web", None, "Running", false),
        pod(
            "pending",
            Some(PENDING_VALUE),
            "web",
            None,
            "Pending",
            false,
        ),
        pod("done", None, "web", None, "Succeeded", false),
        pod("deleting", None, "web", None, "Running", true),
        pod("other", None, "db", None, "Running", false),
        unselected,
    ];
    let got: Vec<String> = counted_pods(&ws, &pods).into_iter().collect();
    assert_eq!(got, ["pending", "running"]);
}

#[test]
fn a_cost_and_a_pending_patch_of_one_pod_make_one_patch() {
    let costs = [
        CostPatch {
            pod: "b".into(),
            cost: -100,
        },
        CostPatch {
            pod: "a".into(),
            cost: 200,
        },
    ];
    let s = stamp("u", "7", 0);
    let patches = pod_patches(
        &costs,
        &[
            ("b".to_string(), PendingPatch::Unlabel),
            ("c".to_string(), PendingPatch::Stamp(s.clone())),
        ],
    );
    assert_eq!(
        patches,
        [
            (
                "a".to_string(),
                json!({"metadata": {"annotations": {POD_DELETION_COST_ANNOTATION: "200"}}})
            ),
            (
                "b".to_string(),
                json!({"metadata": {
                "annotations": {POD_DELETION_COST_ANNOTATION: "-100", COUNTED_ANNOTATION: null},
                "labels": {PENDING_LABEL: null}}})
            ),
            (
                "c".to_string(),
                json!({"metadata": {"annotations": {COUNTED_ANNOTATION: s.to_annotation()}}})
            ),
        ]
    );
}

/// Costs of pods outside the pending flow go before the status write; those of pods
/// labelled pending or stamped go after it, with their label change (one patch each).
#[test]
fn costs_of_pods_outside_the_pending_flow_go_before_the_status() {
    let stamped = stamp("ws-uid", "150", 1);
    let pods = [
        pod("plain", None, "web", None, "Running", false),
        pod(
            "labelled",
            Some(PENDING_VALUE),
            "web",
            None,
            "Running",
            false,
        ),
        pod("stamped", None, "web", Some(&stamped), "Running", false),
    ];
    let cost = |pod: &str, cost: i64| CostPatch {
        pod: pod.into(),
        cost,
    };
    let costs = [
        cost("plain", 5),
        cost("labelled", 4),
        cost("stamped", 3),
        cost("not-cached", 2),
    ];
    let (before, after) = costs_before_status(&costs, &pods);
    assert_eq!(before, [cost("plain", 5), cost("not-cached", 2)]);
    assert_eq!(after, [cost("labelled", 4), cost("stamped", 3)]);
}

use super::*;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint};
use serde_json::json;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn signal(kind: SignalKind, reason: &str, second: i64) -> Signal {
    Signal {
        kind,
        reason: reason.into(),
        source: "cluster-autoscaler".into(),
        message: String::new(),
        at: at(second),
    }
}

#[test]
fn events_are_classified_by_reason_and_reporter() {
    let rules = default_rules();
    let cases = [
        (
            "NotTriggerScaleUp",
            "cluster-autoscaler",
            Some(SignalKind::NoCapacity),
        ),
        (
            "FailedScaleUp",
            "cluster-autoscaler",
            Some(SignalKind::NoCapacity),
        ),
        (
            "TriggeredScaleUp",
            "cluster-autoscaler",
            Some(SignalKind::CapacityComing),
        ),
        (
            "FailedScheduling",
            "karpenter",
            Some(SignalKind::NoCapacity),
        ),
        ("Nominated", "karpenter", Some(SignalKind::CapacityComing)),
        // The scheduler's own FailedScheduling is not a provisioner's verdict.
        ("FailedScheduling", "default-scheduler", None),
        ("NotTriggerScaleUp", "someone-else", None),
        ("Scheduled", "default-scheduler", None),
    ];
    for (reason, source, want) in cases {
        assert_eq!(classify(&rules, reason, source), want, "{reason}@{source}");
    }
    let extra = parse_rule("QuotaExceeded=no-capacity").unwrap();
    assert_eq!(
        classify(&[extra], "QuotaExceeded", "anyone"),
        Some(SignalKind::NoCapacity)
    );
    let scoped = parse_rule("Provisioning@my-provisioner=capacity-coming").unwrap();
    assert_eq!(scoped.source.as_deref(), Some("my-provisioner"));
    for bad in ["x", "=no-capacity", "R@=no-capacity", "R=maybe"] {
        assert!(parse_rule(bad).is_err(), "{bad}");
    }
}

#[test]
fn stuck_pods_move_on_facts_wait_for_coming_capacity_and_else_keep_the_timer() {
    use SignalKind::*;
    let critical = SignedDuration::from_secs(30);
    let bound = Some(SignedDuration::from_secs(300));
    let none = |s: i64| Stuck::Wait {
        left: SignedDuration::from_secs(s),
        waiting: None,
    };
    let coming = |s: i64, r: &str| Stuck::Wait {
        left: SignedDuration::from_secs(s),
        waiting: Some(r.into()),
    };
    let no_capacity = Stuck::Move(Cause::NoCapacity {
        reason: "NotTriggerScaleUp".into(),
        source: "cluster-autoscaler".into(),
    });
    // (signal, nominated, bound, age) → decision
    type Case = (Option<Signal>, bool, Option<SignedDuration>, i64, Stuck);
    let cases: Vec<Case> = vec![
        // No signal: OpenKruise's timer.
        (None, false, None, 10, none(20)),
        (None, false, bound, 30, Stuck::Move(Cause::Timer)),
        // "No capacity" moves at once, bound or not.
        (
            Some(signal(NoCapacity, "NotTriggerScaleUp", 3)),
            false,
            None,
            3,
            no_capacity.clone(),
        ),
        (
            Some(signal(NoCapacity, "NotTriggerScaleUp", 3)),
            true,
            bound,
            3,
            no_capacity,
        ),
        // A signal older than the pod (same name, recreated) does not count.
        (
            Some(signal(NoCapacity, "NotTriggerScaleUp", -1)),
            false,
            None,
            3,
            none(27),
        ),
        // Coming capacity: waits past the critical timer up to the bound…
        (
            Some(signal(CapacityComing, "TriggeredScaleUp", 2)),
            false,
            bound,
            60,
            coming(240, "TriggeredScaleUp"),
        ),
        (None, true, bound, 31, coming(269, "nominatedNodeName")),
        // …then moves, saying why.
        (
            Some(signal(CapacityComing, "TriggeredScaleUp", 2)),
            false,
            bound,
            300,
            Stuck::Move(Cause::WaitExpired {
                reason: "TriggeredScaleUp".into(),
            }),
        ),
        // Without an opted-in bound, coming capacity keeps the critical timer.
        (
            Some(signal(CapacityComing, "TriggeredScaleUp", 2)),
            false,
            None,
            30,
            Stuck::Move(Cause::Timer),
        ),
        // A bound below the critical timer never shortens it.
        (
            Some(signal(CapacityComing, "TriggeredScaleUp", 2)),
            false,
            Some(SignedDuration::from_secs(5)),
            10,
            coming(20, "TriggeredScaleUp"),
        ),
    ];
    for (i, (sig, nominated, bound, age, want)) in cases.into_iter().enumerate() {
        let got = decide_unschedulable(at(0), at(age), critical, sig.as_ref(), nominated, bound);
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn the_newest_signal_wins() {
    use SignalKind::*;
    let later_coming = newest([
        signal(NoCapacity, "NotTriggerScaleUp", 1),
        signal(CapacityComing, "TriggeredScaleUp", 5),
    ]);
    assert_eq!(later_coming.map(|s| s.kind), Some(CapacityComing));
    let later_refusal = newest([
        signal(CapacityComing, "TriggeredScaleUp", 5),
        signal(NoCapacity, "FailedScaleUp", 9),
    ]);
    assert_eq!(
        later_refusal.map(|s| s.reason),
        Some("FailedScaleUp".into())
    );
    let tie = newest([
        signal(NoCapacity, "NotTriggerScaleUp", 5),
        signal(CapacityComing, "TriggeredScaleUp", 5),
    ]);
    assert_eq!(tie.map(|s| s.kind), Some(CapacityComing));
}

/// Security review R4: a signal dated in the future counts as said when the controller
/// first saw it — a real signal said after that wins (the review's case: a forged
/// future-dated "capacity coming" and a real "no capacity" posted later: the pod moves).
#[test]
fn a_signal_from_the_future_counts_as_said_when_it_appeared() {
    use SignalKind::*;
    assert_eq!(
        believed_time(at(10_000), at(40)),
        at(40),
        "the future: when seen"
    );
    assert_eq!(
        believed_time(at(30), at(40)),
        at(30),
        "the past: as claimed"
    );
    let mut forged = signal(CapacityComing, "TriggeredScaleUp", 10_000);
    forged.at = believed_time(forged.at, at(40));
    let real = signal(NoCapacity, "NotTriggerScaleUp", 45);
    let won = newest([forged.clone(), real]).expect("signals");
    assert_eq!(won.kind, NoCapacity);
    let got = decide_unschedulable(
        at(0),
        at(46),
        SignedDuration::from_secs(300),
        Some(&won),
        false,
        Some(SignedDuration::from_secs(3600)),
    );
    assert!(
        matches!(got, Stuck::Move(Cause::NoCapacity { .. })),
        "{got:?}"
    );
    // Unclamped, the forgery would have held the pod for the wait bound.
    let held = newest([
        signal(CapacityComing, "TriggeredScaleUp", 10_000),
        signal(NoCapacity, "NotTriggerScaleUp", 45),
    ])
    .expect("signals");
    assert_eq!(held.kind, CapacityComing);
}

/// The chart's Event policy (templates/capacity-events-policy.yaml) judges the same
/// (reason, reporter) pairs the controller reads by default: `ws.capacitySignalRules`.
#[test]
fn the_charts_signal_rules_are_the_default_rules() {
    let helpers = include_str!("../../../../charts/workloadspread/templates/_helpers.tpl");
    let define = helpers
        .split("{{- define \"ws.capacitySignalRules\" -}}")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .expect("the chart defines ws.capacitySignalRules");
    let charted: Vec<(String, String)> = define
        .split("(list \"")
        .skip(1)
        .filter_map(|pair| {
            let mut quoted = pair.split('"').step_by(2);
            Some((quoted.next()?.to_string(), quoted.next()?.to_string()))
        })
        .collect();
    let rules: Vec<(String, String)> = default_rules()
        .into_iter()
        .map(|r| (r.reason, r.source.unwrap_or_default()))
        .collect();
    assert_eq!(charted, rules);
}

#[test]
fn the_wait_bound_is_the_annotation_else_the_default() {
    let mut ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "w"}, "spec": {}})).unwrap();
    assert_eq!(wait_bound(&ws, 0), None);
    assert_eq!(wait_bound(&ws, 90), Some(SignedDuration::from_secs(90)));
    ws.metadata.annotations =
        Some([(CAPACITY_WAIT_ANNOTATION.to_string(), "600".to_string())].into());
    assert_eq!(wait_bound(&ws, 90), Some(SignedDuration::from_secs(600)));
    ws.metadata.annotations =
        Some([(CAPACITY_WAIT_ANNOTATION.to_string(), "0".to_string())].into());
    assert_eq!(wait_bound(&ws, 90), None);
    // Absurd values are cut to a day, and a pod newer than the clock never panics.
    ws.metadata.annotations =
        Some([(CAPACITY_WAIT_ANNOTATION.to_string(), u64::MAX.to_string())].into());
    let day = wait_bound(&ws, 0);
    assert_eq!(day, Some(SignedDuration::from_secs(86_400)));
    let coming = signal(SignalKind::CapacityComing, "TriggeredScaleUp", 10_000);
    let critical = SignedDuration::from_secs(30);
    let future_pod = decide_unschedulable(at(10_000), at(0), critical, Some(&coming), false, day);
    assert!(matches!(future_pod, Stuck::Wait { .. }), "{future_pod:?}");
}

fn resources(pairs: &[(&str, i64)]) -> Resources {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn pod_requests_count_as_the_scheduler_counts() {
    let spec: PodSpec = serde_json::from_value(json!({
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "0.25"}}}
        ],
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}
        ],
        "overhead": {"cpu": "10m"}
    }))
    .unwrap();
    // containers 500m + sidecar 100m = 600m; the init container runs beside the
    // sidecar: 2100m is the peak; plus 10m overhead.
    assert_eq!(
        pod_requests(&spec),
        resources(&[("cpu", 2110), ("memory", 64 * 1024 * 1024), ("pods", 1)])
    );
}

fn zone_subset(zone: &str) -> WorkloadSpreadSubset {
    WorkloadSpreadSubset {
        name: zone.into(),
        required_node_selector: Some(NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: "In".into(),
                values: Some(vec![zone.into()]),
            }]),
            match_fields: None,
        }),
        ..Default::default()
    }
}

fn node(name: &str, zone: &str, pods: i64, used: Option<i64>) -> NodeCapacity {
    NodeCapacity {
        node: NodeInfo {
            name: name.into(),
            labels: [("zone".to_string(), zone.to_string())].into(),
            taints: vec![],
        },
        schedulable: true,
        allocatable: resources(&[("cpu", 2000), ("pods", pods)]),
        requested: used.map(|u| resources(&[("cpu", u * 500), ("pods", u)])),
    }
}

#[test]
fn a_subset_has_room_when_a_node_it_selects_fits_the_pod() {
    let need = resources(&[("cpu", 500), ("pods", 1)]);
    let a = zone_subset("a");
    // Two pods' worth each, both used up: full.
    let full = [
        node("a-1", "a", 2, Some(2)),
        node("a-2", "a", 2, Some(2)),
        node("b-1", "b", 2, Some(0)),
    ];
    assert_eq!(subset_room(&a, &[], &full, &need), Room::Full { nodes: 2 });
    // A node with room elsewhere does not count; one in the subset does.
    let mut grown = full.to_vec();
    grown.push(node("a-3", "a", 2, Some(1)));
    assert_eq!(
        subset_room(&a, &[], &grown, &need),
        Room::Fits { node: "a-3".into() }
    );
    // CPU counts as much as the pod count.
    let mut cpu_short = node("a-4", "a", 10, Some(0));
    cpu_short.requested = Some(resources(&[("cpu", 1600), ("pods", 0)]));
    assert!(subset_room(&a, &[], &[cpu_short.clone()], &need).is_full());
    // An unread node leaves it unknown, never full.
    assert_eq!(
        subset_room(&a, &[], &[node("a-5", "a", 2, None)], &need),
        Room::Unknown
    );
    // Not Ready / cordoned nodes, and untolerated taints, do not count.
    let mut cordoned = node("a-6", "a", 2, Some(0));
    cordoned.schedulable = false;
    let mut tainted = node("a-7", "a", 2, Some(0));
    tainted.node.taints = vec![Taint {
        key: "spot".into(),
        effect: "NoSchedule".into(),
        value: Some("true".into()),
        time_added: None,
    }];
    assert_eq!(
        subset_room(&a, &[], &[cordoned, tainted.clone()], &need),
        Room::Full { nodes: 0 }
    );
    let toleration = Toleration {
        key: Some("spot".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    };
    assert_eq!(
        subset_room(
            &a,
            std::slice::from_ref(&toleration),
            std::slice::from_ref(&tainted),
            &need
        ),
        Room::Fits { node: "a-7".into() }
    );
    let mut tolerant = a.clone();
    tolerant.tolerations = vec![toleration];
    assert_eq!(
        subset_room(&tolerant, &[], &[tainted], &need),
        Room::Fits { node: "a-7".into() }
    );
    // A resource the node does not offer fits only a zero request.
    let gpu = resources(&[("nvidia.com/gpu", 1), ("pods", 1)]);
    assert!(subset_room(&a, &[], &[node("a-8", "a", 2, Some(0))], &gpu).is_full());
}

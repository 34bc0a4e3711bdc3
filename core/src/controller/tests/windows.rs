//! The creating and deleting windows: pods admitted but unseen, deleted but still
//! present, reserved-slot placeholders and when they expire, and the requeue delays.

use super::*;

fn status_with(creating: Value, deleting: Value) -> Value {
    json!({"subsetStatuses": [{"name": "subset-a", "replicas": 0, "missingReplicas": 5, "creatingPods": creating, "deletingPods": deleting}]})
}

/// Reserved slots: a pod admitted into a placeholder is counted once (the placeholder
/// is dropped even before the host renames it); another placeholder is kept while
/// young, and a dead holder's old one is dropped after its TTL with no event (no pod was
/// expected).
#[test]
fn a_reserved_pod_is_counted_once_and_dead_placeholders_expire() {
    let reserved = with(in_subset(pod("test-pod-0"), "subset-a"), |p| {
        p["metadata"]["annotations"]["workloadspread.io/reservation"] = json!("~h1.0");
        p["metadata"]["labels"]["workloadspread.io/reservation"] = json!("h1.0");
    });
    let drop = crate::admission::reserve::PLACEHOLDER_DROP_SECONDS;
    let creating =
        json!({"~h1.0": ago(1), "~h1.1": ago(1), "~h2.0": ago(drop + 1), "test-pod-9": ago(1)});
    let r = run(
        &ws(one_subset(json!(5)), status_with(creating, json!({}))),
        &pods(vec![reserved]),
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        a.creating_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-9", "~h1.1"]
    );
    // 5 − 1 pod − 2 creating.
    assert_eq!((a.replicas, a.missing_replicas), (1, 2));
    assert!(r.out.events.is_empty(), "{:?}", r.out.events);
}

fn run_seeing(ws: &WorkloadSpread, pods: &[Pod], view: PlaceholderView<'_>) -> Run {
    let options = ReconcileOptions::default();
    let input = ReconcileInput {
        ws,
        pods,
        workload_replicas: 10,
        latest_version: VERSION_IGNORED,
        nodes: &BTreeMap::new(),
        versioned_kinds: &VersionedKinds::default(),
        now: now(),
        options: &options,
        placeholders: view,
        capacity: &crate::controller::capacity::Capacity::NONE,
    };
    Run {
        out: reconcile(&input),
    }
}

/// #26 item 4: a pod's claim is aged from when this controller first saw it, on its own
/// clock: a host whose clock is behind (its stamp looks old) cannot make the controller
/// drop a claim whose pod may still be on its way, and one whose clock is ahead (a stamp
/// in the future) does not keep a claim past its window. A stamp older than the window
/// plus the clock margin (30 s) is gone at once (a claim from before a restart). With no
/// sighting (an offline reconcile), the stamp decides, as before.
#[test]
fn claims_are_aged_by_this_controllers_sightings_whatever_the_hosts_clock() {
    use crate::admission::reserve::stale::Sightings;
    // (what, the host's stamp relative to now (− behind), seen this long ago or never,
    // kept)
    let cases: [(&str, i64, Option<i64>, bool); 8] = [
        ("stamp 40 s old, seen 10 s ago: kept", -40, Some(10), true),
        ("stamp 35 s old, seen just now: kept", -35, Some(0), true),
        ("stamp 59 s old, seen just now: kept", -59, Some(0), true),
        ("stamp 61 s old, seen just now: gone", -61, Some(0), false),
        ("stamp 5 s ahead, seen 31 s ago: gone", 5, Some(31), false),
        ("stamp 10 s old, seen 31 s ago: gone", -10, Some(31), false),
        ("never seen, stamp 10 s old: kept", -10, None, true),
        ("never seen, stamp 31 s old: gone", -31, None, false),
    ];
    for (what, stamp, seen, kept) in cases {
        let at = (now() + stamp.seconds()).to_string();
        let w = ws(
            one_subset(json!(5)),
            status_with(json!({"test-pod-9": at}), json!({})),
        );
        let mut sightings = Sightings::default();
        if let Some(ago) = seen {
            sightings.observe_creating(w.status.as_ref().unwrap(), now() - ago.seconds());
        }
        let view = PlaceholderView {
            sightings: &sightings,
            now: now(),
        };
        let r = run_seeing(&w, &[], view);
        let a = r.subset("subset-a");
        assert_eq!(a.creating_pods.contains_key("test-pod-9"), kept, "{what}");
        assert_eq!(a.missing_replicas, if kept { 4 } else { 5 }, "{what}");
        let failed = r.out.events.iter().any(|e| e.reason == "CreatePodFailed");
        assert_eq!(failed, !kept, "{what}: {:?}", r.out.events);
    }
}

/// #26 items 1, 4, 5, 7: the controller ages a placeholder from when it first saw it (a
/// stamp an hour old from a host whose clock is behind expires nothing) and expires it
/// only after the drop window (a pod admitted into it may still be on its way); a pod
/// stands for a placeholder only in its own subset and when its label agrees with its
/// annotation (a copied or forged annotation frees nothing); a pod is counted once even
/// when an admission recorded it in another subset too.
#[test]
fn placeholders_expire_by_this_controllers_sightings_and_pods_stand_for_their_own() {
    use crate::admission::reserve::stale::Sightings;
    use crate::admission::reserve::{PLACEHOLDER_DROP_SECONDS, RESERVATION_LABEL};
    let two =
        json!([{"name": "subset-a", "maxReplicas": 5}, {"name": "subset-b", "maxReplicas": 5}]);
    let status = json!({"subsetStatuses": [
        {"name": "subset-a", "replicas": 0, "missingReplicas": 5,
            "creatingPods": {"~h2.0": ago(3600), "~h2.1": ago(3600), "~h2.2": ago(3600), "test-pod-9": ago(1)}},
        {"name": "subset-b", "replicas": 0, "missingReplicas": 5, "creatingPods": {"test-pod-0": ago(1)}}]});
    let w = ws(two, status);
    let naming = |name: &str, subset: &str, annotation: &str, label: &str| {
        with(in_subset(pod(name), subset), |p| {
            p["metadata"]["annotations"]["workloadspread.io/reservation"] = json!(annotation);
            p["metadata"]["labels"][RESERVATION_LABEL] = json!(label);
        })
    };
    let pods = pods(vec![
        // Names another pod's key: frees nothing.
        naming("test-pod-0", "subset-a", "test-pod-9", "test-pod-9"),
        // Took ~h2.1: stands for it.
        naming("test-pod-1", "subset-a", "~h2.1", "h2.1"),
        // Its label disagrees (a copied annotation): stands for nothing.
        naming("test-pod-2", "subset-a", "~h2.2", "h9.9"),
        // In b: ~h2.0 of a is not its slot.
        naming("test-pod-3", "subset-b", "~h2.0", "h2.0"),
    ]);
    let keys =
        |r: &Run, s: &str| -> Vec<String> { r.subset(s).creating_pods.keys().cloned().collect() };
    let drop = PLACEHOLDER_DROP_SECONDS;
    // (what, seen this long ago, placeholders left in a)
    let cases: [(&str, i64, &[&str]); 3] = [
        (
            "seen just now: kept, whatever the stamp",
            0,
            &["~h2.0", "~h2.2"],
        ),
        (
            "seen 6 s ago: kept, a pod may be on its way",
            6,
            &["~h2.0", "~h2.2"],
        ),
        ("seen past the drop window: expired", drop + 1, &[]),
    ];
    for (what, seen_ago, left) in cases {
        let mut sightings = Sightings::default();
        sightings.observe(w.status.as_ref().unwrap(), now() - seen_ago.seconds());
        let view = PlaceholderView {
            sightings: &sightings,
            now: now(),
        };
        let r = run_seeing(&w, &pods, view);
        let mut want: Vec<String> = left.iter().map(|k| k.to_string()).collect();
        want.push("test-pod-9".into());
        want.sort();
        assert_eq!(keys(&r, "subset-a"), want, "{what}");
        // test-pod-0 counted in a: its entry in b is gone.
        assert!(keys(&r, "subset-b").is_empty(), "{what}");
        assert_eq!(
            (r.subset("subset-a").replicas, r.subset("subset-b").replicas),
            (3, 1),
            "{what}"
        );
        assert!(r.out.events.is_empty(), "{what}: {:?}", r.out.events);
        assert_eq!(r.out.expired_placeholders, 2 - left.len(), "{what}");
    }
}

#[test]
fn reconcile_creating_and_deleting_windows() {
    // TestWorkloadSpreadReconcile cases 7-14.
    let p0 = pods(vec![in_subset(pod("test-pod-0"), "subset-a")]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(2), "test-pod-1": ago(2)}),
                json!({}),
            ),
        ),
        &p0,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(a.missing_replicas, 3);
    assert_eq!(
        a.creating_pods.keys().collect::<Vec<_>>(),
        vec!["test-pod-1"]
    );

    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(60), "test-pod-1": ago(60)}),
                json!({}),
            ),
        ),
        &p0,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").missing_replicas,
            r.subset("subset-a").creating_pods.len()
        ),
        (4, 0)
    );
    assert_eq!(
        r.out.events,
        vec![Event::warning(
            "CreatePodFailed",
            "Pod ns/test-pod-1 was expected to be created but it wasn't".into()
        )]
    );

    let p01 = pods(vec![
        in_subset(pod("test-pod-0"), "subset-a"),
        in_subset(pod("test-pod-1"), "subset-a"),
    ]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(3), "test-pod-1": ago(3)}),
                json!({}),
            ),
        ),
        &p01,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas,
            r.subset("subset-a").creating_pods.len()
        ),
        (2, 3, 0)
    );

    let mixed = pods(
        (0..5)
            .map(|i| {
                let p = in_subset(pod(&format!("test-pod-{i}")), "subset-a");
                match i {
                    2 | 3 => with(p, |p| {
                        p["status"]["phase"] = json!("Failed");
                    }),
                    4 => with(p, |p| {
                        p["status"]["phase"] = json!("Succeeded");
                    }),
                    _ => p,
                }
            })
            .collect(),
    );
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-0": ago(3), "test-pod-1": ago(3)}),
                json!({}),
            ),
        ),
        &mixed,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (2, 3)
    );
    assert_eq!(
        r.out
            .deletion_costs
            .iter()
            .map(|c| c.pod.as_str())
            .collect::<Vec<_>>(),
        vec!["test-pod-0", "test-pod-1"]
    );

    let five = |f: &dyn Fn(usize, Value) -> Value| {
        pods(
            (0..5)
                .map(|i| f(i, in_subset(pod(&format!("test-pod-{i}")), "subset-a")))
                .collect(),
        )
    };
    let all = five(&|_, p| p);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(5), "test-pod-4": ago(5)}),
                json!({}),
            ),
        ),
        &all,
        10,
    );
    assert_eq!(
        (
            r.subset("subset-a").replicas,
            r.subset("subset-a").missing_replicas
        ),
        (5, 0)
    );
    assert_eq!(r.out.deletion_costs.len(), 5);

    let term4 = five(&|i, p| {
        if i == 4 {
            with(p, |p| {
                p["metadata"]["deletionTimestamp"] = json!(ago(1));
            })
        } else {
            p
        }
    });
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(5), "test-pod-4": ago(5)}),
                json!({"test-pod-4": ago(1)}),
            ),
        ),
        &term4,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (a.replicas, a.missing_replicas, a.deleting_pods.len()),
        (4, 1, 0)
    );
    assert_eq!(r.cost("test-pod-4"), None);

    // Reference case 13: five active pods, test-pod-4's deletion asked 1 s ago. The
    // reference gives its slot back (missing 0 → 1) while the pod runs; here (A11) the
    // deletion stays an intent until the pod departs: missing 0, the entry kept.
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({}), json!({"test-pod-4": ago(1)})),
        ),
        &all,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (
            a.replicas,
            a.missing_replicas,
            a.deleting_pods
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
        ),
        (5, 0, vec!["test-pod-4"])
    );

    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(
                json!({"test-pod-3": ago(360), "test-pod-4": ago(360)}),
                json!({"test-pod-4": ago(960)}),
            ),
        ),
        &all,
        10,
    );
    let a = r.subset("subset-a");
    assert_eq!(
        (
            a.replicas,
            a.missing_replicas,
            a.deleting_pods.len(),
            a.creating_pods.len()
        ),
        (5, 0, 0, 0)
    );
}

#[test]
fn requeue_delays() {
    // TestDelayReconcile
    let secs = |r: &Run| r.out.requeue_after.map(|d| d.as_secs());
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({"a": ago(3), "b": ago(1)}), json!({})),
        ),
        &[],
        10,
    );
    assert_eq!(secs(&r), Some(27));
    let p = pods(vec![
        in_subset(pod("p1"), "subset-a"),
        in_subset(pod("p2"), "subset-a"),
    ]);
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({}), json!({"p1": ago(3), "p2": ago(1)})),
        ),
        &p,
        10,
    );
    assert_eq!(secs(&r), Some(12));
    let r = run(
        &ws(
            one_subset(json!(5)),
            status_with(json!({"x": ago(2)}), json!({"p1": ago(3)})),
        ),
        &p,
        10,
    );
    assert_eq!(secs(&r), Some(12));
    assert_eq!(
        run(&ws(one_subset(json!(5)), json!({})), &[], 10)
            .out
            .requeue_after,
        None
    );
}

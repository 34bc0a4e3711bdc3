use super::*;
use crate::admission::reserve::placeholder_key;
use crate::api::VERSION_IGNORED;
use crate::rules::Rules;
use serde_json::json;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

/// a (max 4) with `creating` keys, all stamped `stamp_age` seconds before `now()` by
/// their holder's clock.
fn ws(creating: &[&str], stamp_age: i64) -> WorkloadSpread {
    let at = (now() - secs(stamp_age)).to_string();
    let keys: serde_json::Map<String, serde_json::Value> = creating
        .iter()
        .map(|k| (k.to_string(), json!(at)))
        .collect();
    let missing = 4 - creating.len() as i32;
    let statuses = json!([{"name": "a", "missingReplicas": missing, "creatingPods": keys},
        {"name": "b", "missingReplicas": -1}]);
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "ns"},
        "spec": {"subsets": [{"name": "a", "maxReplicas": 4}, {"name": "b"}]},
        "status": {"subsetStatuses": statuses.clone(), "versionedSubsetStatuses": {VERSION_IGNORED: statuses}}
    }))
    .unwrap()
}

fn creating(ws: &WorkloadSpread) -> Vec<String> {
    ws.status.as_ref().unwrap().versioned_subset_statuses[VERSION_IGNORED][0]
        .creating_pods
        .keys()
        .cloned()
        .collect()
}

/// The age of a placeholder is this reader's: a stamp far in the past (a holder whose
/// clock runs behind, or a reader whose clock runs ahead) makes nothing stale until the
/// reader itself has seen it for the TTL.
#[test]
fn placeholders_age_from_when_this_reader_first_saw_them() {
    let w = ws(&["~h2.1", "pod-x"], 60);
    let status = w.status.as_ref().unwrap();
    let mut seen = Sightings::default();
    seen.observe(status, now());
    assert_eq!(seen.len(), 1, "pods' entries are not placeholders");
    let none = |_: &str| false;
    for (after, want) in [
        (0, 0),
        (PLACEHOLDER_TTL_SECONDS, 0),
        (PLACEHOLDER_TTL_SECONDS + 1, 1),
    ] {
        let at = now() + secs(after);
        seen.observe(status, at);
        assert_eq!(
            stale(status, &seen, at, none).len(),
            want,
            "{after} s after"
        );
    }
    // A reader with no history of its own (offline) ages by the stamps.
    let stamped = Sightings::from_stamps(status);
    assert_eq!(stale(status, &stamped, now(), none).len(), 1);
    // Gone from the status: forgotten (bounded by what the status holds).
    seen.observe(ws(&[], 0).status.as_ref().unwrap(), now());
    assert!(seen.is_empty());
    // The caller's own placeholders are its to settle or return.
    let stamped = Sightings::from_stamps(status);
    assert!(stale(status, &stamped, now(), |k| k == "~h2.1").is_empty());
}

fn naming(placeholder: &str, subset: &str, key: &str) -> Naming {
    Naming {
        placeholder: placeholder.into(),
        subset: subset.into(),
        key: key.into(),
    }
}

/// (what, creating keys, pods naming placeholders, listing worked, creating after,
/// settled, dropped)
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    &'a [(&'a str, &'a str, &'a str)],
    bool,
    &'a [&'a str],
    usize,
    usize,
);

#[rustfmt::skip]
const CASES: [Case; 6] = [
    ("no pod names them: dropped", &["~h2.1", "~h2.2"], &[], true, &[], 0, 2),
    ("a pod names one: settled to its key, the other dropped", &["~h2.1", "~h2.2"], &[("~h2.1", "a", "web-1")], true, &["web-1"], 1, 1),
    ("the pods could not be listed: nothing dropped", &["~h2.1", "~h2.2"], &[], false, &["~h2.1", "~h2.2"], 0, 0),
    ("a pod naming it in another subset does not count", &["~h2.1"], &[("~h2.1", "b", "web-1")], true, &[], 0, 1),
    ("the pod's key is there already: freed, counted once", &["~h2.1", "web-1"], &[("~h2.1", "a", "web-1")], true, &["web-1"], 1, 0),
    ("a pod's own entry is not a placeholder", &["pod-x"], &[], true, &["pod-x"], 0, 0),
];

#[test]
fn stale_placeholders_are_settled_to_the_pod_naming_them_or_dropped() {
    let scale = Scale::new(8, Rules::Planned);
    for (what, keys, pods, listed, after, settled, dropped) in CASES {
        let mut w = ws(keys, 60);
        let status = w.status.clone().unwrap();
        let stale = stale(&status, &Sightings::from_stamps(&status), now(), |_| false);
        let named: Vec<Naming> = pods.iter().map(|(p, s, k)| naming(p, s, k)).collect();
        let spec = w.clone();
        let status = w.status.as_mut().unwrap();
        let listed = listed.then_some(&named[..]);
        let done = resolve(status, &spec, &stale, listed, scale, now());
        assert_eq!((done.settled, done.dropped), (settled, dropped), "{what}");
        assert_eq!(creating(&w), after, "{what}");
        let a = &w.status.as_ref().unwrap().versioned_subset_statuses[VERSION_IGNORED][0];
        assert_eq!(
            a.missing_replicas,
            4 - after.len() as i32,
            "{what}: missingReplicas"
        );
    }
}

#[test]
fn pods_name_placeholders_through_their_annotations() {
    let pod = |name: &str, reservation: Option<&str>, ws_name: &str, uid: Option<&str>| {
        let mut annotations = serde_json::Map::new();
        let mut matched = json!({"name": ws_name, "subset": "a"});
        if let Some(uid) = uid {
            matched["uid"] = json!(uid);
        }
        annotations.insert(
            crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION.into(),
            json!(matched.to_string()),
        );
        if let Some(r) = reservation {
            annotations.insert(
                crate::admission::reserve::RESERVATION_ANNOTATION.into(),
                json!(r),
            );
        }
        serde_json::from_value::<Pod>(
            json!({"metadata": {"name": name, "annotations": annotations}}),
        )
        .unwrap()
    };
    let pods = [
        pod("web-1", Some("~h1.3"), "ws", None),
        pod("web-2", Some("~h1.4"), "other", None),
        pod("web-3", Some("web-1"), "ws", None),
        pod("web-4", None, "ws", None),
        pod("", Some("~h1.5"), "ws", Some("req-9")),
    ];
    assert_eq!(
        namings(&pods, "ws"),
        [naming("~h1.3", "a", "web-1"), naming("~h1.5", "a", "req-9")]
    );
    let named = named_placeholders(&pods);
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["~h1.3", "~h1.4", "~h1.5"]
    );
    let stale_of = |key: String| Stale {
        version: VERSION_IGNORED.into(),
        subset: "a".into(),
        key,
    };
    let stale = [
        stale_of(placeholder_key("0a1b2c3d", 1)),
        stale_of(placeholder_key("ffff0000", 2)),
        stale_of(placeholder_key("0a1b2c3d", 3)),
    ];
    assert_eq!(
        holder_selector(&stale).as_deref(),
        Some("workloadspread.io/reservation-holder in (0a1b2c3d,ffff0000)")
    );
    assert_eq!(holder_selector(&[]), None);
}

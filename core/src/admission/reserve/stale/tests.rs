use super::*;
use crate::admission::reserve::{placeholder_key, Settled, PLACEHOLDER_DROP_SECONDS};
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

/// (what, creating keys, seen for (s), pods naming placeholders, listing worked,
/// creating after, settled, dropped)
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    i64,
    &'a [(&'a str, &'a str, &'a str)],
    bool,
    &'a [&'a str],
    usize,
    usize,
);

const DROP: i64 = PLACEHOLDER_DROP_SECONDS + 1;
const STALE: i64 = PLACEHOLDER_TTL_SECONDS + 1;

#[rustfmt::skip]
const CASES: [Case; 9] = [
    ("stale, no pod names them: kept until the drop time", &["~h2.1", "~h2.2"], STALE, &[], true, &["~h2.1", "~h2.2"], 0, 0),
    ("past the drop time, no pod names them: dropped", &["~h2.1", "~h2.2"], DROP, &[], true, &[], 0, 2),
    ("stale, a pod names one: settled to its key", &["~h2.1", "~h2.2"], STALE, &[("~h2.1", "a", "web-1")], true, &["web-1", "~h2.2"], 1, 0),
    ("past the drop time, a pod names one: settled, the other dropped", &["~h2.1", "~h2.2"], DROP, &[("~h2.1", "a", "web-1")], true, &["web-1"], 1, 1),
    ("the pods could not be listed: nothing dropped", &["~h2.1", "~h2.2"], DROP, &[], false, &["~h2.1", "~h2.2"], 0, 0),
    ("a pod naming it in another subset does not count", &["~h2.1"], DROP, &[("~h2.1", "b", "web-1")], true, &[], 0, 1),
    ("the pod's key is there already: freed, counted once", &["~h2.1", "web-1"], STALE, &[("~h2.1", "a", "web-1")], true, &["web-1"], 1, 0),
    ("a pod's own entry is not a placeholder", &["pod-x"], DROP, &[], true, &["pod-x"], 0, 0),
    ("not stale yet: untouched", &["~h2.1"], 1, &[("~h2.1", "a", "web-1")], true, &["~h2.1"], 0, 0),
];

#[test]
fn stale_placeholders_are_settled_to_the_pod_naming_them_or_dropped_late() {
    let scale = Scale::new(8, Rules::Planned);
    for (what, keys, seen, pods, listed, after, settled, dropped) in CASES {
        let mut w = ws(keys, 60);
        let status = w.status.clone().unwrap();
        let mut sightings = Sightings::default();
        sightings.observe(&status, now() - secs(seen));
        let stale = stale(&status, &sightings, now(), |_| false);
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

/// A settle finding the pod already counted: in the same subset (another replica wrote
/// its key), released (a DELETE admitted before the settle: renamed, its deletion an
/// intent that frees the slot only once the pod's departure is a fact — the DELETE may
/// still be refused), or in another subset (kept: an over-count until the controller
/// counts the pod).
#[test]
fn a_settle_counts_the_pod_once_whatever_happened_first() {
    use crate::admission::reserve::settle;
    let scale = Scale::new(8, Rules::Planned);
    let mut w = ws(&["~h1.1", "~h1.2", "~h1.3", "web-1"], 0);
    {
        let statuses = w
            .status
            .as_mut()
            .unwrap()
            .versioned_subset_statuses
            .get_mut(VERSION_IGNORED)
            .unwrap();
        let at = statuses[0].creating_pods["web-1"].clone();
        statuses[0].deleting_pods.insert("web-2".into(), at.clone());
        statuses[1].creating_pods.insert("web-3".into(), at);
    }
    let spec = w.clone();
    let status = w.status.as_mut().unwrap();
    let at = (VERSION_IGNORED, "a");
    assert_eq!(
        settle(status, &spec, at, "~h1.1", "web-1", scale, now()),
        Settled::Freed
    );
    assert_eq!(
        settle(status, &spec, at, "~h1.2", "web-2", scale, now()),
        Settled::Renamed
    );
    assert_eq!(
        settle(status, &spec, at, "~h1.3", "web-3", scale, now()),
        Settled::Kept
    );
    let a = &status.versioned_subset_statuses[VERSION_IGNORED][0];
    let keys: Vec<&String> = a.creating_pods.keys().collect();
    assert_eq!(keys, ["web-1", "web-2", "~h1.3"]);
    let deleting: Vec<&String> = a.deleting_pods.keys().collect();
    assert_eq!(deleting, ["web-2"], "the deletion stays an intent");
    let gone: std::collections::BTreeSet<String> = ["web-2".to_string()].into();
    let occupancy = |d| crate::admission::room::occupancy(a, d);
    use crate::admission::Departed;
    assert_eq!(
        occupancy(Departed::NONE) - occupancy(Departed::of(&gone)),
        1,
        "web-2's slot is freed once its departure is a fact, and only then"
    );
}

#[test]
fn pods_name_placeholders_through_their_annotation_and_label() {
    let pod = |name: &str,
               reservation: Option<&str>,
               label: Option<&str>,
               ws_name: &str,
               uid: Option<&str>| {
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
        let labels = label.map(|l| json!({crate::admission::reserve::RESERVATION_LABEL: l}));
        serde_json::from_value::<Pod>(
            json!({"metadata": {"name": name, "annotations": annotations, "labels": labels}}),
        )
        .unwrap()
    };
    let pods = [
        pod("web-1", Some("~h1.3"), Some("h1.3"), "ws", None),
        pod("web-2", Some("~h1.4"), Some("h1.4"), "other", None),
        pod("web-3", Some("web-1"), Some("web-1"), "ws", None),
        pod("web-4", None, None, "ws", None),
        pod("", Some("~h1.5"), Some("h1.5"), "ws", Some("req-9")),
        // A copied annotation without its label (or with another) names nothing.
        pod("web-6", Some("~h1.6"), None, "ws", None),
        pod("web-7", Some("~h1.7"), Some("h1.8"), "ws", None),
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
        droppable: false,
    };
    let stale = [
        stale_of(placeholder_key("0a1b2c3d4e5f6071", 1)),
        stale_of(placeholder_key("ffff0000ffff0000", 2)),
        stale_of(placeholder_key("0a1b2c3d4e5f6071", 1)),
    ];
    assert_eq!(
        reservation_selector(&stale).as_deref(),
        Some("workloadspread.io/reservation in (0a1b2c3d4e5f6071.1,ffff0000ffff0000.2)")
    );
    assert_eq!(reservation_selector(&[]), None);
}

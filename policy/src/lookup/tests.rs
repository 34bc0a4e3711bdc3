use super::*;
use serde_json::json;
use std::cell::RefCell;
use workloadspread_core::fields::FieldSelector;
use workloadspread_core::masks::Mask;

fn owner<'a>(controller: &'a ObjectRef, labels: &'a Labels) -> PodOwner<'a> {
    PodOwner { controller, labels }
}

/// A change to the namespace's objects.
type Change = fn(&mut Vec<Value>);

/// What a host does with a field selector.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Selectors {
    Honour,
    /// Answers every object (a host predating them).
    Ignore,
    /// Fails the call.
    Refuse,
}

/// An in-memory namespace `demo` that honours field masks and selectors (or not),
/// records its calls, and can change its objects at the first GET of a WorkloadSpread (a
/// spread updated, recreated or deleted between the list and the read).
struct Namespace {
    objects: RefCell<Vec<Value>>,
    honour_masks: bool,
    selectors: Selectors,
    change_at_get: RefCell<Option<Change>>,
    calls: RefCell<Vec<String>>,
}

impl Namespace {
    fn objects_of(&self, kind: &str) -> Vec<Value> {
        let objects = self.objects.borrow();
        objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .cloned()
            .collect()
    }
}

impl Host for Namespace {
    fn get(&self, _: &str, kind: &str, _: Option<&str>, name: &str) -> Result<Value, HostError> {
        self.calls.borrow_mut().push(format!("get {kind} {name}"));
        if let Some(change) = self.change_at_get.borrow_mut().take() {
            change(&mut self.objects.borrow_mut());
        }
        self.objects_of(kind)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
            .ok_or_else(|| HostError {
                what: format!("get {kind} {name}"),
                reason: "not found".into(),
            })
    }

    fn list(&self, _: &str, kind: &str, _: &str, _: Option<&str>) -> Result<Vec<Value>, HostError> {
        self.calls.borrow_mut().push(format!("list {kind}"));
        Ok(self.objects_of(kind))
    }

    fn list_fields(
        &self,
        _: &str,
        kind: &str,
        _: &str,
        _: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<Value>, HostError> {
        self.calls
            .borrow_mut()
            .push(format!("list {kind} {fields:?}"));
        let mask = Mask::new(if self.honour_masks { fields } else { &[] });
        Ok(self
            .objects_of(kind)
            .iter()
            .map(|o| mask.apply(o))
            .collect())
    }

    fn list_fields_json_selected(
        &self,
        _: &str,
        kind: &str,
        _: &str,
        field_selector: &str,
        fields: &[&str],
    ) -> Result<Vec<u8>, HostError> {
        self.calls
            .borrow_mut()
            .push(format!("list {kind} where {field_selector}"));
        let selector = match self.selectors {
            Selectors::Refuse => {
                return Err(HostError {
                    what: "list".into(),
                    reason: "field selectors are not supported".into(),
                })
            }
            Selectors::Ignore => FieldSelector::default(),
            Selectors::Honour => FieldSelector::parse(Some(field_selector)).unwrap(),
        };
        let mask = Mask::new(if self.honour_masks { fields } else { &[] });
        let items: Vec<Value> = self
            .objects_of(kind)
            .iter()
            .filter(|o| selector.matches_object(o))
            .map(|o| mask.apply(o))
            .collect();
        Ok(serde_json::to_vec(&json!({ "items": items })).unwrap())
    }

    fn counter(&self, operation: &str, _: &Value) -> Result<Value, HostError> {
        Err(HostError {
            what: operation.into(),
            reason: "no counter".into(),
        })
    }
}

fn spread(name: &str, deployment: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}")},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "subsets": [{"name": "a", "maxReplicas": 2}, {"name": "b"}]},
        "status": {"observedGeneration": 1, "subsetStatuses": [{"name": "a", "replicas": 1, "missingReplicas": 1}]}})
}

/// Position of `canary` in [`namespace`].
const CANARY: usize = 200;

/// 200 other spreads, then two of Deployment web: `canary` (selects track=canary)
/// and `web`.
fn namespace() -> Namespace {
    let mut objects: Vec<Value> = (0..CANARY)
        .map(|i| spread(&format!("other-{i}"), &format!("other-{i}")))
        .collect();
    let mut canary = spread("canary", "web");
    canary["spec"]["targetFilter"] = json!({"selector": {"matchLabels": {"track": "canary"}}});
    objects.push(canary);
    objects.push(spread("web", "web"));
    Namespace {
        objects: RefCell::new(objects),
        honour_masks: true,
        selectors: Selectors::Honour,
        change_at_get: RefCell::new(None),
        calls: RefCell::new(vec![]),
    }
}

/// A pod of ReplicaSet web-5d (of Deployment web) labelled track=`track`, looked up
/// with the whole list.
fn lookup(ns: &Namespace, track: &str) -> Result<Option<WorkloadSpread>, LookupError> {
    lookup_by(ns, track, SpreadLookup::List)
}

fn lookup_by(
    ns: &Namespace,
    track: &str,
    how: SpreadLookup,
) -> Result<Option<WorkloadSpread>, LookupError> {
    let rs = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-5d".into(),
    };
    let labels: Labels = [("track".to_string(), track.to_string())].into();
    let owner_of = |o: &ObjectRef| {
        ns.calls
            .borrow_mut()
            .push(format!("owner of {} {}", o.kind, o.name));
        Ok((o.kind == "ReplicaSet").then(|| ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
        }))
    };
    let kinds = WorkloadKinds::default();
    matching_workloadspread(
        ns,
        "demo",
        owner(&rs, &labels),
        &kinds,
        how,
        owner_of,
        |_| &[],
    )
}

const MASKED_LIST: &str = r#"list WorkloadSpread ["metadata.name", "metadata.deletionTimestamp", "spec.targetRef", "spec.targetFilter"]"#;

/// One masked list, each owner once and only as far as needed (canary, first by name,
/// matches through the ReplicaSet's owner), one GET of the spread that matched: whole,
/// with its subsets and status.
#[test]
fn the_matched_spread_is_read_whole_after_a_masked_list() {
    let ns = namespace();
    let ws = lookup(&ns, "canary").unwrap().unwrap();
    assert_eq!(ws.name(), "canary");
    assert_eq!(
        serde_json::to_value(&ws).unwrap()["status"],
        ns.objects.borrow()[CANARY]["status"]
    );
    assert_eq!(
        *ns.calls.borrow(),
        [
            MASKED_LIST,
            "owner of ReplicaSet web-5d",
            "get WorkloadSpread canary"
        ]
    );
    assert_eq!(lookup(&ns, "stable").unwrap().unwrap().name(), "web");
}

/// A host that ignores the mask answers whole spreads: the same one is found.
#[test]
fn a_host_ignoring_the_mask_finds_the_same_spread() {
    let mut ns = namespace();
    ns.honour_masks = false;
    assert_eq!(lookup(&ns, "canary").unwrap().unwrap().name(), "canary");
    assert_eq!(lookup(&ns, "stable").unwrap().unwrap().name(), "web");
}

/// The spread that matched changed between the list and the GET: the rule runs again
/// on the whole spreads, which see the change. One recreated alike matches alike: it is
/// taken as read.
#[test]
fn a_spread_changed_between_the_two_reads_is_matched_again_whole() {
    let cases: [(&str, Change, &str, &str, &str); 4] = [
        (
            "filter changed",
            |o| {
                o[CANARY]["spec"]["targetFilter"]["selector"]["matchLabels"]["track"] =
                    json!("beta")
            },
            "web",
            "uid-web",
            "list WorkloadSpread",
        ),
        (
            "being deleted",
            |o| o[CANARY]["metadata"]["deletionTimestamp"] = json!("2026-11-24T10:00:00Z"),
            "web",
            "uid-web",
            "list WorkloadSpread",
        ),
        (
            "deleted",
            |o| {
                o.remove(CANARY);
            },
            "web",
            "uid-web",
            "list WorkloadSpread",
        ),
        (
            "recreated alike",
            |o| o[CANARY]["metadata"]["uid"] = json!("uid-again"),
            "canary",
            "uid-again",
            "get WorkloadSpread canary",
        ),
    ];
    for (case, change, name, uid, last_call) in cases {
        let ns = namespace();
        *ns.change_at_get.borrow_mut() = Some(change);
        let ws = lookup(&ns, "canary").unwrap().unwrap();
        assert_eq!(
            (ws.name(), ws.metadata.uid.as_deref()),
            (name, Some(uid)),
            "{case}"
        );
        // The last read: the whole list (the rule ran again), or the GET (taken as read);
        // owner lookups the second run needed may follow.
        let calls = ns.calls.borrow();
        let last_read = calls.iter().rev().find(|c| !c.starts_with("owner of"));
        assert_eq!(last_read.unwrap(), last_call, "{case}");
    }
}

/// By target name: the owner chain first, one selected list per name on it, one GET of
/// the spread that matched; the spreads of other workloads are never listed.
#[test]
fn by_target_name_lists_only_the_chains_targets() {
    let ns = namespace();
    let ws = lookup_by(&ns, "canary", SpreadLookup::TargetName)
        .unwrap()
        .unwrap();
    assert_eq!(ws.name(), "canary");
    assert_eq!(
        *ns.calls.borrow(),
        [
            "owner of ReplicaSet web-5d",
            "owner of Deployment web",
            "list WorkloadSpread where spec.targetRef.name=web",
            "list WorkloadSpread where spec.targetRef.name=web-5d",
            "get WorkloadSpread canary"
        ]
    );
}

/// Both lookups pick the same spread (or none), whatever the host does with the
/// selector, for pods of each track, with either spread changed between the reads or
/// gone; a host refusing field selectors is answered by the whole list.
#[test]
fn by_target_name_picks_what_the_list_picks() {
    let changes: [Option<Change>; 4] = [
        None,
        Some(|o| o.truncate(CANARY)),
        Some(|o| {
            o.remove(CANARY);
        }),
        Some(|o| o[CANARY]["spec"]["targetRef"]["name"] = json!("api")),
    ];
    for (c, change) in changes.into_iter().enumerate() {
        for selectors in [Selectors::Honour, Selectors::Ignore, Selectors::Refuse] {
            for track in ["canary", "stable"] {
                let picked = |how| {
                    let mut ns = namespace();
                    ns.selectors = selectors;
                    if let Some(change) = change {
                        change(&mut ns.objects.borrow_mut());
                    }
                    let ws = lookup_by(&ns, track, how).unwrap();
                    let listed_all = ns.calls.borrow().iter().any(|c| c == MASKED_LIST);
                    (ws.map(|w| w.name().to_string()), listed_all)
                };
                let (by_list, _) = picked(SpreadLookup::List);
                let (by_name, listed_all) = picked(SpreadLookup::TargetName);
                assert_eq!(by_name, by_list, "change {c}, track {track}");
                assert_eq!(listed_all, selectors == Selectors::Refuse, "change {c}");
            }
        }
    }
}

/// The owner chain cannot be looked up: the candidates are every spread, and the rule
/// meets the failure only where a spread needs that owner, as with the list.
#[test]
fn a_failed_owner_lookup_falls_back_to_the_list() {
    let ns = namespace();
    let rs = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-5d".into(),
    };
    let failing = |_: &ObjectRef| Err(OwnerLookupError::Other("apiserver unavailable".into()));
    let kinds = WorkloadKinds::default();
    let labels = Labels::new();
    let how = SpreadLookup::TargetName;
    let found = matching_workloadspread(
        &ns,
        "demo",
        owner(&rs, &labels),
        &kinds,
        how,
        failing,
        |_| &[],
    )
    .unwrap();
    assert!(found.is_none());
    assert_eq!(ns.calls.borrow()[0], MASKED_LIST);
    // A spread of the ReplicaSet itself needs no owner: found through the list.
    ns.objects.borrow_mut().push(spread("rs-direct", "web-5d"));
    ns.objects.borrow_mut().last_mut().unwrap()["spec"]["targetRef"]["kind"] = json!("ReplicaSet");
    let found = matching_workloadspread(
        &ns,
        "demo",
        owner(&rs, &labels),
        &kinds,
        how,
        failing,
        |_| &[],
    )
    .unwrap();
    assert_eq!(found.unwrap().name(), "rs-direct");
}

/// Nothing in the namespace targets the pod's workload: no spread is read whole.
#[test]
fn no_match_reads_no_spread() {
    let ns = namespace();
    ns.objects.borrow_mut().truncate(CANARY);
    assert!(lookup(&ns, "canary").unwrap().is_none());
    assert_eq!(ns.calls.borrow()[0], MASKED_LIST);
    assert!(!ns.calls.borrow().iter().any(|c| c.starts_with("get")));
}

/// A list answer with an item that does not decode still yields the others; an empty
/// list may say `items: null`; names are borrowed from the answer.
#[test]
fn list_answers_decode_item_by_item() {
    let answer = json!({"items": [
        {"metadata": {"name": "ok"}, "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}},
        {"metadata": {"name": 7}}]});
    let answer = serde_json::to_vec(&answer).unwrap();
    let targets = spread_targets(&answer).unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].name(), "ok");
    let whole = br#"{"items": [{"metadata": {"name": "a"}, "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}]}"#;
    let targets = spread_targets(whole).unwrap();
    assert!(matches!(
        targets[0].metadata.name,
        std::borrow::Cow::Borrowed("a")
    ));
    assert!(spread_targets(br#"{"items": null}"#).unwrap().is_empty());
    assert!(spread_targets(br#"{"kind": "List"}"#).unwrap().is_empty());
    assert!(spread_targets(b"{").is_err());
}

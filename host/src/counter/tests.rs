use super::apply::{apply_batch, Resolution};
use super::attempt::{newer, stale_for};
use super::*;
use serde_json::{json, Value};
use workloadspread_core::admission::reserve::stale::Naming;
use workloadspread_core::counter::{PodRef, WorkloadSpreadKey};

fn object(uid: &str) -> DynamicObject {
    let statuses = serde_json::json!([
        {"name": "a", "missingReplicas": 1}, {"name": "b", "missingReplicas": -1}]);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "ws", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "subsets": [{"name": "a", "maxReplicas": 1}, {"name": "b"}]},
        "status": {"observedGeneration": 1, "subsetStatuses": statuses.clone(),
            "versionedSubsetStatuses": {"versionIgnored": statuses}}
    }))
    .unwrap()
}

/// The guest's unclaim of `pod`'s claim into a (it refused the pod).
fn refusal(pod: &str) -> Op {
    Op::Unclaim(UnclaimRequest {
        workload_spread: WorkloadSpreadKey {
            namespace: "ns".into(),
            name: "ws".into(),
            uid: None,
        },
        pod: PodRef {
            name: pod.into(),
            version: "versionIgnored".into(),
        },
        subset: "a".into(),
        generated_uid: None,
        workload_replicas: 4,
        rules: Default::default(),
    })
}

fn claim_request(pod: &str) -> ClaimRequest {
    match claim(pod, None) {
        Op::Claim(c) => c,
        _ => unreachable!(),
    }
}

fn claim(pod: &str, uid: Option<&str>) -> Op {
    Op::Claim(ClaimRequest {
        workload_spread: WorkloadSpreadKey {
            namespace: "ns".into(),
            name: "ws".into(),
            uid: uid.map(Into::into),
        },
        pod: PodRef {
            name: pod.into(),
            version: "versionIgnored".into(),
        },
        candidates: vec!["a".into(), "b".into()],
        workload_replicas: 4,
        generated_uid: format!("gen-{pod}"),
        rules: Default::default(),
    })
}

fn subset(a: &Applied1) -> Option<String> {
    match a {
        Applied1::Written(Ok(Answer::Claim(c))) | Applied1::Now(Answer::Claim(c)) => {
            c.subset.clone()
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// `ops` as a batch whose waiters wait.
fn batch(ops: Vec<Op>) -> Vec<Pending> {
    ops.into_iter().map(|op| internal(Work::Op(op))).collect()
}

#[test]
fn a_batch_fills_subsets_in_order_with_one_write() {
    let (p1, p2, p3) = (claim("p1", None), claim("p2", None), claim("p3", Some("u")));
    let (updated, answers) = apply_batch(
        &object("u"),
        &batch(vec![p1, p2, p3]),
        Timestamp::UNIX_EPOCH,
        None,
        &mut Resolution::default(),
    )
    .unwrap();
    let subsets: Vec<_> = answers.iter().map(subset).collect();
    assert_eq!(
        subsets,
        [Some("a".into()), Some("b".into()), Some("b".into())]
    );
    let updated = updated.expect("status changed");
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
    let statuses = &updated.data["status"]["versionedSubsetStatuses"]["versionIgnored"];
    assert_eq!(statuses[0]["missingReplicas"], 0);
    assert_eq!(statuses[0]["creatingPods"]["p1"], "1970-01-01T00:00:00Z");
    // Unlimited subsets are not tracked (as the reference).
    assert!(statuses[1]["creatingPods"]["p3"].is_null());
}

fn pool() -> Pool {
    Pool::new("h1".into(), ReservePolicy::default(), Arc::default())
}

/// No stale placeholder to resolve.
fn nothing_stale() -> Resolution {
    Resolution::default()
}

/// a (max `max`) then b (unlimited), `creating` in a.
fn object_with(max: i64, creating: Value) -> DynamicObject {
    let mut o = object("u");
    o.data["spec"]["subsets"][0]["maxReplicas"] = max.into();
    let n = creating.as_object().map_or(0, |m| m.len()) as i64;
    for path in ["subsetStatuses", "versionedSubsetStatuses"] {
        let a = match path {
            "subsetStatuses" => &mut o.data["status"][path][0],
            _ => &mut o.data["status"][path]["versionIgnored"][0],
        };
        a["missingReplicas"] = (max - n).into();
        a["creatingPods"] = creating.clone();
    }
    o
}

fn creating(o: &DynamicObject) -> Vec<String> {
    let a = &o.data["status"]["versionedSubsetStatuses"]["versionIgnored"][0];
    let mut keys: Vec<String> = a["creatingPods"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// One replica's reserved-slot cycle on one status: a claim is written and asks
/// for a block, the block is reserved (half the room), the next claims take
/// placeholders without a write, a refused pod's placeholder is unused again, and the
/// settle write renames the taken ones.
#[test]
fn claims_take_reserved_slots_without_a_write_and_settle_later() {
    let mut pool = pool();
    let t0 = Timestamp::UNIX_EPOCH;
    let (o, out) = apply_batch(
        &object_with(8, json!({})),
        &batch(vec![claim("p1", None)]),
        t0,
        Some(&mut pool),
        &mut Resolution::default(),
    )
    .unwrap();
    let o = o.expect("p1 written");
    assert_eq!(subset(&out[0]), Some("a".into()));
    let ws = workloadspread_kube::resource::decode_workloadspread(&o).unwrap();
    let Some(Work::Reserve {
        slot, keys, scale, ..
    }) = refill(&ws, &mut pool, &claim_request("p1"), "a")
    else {
        panic!("a first claim asks for a block");
    };
    let reserve_all = internal(Work::Reserve {
        slot: slot.clone(),
        keys: keys.clone(),
        scale,
        uid: Some("u".into()),
    });
    let (o, out) = apply_batch(
        &o,
        &[reserve_all],
        t0,
        Some(&mut pool),
        &mut nothing_stale(),
    )
    .unwrap();
    let o = o.expect("placeholders written");
    let Applied1::Reserved(got) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(got.len(), 1, "a block of 1 after one claim");
    pool.reserved(&slot, got.clone());
    // p2 takes the placeholder: answered now, nothing to write.
    let (none, out) = apply_batch(
        &o,
        &batch(vec![claim("p2", None)]),
        t0,
        Some(&mut pool),
        &mut nothing_stale(),
    )
    .unwrap();
    assert!(none.is_none());
    let Applied1::Now(Answer::Claim(a)) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(a.reservation.as_ref(), got.first().map(|(k, _)| k));
    // Refused by the guest: unused again, still nothing written.
    let refused = refusal("p2");
    let (none, out) = apply_batch(
        &o,
        &batch(vec![refused, claim("p3", None)]),
        t0,
        Some(&mut pool),
        &mut Resolution::default(),
    )
    .unwrap();
    assert!(none.is_none());
    assert!(matches!(
        out[0],
        Applied1::Now(Answer::Release(ReleaseResponse { released: true }))
    ));
    assert!(matches!(&out[1], Applied1::Now(Answer::Claim(a)) if a.reservation.is_some()));
    let settle = internal(Work::Settle(pool.settles()));
    let (o, _) = apply_batch(&o, &[settle], t0, Some(&mut pool), &mut nothing_stale()).unwrap();
    assert_eq!(creating(&o.expect("settled")), ["p1", "p3"]);
}

/// A block reserved in the same write as claims comes after them: reserved first,
/// its placeholders (not yet in the pool) would leave the last claim no room.
#[test]
fn a_batch_claims_before_it_reserves() {
    let mut pool = pool();
    let t0 = Timestamp::UNIX_EPOCH;
    let one = object_with(3, json!({"p0": "1970-01-01T00:00:00Z"}));
    let reserve = internal(Work::Reserve {
        slot: ("versionIgnored".into(), "a".into()),
        keys: pool.new_keys(2),
        scale: Scale::new(4, Default::default()),
        uid: Some("u".into()),
    });
    let mut work = vec![reserve];
    work.extend(batch(vec![claim("p1", None), claim("p2", None)]));
    let (o, out) = apply_batch(&one, &work, t0, Some(&mut pool), &mut nothing_stale()).unwrap();
    assert!(
        matches!(&out[0], Applied1::Reserved(k) if k.is_empty()),
        "{out:?}"
    );
    assert_eq!(subset(&out[1]), Some("a".into()));
    assert_eq!(subset(&out[2]), Some("a".into()));
    assert_eq!(creating(&o.expect("written")), ["p0", "p1", "p2"]);
}

/// A return in the same write as a claim comes first: the returned placeholder has
/// left the pool, and the claim must find its room.
#[test]
fn a_batch_returns_before_it_claims() {
    let mut pool = pool();
    let t0 = Timestamp::UNIX_EPOCH;
    let full = object_with(
        2,
        json!({"p0": "1970-01-01T00:00:00Z", "~h1.9": "1970-01-01T00:00:00Z"}),
    );
    let giving_back = internal(Work::Return(Return {
        slot: ("versionIgnored".into(), "a".into()),
        keys: vec!["~h1.9".into()],
        scale: Scale::new(4, Default::default()),
    }));
    let mut work = batch(vec![claim("p1", None)]);
    work.push(giving_back);
    let (o, out) = apply_batch(&full, &work, t0, Some(&mut pool), &mut nothing_stale()).unwrap();
    assert_eq!(subset(&out[0]), Some("a".into()));
    assert_eq!(creating(&o.expect("written")), ["p0", "p1"]);
}

/// What an attempt of this replica resolves on `o` at `now` (the pods listed: `named`).
fn resolution_at(
    shared: &mut Shared,
    o: &DynamicObject,
    now: Timestamp,
    named: Option<Vec<Naming>>,
) -> Resolution {
    let ws = super::apply::decode(o).unwrap();
    let stale = stale_for(shared, &ws.status.unwrap_or_default(), now);
    Resolution::new(stale, named)
}

fn later(t0: Timestamp, seconds: u64) -> Timestamp {
    t0 + std::time::Duration::from_secs(seconds)
}

/// A placeholder handed to a pod is never resolved as stale by its own replica's
/// writes (another pod would get its slot), and a pod refused while its settle is in
/// the same write is settled first and then unclaimed: its slot is free, and the
/// placeholder is not handed out again.
#[test]
fn a_handed_placeholder_survives_its_own_replicas_writes_until_settled() {
    let t0 = Timestamp::UNIX_EPOCH;
    let mut shared = Shared::new(pool());
    let slot: SlotKey = ("versionIgnored".into(), "a".into());
    let placed = object_with(2, json!({"~h1.5": "1970-01-01T00:00:00Z"}));
    let pool = &mut shared.pool;
    pool.track_uid(Some("u"));
    pool.claimed(&slot, Scale::new(4, Default::default()), Instant::now());
    pool.reserved(&slot, vec![("~h1.5".into(), t0)]);
    let scale = Scale::new(4, Default::default());
    let handed = pool.take(&slot, "~h1.5", "p1", scale, ClaimResponse::default());
    assert!(handed.is_some());
    // Seen at t0, looked at again past the TTL: still ours, not stale.
    resolution_at(&mut shared, &placed, t0, Some(vec![]));
    let ttl = PLACEHOLDER_TTL_SECONDS as u64;
    let mut resolution = resolution_at(&mut shared, &placed, later(t0, ttl + 1), Some(vec![]));
    assert!(resolution.stale.is_empty(), "{:?}", resolution.stale);
    let (o, out) = apply_batch(
        &placed,
        &batch(vec![claim("p2", None)]),
        later(t0, ttl + 1),
        Some(&mut shared.pool),
        &mut resolution,
    )
    .unwrap();
    assert_eq!(subset(&out[0]), Some("a".into()));
    let o = o.expect("p2 written");
    assert_eq!(creating(&o), ["p2", "~h1.5"]);
    let refused = refusal("p1");
    let mut work = batch(vec![refused]);
    work.push(internal(Work::Settle(shared.pool.settles())));
    let (o, out) =
        apply_batch(&o, &work, t0, Some(&mut shared.pool), &mut nothing_stale()).unwrap();
    assert!(matches!(
        out[0],
        Applied1::Written(Ok(Answer::Release(ReleaseResponse { released: true })))
    ));
    assert_eq!(creating(&o.expect("written")), ["p2"]);
    assert!(shared.pool.unused("versionIgnored").is_empty());
}

/// Another replica's placeholders hold a's last slots: the claim waits rather than
/// spill into b, and only after MAX_WAIT is it placed without them. Seen by this
/// replica for longer than the TTL they are stale: one a pod names is settled to that
/// pod (its slot stays taken: the claim goes to b), one no pod names is dropped (the
/// claim gets its slot). Until the pods could be listed, neither is freed (the claim
/// keeps waiting).
#[test]
fn a_claim_waits_for_another_replicas_placeholders_then_they_are_resolved() {
    let t0 = Timestamp::UNIX_EPOCH;
    let full = object_with(
        2,
        json!({"p0": "1970-01-01T00:00:00Z", "~h2.1": "1970-01-01T00:00:00Z"}),
    );
    let mut shared = Shared::new(pool());
    let mut seen = resolution_at(&mut shared, &full, t0, Some(vec![]));
    assert!(seen.stale.is_empty());
    let (none, out) = apply_batch(
        &full,
        &batch(vec![claim("p1", None)]),
        t0,
        Some(&mut shared.pool),
        &mut seen,
    )
    .unwrap();
    assert!(
        none.is_none() && matches!(out[0], Applied1::Wait),
        "{out:?}"
    );
    let mut late = batch(vec![claim("p1", None)]);
    late[0].since = Instant::now() - MAX_WAIT;
    let (o, out) = apply_batch(&full, &late, t0, Some(&mut shared.pool), &mut seen).unwrap();
    assert_eq!(subset(&out[0]), Some("b".into()));
    assert!(o.is_none(), "b is unlimited: nothing written");
    // The stamp is old, but this replica saw the placeholder only at t0: stale from
    // TTL seconds after that (its clock, whatever the holder's says).
    let ttl = PLACEHOLDER_TTL_SECONDS as u64;
    let mut not_yet = resolution_at(&mut shared, &full, later(t0, ttl), Some(vec![]));
    assert!(not_yet.stale.is_empty(), "{:?}", not_yet.stale);
    let (_, out) = apply_batch(
        &full,
        &batch(vec![claim("p1", None)]),
        later(t0, ttl),
        Some(&mut shared.pool),
        &mut not_yet,
    )
    .unwrap();
    assert!(matches!(out[0], Applied1::Wait), "{out:?}");
    /// (what, the pods listed, where the claim goes, creatingPods of a after)
    type Case<'a> = (&'a str, Option<Vec<Naming>>, Option<&'a str>, &'a [&'a str]);
    let cases: [Case; 3] = [
        (
            "no pod names it: dropped",
            Some(vec![]),
            Some("a"),
            &["p0", "p1"],
        ),
        (
            "a pod names it: settled, a is full of pods, the claim goes to b",
            Some(vec![Naming {
                placeholder: "~h2.1".into(),
                subset: "a".into(),
                key: "web-9".into(),
            }]),
            Some("b"),
            &["p0", "web-9"],
        ),
        (
            "the pods could not be listed: kept",
            None,
            None,
            &["p0", "~h2.1"],
        ),
    ];
    let drop = workloadspread_core::admission::reserve::PLACEHOLDER_DROP_SECONDS as u64;
    for (what, named, want, after) in cases {
        let mut shared = Shared::new(pool());
        resolution_at(&mut shared, &full, t0, Some(vec![]));
        let now = later(t0, drop + 1);
        let mut r = resolution_at(&mut shared, &full, now, named);
        assert_eq!(r.stale.len(), 1, "{what}");
        let (o, out) = apply_batch(
            &full,
            &batch(vec![claim("p1", None)]),
            now,
            Some(&mut shared.pool),
            &mut r,
        )
        .unwrap();
        match want {
            Some(s) => assert_eq!(subset(&out[0]), Some(s.into()), "{what}"),
            None => assert!(matches!(out[0], Applied1::Wait), "{what}: {out:?}"),
        }
        let o = o.unwrap_or_else(|| full.clone());
        assert_eq!(creating(&o), after, "{what}");
    }
    // Stale but not yet past the drop time, no pod naming it: a pod admitted into it may
    // still be on its way — kept, and the claim keeps waiting.
    let mut shared = Shared::new(pool());
    resolution_at(&mut shared, &full, t0, Some(vec![]));
    let mut r = resolution_at(&mut shared, &full, later(t0, ttl + 1), Some(vec![]));
    assert_eq!(r.stale.len(), 1);
    let claims = batch(vec![claim("p1", None)]);
    let (o, out) = apply_batch(
        &full,
        &claims,
        later(t0, ttl + 1),
        Some(&mut shared.pool),
        &mut r,
    )
    .unwrap();
    assert!(o.is_none() && matches!(out[0], Applied1::Wait), "{out:?}");
}

/// A reserve write that landed but was not answered in time is found by the next read:
/// its placeholders are held with the stamp of that write, so they are given back as soon
/// as they are too old to hand out, not held (neither handed out nor returned) for
/// another hand-out period as if reserved now (#26 item 3).
#[test]
fn placeholders_of_a_write_found_landed_are_aged_by_their_stamp() {
    let t0 = Timestamp::UNIX_EPOCH;
    let mut pool = pool();
    let slot: SlotKey = ("versionIgnored".into(), "a".into());
    pool.track_uid(Some("u"));
    let scale = Scale::new(4, Default::default());
    pool.claimed(&slot, scale, Instant::now());
    // The write of "~h1.1" was prepared at t0 and landed; the answer never came.
    let landed = object_with(4, json!({"~h1.1": "1970-01-01T00:00:00Z"}));
    let retry = internal(Work::Reserve {
        slot: slot.clone(),
        keys: vec!["~h1.1".into()],
        scale,
        uid: Some("u".into()),
    });
    let read_again = later(t0, 2);
    let (o, out) = apply_batch(
        &landed,
        &[retry],
        read_again,
        Some(&mut pool),
        &mut nothing_stale(),
    )
    .unwrap();
    assert!(o.is_none(), "found in place: nothing written again");
    let Applied1::Reserved(got) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(got, &[("~h1.1".to_string(), t0)]);
    pool.reserved(&slot, got.clone());
    // Two seconds old by its stamp: returned now, not in two seconds.
    let returns = pool.expired(Instant::now(), read_again);
    assert_eq!(returns.len(), 1, "{returns:?}");
    assert_eq!(returns[0].keys, ["~h1.1"]);
}

#[test]
fn an_attempt_starts_from_the_newer_copy() {
    let with_version = |v: &str, missing: i64| {
        let mut o = object("u");
        o.metadata.resource_version = Some(v.into());
        o.data["status"]["subsetStatuses"][0]["missingReplicas"] = missing.into();
        o
    };
    let missing = |o: Option<DynamicObject>| {
        o.map(|o| o.data["status"]["subsetStatuses"][0]["missingReplicas"].clone())
    };
    // (own, reflected, chosen missingReplicas)
    let cases = [
        (Some(("7", 0)), Some(("9", 1)), Some(1)),
        (Some(("9", 0)), Some(("7", 1)), Some(0)),
        (Some(("9", 0)), Some(("9", 1)), Some(0)),
        (Some(("x", 0)), Some(("9", 1)), Some(0)),
        (None, Some(("9", 1)), Some(1)),
        (Some(("7", 0)), None, Some(0)),
        (None, None, None),
    ];
    for (own, reflected, want) in cases {
        let own = own.map(|(v, m)| with_version(v, m));
        let reflected = reflected.map(|(v, m)| with_version(v, m));
        assert_eq!(
            missing(newer(own, reflected)),
            want.map(serde_json::Value::from),
            "{want:?}"
        );
    }
}

#[test]
fn a_recreated_workloadspread_fails_only_that_operation() {
    let (p1, p2) = (claim("p1", Some("old")), claim("p2", None));
    let (_, answers) = apply_batch(
        &object("new"),
        &batch(vec![p1, p2]),
        Timestamp::UNIX_EPOCH,
        None,
        &mut Resolution::default(),
    )
    .unwrap();
    assert!(
        matches!(
            &answers[0],
            Applied1::Written(Err(CommitError::Recreated { .. }))
        ),
        "{answers:?}"
    );
    assert_eq!(subset(&answers[1]), Some("a".into()));
}

#[test]
fn nothing_to_release_writes_nothing() {
    let release = Op::Release(ReleaseRequest {
        workload_spread: WorkloadSpreadKey {
            namespace: "ns".into(),
            name: "ws".into(),
            uid: None,
        },
        pod: PodRef {
            name: "gone".into(),
            version: "versionIgnored".into(),
        },
        subset: "nope".into(),
        workload_replicas: 4,
        rules: Default::default(),
        reservation: None,
        generated_uid: None,
        controller_uid: None,
    });
    let (updated, answers) = apply_batch(
        &object("u"),
        &batch(vec![release]),
        Timestamp::UNIX_EPOCH,
        None,
        &mut Resolution::default(),
    )
    .unwrap();
    assert!(updated.is_none());
    assert!(matches!(
        answers[0],
        Applied1::Written(Ok(Answer::Release(ReleaseResponse { released: false })))
    ));
}

mod batching;

/// A placeholder taken without a write on a copy whose spec is not confirmed
/// (`fence.rs`): answered once confirmed; withdrawn — unused again — when the spec moved
/// or when its caller goes away before the read answers; and a stale guard for another
/// hand-out of the same pod touches nothing.
#[test]
fn an_unconfirmed_hand_out_is_confirmed_withdrawn_or_given_back_when_dropped() {
    use super::fence::Unconfirmed;
    let mut pool = pool();
    let slot: SlotKey = ("versionIgnored".into(), "a".into());
    pool.claimed(&slot, claim_request("p0").scale(), Instant::now());
    let keys = pool.new_keys(2);
    let t0 = (Timestamp::now(), Timestamp::now());
    pool.reserved(&slot, keys.iter().map(|k| (k.clone(), t0.0)).collect());
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let queue = Queue {
        tx,
        shared: Arc::new(Mutex::new(Shared::new(pool))),
    };
    let take = |pod: &str, placeholder: &str| {
        let answer = ClaimResponse {
            subset: Some("a".into()),
            ..Default::default()
        };
        let scale = claim_request(pod).scale();
        lock(&queue.shared)
            .pool
            .take_unconfirmed(&slot, placeholder, pod, scale, answer)
            .expect("unused")
    };
    let unused = || lock(&queue.shared).pool.unused("versionIgnored").len();
    assert_eq!(unused(), 2);
    // The caller went away while the read was in flight.
    take("p1", &keys[0]);
    assert_eq!(unused(), 1);
    drop(Unconfirmed::new(queue.clone(), "p1", keys[0].clone()));
    assert_eq!(unused(), 2, "given back when its caller went away");
    // The spec moved: withdrawn.
    take("p1", &keys[0]);
    assert!(Unconfirmed::new(queue.clone(), "p1", keys[0].clone())
        .resolve(false)
        .is_none());
    assert_eq!(unused(), 2);
    assert!(lock(&queue.shared).pool.handed("p1").is_none());
    // Confirmed: answered with its placeholder, and settled from now on.
    take("p2", &keys[1]);
    let stale_guard = Unconfirmed::new(queue.clone(), "p2", keys[0].clone());
    assert!(stale_guard.resolve(false).is_none());
    assert!(
        lock(&queue.shared).pool.handed("p2").is_some(),
        "another hand-out's guard leaves p2's alone"
    );
    let answer = Unconfirmed::new(queue.clone(), "p2", keys[1].clone())
        .resolve(true)
        .expect("confirmed");
    assert_eq!(answer.reservation.as_deref(), Some(keys[1].as_str()));
    assert_eq!(lock(&queue.shared).pool.settles().len(), 1);
    assert_eq!(unused(), 1);
}

use super::*;
use workloadspread_core::rules::Rules;

fn pool(max_block: usize) -> Pool {
    Pool::new(
        "h1".into(),
        ReservePolicy {
            max_block,
            idle: Duration::from_secs(2),
        },
        Arc::default(),
    )
}

fn slot(subset: &str) -> SlotKey {
    ("v1".into(), subset.into())
}

fn scale() -> Scale<'static> {
    Scale::new(10, Rules::Planned)
}

/// This host's clock `ms` milliseconds after an origin (stamps in the status).
fn clock(ms: u64) -> Timestamp {
    Timestamp::UNIX_EPOCH + Duration::from_millis(ms)
}

/// `keys` stamped at `ms`.
fn stamped(keys: Vec<String>, ms: u64) -> Vec<(String, Timestamp)> {
    keys.into_iter().map(|k| (k, clock(ms))).collect()
}

fn answer(subset: &str) -> ClaimResponse {
    ClaimResponse {
        subset: Some(subset.into()),
        ..Default::default()
    }
}

#[test]
fn the_block_follows_the_claims_of_the_last_second_and_refills_at_half() {
    let mut p = pool(4);
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    // First claim: a block of 1.
    assert_eq!(p.claimed(&slot("a"), scale(), ms(0)), Some(1));
    // A refill in flight: nothing more is asked.
    assert_eq!(p.claimed(&slot("a"), scale(), ms(10)), None);
    let keys = p.new_keys(1);
    assert_eq!(keys, ["~h1.1"]);
    p.reserved(&slot("a"), stamped(keys, 20));
    // 3 claims in the last second, 1 unused: refill to 3.
    assert_eq!(p.claimed(&slot("a"), scale(), ms(30)), Some(2));
    let keys = p.new_keys(2);
    p.reserved(&slot("a"), stamped(keys, 40));
    // 3 unused of a block of 4: more than half left.
    assert_eq!(p.claimed(&slot("a"), scale(), ms(50)), None);
    // A second later the rate is 1 again: the block is 1, 3 held, nothing to ask.
    assert_eq!(p.claimed(&slot("a"), scale(), ms(1100)), None);
    // Capped at max_block.
    let mut p = pool(2);
    for i in 0..10 {
        if let Some(n) = p.claimed(&slot("b"), scale(), ms(i)) {
            assert!(n <= 2, "{n}");
            p.reserved(&slot("b"), vec![]);
        }
    }
}

#[test]
fn a_placeholder_is_handed_once_and_settled_or_untaken() {
    let mut p = pool(8);
    let t0 = Instant::now();
    p.claimed(&slot("a"), scale(), t0);
    let keys = p.new_keys(2);
    p.reserved(&slot("a"), stamped(keys, 0));
    let got = p
        .take(&slot("a"), "~h1.1", "pod-1", scale(), answer("a"))
        .unwrap();
    assert_eq!(got.reservation.as_deref(), Some("~h1.1"));
    assert_eq!(p.handed("pod-1").unwrap().answer, got);
    assert!(p.is_handed("~h1.1") && p.knows("~h1.1") && p.knows("~h1.2"));
    assert!(
        p.take(&slot("a"), "~h1.1", "pod-9", scale(), answer("a"))
            .is_none(),
        "handed once"
    );
    // The guest refused pod-1: its placeholder is unused again and not settled.
    assert!(p.untake("pod-1"));
    assert!(!p.untake("pod-1"));
    assert!(p.settles().is_empty());
    let got = p
        .take(&slot("a"), "~h1.1", "pod-2", scale(), answer("a"))
        .unwrap();
    assert_eq!(got.reservation.as_deref(), Some("~h1.1"));
    let settles = p.settles();
    assert_eq!(settles.len(), 1);
    assert!(p.settles().is_empty(), "handed over once");
    // Refused while its settle is being written: the settle renames it to pod-2's
    // key, so it is not unused again (the caller unclaims that key).
    assert!(!p.untake("pod-2"));
    assert!(p
        .take(&slot("a"), "~h1.1", "pod-3", scale(), answer("a"))
        .is_none());
    p.settled(&settles);
    assert!(p.handed("pod-2").is_none() && !p.is_handed("~h1.1"));
    assert!(p
        .take(&slot("b"), "~h1.2", "pod-3", scale(), answer("b"))
        .is_none());
}

#[test]
fn idle_and_old_placeholders_are_returned() {
    let mut p = pool(8);
    let t0 = Instant::now();
    let s = |n: u64| t0 + Duration::from_millis(n);
    let handout = HANDOUT_SECONDS as u64 * 1000;
    // a's block lands at 0 and a goes idle; b's lands at 1000 and b keeps being claimed.
    for (subset, at) in [("a", 0), ("b", 1000)] {
        p.claimed(&slot(subset), scale(), s(at));
        let keys = p.new_keys(2);
        p.reserved(&slot(subset), stamped(keys, at));
    }
    p.claimed(&slot("b"), scale(), s(1900));
    assert!(p.expired(s(1000), clock(1000)).is_empty());
    let returned = p.expired(s(2100), clock(2100));
    assert_eq!(
        returned,
        [Return {
            slot: slot("a"),
            keys: vec!["~h1.1".into(), "~h1.2".into()],
            scale: scale()
        }]
    );
    // Being returned: still our room when choosing, no longer to hand out.
    assert_eq!((p.unused("v1").len(), p.returning("v1").len()), (2, 2));
    assert!(p
        .take(&slot("a"), "~h1.1", "pod-1", scale(), answer("a"))
        .is_none());
    p.returned(&returned[0]);
    assert_eq!((p.unused("v1").len(), p.returning("v1").len()), (2, 0));
    // b's are too old to hand out by their stamps, busy or not.
    p.claimed(&slot("b"), scale(), s(1000 + handout - 100));
    assert!(p
        .expired(s(1000 + handout - 50), clock(1000 + handout - 50))
        .is_empty());
    let returned = p.expired(s(1000 + handout), clock(1000 + handout));
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0].keys, ["~h1.3", "~h1.4"]);
    assert!(!p.is_idle(), "until the return is written");
    p.returned(&returned[0]);
    assert!(p.is_idle());
}

#[test]
fn a_recreated_workloadspread_forgets_its_placeholders() {
    let mut p = pool(8);
    let t0 = Instant::now();
    p.track_uid(Some("u1"));
    p.claimed(&slot("a"), scale(), t0);
    let keys = p.new_keys(1);
    p.reserved(&slot("a"), stamped(keys, 0));
    p.track_uid(Some("u1"));
    assert_eq!(p.unused("v1").len(), 1);
    p.track_uid(Some("u2"));
    assert!(p.unused("v1").is_empty() && p.drain().is_empty());
}

#[test]
fn settles_wait_for_the_controller_to_count_the_pods_first() {
    let mut p = pool(8);
    let t0 = Instant::now();
    p.claimed(&slot("a"), scale(), t0);
    let keys = p.new_keys(2);
    p.reserved(&slot("a"), stamped(keys, 0));
    p.take(&slot("a"), "~h1.1", "pod-1", scale(), answer("a"))
        .unwrap();
    let delay = Duration::from_secs(1);
    assert!(p.settles_due(Instant::now(), delay).is_empty(), "not yet");
    let due = p.settles_due(Instant::now() + delay, delay);
    assert_eq!(due.len(), 1);
    assert!(
        p.settles_due(Instant::now() + delay * 2, delay).is_empty(),
        "once"
    );
}

/// A settle write that fails (the API server away) leaves the placeholders handed out
/// and due again: the next write renames them (#26 item 1). Gone objects and settles
/// failing for longer than the give-up time are forgotten (stale resolution by whoever
/// writes next settles those to their pods).
#[test]
fn failed_settles_are_retried_until_they_are_given_up() {
    let mut p = pool(8);
    let t0 = Instant::now();
    p.claimed(&slot("a"), scale(), t0);
    let keys = p.new_keys(2);
    p.reserved(&slot("a"), stamped(keys, 0));
    p.take(&slot("a"), "~h1.1", "pod-1", scale(), answer("a"))
        .unwrap();
    let settles = p.settles();
    assert_eq!(settles.len(), 1);
    let give_up = Duration::from_secs(60);
    p.settle_failed(&settles, Instant::now(), give_up);
    assert!(
        p.is_handed("~h1.1"),
        "still ours: never resolved as stale by us"
    );
    let again = p.settles_due(
        Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    assert_eq!(again, settles, "due again");
    p.settle_failed(&again, Instant::now() + give_up, give_up);
    assert!(!p.is_handed("~h1.1") && p.settles().is_empty(), "given up");
}

/// A return the API server keeps refusing (403, 422) is written again after a pause
/// that doubles with each failure, not every tick; one that lands resets the pause.
#[test]
fn failed_returns_back_off() {
    let mut p = pool(4);
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let r = Return {
        slot: slot("a"),
        keys: vec!["~h1.1".into()],
        scale: scale(),
    };
    let retried = |p: &mut Pool, at: u64| p.expired(ms(at), clock(at)).len();
    p.return_failed(r.clone(), ms(0));
    assert_eq!(retried(&mut p, 50), 0, "within the first pause");
    assert_eq!(retried(&mut p, 100), 1, "after 100 ms");
    p.return_failed(r.clone(), ms(100));
    assert_eq!(retried(&mut p, 250), 0, "the pause doubled");
    assert_eq!(retried(&mut p, 300), 1);
    for _ in 0..20 {
        p.return_failed(r.clone(), ms(300));
    }
    assert_eq!(
        retried(&mut p, 300 + 29_999),
        0,
        "capped at 30 s, not beyond"
    );
    assert_eq!(retried(&mut p, 300 + 30_000), 20, "the 20 failed returns");
    p.returned(&r);
    p.return_failed(r, ms(40_000));
    assert_eq!(
        retried(&mut p, 40_100),
        1,
        "a landed return resets the pause"
    );
}

/// A hand-out on a copy whose spec is not confirmed yet (`counter::fence`) is held for
/// its pod but neither settled nor withdrawn once confirmed; withdrawn unconfirmed, its
/// placeholder is unused again for the next claim.
#[test]
fn an_unconfirmed_hand_out_is_settled_once_confirmed_or_withdrawn() {
    let mut p = pool(8);
    p.claimed(&slot("a"), scale(), Instant::now());
    let keys = p.new_keys(1);
    p.reserved(&slot("a"), stamped(keys, 0));
    p.take_unconfirmed(&slot("a"), "~h1.1", "pod-1", scale(), answer("a"))
        .unwrap();
    assert!(!p.handed("pod-1").unwrap().confirmed);
    assert!(p.unused("v1").is_empty(), "held for pod-1 meanwhile");
    assert!(p.settles().is_empty(), "not settled before it is confirmed");
    // The spec moved: withdrawn, the placeholder is unused again.
    assert!(
        !p.withdraw("pod-1", "~h1.2"),
        "another hand-out's placeholder"
    );
    assert!(p.withdraw("pod-1", "~h1.1"));
    assert!(p.handed("pod-1").is_none());
    assert_eq!(p.unused("v1"), [("a".to_string(), "~h1.1".to_string())]);
    // Taken again and confirmed: answered, settled, and no longer withdrawn.
    p.take_unconfirmed(&slot("a"), "~h1.1", "pod-2", scale(), answer("a"))
        .unwrap();
    let got = p.confirm("pod-2").unwrap();
    assert_eq!(got.reservation.as_deref(), Some("~h1.1"));
    assert!(
        !p.withdraw("pod-2", "~h1.1"),
        "a confirmed hand-out may be answered"
    );
    assert_eq!(p.settles().len(), 1);
    assert!(p.confirm("pod-3").is_none());
}

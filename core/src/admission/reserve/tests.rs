use super::*;
use crate::api::VERSION_IGNORED;
use crate::rules::Rules;
use serde_json::{json, Value};

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn ago(seconds: i64) -> String {
    (now() - SignedDuration::from_secs(seconds)).to_string()
}

/// Subsets a (max 4), b (max 4), c (unlimited); `creating[i]` are subset i's creating
/// keys (all stamped 1 s ago), `replicas[i]` its counted pods.
fn ws(replicas: [i32; 2], creating: [&[&str]; 2]) -> WorkloadSpread {
    let status = |i: usize, name: &str| {
        let keys: serde_json::Map<String, Value> = creating[i]
            .iter()
            .map(|k| (k.to_string(), json!(ago(1))))
            .collect();
        let missing = 4 - replicas[i] - creating[i].len() as i32;
        json!({"name": name, "replicas": replicas[i], "missingReplicas": missing.max(0), "creatingPods": keys})
    };
    let statuses = json!([status(0, "a"), status(1, "b"), {"name": "c", "missingReplicas": -1}]);
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "ns"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "subsets": [{"name": "a", "maxReplicas": 4}, {"name": "b", "maxReplicas": 4}, {"name": "c"}]},
        "status": {"subsetStatuses": statuses.clone(), "versionedSubsetStatuses": {VERSION_IGNORED: statuses}}
    }))
    .unwrap()
}

fn candidates() -> Vec<String> {
    ["a", "b", "c"].map(String::from).to_vec()
}

fn placement(ws: &WorkloadSpread, pod: &str, unused: Unused<'_>) -> Placement {
    let candidates = candidates();
    let claimant = Claimant {
        pod: PodKey {
            name: pod,
            version: VERSION_IGNORED,
        },
        new_uid: "req-uid",
        candidates: &candidates,
        scale: Scale::new(8, Rules::Planned),
        now: now(),
    };
    place(ws.status.as_ref().unwrap(), ws, &claimant, "h1", unused)
}

/// (what, replicas, creating keys, own unused, pod, placement)
type Case<'a> = (
    &'a str,
    [i32; 2],
    [&'a [&'a str]; 2],
    &'a [(&'a str, &'a str)],
    &'a str,
    Placement,
);

#[test]
fn a_claim_takes_its_holders_placeholder_waits_for_others_or_claims() {
    let take = |s: &str, k: &str| Placement::Take {
        subset: s.into(),
        key: k.into(),
    };
    let claim = |s: Option<&str>| Placement::Claim(s.map(Into::into));
    let cases: [Case; 10] = [
        (
            "no placeholder anywhere",
            [0, 0],
            [&[], &[]],
            &[],
            "p",
            claim(Some("a")),
        ),
        (
            "own placeholder fills a",
            [3, 0],
            [&["~h1.0"], &[]],
            &[("a", "~h1.0")],
            "p",
            take("a", "~h1.0"),
        ),
        (
            "own placeholder, a has room anyway",
            [1, 0],
            [&["~h1.0"], &[]],
            &[("a", "~h1.0")],
            "p",
            take("a", "~h1.0"),
        ),
        (
            "a full of pods, own placeholder in b",
            [4, 0],
            [&[], &["~h1.3"]],
            &[("b", "~h1.3")],
            "p",
            take("b", "~h1.3"),
        ),
        (
            "a full, b free, own placeholder used",
            [4, 0],
            [&[], &["~h1.3"]],
            &[],
            "p",
            claim(Some("b")),
        ),
        (
            "another holder's placeholder fills a",
            [3, 0],
            [&["~h2.0"], &[]],
            &[],
            "p",
            Placement::Wait,
        ),
        (
            "another holder's placeholder in a with room left",
            [2, 0],
            [&["~h2.0"], &[]],
            &[],
            "p",
            claim(Some("a")),
        ),
        (
            "others' placeholders fill a and b",
            [3, 3],
            [&["~h2.0"], &["~h2.1"]],
            &[],
            "p",
            Placement::Wait,
        ),
        (
            "a retried pod keeps its subset",
            [0, 0],
            [&[], &["p"]],
            &[("a", "~h1.0")],
            "p",
            claim(Some("b")),
        ),
        (
            "a placeholder the status lacks is not taken",
            [0, 0],
            [&[], &[]],
            &[("a", "~h1.0")],
            "p",
            claim(Some("a")),
        ),
    ];
    for (what, replicas, creating, unused, pod, want) in cases {
        assert_eq!(
            placement(&ws(replicas, creating), pod, unused),
            want,
            "{what}"
        );
    }
    // "~h10.0" belongs to h10, not h1.
    assert!(held_by("~h1.0", "h1") && !held_by("~h10.0", "h1") && !held_by("p", "h1"));
}

fn versioned(ws: &WorkloadSpread) -> &Vec<crate::api::v1beta1::WorkloadSpreadSubsetStatus> {
    &ws.status.as_ref().unwrap().versioned_subset_statuses[VERSION_IGNORED]
}

/// Runs `f` on `w`'s status with a copy of `w` for the spec.
fn on_status<R>(
    w: &mut WorkloadSpread,
    f: impl FnOnce(&mut WorkloadSpreadStatus, &WorkloadSpread) -> R,
) -> R {
    let spec = w.clone();
    f(w.status.as_mut().unwrap(), &spec)
}

fn keys(n: u64) -> Vec<String> {
    (0..n).map(|i| placeholder_key("h1", i)).collect()
}

#[test]
fn a_block_takes_at_most_half_the_free_room_and_counts_for_every_reader() {
    let scale = Scale::new(8, Rules::Planned);
    // (replicas of a, keys asked, reserved)
    for (replicas, asked, want) in [(0, 8, 2), (0, 1, 1), (2, 8, 1), (3, 8, 0), (4, 8, 0)] {
        let mut w = ws([replicas, 0], [&[], &[]]);
        let got = on_status(&mut w, |status, spec| {
            reserve(
                status,
                spec,
                VERSION_IGNORED,
                "a",
                &keys(asked),
                scale,
                now(),
            )
        });
        assert_eq!(got.len(), want, "replicas {replicas} asked {asked}");
        let a = &versioned(&w)[0];
        assert_eq!(a.creating_pods.len(), want);
        assert_eq!(
            a.missing_replicas,
            4 - replicas - want as i32,
            "readers see fewer free slots"
        );
    }
    // A retried write finds its keys in place and reserves nothing more.
    let mut w = ws([0, 0], [&["~h1.0", "~h1.1"], &[]]);
    let got = on_status(&mut w, |status, spec| {
        reserve(status, spec, VERSION_IGNORED, "a", &keys(2), scale, now())
    });
    assert_eq!(got, keys(2));
    assert_eq!(versioned(&w)[0].creating_pods.len(), 2);
    // Unlimited subsets are not tracked.
    let mut w = ws([0, 0], [&[], &[]]);
    assert!(on_status(&mut w, |status, spec| reserve(
        status,
        spec,
        VERSION_IGNORED,
        "c",
        &keys(4),
        scale,
        now()
    ))
    .is_empty());
}

#[test]
fn settling_renames_a_placeholder_without_changing_the_occupancy() {
    let mut w = ws([1, 0], [&["~h1.0", "~h1.1"], &[]]);
    let status = w.status.as_mut().unwrap();
    assert!(settle(
        status,
        VERSION_IGNORED,
        "a",
        "~h1.0",
        "web-1",
        now()
    ));
    // Gone: the controller counted the pod through its annotation already.
    assert!(
        !settle(status, VERSION_IGNORED, "a", "~h1.0", "web-2", now()),
        "already gone"
    );
    let a = &versioned(&w)[0];
    let keys: Vec<&String> = a.creating_pods.keys().collect();
    assert_eq!(keys, ["web-1", "~h1.1"]);
    assert_eq!(a.missing_replicas, 1);
}

#[test]
fn stale_placeholders_are_dropped_and_their_slots_freed() {
    let mut w = ws([0, 0], [&["~h2.0", "~h1.1", "pod-x"], &[]]);
    let ttl = PLACEHOLDER_TTL_SECONDS;
    {
        let a = &mut w
            .status
            .as_mut()
            .unwrap()
            .versioned_subset_statuses
            .get_mut(VERSION_IGNORED)
            .unwrap()[0];
        a.creating_pods.get_mut("~h2.0").unwrap().0 = now() - SignedDuration::from_secs(ttl + 1);
        a.creating_pods.get_mut("pod-x").unwrap().0 = now() - SignedDuration::from_secs(ttl + 1);
        a.creating_pods.get_mut("~h1.1").unwrap().0 = now() - SignedDuration::from_secs(ttl - 1);
    }
    let scale = Scale::new(8, Rules::Planned);
    assert!(on_status(&mut w, |status, spec| drop_stale(
        status,
        spec,
        VERSION_IGNORED,
        scale,
        now(),
        |k| k == "~h9.9"
    )));
    let a = &versioned(&w)[0];
    let keys: Vec<&String> = a.creating_pods.keys().collect();
    // A pod's entry is the controller's to expire, in its own window.
    assert_eq!(keys, ["pod-x", "~h1.1"]);
    assert_eq!(a.missing_replicas, 2);
    assert!(!on_status(&mut w, |status, spec| drop_stale(
        status,
        spec,
        VERSION_IGNORED,
        scale,
        now(),
        |k| k == "~h9.9"
    )));
}

/// Several holders sharing one status, driven by random actions: claims (taking a
/// placeholder, or claiming with a write as the host does), reservations, settles,
/// returns, time passing (stale placeholders dropped) and holders dying. After every
/// action no limited subset is over its maximum, and every admitted pod is in the status
/// exactly once (its key, or the placeholder it took until that is settled).
mod shared_status {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Action {
        Claim(usize),
        Reserve(usize, usize, u64),
        Settle(usize),
        Return(usize),
        Advance(i64),
        Die(usize),
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            4 => (0..3usize).prop_map(Action::Claim),
            2 => (0..3usize, 0..2usize, 1..6u64).prop_map(|(h, s, n)| Action::Reserve(h, s, n)),
            1 => (0..3usize).prop_map(Action::Settle),
            1 => (0..3usize).prop_map(Action::Return),
            1 => (0..12i64).prop_map(Action::Advance),
            1 => (0..3usize).prop_map(Action::Die),
        ]
    }

    #[derive(Default)]
    struct Holder {
        id: String,
        next: u64,
        /// (subset, key) written and not handed out.
        unused: Vec<(String, String)>,
        /// (subset, placeholder, pod) handed out, not yet renamed.
        taken: Vec<(String, String, String)>,
    }

    struct World {
        ws: WorkloadSpread,
        now: Timestamp,
        holders: Vec<Holder>,
        /// Pods admitted per subset index (a, b, c).
        admitted: [usize; 3],
        pods: usize,
    }

    const MAX: [i32; 2] = [5, 7];
    const SUBSETS: [&str; 3] = ["a", "b", "c"];

    fn world() -> World {
        let statuses = json!([{"name": "a", "missingReplicas": MAX[0]},
            {"name": "b", "missingReplicas": MAX[1]}, {"name": "c", "missingReplicas": -1}]);
        let ws = serde_json::from_value(json!({
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "subsets": [{"name": "a", "maxReplicas": MAX[0]}, {"name": "b", "maxReplicas": MAX[1]}, {"name": "c"}]},
            "status": {"subsetStatuses": statuses.clone(), "versionedSubsetStatuses": {VERSION_IGNORED: statuses}}
        }))
        .unwrap();
        let holders = (0..3)
            .map(|i| Holder {
                id: format!("h{i}"),
                ..Default::default()
            })
            .collect();
        World {
            ws,
            now: now(),
            holders,
            admitted: [0; 3],
            pods: 0,
        }
    }

    fn scale() -> Scale {
        Scale::new(12, Rules::Planned)
    }

    impl World {
        fn status(&mut self) -> &mut WorkloadSpreadStatus {
            self.ws.status.as_mut().unwrap()
        }

        fn subsets(&self) -> &Vec<crate::api::v1beta1::WorkloadSpreadSubsetStatus> {
            versioned(&self.ws)
        }

        /// As holder `h` does before it writes: its own handed-out placeholders stay.
        fn drop_stale(&mut self, h: usize) {
            let (spec, now) = (self.ws.clone(), self.now);
            let handed: Vec<String> = self.holders[h].taken.iter().map(|t| t.1.clone()).collect();
            let keep = |k: &str| handed.iter().any(|x| x == k);
            drop_stale(self.status(), &spec, VERSION_IGNORED, scale(), now, keep);
        }

        fn claim(&mut self, h: usize) -> Result<(), TestCaseError> {
            self.drop_stale(h);
            self.pods += 1;
            let pod = format!("pod-{}", self.pods);
            let candidates: Vec<String> = SUBSETS.map(String::from).to_vec();
            let claimant = Claimant {
                pod: PodKey {
                    name: &pod,
                    version: VERSION_IGNORED,
                },
                new_uid: "",
                candidates: &candidates,
                scale: scale(),
                now: self.now,
            };
            let unused: Vec<(&str, &str)> = self.holders[h]
                .unused
                .iter()
                .map(|(s, k)| (s.as_str(), k.as_str()))
                .collect();
            let placement = place(
                self.ws.status.as_ref().unwrap(),
                &self.ws,
                &claimant,
                &self.holders[h].id,
                &unused,
            );
            let (spec, now) = (self.ws.clone(), self.now);
            let subset = match placement {
                Placement::Take { subset, key } => {
                    let i = self.holders[h]
                        .unused
                        .iter()
                        .position(|(us, k)| *us == subset && *k == key)
                        .expect("Take names one of the holder's placeholders");
                    prop_assert!(
                        self.subsets()
                            .iter()
                            .any(|x| x.name == subset && x.creating_pods.contains_key(&key)),
                        "Take names a placeholder the status lacks: {key}"
                    );
                    self.holders[h].unused.remove(i);
                    self.holders[h]
                        .taken
                        .push((subset.clone(), key, pod.clone()));
                    Some(subset)
                }
                Placement::Claim(Some(s)) => {
                    let only = [s.clone()];
                    let c =
                        claim_among(self.status(), &spec, claimant.pod, &only, scale(), now, "");
                    match c.subset {
                        Some(s) => Some(s),
                        None => {
                            claim_among(
                                self.status(),
                                &spec,
                                claimant.pod,
                                &candidates,
                                scale(),
                                now,
                                "",
                            )
                            .subset
                        }
                    }
                }
                // Waited past the limit, or no room: placed without another's room.
                Placement::Wait | Placement::Claim(None) => {
                    claim_among(
                        self.status(),
                        &spec,
                        claimant.pod,
                        &candidates,
                        scale(),
                        now,
                        "",
                    )
                    .subset
                }
            };
            if let Some(s) = subset {
                let i = SUBSETS.iter().position(|x| *x == s).unwrap();
                self.admitted[i] += 1;
            }
            Ok(())
        }

        fn reserve(&mut self, h: usize, subset: usize, n: u64) {
            self.drop_stale(h);
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    self.holders[h].next += 1;
                    placeholder_key(&self.holders[h].id, self.holders[h].next)
                })
                .collect();
            let (spec, now) = (self.ws.clone(), self.now);
            let got = reserve(
                self.status(),
                &spec,
                VERSION_IGNORED,
                SUBSETS[subset],
                &keys,
                scale(),
                now,
            );
            let held = &mut self.holders[h].unused;
            held.extend(got.into_iter().map(|k| (SUBSETS[subset].to_string(), k)));
        }

        fn settle(&mut self, h: usize) {
            let now = self.now;
            for (s, key, pod) in std::mem::take(&mut self.holders[h].taken) {
                settle(self.status(), VERSION_IGNORED, &s, &key, &pod, now);
            }
        }

        fn give_back(&mut self, h: usize) {
            let spec = self.ws.clone();
            for (s, key) in std::mem::take(&mut self.holders[h].unused) {
                let pod = PodKey {
                    name: "",
                    version: VERSION_IGNORED,
                };
                unclaim(self.status(), &spec, pod, &key, &s, scale());
            }
        }

        fn apply(&mut self, action: &Action) -> Result<(), TestCaseError> {
            match *action {
                Action::Claim(h) => self.claim(h)?,
                Action::Reserve(h, s, n) => self.reserve(h, s, n),
                Action::Settle(h) => self.settle(h),
                Action::Return(h) => self.give_back(h),
                Action::Advance(secs) => {
                    // Live holders settle within ms: before time passes.
                    for h in 0..self.holders.len() {
                        self.settle(h);
                    }
                    self.now += SignedDuration::from_secs(secs);
                }
                Action::Die(h) => {
                    // The controller counts a dead holder's handed-out pods through
                    // their annotation; its unused placeholders stay until stale.
                    self.settle(h);
                    let id = format!("h{h}x{}", self.pods);
                    self.holders[h] = Holder {
                        id,
                        ..Default::default()
                    };
                }
            }
            Ok(())
        }

        fn check(&self, after: &Action) -> Result<(), TestCaseError> {
            for (i, s) in self.subsets().iter().take(2).enumerate() {
                let occupancy = s.creating_pods.len() as i64 + i64::from(s.replicas);
                prop_assert!(
                    occupancy <= i64::from(MAX[i]),
                    "{} over its maximum after {after:?}: {s:?}",
                    s.name
                );
                let pods = s
                    .creating_pods
                    .keys()
                    .filter(|k| !is_placeholder(k))
                    .count();
                let taken = self
                    .holders
                    .iter()
                    .flat_map(|h| &h.taken)
                    .filter(|(sub, key, _)| *sub == s.name && s.creating_pods.contains_key(key))
                    .count();
                prop_assert_eq!(
                    pods + taken,
                    self.admitted[i],
                    "pods of {} counted after {:?}: {:?}",
                    s.name,
                    after,
                    s
                );
            }
            Ok(())
        }
    }

    proptest! {
        #[test]
        fn holders_sharing_a_status_never_overfill_and_count_every_pod_once(
            actions in proptest::collection::vec(action(), 1..80)
        ) {
            let mut w = world();
            for a in &actions {
                w.apply(a)?;
                w.check(a)?;
            }
        }
    }
}

use super::*;
use crate::api::VERSION_IGNORED;
use crate::counter::{PodRef, WorkloadSpreadKey};
use serde_json::{json, Value};

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

fn ago(seconds: i64) -> String {
    (now() - k8s_openapi::jiff::SignedDuration::from_secs(seconds)).to_string()
}

/// Subsets a and b (maximum 2 each) and c (unlimited); `a` and `b` list the
/// `creatingPods` keys of a and b (stamped 1 s ago). Object uid `ws-uid`.
fn spread(a: &[&str], b: &[&str]) -> WorkloadSpread {
    let status = |name: &str, keys: &[&str]| {
        let keys: serde_json::Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), json!(ago(1))))
            .collect();
        json!({"name": name, "missingReplicas": 2 - keys.len() as i32, "creatingPods": keys})
    };
    let statuses = json!([status("a", a), status("b", b), {"name": "c", "missingReplicas": -1}]);
    serde_json::from_value(json!({
        "metadata": {"name": "ws", "namespace": "ns", "uid": "ws-uid"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "subsets": [{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": 2}, {"name": "c"}]},
        "status": {"versionedSubsetStatuses": {VERSION_IGNORED: statuses}}
    }))
    .unwrap()
}

fn key(uid: &str) -> WorkloadSpreadKey {
    WorkloadSpreadKey {
        namespace: "ns".into(),
        name: "ws".into(),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
    }
}

fn pod(name: &str) -> PodRef {
    PodRef {
        name: name.into(),
        version: VERSION_IGNORED.into(),
    }
}

fn claim(name: &str, uid: &str) -> ClaimRequest {
    ClaimRequest {
        workload_spread: key(uid),
        pod: pod(name),
        candidates: ["a", "b", "c"].map(String::from).to_vec(),
        workload_replicas: 6,
        generated_uid: format!("gen-{name}"),
        rules: Rules::Planned,
    }
}

fn unclaim_of(name: &str, subset: &str) -> UnclaimRequest {
    UnclaimRequest {
        workload_spread: key("ws-uid"),
        pod: pod(name),
        subset: subset.into(),
        generated_uid: None,
        workload_replicas: 6,
        rules: Rules::Planned,
    }
}

fn scale() -> Scale<'static> {
    Scale::new(6, Rules::Planned)
}

/// A holder `h1` with unused placeholders (subset, key) and hand-outs (pod, placeholder,
/// confirmed).
#[derive(Default)]
struct Held {
    unused: Vec<(String, String)>,
    handed: Vec<(String, String, ClaimResponse, bool)>,
}

impl Holdings for Held {
    fn holder(&self) -> &str {
        "h1"
    }
    fn unused(&self, _: &str) -> Vec<(String, String)> {
        self.unused.clone()
    }
    fn returning(&self, _: &str) -> Vec<(String, String)> {
        vec![]
    }
    fn handed(&self, claim_key: &str) -> Option<(&ClaimResponse, bool)> {
        let h = self.handed.iter().find(|h| h.0 == claim_key)?;
        Some((&h.2, h.3))
    }
    fn take(&mut self, t: Taking<'_>, mut answer: ClaimResponse) -> Option<ClaimResponse> {
        let i = self
            .unused
            .iter()
            .position(|(s, k)| s == t.subset && k == t.placeholder)?;
        let (_, placeholder) = self.unused.remove(i);
        answer.reservation = Some(placeholder.clone());
        let entry = (
            t.claim_key.to_string(),
            placeholder,
            answer.clone(),
            t.confirmed,
        );
        self.handed.push(entry);
        Some(answer)
    }
    fn untake(&mut self, claim_key: &str) -> bool {
        let Some(i) = self.handed.iter().position(|h| h.0 == claim_key) else {
            return false;
        };
        let (_, placeholder, answer, _) = self.handed.remove(i);
        let subset = answer.subset.unwrap_or_default();
        self.unused.insert(0, (subset, placeholder));
        true
    }
}

/// An outcome in a few words: a claim's subset, placeholder and cost.
fn shape(o: &Outcome) -> String {
    let claim = |c: &ClaimResponse| {
        let mut s = c.subset.clone().unwrap_or("-".into());
        if let Some(r) = &c.reservation {
            s += &format!(" {r}");
        }
        if let Some(cost) = c.deletion_cost {
            s += &format!(" cost {cost}");
        }
        s
    };
    match o {
        Outcome::Written(Answer::Claim(c)) => format!("written {}", claim(c)),
        Outcome::Now(Answer::Claim(c)) => format!("now {}", claim(c)),
        Outcome::Written(Answer::Release(r)) => format!("written released={}", r.released),
        Outcome::Now(Answer::Release(r)) => format!("now released={}", r.released),
        Outcome::Recreated => "recreated".into(),
        Outcome::Wait => "wait".into(),
        Outcome::Reserved(keys) => {
            let keys: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
            format!("reserved {}", keys.join(","))
        }
        Outcome::Done => "done".into(),
    }
}

/// The `creatingPods` keys of a and b after the batch, as "a: k1 k2 | b: k3".
fn creating(ws: &WorkloadSpread) -> String {
    let statuses = &ws.status.as_ref().unwrap().versioned_subset_statuses[VERSION_IGNORED];
    let keys = |name: &str| {
        let s = statuses.iter().find(|s| s.name == name).unwrap();
        s.creating_pods
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("a: {} | b: {}", keys("a"), keys("b"))
}

/// One piece of a case's batch (owned; borrowed into [`Work`] to apply).
enum Piece {
    Claim(ClaimRequest, bool),
    Unclaim(UnclaimRequest),
    Reserve(&'static str, Vec<String>, Option<&'static str>),
    Settle(&'static str, &'static str, &'static str),
    Return(&'static str, Vec<String>),
}

struct Case {
    what: &'static str,
    status: (&'static [&'static str], &'static [&'static str]),
    /// `None`: reserved slots off.
    unused: Option<&'static [(&'static str, &'static str)]>,
    batch: Vec<Piece>,
    outcomes: &'static [&'static str],
    after: &'static str,
}

fn run(case: &Case) -> (Vec<String>, String, bool, Held) {
    let mut ws = spread(case.status.0, case.status.1);
    let settles: Vec<Vec<Settle<'_>>> = case
        .batch
        .iter()
        .map(|p| match p {
            Piece::Settle(subset, placeholder, key) => vec![Settle {
                version: VERSION_IGNORED,
                subset,
                placeholder,
                key,
                scale: scale(),
            }],
            _ => vec![],
        })
        .collect();
    let works: Vec<Work<'_>> = case
        .batch
        .iter()
        .zip(&settles)
        .map(|(p, settles)| match p {
            Piece::Claim(req, may_wait) => Work::Claim {
                req,
                may_wait: *may_wait,
            },
            Piece::Unclaim(u) => Work::Unclaim(u),
            Piece::Reserve(subset, keys, uid) => Work::Reserve {
                version: VERSION_IGNORED,
                subset,
                keys,
                scale: scale(),
                uid: *uid,
            },
            Piece::Settle(..) => Work::Settle(settles),
            Piece::Return(subset, keys) => Work::Return {
                version: VERSION_IGNORED,
                subset,
                keys,
                scale: scale(),
            },
        })
        .collect();
    let departed = BTreeSet::new();
    let facts = Facts {
        now: now(),
        departed: &departed,
        overdue: None,
        confirm_takes: true,
    };
    let mut held = Held {
        unused: case
            .unused
            .unwrap_or_default()
            .iter()
            .map(|(s, k)| (s.to_string(), k.to_string()))
            .collect(),
        handed: vec![],
    };
    let holdings = case.unused.map(|_| &mut held as &mut dyn Holdings);
    let applied = apply(&mut ws, &works, facts, StaleWork::default(), holdings);
    let shapes = applied.outcomes.iter().map(shape).collect();
    (shapes, creating(&ws), applied.changed, held)
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|k| k.to_string()).collect()
}

#[test]
fn a_batch_is_applied_in_the_protocols_order_and_every_claim_answered_whole() {
    let cases = [
        Case {
            what: "claims without reserved slots are written, in order, with their costs",
            status: (&["p0"], &[]),
            unused: None,
            batch: vec![
                Piece::Claim(claim("p1", ""), true),
                Piece::Claim(claim("p2", ""), true),
            ],
            outcomes: &["written a cost 999998", "written b cost 999997"],
            after: "a: p0 p1 | b: p2",
        },
        Case {
            what: "an operation for a recreated object is not applied",
            status: (&[], &[]),
            unused: None,
            batch: vec![Piece::Claim(claim("p1", "old-uid"), true)],
            outcomes: &["recreated"],
            after: "a:  | b: ",
        },
        Case {
            what: "a return later in the batch gives its room to an earlier claim",
            status: (&["p0", "~h1.0"], &[]),
            unused: Some(&[]),
            batch: vec![
                Piece::Claim(claim("p1", ""), true),
                Piece::Return("a", keys(&["~h1.0"])),
            ],
            outcomes: &["written a cost 999998", "done"],
            after: "a: p0 p1 | b: ",
        },
        Case {
            what: "a settle renames before an unclaim of the same pod removes its key",
            status: (&["~h1.3"], &[]),
            unused: Some(&[]),
            batch: vec![
                Piece::Unclaim(unclaim_of("p1", "a")),
                Piece::Settle("a", "~h1.3", "p1"),
            ],
            outcomes: &["written released=true", "done"],
            after: "a:  | b: ",
        },
        Case {
            what: "a block reserved in the same write is not seen by the claims",
            status: (&[], &[]),
            unused: Some(&[]),
            batch: vec![
                Piece::Reserve("a", keys(&["~h1.7", "~h1.8"]), Some("ws-uid")),
                Piece::Claim(claim("p1", ""), true),
                Piece::Claim(claim("p2", ""), true),
            ],
            outcomes: &[
                "reserved ",
                "written a cost 999999",
                "written a cost 999998",
            ],
            after: "a: p1 p2 | b: ",
        },
        Case {
            what: "no block is reserved in a recreated object",
            status: (&[], &[]),
            unused: Some(&[]),
            batch: vec![Piece::Reserve("a", keys(&["~h1.7"]), Some("old-uid"))],
            outcomes: &["reserved "],
            after: "a:  | b: ",
        },
        Case {
            what: "claims take the holder's placeholder where the rules choose, else write",
            status: (&["~h1.0"], &["~h1.1"]),
            unused: Some(&[("a", "~h1.0"), ("b", "~h1.1")]),
            batch: vec![
                Piece::Claim(claim("p1", ""), true),
                Piece::Claim(claim("p2", ""), true),
                Piece::Claim(claim("p3", ""), true),
            ],
            outcomes: &[
                "now a ~h1.0 cost 999999",
                "written a cost 999998",
                "now b ~h1.1 cost 999997",
            ],
            after: "a: p2 ~h1.0 | b: ~h1.1",
        },
        Case {
            what: "another holder's placeholder in the way: wait, then place without it",
            status: (&["p0", "~h2.0"], &[]),
            unused: Some(&[]),
            batch: vec![
                Piece::Claim(claim("p1", ""), true),
                Piece::Claim(claim("p2", ""), false),
            ],
            outcomes: &["wait", "written b cost 999997"],
            after: "a: p0 ~h2.0 | b: p2",
        },
        Case {
            what: "an unclaim of a pod handed a placeholder gives it back without a write",
            status: (&["~h1.0"], &[]),
            unused: Some(&[("a", "~h1.0")]),
            batch: vec![
                Piece::Claim(claim("p1", ""), true),
                Piece::Unclaim(unclaim_of("p1", "a")),
                Piece::Claim(claim("p2", ""), true),
            ],
            outcomes: &[
                "now a ~h1.0 cost 999999",
                "now released=true",
                "now a ~h1.0 cost 999999",
            ],
            after: "a: ~h1.0 | b: ",
        },
    ];
    for case in &cases {
        let (outcomes, after, changed, _) = run(case);
        assert_eq!(outcomes, case.outcomes, "{}", case.what);
        assert_eq!(after, case.after, "{}", case.what);
        let before = spread(case.status.0, case.status.1);
        assert_eq!(
            changed,
            creating(&before) != after,
            "{}: changed",
            case.what
        );
    }
}

#[test]
fn a_retried_claim_gets_its_hand_out_once_confirmed_and_waits_before() {
    let ws = spread(&["~h1.0"], &[]);
    for (confirmed, want) in [(true, "now a ~h1.0"), (false, "wait")] {
        let mut held = Held::default();
        let answer = ClaimResponse {
            subset: Some("a".into()),
            reservation: Some("~h1.0".into()),
            ..Default::default()
        };
        held.handed
            .push(("p1".into(), "~h1.0".into(), answer, confirmed));
        let mut ws = ws.clone();
        let req = claim("p1", "");
        let works = [Work::Claim {
            req: &req,
            may_wait: true,
        }];
        let departed = BTreeSet::new();
        let facts = Facts {
            now: now(),
            departed: &departed,
            overdue: None,
            confirm_takes: true,
        };
        let applied = apply(
            &mut ws,
            &works,
            facts,
            StaleWork::default(),
            Some(&mut held),
        );
        assert_eq!(shape(&applied.outcomes[0]), want);
        assert!(!applied.changed);
    }
}

#[test]
fn a_hand_out_without_the_queue_takes_only_where_the_rules_choose() {
    // a holds p0 and our placeholder: the rules choose a, where it is.
    let ws = spread(&["p0", "~h1.0"], &[]);
    let mut held = Held {
        unused: vec![("a".into(), "~h1.0".into())],
        handed: vec![],
    };
    let got = hand_out(&ws, &claim("p1", ""), now(), &mut held);
    assert_eq!(got.and_then(|a| a.reservation).as_deref(), Some("~h1.0"));
    assert!(!held.handed[0].3, "taken unconfirmed");
    // Our placeholder in b, a has room: a write's business.
    let ws = spread(&[], &["~h1.1"]);
    let mut held = Held {
        unused: vec![("b".into(), "~h1.1".into())],
        handed: vec![],
    };
    assert_eq!(hand_out(&ws, &claim("p1", ""), now(), &mut held), None);
    assert!(held.handed.is_empty());
}

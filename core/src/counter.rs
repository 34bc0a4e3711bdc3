//! The counter capability: a small versioned JSON protocol between the policy (waPC
//! guest) and a host that keeps WorkloadSpread subset counters exactly.
//!
//! waPC binding `workloadspread`, namespace `counter`, operations `v1/hello`,
//! `v1/claim`, `v1/release`, `v1/unclaim`; payloads and answers are the JSON types below. Kubewarden's
//! policy-server does not offer it (its host calls are read-only), so the guest detects
//! it with `v1/hello` and otherwise decides from what it can read. See `docs/counter-protocol.md`.

use crate::admission::reserve::{is_placeholder, settle};
use crate::admission::{claim_among, release, unclaim, PodKey, Scale};
use crate::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use crate::rules::Rules;
use crate::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// waPC binding of the capability.
pub const BINDING: &str = "workloadspread";
/// waPC namespace of the capability.
pub const NAMESPACE: &str = "counter";
/// Capability probe.
pub const OP_HELLO: &str = "v1/hello";
/// Claim a subset slot for a pod being created.
pub const OP_CLAIM: &str = "v1/claim";
/// Release a pod's slot on delete or eviction.
pub const OP_RELEASE: &str = "v1/release";
/// Undo a claim whose pod the guest then refused (protocol 3).
pub const OP_UNCLAIM: &str = "v1/unclaim";
/// Protocol version answered by `v1/hello`. 2 added [`ClaimRequest::rules`]: a host
/// answering 1 ignores it and scales percentages by the reference's rules. 3 added
/// `v1/unclaim` (an older host answers it with an error; the slot then expires with the
/// controller's creating window). 4 added [`ClaimResponse::reservation`]: the host may
/// admit a pod into a slot it reserved beforehand (`docs/counter-protocol.md`, *Reserved
/// slots*); a guest of protocol < 4 ignores the field and the pod is counted twice until
/// the host renames the placeholder (~1 s; a spill, never an overfilled subset).
pub const PROTOCOL_VERSION: u32 = 4;

/// The lowest protocol a host must speak for claims under `rules`.
pub fn protocol_needed(rules: Rules) -> u32 {
    match rules {
        Rules::Planned => 2,
        Rules::Reference => 1,
    }
}

/// Answer to `v1/hello`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub protocol: u32,
}

/// The WorkloadSpread whose status holds the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpreadKey {
    pub namespace: String,
    pub name: String,
    /// When set, the host refuses to act on a recreated object with another uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// The pod a claim or release is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    /// Pod name; empty for `generateName` pods.
    #[serde(default)]
    pub name: String,
    /// `version::pod_version` of the pod.
    pub version: String,
}

/// `v1/claim` request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRequest {
    pub workload_spread: WorkloadSpreadKey,
    pub pod: PodRef,
    /// Subsets the pod may go to, in preference order (normally every spec subset).
    pub candidates: Vec<String>,
    /// The workload's replicas for percentages.
    pub workload_replicas: i32,
    /// Id recorded in creatingPods when the pod has no name (the guest derives it from
    /// the admission request uid, so retries of the same request reuse it).
    pub generated_uid: String,
    /// How percentages are scaled ([`Rules`]); absent means "reference", what guests
    /// sent before the field existed.
    #[serde(default = "reference_rules")]
    pub rules: Rules,
}

fn reference_rules() -> Rules {
    Rules::Reference
}

impl ClaimRequest {
    /// The pod's `creatingPods` key: its name, or the generated id of an unnamed pod.
    pub fn key(&self) -> &str {
        match self.pod.name.is_empty() {
            true => &self.generated_uid,
            false => &self.pod.name,
        }
    }

    /// The scale its percentages are judged by (no departure confirmed).
    pub fn scale(&self) -> Scale<'static> {
        Scale::new(self.workload_replicas, self.rules)
    }

    /// The pod, as the admission rules see it.
    pub fn pod_key(&self) -> PodKey<'_> {
        PodKey {
            name: &self.pod.name,
            version: &self.pod.version,
        }
    }
}

impl UnclaimRequest {
    /// The claim's `creatingPods` key: the generated id, or the pod's name.
    pub fn key(&self) -> &str {
        self.generated_uid.as_deref().unwrap_or(&self.pod.name)
    }
}

/// `v1/claim` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResponse {
    /// The claimed subset; `None` when no candidate has room (admit unchanged).
    #[serde(default)]
    pub subset: Option<String>,
    /// Set when creatingPods is keyed by the generated id (unnamed pod).
    #[serde(default)]
    pub generated_uid: Option<String>,
    /// The placeholder the pod was admitted into (protocol 4): the guest records it in
    /// the pod's `workloadspread.io/reservation` annotation so the controller counts the
    /// pod once before the host renames the placeholder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// The pod's planned deletion cost (`controller::cost::claimed_pod_cost`), which the guest
    /// writes in its patch so the controller does not patch the pod for it (#28).
    /// Absent from hosts before it: the controller then writes the cost, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_cost: Option<i64>,
}

/// `v1/release` request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseRequest {
    pub workload_spread: WorkloadSpreadKey,
    pub pod: PodRef,
    /// Subset named in the pod's matched-workloadspread annotation.
    pub subset: String,
    pub workload_replicas: i32,
    /// As in [`ClaimRequest::rules`].
    #[serde(default = "reference_rules")]
    pub rules: Rules,
    /// The placeholder the pod was admitted into (its reservation annotation, when its
    /// label agrees): while the placeholder is not settled it is the pod's slot. The
    /// release settles it to the pod's key first, then records the deletion: were the
    /// deletion recorded beside a placeholder that a stale drop may later free (once the
    /// pod is gone, nothing names it), the pod's departure would free its slot twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// The pod's generated id (its matched annotation's `uid`), the `creatingPods` key it
    /// was admitted under when it had no name yet; absent: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_uid: Option<String>,
    /// The uid of the pod's controller the guest checked against the spread's workload:
    /// the host records the release only when the stored pod has that controller
    /// ([`stored::contradiction`]). Absent from guests before it: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_uid: Option<String>,
}

/// `v1/unclaim` request: the claim answered for `pod` into `subset` is void.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnclaimRequest {
    pub workload_spread: WorkloadSpreadKey,
    pub pod: PodRef,
    pub subset: String,
    /// The claim's `generatedUid` for an unnamed pod (its `creatingPods` key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_uid: Option<String>,
    pub workload_replicas: i32,
    #[serde(default = "reference_rules")]
    pub rules: Rules,
}

/// `v1/release` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseResponse {
    /// Whether the status changed.
    pub released: bool,
}

/// A counter call as the guest sends it, parsed once for every host (`serve`, `run`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Hello,
    Claim(ClaimRequest),
    Release(ReleaseRequest),
    Unclaim(UnclaimRequest),
}

/// Why a counter call could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("unknown operation {BINDING}/{NAMESPACE}/{0} (this host speaks protocol {PROTOCOL_VERSION}: v1/hello, v1/claim, v1/release, v1/unclaim)")]
    UnknownOperation(String),
    #[error("invalid {operation} request: {reason}")]
    Invalid { operation: String, reason: String },
}

impl Call {
    /// Parses `payload` of `operation`.
    pub fn parse(operation: &str, payload: &[u8]) -> Result<Call, CallError> {
        fn json<T: serde::de::DeserializeOwned>(op: &str, payload: &[u8]) -> Result<T, CallError> {
            serde_json::from_slice(payload).map_err(|e| CallError::Invalid {
                operation: op.to_string(),
                reason: e.to_string(),
            })
        }
        Ok(match operation {
            OP_HELLO => Call::Hello,
            OP_CLAIM => Call::Claim(json(operation, payload)?),
            OP_RELEASE => Call::Release(json(operation, payload)?),
            OP_UNCLAIM => Call::Unclaim(json(operation, payload)?),
            other => return Err(CallError::UnknownOperation(other.to_string())),
        })
    }
}

/// Applies a claim to `ws`'s status (the host's side of `v1/claim`); returns the new
/// status and the answer. The caller writes the status back. `departed`: the pods whose
/// departure the caller has seen stored (their `deletingPods` entries free slots).
pub fn apply_claim(
    ws: &WorkloadSpread,
    req: &ClaimRequest,
    now: Timestamp,
    departed: &BTreeSet<String>,
) -> (WorkloadSpreadStatus, ClaimResponse) {
    let mut status = ws.status.clone().unwrap_or_default();
    let scale = req.scale().with_departed(departed);
    let (pod, candidates, new_uid) = (req.pod_key(), &req.candidates, &req.generated_uid);
    let claim = claim_among(&mut status, ws, pod, candidates, scale, now, new_uid);
    let answer = batch::answer(ws, &status, req, claim, scale, &[]);
    (status, answer)
}

/// Applies an unclaim to `ws`'s status (the host's side of `v1/unclaim`); the answer
/// says whether a slot was freed.
pub fn apply_unclaim(
    ws: &WorkloadSpread,
    req: &UnclaimRequest,
) -> (WorkloadSpreadStatus, ReleaseResponse) {
    let mut status = ws.status.clone().unwrap_or_default();
    let pod = PodKey {
        name: &req.pod.name,
        version: &req.pod.version,
    };
    let scale = Scale::new(req.workload_replicas, req.rules);
    let released = unclaim(&mut status, ws, pod, req.key(), &req.subset, scale);
    (status, ReleaseResponse { released })
}

/// Applies a release to `ws`'s status (the host's side of `v1/release`): the pod's
/// deletion is recorded as an intent (`admission::release`), which frees its slot only
/// once the departure is a fact; a placeholder the pod was admitted into is settled to
/// the pod's key first ([`ReleaseRequest::reservation`]).
pub fn apply_release(
    ws: &WorkloadSpread,
    req: &ReleaseRequest,
    now: Timestamp,
) -> (WorkloadSpreadStatus, ReleaseResponse) {
    let mut status = ws.status.clone().unwrap_or_default();
    let original = status.clone();
    let pod = PodKey {
        name: &req.pod.name,
        version: &req.pod.version,
    };
    let scale = Scale::new(req.workload_replicas, req.rules);
    let at = (req.pod.version.as_str(), req.subset.as_str());
    if let Some(placeholder) = req.reservation.as_deref().filter(|r| is_placeholder(r)) {
        let key = req.generated_uid.as_deref().unwrap_or(&req.pod.name);
        settle(&mut status, ws, at, placeholder, key, scale, now);
    }
    if let Some(uid) = req.generated_uid.as_deref() {
        rename_claim(&mut status, at, uid, &req.pod.name);
    }
    release(&mut status, ws, pod, &req.subset, scale, now);
    let released = status != original;
    (status, ReleaseResponse { released })
}

/// Renames the claim of a pod admitted without a name (`creatingPods[uid]`) to the pod's
/// name in `subset` of `version`, keeping its stamp: the deletion recorded next is keyed
/// by name, and whoever later finds both entries with the pod gone removes them together
/// (`admission::expire`). Unchanged when the claim is not there.
fn rename_claim(
    status: &mut WorkloadSpreadStatus,
    (version, subset): (&str, &str),
    uid: &str,
    name: &str,
) {
    if uid.is_empty() || name.is_empty() || uid == name {
        return;
    }
    let Some(s) = status
        .versioned_subset_statuses
        .get_mut(version)
        .and_then(|v| v.iter_mut().find(|s| s.name == subset))
    else {
        return;
    };
    if s.creating_pods.contains_key(name) {
        return;
    }
    if let Some(at) = s.creating_pods.remove(uid) {
        s.creating_pods.insert(name.to_string(), at);
    }
}

pub mod batch;
pub mod stored;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_parsed_once_with_errors_that_say_what_is_wrong() {
        assert_eq!(Call::parse(OP_HELLO, b"{}"), Ok(Call::Hello));
        let claim =
            br#"{"workloadSpread": {"namespace": "ns", "name": "ws"}, "pod": {"version": "v"},
            "candidates": ["a"], "workloadReplicas": 3, "generatedUid": "u"}"#;
        assert!(
            matches!(Call::parse(OP_CLAIM, claim), Ok(Call::Claim(c)) if c.candidates == ["a"])
        );
        let err = Call::parse(OP_RELEASE, b"{}").unwrap_err();
        assert!(matches!(&err, CallError::Invalid { operation, .. } if operation == OP_RELEASE));
        let err = Call::parse("v2/claim", b"{}").unwrap_err().to_string();
        assert!(
            err.contains("unknown operation workloadspread/counter/v2/claim"),
            "{err}"
        );
    }

    #[test]
    fn wire_format() {
        let req = ClaimRequest {
            workload_spread: WorkloadSpreadKey {
                namespace: "ns".into(),
                name: "ws".into(),
                uid: None,
            },
            pod: PodRef {
                name: "".into(),
                version: "versionIgnored".into(),
            },
            candidates: vec!["a".into(), "b".into()],
            workload_replicas: 10,
            generated_uid: "u-1".into(),
            rules: Rules::Planned,
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"workloadSpread": {"namespace": "ns", "name": "ws"},
                "pod": {"name": "", "version": "versionIgnored"}, "candidates": ["a", "b"],
                "workloadReplicas": 10, "generatedUid": "u-1", "rules": "planned"})
        );
        // A guest from before `rules` meant the reference's percentages.
        let old: ClaimRequest = serde_json::from_value(serde_json::json!({
            "workloadSpread": {"namespace": "ns", "name": "ws"}, "pod": {"version": "v"},
            "candidates": [], "workloadReplicas": 1, "generatedUid": "u"}))
        .unwrap();
        assert_eq!(old.rules, Rules::Reference);
        let resp: ClaimResponse = serde_json::from_str(r#"{"subset":"a"}"#).unwrap();
        assert_eq!(
            resp,
            ClaimResponse {
                subset: Some("a".into()),
                generated_uid: None,
                reservation: None,
                deletion_cost: None,
            }
        );
    }
}

#[cfg(test)]
mod unclaim_tests {
    use super::*;
    use serde_json::json;

    /// A claim undone frees its slot and its `creatingPods` entry; undoing it again (or
    /// one never claimed) changes nothing.
    #[test]
    fn unclaim_frees_the_slot_once() {
        let statuses =
            json!([{"name": "a", "missingReplicas": 2}, {"name": "b", "missingReplicas": -1}]);
        let mut ws: WorkloadSpread = serde_json::from_value(json!({
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {"subsets": [{"name": "a", "maxReplicas": 2}, {"name": "b"}]},
            "status": {"subsetStatuses": statuses, "versionedSubsetStatuses": {"v": statuses}}}))
        .unwrap();
        let key = WorkloadSpreadKey {
            namespace: "ns".into(),
            name: "ws".into(),
            uid: None,
        };
        let pod = PodRef {
            name: String::new(),
            version: "v".into(),
        };
        let claim = ClaimRequest {
            workload_spread: key.clone(),
            pod: pod.clone(),
            candidates: vec!["a".into(), "b".into()],
            workload_replicas: 4,
            generated_uid: "req-1".into(),
            rules: Rules::Planned,
        };
        let (status, answer) = apply_claim(&ws, &claim, Timestamp::UNIX_EPOCH, &BTreeSet::new());
        assert_eq!(answer.subset.as_deref(), Some("a"));
        ws.status = Some(status);
        let unclaim = UnclaimRequest {
            workload_spread: key,
            pod,
            subset: "a".into(),
            generated_uid: answer.generated_uid,
            workload_replicas: 4,
            rules: Rules::Planned,
        };
        let (status, freed) = apply_unclaim(&ws, &unclaim);
        assert!(freed.released);
        let a = &status.versioned_subset_statuses["v"][0];
        assert_eq!((a.missing_replicas, a.creating_pods.len()), (2, 0));
        ws.status = Some(status);
        assert!(!apply_unclaim(&ws, &unclaim).1.released);
    }
}

//! The pod webhook re-invoked (issue #41, item 5; `reinvocationPolicy: IfNeeded`): when a
//! mutating webhook ordered after ours changes the pod, the API server calls ours again
//! with the changed pod. Evaluated afresh, the policy would claim a second slot (the
//! matched annotation a pod arrives with is not trusted) and might pick another subset.
//! Instead the first answer carries a token ([`TOKEN_ANNOTATION`]): the subset it chose and
//! the metadata it set, bound to the namespace, the requesting user and the pod's
//! controller, stamped, and signed with a key every replica derives from the shared
//! serving secret. A re-invocation carrying a valid token is answered with the same
//! answer — the subset injected again into the changed pod (what the later webhook
//! removed comes back, what it left is not added twice), the same metadata — and no
//! claim. A token that does not verify (forged, copied onto another user's pod, older
//! than [`MAX_AGE_SECONDS`]) is ignored: the pod is evaluated as any other.
//!
//! A token is also bound to its pod (protocol review F7, security R12): nothing names a pod
//! at mutating admission (no name for `generateName` pods, no uid), so the first answer
//! labels the pod with a random id ([`ADMISSION_LABEL`]) the token carries, and a
//! re-invocation is honoured only while no *stored* pod carries that id — a genuine
//! re-invocation always comes before its pod is stored, while a copy of a stored pod's
//! metadata (a token replayed onto another pod of the same owner and user) finds the
//! original, read consistently, and is evaluated afresh: it claims its own slot.

use super::classify::pod_create;
use crate::capabilities::Capabilities;
use crate::engine::evaluate::AdmissionResponse;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::RwLock;
use workloadspread_core::admission::reserve::{RESERVATION_ANNOTATION, RESERVATION_LABEL};
use workloadspread_core::annotation::MatchedWorkloadSpread;
use workloadspread_core::api::v1beta1::{WorkloadSpread, API_VERSION};
pub use workloadspread_core::api::ADMISSION_LABEL;
use workloadspread_core::api::{
    KIND, MATCHED_WORKLOADSPREAD_ANNOTATION, PENDING_LABEL, POD_DELETION_COST_ANNOTATION,
};

/// The annotation carrying the token of the first answer.
pub const TOKEN_ANNOTATION: &str = "workloadspread.io/admission-token";
/// How long after the first answer a token is honoured (an admission takes at most the
/// webhook timeouts of its chain).
pub const MAX_AGE_SECONDS: i64 = 60;
/// Annotations and labels of the first answer a re-invocation sets again.
const ANNOTATIONS: [&str; 3] = [
    MATCHED_WORKLOADSPREAD_ANNOTATION,
    RESERVATION_ANNOTATION,
    POD_DELETION_COST_ANNOTATION,
];
const LABELS: [&str; 2] = [RESERVATION_LABEL, PENDING_LABEL];

/// The signing keys: the current one and the one before (a serving secret rotated while
/// an admission is in flight, or replicas a moment apart), each with the fingerprint of
/// the secret it was derived from.
#[derive(Default)]
pub struct TokenKeys(RwLock<Vec<([u8; 32], ring::hmac::Key)>>);

impl TokenKeys {
    /// Derives the key from `secret` (a PEM private key every replica holds); a new one
    /// becomes current and the previous is kept for verification.
    pub fn observe(&self, secret: &str) {
        let derived: [u8; 32] =
            Sha256::digest(format!("workloadspread admission token v1\0{secret}")).into();
        let fingerprint: [u8; 32] = Sha256::digest(derived).into();
        let mut keys = self.0.write().unwrap_or_else(|p| p.into_inner());
        if keys.first().is_some_and(|(f, _)| *f == fingerprint) {
            return;
        }
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &derived);
        keys.insert(0, (fingerprint, key));
        keys.truncate(2);
    }

    fn sign(&self, payload: &[u8]) -> Option<Vec<u8>> {
        let keys = self.0.read().unwrap_or_else(|p| p.into_inner());
        keys.first()
            .map(|(_, k)| ring::hmac::sign(k, payload).as_ref().to_vec())
    }

    fn verify(&self, payload: &[u8], tag: &[u8]) -> bool {
        let keys = self.0.read().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .any(|(_, k)| ring::hmac::verify(k, payload, tag).is_ok())
    }
}

/// The keys follow the secret the TLS side loads (`tls::SecretObserver`).
impl crate::tls::SecretObserver for TokenKeys {
    fn observe(&self, secret: &str) {
        TokenKeys::observe(self, secret);
    }
}

/// What a token binds and carries.
#[derive(Debug, Deserialize, Serialize, PartialEq)]
struct Claim {
    /// Namespace, requesting user, the pod's controller (uid).
    namespace: String,
    user: String,
    owner: String,
    /// The WorkloadSpread and subset chosen.
    ws: String,
    subset: String,
    /// The matched annotation's uid, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    /// Seconds since the epoch when the first answer was given.
    at: i64,
    /// The random id of [`ADMISSION_LABEL`] (tokens without one are not honoured).
    #[serde(default)]
    nonce: String,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

fn encode(claim: &Claim, keys: &TokenKeys) -> Option<String> {
    let payload = serde_json::to_vec(claim).ok()?;
    let tag = keys.sign(&payload)?;
    Some(format!("v1.{}.{}", B64.encode(payload), B64.encode(tag)))
}

fn decode(token: &str, keys: &TokenKeys) -> Option<Claim> {
    let rest = token.strip_prefix("v1.")?;
    let (payload, tag) = rest.split_once('.')?;
    let (payload, tag) = (B64.decode(payload).ok()?, B64.decode(tag).ok()?);
    keys.verify(&payload, &tag)
        .then(|| serde_json::from_slice(&payload).ok())
        .flatten()
}

fn controller_uid(pod: &Value) -> Option<&str> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

/// The claim of a valid, fresh token on this pod CREATE, bound to this request.
fn verified(request: &Value, keys: &TokenKeys, now: i64) -> Option<Claim> {
    if !pod_create(request) {
        return None;
    }
    let object = &request["object"];
    let token = object["metadata"]["annotations"][TOKEN_ANNOTATION].as_str()?;
    let claim = decode(token, keys)?;
    let bound = claim.namespace == request["namespace"].as_str().unwrap_or_default()
        && claim.user == request["userInfo"]["username"].as_str().unwrap_or_default()
        && Some(claim.owner.as_str()) == controller_uid(object)
        && !claim.nonce.is_empty()
        && object["metadata"]["labels"][ADMISSION_LABEL].as_str() == Some(claim.nonce.as_str())
        && (now - claim.at).abs() <= MAX_AGE_SECONDS;
    bound.then_some(claim)
}

/// Whether a stored pod of a namespace matches a label selector, read consistently
/// (`None`: the read failed).
pub type StoredPods<'a> = &'a dyn Fn(&str, &str) -> Option<bool>;

/// The answer to a re-invocation: `None` unless `request` is a pod CREATE carrying a valid
/// token of this host's whose pod is not stored yet (then the guest is not asked: no
/// claim). `caps` reads the WorkloadSpread (from the cache); `stored` finds a stored pod
/// carrying the token's id (a copy; a failed read counts as one: evaluated afresh, the pod
/// claims its own slot).
pub fn answer(
    request: &Value,
    keys: &TokenKeys,
    caps: &dyn Capabilities,
    stored: StoredPods<'_>,
    now: i64,
) -> Option<AdmissionResponse> {
    let claim = verified(request, keys, now)?;
    let selector = format!("{ADMISSION_LABEL}={}", claim.nonce);
    if stored(&claim.namespace, &selector) != Some(false) {
        return None;
    }
    let uid = request["uid"].as_str().unwrap_or_default().to_string();
    let object = &request["object"];
    let mut pod = object.clone();
    let read = json!({"api_version": API_VERSION, "kind": KIND, "name": claim.ws,
        "namespace": claim.namespace, "disable_cache": false});
    let ws: Option<WorkloadSpread> = caps
        .call(
            "kubewarden",
            "kubernetes",
            "get_resource",
            read.to_string().as_bytes(),
        )
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    // A WorkloadSpread deleted in between: the pod keeps what it has.
    if let Some(ws) = &ws {
        if workloadspread_core::inject::inject(&mut pod, ws, &claim.subset, claim.uid.as_deref())
            .is_ok()
        {
            dedupe_subset(&mut pod, ws, &claim.subset);
        } else {
            pod = object.clone();
        }
    }
    for (key, value) in &claim.annotations {
        pod["metadata"]["annotations"][key.as_str()] = Value::String(value.clone());
    }
    for (key, value) in &claim.labels {
        pod["metadata"]["labels"][key.as_str()] = Value::String(value.clone());
    }
    let ops = json_patch::diff(object, &pod);
    let audit = BTreeMap::from([
        (
            "subset".to_string(),
            format!("{}/{}", claim.ws, claim.subset),
        ),
        ("reinvoked".to_string(), "true".to_string()),
    ]);
    let patch = (!ops.0.is_empty())
        .then(|| serde_json::to_vec(&ops).ok())
        .flatten()
        .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes));
    Some(AdmissionResponse {
        uid,
        allowed: true,
        patch_type: patch.as_ref().map(|_| "JSONPatch".to_string()),
        patch,
        status: None,
        audit_annotations: Some(audit),
        warnings: None,
    })
}

/// Injecting a subset into a pod that has it already appends its tolerations, node
/// selector requirements and preferred terms again: keep the first of each.
fn dedupe_subset(pod: &mut Value, ws: &WorkloadSpread, subset: &str) {
    let Some(subset) = ws.subset(subset) else {
        return;
    };
    let tolerations: Vec<Value> = subset
        .tolerations
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    dedupe(pod.pointer_mut("/spec/tolerations"), &tolerations);
    let preferred: Vec<Value> = subset
        .preferred_node_selector
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    const NODE_AFFINITY: &str = "/spec/affinity/nodeAffinity";
    dedupe(
        pod.pointer_mut(&format!(
            "{NODE_AFFINITY}/preferredDuringSchedulingIgnoredDuringExecution"
        )),
        &preferred,
    );
    let Some(term) = subset
        .required_node_selector
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
    else {
        return;
    };
    let terms = pod.pointer_mut(&format!(
        "{NODE_AFFINITY}/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    ));
    if let Some(terms) = terms.and_then(Value::as_array_mut) {
        for t in terms {
            for key in ["matchExpressions", "matchFields"] {
                let ours: Vec<Value> = term[key].as_array().cloned().unwrap_or_default();
                dedupe(t.get_mut(key), &ours);
            }
        }
    }
}

/// Drops the repeats of `ours` from the array `list` (the first of each stays; entries not
/// in `ours`, the pod's own, are left as they are).
fn dedupe(list: Option<&mut Value>, ours: &[Value]) {
    let Some(items) = list.and_then(Value::as_array_mut) else {
        return;
    };
    let mut seen: Vec<Value> = Vec::new();
    items.retain(|v| {
        if !ours.contains(v) {
            return true;
        }
        if seen.contains(v) {
            return false;
        }
        seen.push(v.clone());
        true
    });
}

/// Adds the token to a mutated pod CREATE's answer (the patch gains one `add`): the
/// subset, the metadata the answer sets, the request's namespace, user and the pod's
/// controller. Answers that place no pod are left alone.
pub fn sign(request: &Value, response: &mut AdmissionResponse, keys: &TokenKeys, now: i64) {
    if !pod_create(request) || !response.allowed {
        return;
    }
    let Some(encoded) = &response.patch else {
        return;
    };
    let Some(mut ops) = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|b| serde_json::from_slice::<json_patch::Patch>(&b).ok())
    else {
        return;
    };
    let mut pod = request["object"].clone();
    if json_patch::patch(&mut pod, &ops).is_err() {
        return;
    }
    let Some(matched) = pod["metadata"]["annotations"][MATCHED_WORKLOADSPREAD_ANNOTATION]
        .as_str()
        .and_then(|a| MatchedWorkloadSpread::parse(a).ok())
    else {
        return;
    };
    let Some(owner) = controller_uid(&pod) else {
        return;
    };
    let Some(nonce) = random_id() else {
        return;
    };
    let pick = |section: &str, keys: &[&str]| -> BTreeMap<String, String> {
        keys.iter()
            .filter_map(|k| {
                let v = pod["metadata"][section][*k].as_str()?;
                Some((k.to_string(), v.to_string()))
            })
            .collect()
    };
    let claim = Claim {
        namespace: request["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        user: request["userInfo"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        owner: owner.to_string(),
        ws: matched.name.clone(),
        subset: matched.subset.clone(),
        uid: matched.uid.clone(),
        at: now,
        nonce: nonce.clone(),
        annotations: pick("annotations", &ANNOTATIONS),
        labels: pick("labels", &LABELS),
    };
    let Some(token) = encode(&claim, keys) else {
        return;
    };
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    let label = match pod["metadata"]["labels"].is_object() {
        true => {
            json!({"op": "add", "path": format!("/metadata/labels/{}", escape(ADMISSION_LABEL)),
            "value": nonce})
        }
        false => {
            json!({"op": "add", "path": "/metadata/labels", "value": {ADMISSION_LABEL: nonce}})
        }
    };
    let token = json!({"op": "add",
        "path": format!("/metadata/annotations/{}", escape(TOKEN_ANNOTATION)), "value": token});
    for op in [label, token] {
        match serde_json::from_value::<json_patch::PatchOperation>(op) {
            Ok(op) => ops.0.push(op),
            Err(_) => return,
        }
    }
    if let Ok(bytes) = serde_json::to_vec(&ops) {
        response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
}

/// 128 random bits as 32 hex digits (a label value).
fn random_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests;

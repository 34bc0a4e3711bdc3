use super::*;
use crate::capabilities::HostCallError;
use serde_json::json;

/// Answers `get_resource` with the WorkloadSpread it holds.
struct Cache(Value);
impl Capabilities for Cache {
    fn call(&self, b: &str, n: &str, o: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
        match (b, n, o) {
            ("kubewarden", "kubernetes", "get_resource") => Ok(self.0.to_string().into_bytes()),
            _ => Err(HostCallError::Internal(format!(
                "unexpected call {b}/{n}/{o}"
            ))),
        }
    }
}

fn workloadspread() -> Value {
    json!({"apiVersion": API_VERSION, "kind": "WorkloadSpread",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
            "subsets": [{"name": "a",
                "requiredNodeSelector": {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "a",
                    "effect": "NoSchedule"}],
                "patch": {"metadata": {"labels": {"subset": "a"}}}}]}})
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-", "namespace": "team", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "rs-uid", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}}})
}

fn request(object: &Value, user: &str) -> Value {
    json!({"uid": "req", "operation": "CREATE", "namespace": "team",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "userInfo": {"username": user}, "object": object})
}

/// No stored pod carries the token's id (a genuine re-invocation).
const NOT_STORED: fn(&str, &str) -> Option<bool> = |_, _| Some(false);

fn keys(secret: &str) -> TokenKeys {
    let keys = TokenKeys::default();
    keys.observe(secret);
    keys
}

fn apply(object: &Value, response: &AdmissionResponse) -> Value {
    let mut pod = object.clone();
    if let Some(patch) = &response.patch {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut pod, &ops).unwrap();
    }
    pod
}

/// The first answer, as the policy gives it: the subset injected, a deletion cost.
fn first_answer(object: &Value) -> AdmissionResponse {
    let ws: WorkloadSpread = serde_json::from_value(workloadspread()).unwrap();
    let mut mutated = object.clone();
    workloadspread_core::inject::inject(&mut mutated, &ws, "a", None).unwrap();
    mutated["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] = json!("100");
    let ops = serde_json::to_vec(&json_patch::diff(object, &mutated)).unwrap();
    AdmissionResponse {
        uid: "req".into(),
        allowed: true,
        patch_type: Some("JSONPatch".into()),
        patch: Some(base64::engine::general_purpose::STANDARD.encode(ops)),
        status: None,
        audit_annotations: None,
        warnings: None,
    }
}

/// The pod after the first answer, with its token.
fn admitted(keys: &TokenKeys, at: i64) -> Value {
    let object = pod();
    let mut response = first_answer(&object);
    sign(&request(&object, "rs-controller"), &mut response, keys, at);
    apply(&object, &response)
}

#[test]
fn a_reinvocation_of_an_unchanged_pod_changes_nothing_and_claims_nothing() {
    let keys = keys("serving key");
    let first = admitted(&keys, 1000);
    assert!(first["metadata"]["annotations"][TOKEN_ANNOTATION].is_string());
    let cache = Cache(workloadspread());
    let again = answer(
        &request(&first, "rs-controller"),
        &keys,
        &cache,
        &NOT_STORED,
        1010,
    )
    .unwrap();
    let ops = again.patch.as_ref().map(|p| {
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(p).unwrap()).unwrap()
    });
    assert!(again.allowed && again.patch.is_none(), "{ops:?}");
}

#[test]
fn what_a_later_webhook_removed_comes_back_once() {
    let keys = keys("serving key");
    let first = admitted(&keys, 1000);
    // A later webhook drops the node affinity, the tolerations and our annotations but the
    // token, and adds a label of its own.
    let mut rewritten = first.clone();
    rewritten["spec"]["affinity"] = json!({});
    rewritten["spec"]["tolerations"] = json!([]);
    rewritten["metadata"]["labels"]["other"] = json!("webhook");
    let annotations = rewritten["metadata"]["annotations"]
        .as_object_mut()
        .unwrap();
    annotations.retain(|k, _| k == TOKEN_ANNOTATION);
    let again = answer(
        &request(&rewritten, "rs-controller"),
        &keys,
        &Cache(workloadspread()),
        &NOT_STORED,
        1010,
    )
    .unwrap();
    let restored = apply(&rewritten, &again);
    let mut want = first.clone();
    want["metadata"]["labels"]["other"] = json!("webhook");
    // The pod's own required term is gone for good (the later webhook removed it); the
    // subset's comes back, once, with its toleration and the first answer's metadata.
    want["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"] = json!([{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]);
    assert_eq!(restored, want);
    // Answered again, the restored pod is left as it is.
    let third = answer(
        &request(&restored, "rs-controller"),
        &keys,
        &Cache(workloadspread()),
        &NOT_STORED,
        1020,
    )
    .unwrap();
    assert!(third.patch.is_none(), "{third:?}");
}

#[test]
fn a_token_binds_its_user_owner_time_and_key() {
    let keys = keys("serving key");
    let first = admitted(&keys, 1000);
    let cache = Cache(workloadspread());
    let ask = |pod: &Value, user: &str, keys: &TokenKeys, now: i64| {
        answer(&request(pod, user), keys, &cache, &NOT_STORED, now).is_some()
    };
    assert!(ask(&first, "rs-controller", &keys, 1000 + MAX_AGE_SECONDS));
    assert!(!ask(&first, "mallory", &keys, 1010), "another user");
    assert!(
        !ask(&first, "rs-controller", &keys, 1001 + MAX_AGE_SECONDS),
        "too old"
    );
    let mut other_owner = first.clone();
    other_owner["metadata"]["ownerReferences"][0]["uid"] = json!("another-rs");
    assert!(
        !ask(&other_owner, "rs-controller", &keys, 1010),
        "copied onto another pod"
    );
    let mut tampered = first.clone();
    let token = tampered["metadata"]["annotations"][TOKEN_ANNOTATION]
        .as_str()
        .unwrap()
        .to_string();
    let (_, tag) = token.rsplit_once('.').unwrap();
    let forged = Claim {
        namespace: "team".into(),
        user: "rs-controller".into(),
        owner: "rs-uid".into(),
        ws: "web".into(),
        subset: "b".into(),
        uid: None,
        at: 1000,
        nonce: first["metadata"]["labels"][ADMISSION_LABEL]
            .as_str()
            .unwrap()
            .to_string(),
        annotations: BTreeMap::new(),
        labels: BTreeMap::new(),
    };
    let payload = B64.encode(serde_json::to_vec(&forged).unwrap());
    tampered["metadata"]["annotations"][TOKEN_ANNOTATION] = json!(format!("v1.{payload}.{tag}"));
    assert!(
        !ask(&tampered, "rs-controller", &keys, 1010),
        "a forged claim"
    );
    // A rotated secret still verifies the token of the one before; two rotations do not.
    keys.observe("rotated key");
    assert!(ask(&first, "rs-controller", &keys, 1010));
    keys.observe("rotated again");
    assert!(!ask(&first, "rs-controller", &keys, 1010));
}

#[test]
fn answers_that_place_no_pod_get_no_token() {
    let keys = keys("serving key");
    let object = pod();
    let mut unchanged = AdmissionResponse {
        uid: "req".into(),
        allowed: true,
        patch_type: None,
        patch: None,
        status: None,
        audit_annotations: None,
        warnings: None,
    };
    sign(&request(&object, "u"), &mut unchanged, &keys, 0);
    assert!(unchanged.patch.is_none());
    let mut refused = first_answer(&object);
    refused.allowed = false;
    let before = refused.patch.clone();
    sign(&request(&object, "u"), &mut refused, &keys, 0);
    assert_eq!(refused.patch, before);
}

/// Protocol review F7 / security R12: a token is honoured only on the pod it was given to,
/// before that pod is stored. A copy of a stored pod's metadata (its token and id label) on
/// another pod of the same owner and user finds the original stored and is evaluated
/// afresh; so is a pod whose id label is missing or another; a failed read counts as a copy.
#[test]
fn a_token_is_honoured_only_until_its_pod_is_stored() {
    let keys = keys("serving key");
    let first = admitted(&keys, 1000);
    let id = first["metadata"]["labels"][ADMISSION_LABEL]
        .as_str()
        .expect("the first answer labels the pod with its token's id")
        .to_string();
    assert_eq!(id.len(), 32);
    let cache = Cache(workloadspread());
    let asked = std::cell::RefCell::new(vec![]);
    let stored = |answer: Option<bool>| {
        let asked = &asked;
        move |ns: &str, selector: &str| {
            asked.borrow_mut().push(format!("{ns} {selector}"));
            answer
        }
    };
    let ask = |pod: &Value, stored: StoredPods<'_>| {
        answer(&request(pod, "rs-controller"), &keys, &cache, stored, 1010).is_some()
    };
    assert!(ask(&first, &stored(Some(false))), "a genuine re-invocation");
    assert_eq!(
        asked.borrow().as_slice(),
        [format!("team {ADMISSION_LABEL}={id}")]
    );
    assert!(!ask(&first, &stored(Some(true))), "a copy of a stored pod");
    assert!(!ask(&first, &stored(None)), "the read failed");
    let mut unlabelled = first.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(ADMISSION_LABEL);
    assert!(!ask(&unlabelled, &stored(Some(false))), "no id label");
    let mut relabelled = first.clone();
    relabelled["metadata"]["labels"][ADMISSION_LABEL] = json!("0".repeat(32));
    assert!(!ask(&relabelled, &stored(Some(false))), "another id");
    // Each first answer draws its own id.
    let second = admitted(&keys, 1000);
    assert_ne!(second["metadata"]["labels"][ADMISSION_LABEL], json!(id));
}

/// A pod without labels gets the id label with its labels object.
#[test]
fn the_id_label_is_added_to_a_pod_without_labels() {
    let keys = keys("serving key");
    let mut object = pod();
    object["metadata"].as_object_mut().unwrap().remove("labels");
    // An answer that only places the pod (no label of the subset's).
    let mut placed = object.clone();
    placed["metadata"]["annotations"] =
        json!({MATCHED_WORKLOADSPREAD_ANNOTATION: r#"{"name":"web","subset":"a"}"#});
    let ops = serde_json::to_vec(&json_patch::diff(&object, &placed)).unwrap();
    let mut response = AdmissionResponse {
        patch: Some(base64::engine::general_purpose::STANDARD.encode(ops)),
        patch_type: Some("JSONPatch".into()),
        ..first_answer(&object)
    };
    sign(
        &request(&object, "rs-controller"),
        &mut response,
        &keys,
        1000,
    );
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response.patch.as_ref().unwrap())
        .unwrap();
    let patch = String::from_utf8(patch).unwrap();
    assert!(patch.contains(r#""path":"/metadata/labels""#), "{patch}");
    let signed = apply(&object, &response);
    assert!(
        signed["metadata"]["labels"][ADMISSION_LABEL].is_string(),
        "{signed}"
    );
    assert!(signed["metadata"]["annotations"][TOKEN_ANNOTATION].is_string());
}

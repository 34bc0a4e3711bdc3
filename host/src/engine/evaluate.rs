//! One evaluation as every command makes it (`run`, `bench`, the webhook): the
//! AdmissionRequest built, the policy's settings validated, the guest's answer turned into
//! the AdmissionResponse (JSON patch computed here, as Kubewarden's host does), printed by
//! `run` on one line exactly like `kwctl run`.

use crate::capabilities::Capabilities;
use crate::engine::PolicyEngine;
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `AdmissionResponse` as kwctl prints it.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    pub audit_annotations: Option<BTreeMap<String, String>>,
    pub warnings: Option<Vec<String>>,
}

/// Rejection details.
#[derive(Debug, Serialize, PartialEq)]
pub struct Status {
    pub message: String,
    pub code: u16,
}

/// Accepts an AdmissionReview (`kind: AdmissionReview`) or a bare AdmissionRequest.
pub fn admission_request(input: &Value) -> Result<Value> {
    if input["kind"] == "AdmissionReview" {
        let request = input["request"].clone();
        if request.is_null() {
            bail!("AdmissionReview has no request");
        }
        return Ok(request);
    }
    if !input.is_object() || input["uid"].is_null() && input["operation"].is_null() {
        bail!("not an AdmissionRequest or AdmissionReview (expected uid/operation or kind: AdmissionReview)");
    }
    Ok(input.clone())
}

/// Validates the settings with the module's `validate_settings`.
pub fn validate_settings(
    engine: &PolicyEngine,
    settings: &Value,
    caps: Arc<dyn Capabilities>,
) -> Result<()> {
    let answer = engine.call("validate_settings", &serde_json::to_vec(settings)?, caps)?;
    let v: Value = serde_json::from_slice(&answer).context("validate_settings answer")?;
    if v["valid"] != true {
        bail!(
            "invalid settings: {}",
            v["message"].as_str().unwrap_or("(no message)")
        );
    }
    Ok(())
}

/// Runs `validate` and converts the policy's answer into an AdmissionResponse
/// (JSON patch computed here, as Kubewarden's host does).
pub fn evaluate(
    engine: &PolicyEngine,
    request: &Value,
    settings: &Value,
    caps: Arc<dyn Capabilities>,
) -> AdmissionResponse {
    evaluate_with(request, settings, |bytes| {
        engine.call("validate", bytes, caps)
    })
}

/// One evaluation as `serve` makes it around any implementation of the guest's `validate`
/// (the module, or the policy crate compiled natively): the payload encoded, the answer
/// decoded, the patch computed.
pub fn evaluate_with<E: std::fmt::Display>(
    request: &Value,
    settings: &Value,
    validate: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> AdmissionResponse {
    let uid = request["uid"].as_str().unwrap_or_default().to_string();
    // Serialised from borrows: a large request is not copied into a second JSON tree.
    #[derive(serde::Serialize)]
    struct Payload<'a> {
        request: &'a Value,
        settings: &'a Value,
    }
    let payload = match serde_json::to_vec(&Payload { request, settings }) {
        Ok(bytes) => bytes,
        Err(e) => return rejection(uid, format!("encoding the policy's payload: {e}"), 500),
    };
    let answer = match validate(&payload) {
        Ok(bytes) => bytes,
        Err(e) => return rejection(uid, e.to_string(), 500),
    };
    match serde_json::from_slice::<Value>(&answer) {
        Ok(v) => to_admission_response(uid, request, &v),
        Err(e) => rejection(uid, format!("invalid policy answer: {e}"), 500),
    }
}

/// A rejection with `message` and HTTP `code`.
pub fn rejection(uid: String, message: String, code: u16) -> AdmissionResponse {
    AdmissionResponse {
        uid,
        allowed: false,
        patch_type: None,
        patch: None,
        status: Some(Status { message, code }),
        audit_annotations: None,
        warnings: None,
    }
}

fn to_admission_response(uid: String, request: &Value, v: &Value) -> AdmissionResponse {
    let audit = serde_json::from_value(v["audit_annotations"].clone()).unwrap_or(None);
    let warnings = serde_json::from_value(v["warnings"].clone()).unwrap_or(None);
    if v["accepted"] != true {
        let message = v["message"].as_str().unwrap_or("rejected").to_string();
        let code = v["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(400);
        let mut r = rejection(uid, message, code);
        r.audit_annotations = audit;
        r.warnings = warnings;
        return r;
    }
    let mut response = AdmissionResponse {
        uid: uid.clone(),
        allowed: true,
        patch_type: None,
        patch: None,
        status: None,
        audit_annotations: audit,
        warnings,
    };
    let mutated = &v["mutated_object"];
    if !mutated.is_null() {
        if request["object"].is_null() {
            return rejection(
                uid,
                "the policy mutated a request without an object".into(),
                500,
            );
        }
        patch_to(&mut response, &request["object"], mutated);
    }
    response
}

/// `object` as `response`'s JSON patch leaves it (`object` itself without a patch); `None`
/// when the patch cannot be read or applied.
pub fn patched(object: &Value, response: &AdmissionResponse) -> Option<Value> {
    use base64::Engine as _;
    let mut pod = object.clone();
    if let Some(encoded) = &response.patch {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        let ops = serde_json::from_slice::<json_patch::Patch>(&bytes).ok()?;
        json_patch::patch(&mut pod, &ops).ok()?;
    }
    Some(pod)
}

/// Sets `response`'s JSON patch from `object` to `mutated` (none when they are equal).
pub fn patch_to(response: &mut AdmissionResponse, object: &Value, mutated: &Value) {
    let diff = json_patch::diff(object, mutated);
    if !diff.0.is_empty() {
        let bytes = serde_json::to_vec(&diff).unwrap_or_default();
        response.patch_type = Some("JSONPatch".into());
        response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
}

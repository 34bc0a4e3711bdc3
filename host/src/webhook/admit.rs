//! `/mutate` and `/validate`: admit (the caller, the body, a slot, the review) → evaluate
//! (what the answer changes in the caches) → decide (readiness, re-invocation, unrelated
//! pods, the claim rate, then the guest), each step by what the request is
//! (`classify.rs`).

use super::classify::{about_workloadspread, may_claim, owned_pod_create, workloadspread_created};
use super::{bad_request, body, reinvoke, App, PeerCertificate};
use crate::capabilities::Capabilities;
use crate::engine::evaluate::{self, AdmissionResponse};
use crate::index::ShowingContested;
use crate::metrics::{
    Endpoint, EndpointLabels, EvalLabels, NamespaceLabels, Outcome, Refusal, Running,
};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_core::annotation::MatchedWorkloadSpread;

/// How long an admission waits for the caches' initial list.
const CACHE_WAIT: Duration = Duration::from_secs(5);

pub(super) async fn admit(app: Arc<App>, endpoint: Endpoint, request: Request) -> Response {
    let started = Instant::now();
    if app.client_auth {
        let presented = request
            .extensions()
            .get::<PeerCertificate>()
            .and_then(|p| p.0.as_deref())
            .map(crate::tls::client_auth::names_of);
        if let Err(why) = client_allowed(&app, presented.as_deref()) {
            return (StatusCode::FORBIDDEN, why.to_string()).into_response();
        }
    }
    // The body first, then a slot: a slow sender holds no evaluation slot.
    let body = match body::read(&app, request, body::Budget::Admissions).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let permit = match body::slot(&app, &app.slots, || {
        format!(
            "all {} evaluation slots stayed busy for {:?}; retry (raise --max-concurrency with \
             the memory limit, or add replicas)",
            app.slots.available_permits().max(1),
            body::SLOT_WAIT
        )
    })
    .await
    {
        Ok(p) => Arc::new(p),
        Err(response) => return response,
    };
    let parsed = serde_json::from_slice::<Value>(&body.bytes);
    drop(body);
    let mut review: Value = match parsed {
        Ok(v) => v,
        Err(e) => return bad_request(format!("the body is not an AdmissionReview: {e}")),
    };
    if review["kind"] != "AdmissionReview" || !review["request"].is_object() {
        return bad_request("expected an AdmissionReview with a request".into());
    }
    let api_version = review["apiVersion"]
        .as_str()
        .unwrap_or("admission.k8s.io/v1")
        .to_string();
    let request = review["request"].take();
    drop(review);
    // What the request was about, for the debug line (the request moves into the guest).
    let about = tracing::enabled!(tracing::Level::DEBUG).then(|| {
        let field = |k: &str| request[k].as_str().unwrap_or_default().to_string();
        let object = if request["object"].is_object() {
            &request["object"]
        } else {
            &request["oldObject"]
        };
        let deleting = object["metadata"]["deletionTimestamp"].is_string();
        format!(
            "{} {}/{} {}{}",
            field("operation"),
            field("namespace"),
            field("name"),
            request["subResource"].as_str().unwrap_or_default(),
            if deleting { " (terminating)" } else { "" }
        )
    });
    let response = evaluate(&app, request, permit).await;
    let outcome = outcome_of(&response);
    tracing::debug!(
        uid = %response.uid,
        about = about.as_deref().unwrap_or_default(),
        ?outcome,
        audit = ?response.audit_annotations,
        message = ?response.status.as_ref().map(|s| &s.message),
        "admission"
    );
    app.metrics
        .evaluations
        .get_or_create(&EvalLabels {
            endpoint: endpoint.clone(),
            outcome,
        })
        .inc();
    app.metrics
        .latency
        .get_or_create(&EndpointLabels { endpoint })
        .observe(started.elapsed().as_secs_f64());
    axum::Json(json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": without_nulls(serde_json::to_value(&response).unwrap_or(Value::Null)),
    }))
    .into_response()
}

/// Why a caller may not use the webhook routes (the 403's body).
#[derive(Debug, thiserror::Error)]
enum ClientRefused {
    #[error(
        "this webhook answers only the API server: present a client certificate of \
         the CA given to --client-ca-file (the API server's admission configuration names it \
         in a kubeConfigFile; docs/operations.md, Security)"
    )]
    NoCertificate,
    #[error(
        "the client certificate names {names:?}, none of the identities this webhook answers \
         (--client-cert-identity {pinned:?}; chart tls.clientCertIdentities)"
    )]
    NotPinned {
        names: Vec<String>,
        pinned: Vec<String>,
    },
}

/// Whether a caller presenting a certificate that goes by `names` (`None`: none) may use
/// the webhook routes: one of the CA's, naming a pinned identity when there are any.
fn client_allowed(app: &App, names: Option<&[String]>) -> Result<(), ClientRefused> {
    let Some(names) = names else {
        return Err(ClientRefused::NoCertificate);
    };
    if app.client_identities.is_empty() || names.iter().any(|n| app.client_identities.contains(n)) {
        return Ok(());
    }
    Err(ClientRefused::NotPinned {
        names: names.to_vec(),
        pinned: app.client_identities.clone(),
    })
}

/// The evaluation slot an admission holds: shared with the blocking work it starts, so the
/// slot is given back when the last of them ends, not when a client that went away drops
/// the handler.
type Slot = Arc<tokio::sync::OwnedSemaphorePermit>;

async fn evaluate(app: &Arc<App>, request: Value, slot: Slot) -> AdmissionResponse {
    let created = workloadspread_created(&request).map(str::to_string);
    let response = decide(app, request, slot).await;
    // A WorkloadSpread this host lets through is stored next: the namespace's remembered
    // list no longer holds. One it refuses, or a dry run, is never stored: forgetting
    // there would only make the namespace's next pods list again (`index::lookup`).
    if let (Some(namespace), true) = (created, response.allowed) {
        app.capabilities.forget_lookup(&namespace).await;
    }
    response
}

async fn decide(app: &Arc<App>, request: Value, slot: Slot) -> AdmissionResponse {
    let uid = request["uid"].as_str().unwrap_or_default().to_string();
    // An empty WorkloadSpread cache would admit pods unspread: wait for the first list.
    if tokio::time::timeout(CACHE_WAIT, app.capabilities.wait_until_ready())
        .await
        .is_err()
    {
        let why = app.capabilities.not_ready_reason().unwrap_or_default();
        return evaluate::rejection(uid, format!("the host is not ready ({why}); retry"), 503);
    }
    // A WorkloadSpread created a moment ago may not be in the cache yet (`index::lookup`).
    if let Some(namespace) = owned_pod_create(&request) {
        if let Err(e) = app.capabilities.catch_up(namespace).await {
            tracing::warn!(namespace, "{e}");
            return evaluate::rejection(uid, e.to_string(), 503);
        }
    }
    // A re-invocation (a later webhook changed the pod): the first answer again, no claim.
    if request["object"]["metadata"]["annotations"][reinvoke::TOKEN_ANNOTATION].is_string() {
        let (worker, asked, held) = (app.clone(), request.clone(), slot.clone());
        let again = tokio::task::spawn_blocking(move || {
            // The gauge falls before the slot is given back (a tuple drops in order).
            let _held = (Running::start(&worker.metrics.limits), held);
            let caps: &dyn Capabilities = worker.capabilities.as_ref();
            let stored =
                |ns: &str, selector: &str| worker.capabilities.any_stored_pod(ns, selector);
            reinvoke::answer(
                &asked,
                &worker.tokens,
                caps,
                &stored,
                crate::clock::unix_now(),
            )
        });
        if let Ok(Some(answer)) = again.await {
            app.metrics.reinvocations.inc();
            return answer;
        }
    }
    if app.skip_unrelated {
        if let Some(answer) = unrelated_pod_answer(app, &request) {
            app.metrics.unrelated.inc();
            return answer;
        }
    }
    if let Some(namespace) = may_claim(&request) {
        if !app.claims.try_take(namespace, Instant::now()) {
            app.metrics.limits.refuse(Refusal::ClaimRate);
            app.metrics
                .limits
                .claims_limited
                .get_or_create(&NamespaceLabels {
                    namespace: namespace.to_string(),
                })
                .inc();
            return evaluate::rejection(uid, app.claims.refusal(namespace), 429);
        }
    }
    let kept = spread_by_another(app, &request).await;
    let worker = app.clone();
    let evaluation = tokio::task::spawn_blocking(move || {
        let _held = (Running::start(&worker.metrics.limits), slot);
        let caps: Arc<dyn Capabilities> = match about_workloadspread(&request) {
            true => Arc::new(ShowingContested(worker.capabilities.clone())),
            false => worker.capabilities.clone(),
        };
        let mut response = evaluate::evaluate(&worker.engine, &request, &worker.settings, caps);
        reinvoke::sign(
            &request,
            &mut response,
            &worker.tokens,
            crate::clock::unix_now(),
        );
        // After the signature: a pod carrying another webhook's placement gets no token.
        if let Some(matched) = &kept {
            keep_matched(&request, &mut response, matched);
        }
        response
    });
    match evaluation.await {
        Ok(r) => r,
        Err(e) => evaluate::rejection(uid, format!("policy evaluation failed: {e}"), 500),
    }
}

/// The `matched-workloadspread` annotation of a pod creation when it names a WorkloadSpread
/// this host stands back from (`index::contests`): the placement of the webhook called
/// before this one (OpenKruise's). A spread not stood back from yet is read live first:
/// OpenKruise's webhook stores its status write (the pod in `creatingPods`) before the pod
/// reaches this one, so a replica of it still on after a hand-over is found here, pod by pod,
/// before this host spreads the pod a second time. A caller's own copy of the annotation
/// only costs that read.
async fn spread_by_another(app: &App, request: &Value) -> Option<String> {
    use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION as MATCHED;
    if !super::classify::pod_create(request) {
        return None;
    }
    let namespace = request["namespace"].as_str()?;
    let matched = request["object"]["metadata"]["annotations"][MATCHED].as_str()?;
    let name = MatchedWorkloadSpread::parse(matched).ok()?.name;
    let caps = &app.capabilities;
    let stood_back =
        caps.stands_back_from(namespace, &name) || caps.contested_now(namespace, &name).await;
    stood_back.then(|| matched.to_string())
}

/// Keeps `matched` (another webhook's placement, [`spread_by_another`]) on a pod the
/// policy let through without placing it: the policy strips that annotation from every
/// pod, as metadata only this system writes. A pod the policy placed (a spread it does
/// not stand back from covers it, whatever the annotation named) keeps the policy's.
fn keep_matched(request: &Value, response: &mut AdmissionResponse, matched: &str) {
    use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION as MATCHED;
    if !response.allowed {
        return;
    }
    let object = &request["object"];
    let Some(mut pod) = evaluate::patched(object, response) else {
        return;
    };
    let annotations = &mut pod["metadata"]["annotations"];
    if annotations.is_null() {
        *annotations = json!({});
    }
    let Some(annotations) = annotations.as_object_mut() else {
        return;
    };
    if annotations.contains_key(MATCHED) {
        return;
    }
    annotations.insert(MATCHED.into(), Value::String(matched.to_string()));
    response.patch = None;
    response.patch_type = None;
    evaluate::patch_to(response, object, &pod);
}

fn allowed(request: &Value) -> AdmissionResponse {
    AdmissionResponse {
        uid: request["uid"].as_str().unwrap_or_default().to_string(),
        allowed: true,
        patch_type: None,
        patch: None,
        status: None,
        audit_annotations: None,
        warnings: None,
    }
}

/// The policy's answer to a pod request (create, delete, eviction) in a namespace where
/// the synced WorkloadSpread cache holds none — allowed, and a created pod stripped of
/// the metadata only this system writes — given without instantiating the module: most
/// pods of a cluster are not spread.
/// `None` (ask the guest) for anything else or while the cache is not synced.
fn unrelated_pod_answer(app: &App, request: &Value) -> Option<AdmissionResponse> {
    let resource = &request["resource"];
    if resource["group"] != "" || resource["resource"] != "pods" {
        return None;
    }
    let namespace = request["namespace"].as_str()?;
    if app.capabilities.has_workloadspread(namespace)? {
        return None;
    }
    let mut answer = allowed(request);
    // As the guest does with every pod it is asked to create: the metadata only this
    // system writes leaves an incoming pod (`core::pods::strip_system_metadata`).
    let create = request["operation"] == "CREATE"
        && request["subResource"]
            .as_str()
            .unwrap_or_default()
            .is_empty();
    if create && request["object"].is_object() {
        let mut clean = request["object"].clone();
        if !workloadspread_core::pods::strip_system_metadata(&mut clean).is_empty() {
            evaluate::patch_to(&mut answer, &request["object"], &clean);
        }
    }
    Some(answer)
}

fn outcome_of(r: &AdmissionResponse) -> Outcome {
    match (r.allowed, &r.patch, &r.status) {
        (true, Some(_), _) => Outcome::Mutated,
        (true, None, _) => Outcome::Allowed,
        (false, _, Some(s)) if s.code >= 500 => Outcome::Error,
        (false, _, _) => Outcome::Rejected,
    }
}

/// The API server accepts absent fields; explicit nulls are noise in its audit log.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another webhook's placement survives the policy's strip; the policy's own placement,
    /// or a refusal, is left as it is.
    #[test]
    fn another_webhooks_placement_is_kept_only_where_the_policy_placed_nothing() {
        use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION as MATCHED;
        let theirs = r#"{"name":"s","subset":"a"}"#;
        let ours = r#"{"name":"t","subset":"b"}"#;
        let request = json!({"uid": "u", "object": {"metadata": {"name": "p",
            "annotations": {MATCHED: theirs, "other": "x"}}}});
        let answer = |to: Option<Value>| {
            let mut r = evaluate::rejection("u".into(), String::new(), 400);
            r.allowed = true;
            r.status = None;
            if let Some(to) = to {
                evaluate::patch_to(&mut r, &request["object"], &to);
            }
            r
        };
        let annotation = |r: &AdmissionResponse| {
            evaluate::patched(&request["object"], r).unwrap()["metadata"]["annotations"][MATCHED]
                .clone()
        };
        // Stripped by the policy (its spread hidden): put back.
        let mut stripped = answer(Some(json!({"metadata": {"name": "p",
            "annotations": {"other": "x"}}})));
        keep_matched(&request, &mut stripped, theirs);
        assert_eq!(annotation(&stripped), theirs);
        // Placed by the policy in a spread it does not stand back from: the policy's.
        let mut placed = answer(Some(json!({"metadata": {"name": "p",
            "annotations": {MATCHED: ours, "other": "x"}}})));
        keep_matched(&request, &mut placed, theirs);
        assert_eq!(annotation(&placed), ours);
        // No patch at all: nothing to change.
        let mut unchanged = answer(None);
        keep_matched(&request, &mut unchanged, theirs);
        assert_eq!(annotation(&unchanged), theirs);
        let mut refused = evaluate::rejection("u".into(), "no".into(), 400);
        keep_matched(&request, &mut refused, theirs);
        assert!(refused.patch.is_none() && !refused.allowed);
    }

    #[test]
    fn nulls_are_dropped() {
        let v = without_nulls(json!({"uid": "u", "patch": null, "allowed": true}));
        assert_eq!(v, json!({"uid": "u", "allowed": true}));
    }
}

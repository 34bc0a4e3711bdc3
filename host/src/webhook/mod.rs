//! The HTTPS admission webhook `serve` runs: the policy module with cluster-backed
//! capabilities (`index/`) and exact counters (`counter/`). This file: the routes and what
//! a handler holds ([`App`]); `/mutate` and `/validate` go admit → evaluate → decide.
//! Beside it: the request's body and slots (`body.rs`), the caller's limits (`limits.rs`),
//! the listener and its connections' deadlines (`listener.rs`, `guard.rs`), `/convert`
//! (`convert.rs`), re-invocation tokens (`reinvoke.rs`), the health port
//! (`startup.rs`) and the webhooks written into their configurations (`registration.rs`).
//! Certificates are the `tls/` wing's; the webhook only uses them.

pub mod body;
pub mod convert;
pub mod guard;
pub mod limits;
pub mod listener;
pub mod registration;
pub mod reinvoke;
pub mod startup;

use crate::capabilities::{AllowList, Capabilities};
use crate::engine::evaluate::{self, AdmissionResponse};
use crate::engine::PolicyEngine;
use crate::index::KubeCapabilities;
use crate::metrics::{
    Endpoint, EndpointLabels, EvalLabels, Metrics, NamespaceLabels, Outcome, Refusal,
};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use limits::ClaimLimiter;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long an admission waits for the caches' initial list.
const CACHE_WAIT: Duration = Duration::from_secs(5);

/// Everything a request handler needs.
pub struct App {
    pub engine: Arc<PolicyEngine>,
    pub settings: Value,
    pub capabilities: Arc<KubeCapabilities>,
    pub metrics: Arc<Metrics>,
    /// Bounds concurrent evaluations (each holds a blocking thread and up to the guest's
    /// memory cap): a permit is taken once the body is read (`body.rs`).
    pub slots: Semaphore,
    /// Requests with bodies over [`LARGE_BODY`] (or of unknown length) take one of these
    /// before their body is read: a few of them at a time, so large bodies cannot hold the
    /// read budget while ordinary admissions (a few KiB) wait.
    pub large_slots: Semaphore,
    /// Bytes of bodies read or being read, at most ([`body::read_budget`]): taken as they
    /// arrive, given back when the request is answered.
    pub read_budget: Semaphore,
    /// `/convert` (which needs no client certificate) on a budget of its own: conversions
    /// never take an evaluation slot.
    pub convert_slots: Semaphore,
    /// Largest AdmissionReview body accepted.
    pub max_request_bytes: usize,
    /// Answer pod requests of namespaces without a WorkloadSpread without the guest.
    pub skip_unrelated: bool,
    /// Pod creations that may claim a slot, per namespace.
    pub claims: ClaimLimiter,
    /// How long a request's body may take to arrive (its headers: [`ServeOptions`]).
    pub body_timeout: Duration,
    /// `/mutate` and `/validate` answer only callers that presented a client certificate
    /// of the configured CA (`--client-ca-file`): the API server.
    pub client_auth: bool,
    /// ... naming one of these (`--client-cert-identity`; empty: any the CA signed).
    pub client_identities: Vec<String>,
    /// Generated certificates: whether their CA bundle reaches the webhook
    /// configurations (`/readyz` fails once the served certificate would expire first).
    pub certificates: Option<Arc<crate::tls::staleness::BundleWatch>>,
    /// Keys of the tokens that make a re-invocation of the pod webhook answer as the first
    /// invocation did, without a second claim (`reinvoke.rs`).
    pub tokens: Arc<reinvoke::TokenKeys>,
}

/// The connection's peer's verified client certificate, if it presented one: the names
/// it goes by (`client_auth::names_of`).
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub Option<Vec<String>>);

pub use body::{LARGE_BODY, LARGE_SLOTS};
pub use listener::{bind, serve, ServeOptions};
/// Conversions answered at once (`/convert`).
pub const CONVERT_SLOTS: usize = 2;

/// The webhook's routes. `/metrics` is served on the health port only (`startup.rs`):
/// its labels name namespaces and workloads, and the webhook port is reachable by every
/// pod the NetworkPolicy lets through.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/convert", post(convert_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            body::refuse_oversized,
        ))
        .with_state(app)
}

async fn convert_handler(State(app): State<Arc<App>>, request: Request) -> Response {
    let body = match body::read(&app, request).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let _slot = match body::slot(&app, &app.convert_slots, || {
        format!("{CONVERT_SLOTS} conversions are already being answered; retry")
    })
    .await
    {
        Ok(s) => s,
        Err(response) => return response,
    };
    match serde_json::from_slice::<Value>(&body.bytes) {
        Ok(review) if review["request"].is_object() => {
            axum::Json(convert::review(&review)).into_response()
        }
        Ok(_) => bad_request("expected a ConversionReview with a request".into()),
        Err(e) => bad_request(format!("the body is not a ConversionReview: {e}")),
    }
}

async fn mutate(State(app): State<Arc<App>>, request: Request) -> Response {
    admit(app, Endpoint::Mutate, request).await
}

async fn validate(State(app): State<Arc<App>>, request: Request) -> Response {
    admit(app, Endpoint::Validate, request).await
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    ready_answer(&app)
}

/// `/readyz` of a serving host: "ok", or 503 with what it waits for.
pub fn ready_answer(app: &App) -> Response {
    // Not part of `KubeCapabilities::not_ready_reason`: admissions are still answered
    // (whoever's TLS handshake still succeeds is served).
    let certificates = app
        .certificates
        .as_ref()
        .and_then(|c| c.refresh(crate::tls::unix_now()));
    match app.capabilities.not_ready_reason().or(certificates) {
        None => "ok".into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn admit(app: Arc<App>, endpoint: Endpoint, request: Request) -> Response {
    let started = Instant::now();
    if app.client_auth {
        let presented = request
            .extensions()
            .get::<PeerCertificate>()
            .and_then(|p| p.0.clone());
        if let Err(why) = client_allowed(&app, presented.as_deref()) {
            return (StatusCode::FORBIDDEN, why.to_string()).into_response();
        }
    }
    // The body first, then a slot: a slow sender holds no evaluation slot.
    let body = match body::read(&app, request).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let _permit = match body::slot(&app, &app.slots, || {
        format!(
            "all {} evaluation slots stayed busy for {:?}; retry (raise --max-concurrency with \
             the memory limit, or add replicas)",
            app.slots.available_permits().max(1),
            body::SLOT_WAIT
        )
    })
    .await
    {
        Ok(p) => p,
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
    let response = evaluate(&app, request).await;
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

async fn evaluate(app: &Arc<App>, request: Value) -> AdmissionResponse {
    let created = workloadspread_created(&request).map(str::to_string);
    let response = decide(app, request).await;
    // A WorkloadSpread this host lets through is stored next: the namespace's remembered
    // list no longer holds. One it refuses, or a dry run, is never stored: forgetting
    // there would only make the namespace's next pods list again (`index::lookup`).
    if let (Some(namespace), true) = (created, response.allowed) {
        app.capabilities.forget_lookup(&namespace).await;
    }
    response
}

async fn decide(app: &Arc<App>, request: Value) -> AdmissionResponse {
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
        let (worker, asked) = (app.clone(), request.clone());
        let again = tokio::task::spawn_blocking(move || {
            let caps: &dyn Capabilities = worker.capabilities.as_ref();
            reinvoke::answer(&asked, &worker.tokens, caps, crate::tls::unix_now())
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
    let worker = app.clone();
    let evaluation = tokio::task::spawn_blocking(move || {
        let caps: Arc<dyn Capabilities> = worker.capabilities.clone();
        let mut response = evaluate::evaluate(&worker.engine, &request, &worker.settings, caps);
        reinvoke::sign(
            &request,
            &mut response,
            &worker.tokens,
            crate::tls::unix_now(),
        );
        response
    });
    match evaluation.await {
        Ok(r) => r,
        Err(e) => evaluate::rejection(uid, format!("policy evaluation failed: {e}"), 500),
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
    let mut answer = AdmissionResponse {
        uid: request["uid"].as_str().unwrap_or_default().to_string(),
        allowed: true,
        patch_type: None,
        patch: None,
        status: None,
        audit_annotations: None,
        warnings: None,
    };
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

/// The namespace a pod creation may claim a slot in: not a dry run, and the pod has a
/// controller (unowned pods are never spread). Such creations are rate-limited, by the
/// namespace the policy decides in — the pod's own `metadata.namespace` when it names one
/// (a review POSTed by anyone may give another in `request.namespace`), else the
/// request's.
fn may_claim(request: &Value) -> Option<&str> {
    let requested = owned_pod_create(request).filter(|_| !dry_run(request))?;
    let own = request["object"]["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty());
    Some(own.unwrap_or(requested))
}

/// The namespace of a pod creation (dry run or not) whose pod has a controller: the
/// requests a WorkloadSpread may spread.
fn owned_pod_create(request: &Value) -> Option<&str> {
    let resource = &request["resource"];
    let is_pod_create = resource["group"] == ""
        && resource["resource"] == "pods"
        && request["subResource"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        && request["operation"] == "CREATE";
    let owned = request["object"]["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    (is_pod_create && owned)
        .then(|| request["namespace"].as_str())
        .flatten()
}

/// Whether the API server will store nothing of this request (`dryRun`).
fn dry_run(request: &Value) -> bool {
    request["dryRun"] == true
}

/// The namespace of a WorkloadSpread creation (any served version) that is not a dry run.
fn workloadspread_created(request: &Value) -> Option<&str> {
    let resource = &request["resource"];
    (resource["group"] == "apps.kruise.io"
        && resource["resource"] == "workloadspreads"
        && request["operation"] == "CREATE"
        && !dry_run(request))
    .then(|| request["namespace"].as_str())
    .flatten()
}

fn outcome_of(r: &AdmissionResponse) -> Outcome {
    match (r.allowed, &r.patch, &r.status) {
        (true, Some(_), _) => Outcome::Mutated,
        (true, None, _) => Outcome::Allowed,
        (false, _, Some(s)) if s.code >= 500 => Outcome::Error,
        (false, _, _) => Outcome::Rejected,
    }
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
}

/// The API server accepts absent fields; explicit nulls are noise in its audit log.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

/// Allow-list from a policy's metadata (`contextAwareResources`, `hostCapabilities`).
pub fn allow_list_from_metadata(metadata: &Value) -> AllowList {
    let resources = metadata["contextAwareResources"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|r| {
                    Some((
                        r["apiVersion"].as_str()?.to_string(),
                        r["kind"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let capabilities = metadata["hostCapabilities"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    AllowList {
        capabilities,
        resources: Some(resources),
        group_kinds: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_allow_list() {
        let metadata: Value = serde_yaml::from_str(include_str!("../../../metadata.yml")).unwrap();
        let allow = allow_list_from_metadata(&metadata);
        assert!(allow.permits_resource("apps/v1", "ReplicaSet"));
        assert!(!allow.permits_resource("v1", "Secret"));
        assert!(allow.permits_capability("kubernetes", "get_resource"));
        assert!(!allow.permits_capability("kubernetes", "list_resources_all"));
    }

    /// The claim limiter counts the namespace the claim is made in: the pod's own, which
    /// a review POSTed by anyone may contradict in `request.namespace` (#40).
    #[test]
    fn claims_are_limited_in_the_pods_own_namespace() {
        let review = |pod_ns: Value, dry_run: bool| {
            json!({"resource": {"group": "", "resource": "pods"}, "operation": "CREATE",
                "namespace": "decoy", "dryRun": dry_run,
                "object": {"metadata": {"namespace": pod_ns,
                    "ownerReferences": [{"controller": true, "kind": "ReplicaSet", "name": "web"}]}}})
        };
        assert_eq!(may_claim(&review(json!("team-a"), false)), Some("team-a"));
        assert_eq!(may_claim(&review(json!(""), false)), Some("decoy"));
        assert_eq!(may_claim(&review(Value::Null, false)), Some("decoy"));
        assert_eq!(may_claim(&review(json!("team-a"), true)), None, "a dry run");
    }

    #[test]
    fn nulls_are_dropped() {
        let v = without_nulls(json!({"uid": "u", "patch": null, "allowed": true}));
        assert_eq!(v, json!({"uid": "u", "allowed": true}));
    }
}

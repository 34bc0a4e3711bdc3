//! `serve`: the HTTPS admission webhook running the policy module with cluster-backed
//! capabilities and exact counters.

pub mod certs;
pub mod commit;
pub mod convert;
pub mod guard;
pub mod kube_state;
pub mod limits;
pub mod metrics;
pub mod reserve;
pub mod rotation;
pub mod staleness;
pub mod tls;

use crate::capabilities::{AllowList, Capabilities};
use crate::engine::PolicyEngine;
use crate::run::{self, AdmissionResponse};
use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use kube_state::KubeCapabilities;
use limits::{ClaimLimiter, Refusal};
use metrics::{Endpoint, EndpointLabels, EvalLabels, Metrics, Outcome};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_rustls::TlsAcceptor;

/// How long an admission waits for the caches' initial list.
const CACHE_WAIT: Duration = Duration::from_secs(5);

/// Everything a request handler needs.
pub struct App {
    pub engine: Arc<PolicyEngine>,
    pub settings: Value,
    pub capabilities: Arc<KubeCapabilities>,
    pub metrics: Arc<Metrics>,
    /// Bounds concurrent admissions, body included: a permit is taken before the body is
    /// read (each evaluation holds a blocking thread and up to the guest's memory cap).
    pub slots: Semaphore,
    /// Requests with bodies over [`LARGE_BODY`] (or of unknown length) also take one of
    /// these first: a few of them at a time, so large bodies cannot hold every slot while
    /// ordinary admissions (a few KiB) wait.
    pub large_slots: Semaphore,
    /// Largest AdmissionReview body accepted.
    pub max_request_bytes: usize,
    /// Answer pod requests of namespaces without a WorkloadSpread without the guest.
    pub skip_unrelated: bool,
    /// Pod creations that may claim a slot, per namespace.
    pub claims: ClaimLimiter,
    /// How long a request's body may take to arrive (its headers: [`ServeOptions`]).
    pub read_timeout: Duration,
    /// `/mutate` and `/validate` answer only callers that presented a client certificate
    /// of the configured CA (`--client-ca-file`): the API server.
    pub client_auth: bool,
    /// Generated certificates: whether their CA bundle reaches the webhook
    /// configurations (`/readyz` fails once the served certificate would expire first).
    pub certificates: Option<Arc<staleness::BundleWatch>>,
}

/// Whether the connection's peer presented a verified client certificate.
#[derive(Clone, Copy, Debug)]
pub struct PeerCertificate(pub bool);

/// How long a request waits for an evaluation slot before it is refused (503): below the
/// API server's webhook timeout, so the refusal says why instead of timing out.
const SLOT_WAIT: Duration = Duration::from_secs(5);
/// Bodies above this take a large-body slot too (pod reviews are a few KiB).
pub const LARGE_BODY: usize = 1 << 20;
/// Large-body slots.
pub const LARGE_SLOTS: usize = 2;

/// The webhook's routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/convert", post(convert_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            refuse_oversized,
        ))
        .with_state(app)
}

/// Probes and metrics only, for a plain-HTTP port of their own (`--health-listen`): the
/// webhook port may require client certificates and admit only the API server.
pub fn health_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(app)
}

/// Answers 413 from the declared length before any of the body is read, so the client
/// (which may wait on `Expect: 100-continue`) gets the reason instead of a reset.
async fn refuse_oversized(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(n) if n > app.max_request_bytes => too_large(&app),
        _ => next.run(request).await,
    }
}

/// An evaluation slot, then the body within the read timeout and the size limit. The
/// slot comes first: bodies are only read (and held in memory) for admissions that will
/// be evaluated, so concurrency × body size stays bounded (`limits::check_memory_fit`).
async fn slot_and_body(
    app: &App,
    request: Request,
) -> Result<(SemaphorePermit<'_>, Bytes), Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let _large = match declared {
        Some(n) if n <= LARGE_BODY => None,
        _ => match tokio::time::timeout(SLOT_WAIT, app.large_slots.acquire()).await {
            Ok(Ok(p)) => Some(p),
            Ok(Err(_)) => return Err(unavailable("the server is shutting down; retry".into())),
            Err(_) => {
                app.metrics.limits.refuse(Refusal::Busy);
                return Err(unavailable(format!(
                    "{LARGE_SLOTS} requests over {LARGE_BODY} bytes are already being read; retry"
                )));
            }
        },
    };
    let permit = match tokio::time::timeout(SLOT_WAIT, app.slots.acquire()).await {
        Ok(Ok(p)) => p,
        Ok(Err(_)) => return Err(unavailable("the server is shutting down; retry".into())),
        Err(_) => {
            app.metrics.limits.refuse(Refusal::Busy);
            return Err(unavailable(format!(
                "all {} evaluation slots stayed busy for {SLOT_WAIT:?}; retry (raise \
                 --max-concurrency with the memory limit, or add replicas)",
                app.slots.available_permits().max(1)
            )));
        }
    };
    let body = request.into_body();
    match tokio::time::timeout(
        app.read_timeout,
        axum::body::to_bytes(body, app.max_request_bytes),
    )
    .await
    {
        Ok(Ok(bytes)) => Ok((permit, bytes)),
        Ok(Err(e)) => Err(body_error(app, &e)),
        Err(_) => {
            app.metrics.limits.refuse(Refusal::BodyTimeout);
            Err((
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {:?} (--request-read-timeout-seconds)",
                    app.read_timeout
                ),
            )
                .into_response())
        }
    }
}

fn unavailable(message: String) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
}

fn too_large(app: &App) -> Response {
    let message = format!(
        "the AdmissionReview is larger than {} bytes (raise --max-request-bytes)",
        app.max_request_bytes
    );
    (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
}

async fn convert_handler(State(app): State<Arc<App>>, request: Request) -> Response {
    let (_permit, body) = match slot_and_body(&app, request).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    match serde_json::from_slice::<Value>(&body) {
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

/// The answer to a body that could not be read (over the limit, or the connection broke).
fn body_error(app: &App, e: &axum::Error) -> Response {
    let too_big =
        std::error::Error::source(e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
    if too_big {
        return too_large(app);
    }
    (
        StatusCode::BAD_REQUEST,
        format!("unreadable request body: {e}"),
    )
        .into_response()
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    // Not part of `KubeCapabilities::not_ready_reason`: admissions are still answered
    // (whoever's TLS handshake still succeeds is served).
    let certificates = app
        .certificates
        .as_ref()
        .and_then(|c| c.refresh(tls::unix_now()));
    match app.capabilities.not_ready_reason().or(certificates) {
        None => "ok".into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}

async fn admit(app: Arc<App>, endpoint: Endpoint, request: Request) -> Response {
    let started = Instant::now();
    let authenticated = request
        .extensions()
        .get::<PeerCertificate>()
        .is_some_and(|p| p.0);
    if app.client_auth && !authenticated {
        return (
            StatusCode::FORBIDDEN,
            "this webhook answers only the API server: present a client certificate of the CA \
             given to --client-ca-file (the API server's admission configuration names it in a \
             kubeConfigFile; docs/operations.md, Security)",
        )
            .into_response();
    }
    let (_permit, body) = match slot_and_body(&app, request).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let parsed = serde_json::from_slice::<Value>(&body);
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

async fn evaluate(app: &Arc<App>, request: Value) -> AdmissionResponse {
    let created = workloadspread_created(&request).map(str::to_string);
    let response = decide(app, request).await;
    // A WorkloadSpread this host lets through is stored next: the namespace's remembered
    // list no longer holds. One it refuses, or a dry run, is never stored: forgetting
    // there would only make the namespace's next pods list again (`kube_state::lookup`).
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
        return run::rejection(uid, format!("the host is not ready ({why}); retry"), 503);
    }
    // A WorkloadSpread created a moment ago may not be in the cache yet (`kube_state::lookup`).
    if let Some(namespace) = owned_pod_create(&request) {
        if let Err(e) = app.capabilities.catch_up(namespace).await {
            tracing::warn!(namespace, "{e}");
            return run::rejection(uid, e.to_string(), 503);
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
                .get_or_create(&limits::NamespaceLabels {
                    namespace: namespace.to_string(),
                })
                .inc();
            return run::rejection(uid, app.claims.refusal(namespace), 429);
        }
    }
    let worker = app.clone();
    let evaluation = tokio::task::spawn_blocking(move || {
        let caps: Arc<dyn Capabilities> = worker.capabilities.clone();
        run::evaluate(&worker.engine, &request, &worker.settings, caps)
    });
    match evaluation.await {
        Ok(r) => r,
        Err(e) => run::rejection(uid, format!("policy evaluation failed: {e}"), 500),
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
            run::patch_to(&mut answer, &request["object"], &clean);
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

/// Connection limits of a listener.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// A request's headers must arrive within this of its first byte (slowloris); a
    /// connection's TLS handshake too.
    pub header_timeout: Duration,
    /// A connection may wait this long for its next request (longer than the API
    /// server's 90 s, so that the client closes idle connections, not us: `guard.rs`).
    pub idle_timeout: Duration,
    /// Open connections; past it, new ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// After shutdown, in-flight requests may finish for this long.
    pub drain: Duration,
}

/// A connection's IO under its deadlines (`guard.rs`).
fn guarded<I>(
    io: I,
    state: &Arc<guard::ConnState>,
    options: &ServeOptions,
) -> hyper_util::rt::TokioIo<guard::Guarded<I>> {
    hyper_util::rt::TokioIo::new(guard::Guarded::new(
        io,
        state.clone(),
        options.header_timeout,
        options.idle_timeout,
    ))
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown`
/// resolves, then lets in-flight requests finish (bounded by `options.drain`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
    options: ServeOptions,
) -> Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(options.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        // A connection slot first: at the cap, connections queue in the backlog instead
        // of each holding a task, a TLS state and buffers.
        let slot = tokio::select! {
            slot = connections.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _slot = slot;
            let http = hyper::server::conn::http1::Builder::new();
            let state = guard::ConnState::new();
            let with_peer = |presented: bool| {
                let state = state.clone();
                let tagged = tower::ServiceExt::map_request(
                    router,
                    move |mut r: hyper::Request<hyper::body::Incoming>| {
                        state.handled();
                        r.extensions_mut().insert(PeerCertificate(presented));
                        r
                    },
                );
                hyper_util::service::TowerToHyperService::new(tagged)
            };
            let Some(acceptor) = acceptor else {
                let service = with_peer(false);
                let conn = http.serve_connection(guarded(tcp, &state, &options), service);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "connection: {e}");
                }
                return;
            };
            let handshake = tokio::time::timeout(options.header_timeout, acceptor.accept(tcp));
            let stream = match handshake.await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            // rustls verified the certificate against the client CA when one was sent.
            let service = with_peer(stream.get_ref().1.peer_certificates().is_some());
            let conn = http.serve_connection(guarded(stream, &state, &options), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
    tracing::info!("shutting down: draining in-flight requests");
    if tokio::time::timeout(options.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {:?}; closing", options.drain);
    }
    Ok(())
}

/// Binds `addr`, reporting a clear error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))
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

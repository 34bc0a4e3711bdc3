//! The HTTPS admission webhook `serve` runs: the policy module with cluster-backed
//! capabilities (`index/`) and exact counters (`counter/`). This file: the routes and what
//! a handler holds ([`App`]); `/mutate` and `/validate` go admit → evaluate → decide.
//! Beside it: the request's body and slots (`body.rs`), the caller's limits (`limits.rs`),
//! the listener and its connections' deadlines (`workloadspread_kube::serve`), `/convert`
//! (`convert.rs`), re-invocation tokens (`reinvoke.rs`), the health port
//! (`startup.rs`) and the webhooks written into their configurations (`registration.rs`).
//! Certificates are the `tls/` wing's; the webhook only uses them.

mod admit;
pub mod body;
mod classify;
pub mod convert;
pub mod limits;
pub mod registration;
pub mod reinvoke;
pub mod startup;

use crate::capabilities::AllowList;
use crate::engine::PolicyEngine;
use crate::index::KubeCapabilities;
use crate::metrics::{Endpoint, Metrics};
use admit::admit;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use limits::ClaimLimiter;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Everything a request handler needs.
pub struct App {
    pub engine: Arc<PolicyEngine>,
    pub settings: Value,
    pub capabilities: Arc<KubeCapabilities>,
    pub metrics: Arc<Metrics>,
    /// Bounds concurrent evaluations (each holds a blocking thread and up to the guest's
    /// memory cap): a permit is taken once the body is read (`body.rs`) and held by the
    /// evaluation itself, which may outlive its request.
    pub slots: Arc<Semaphore>,
    /// Requests with bodies over [`LARGE_BODY`] (or of unknown length) take one of these
    /// before their body is read: a few of them at a time, so large bodies cannot hold the
    /// read budget while ordinary admissions (a few KiB) wait.
    pub large_slots: Arc<Semaphore>,
    /// Bytes of bodies read or being read, at most ([`body::read_budget`]): taken as they
    /// arrive, given back when the request is answered.
    pub read_budget: Semaphore,
    /// The bytes of `read_budget` each peer address holds (at most half: `body::peer_share`).
    pub peer_reads: body::PeerReads,
    /// `/convert`'s bodies on a budget of their own (`body::convert_budget`), shared per
    /// peer the same way.
    pub convert_budget: Semaphore,
    pub convert_peer_reads: body::PeerReads,
    /// `/convert` (which needs no client certificate) on a budget of its own: conversions
    /// never take an evaluation slot.
    pub convert_slots: Arc<Semaphore>,
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

pub use body::{LARGE_BODY, LARGE_SLOTS};
/// The listeners (connection limits, shedding, deadlines) are shared with the controller.
pub use workloadspread_kube::serve::{bind, serve, PeerCertificate, ServeOptions};
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
    let body = match body::read(&app, request, body::Budget::Conversions).await {
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
        .and_then(|c| c.refresh(crate::clock::unix_now()));
    match app.capabilities.not_ready_reason().or(certificates) {
        None => "ok".into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
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
}

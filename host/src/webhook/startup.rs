//! The health port from the first moment of `serve` (issue #41): it is bound before any
//! slow step, so the liveness probe passes at once, `/readyz` says which step the host is
//! still in (and, once it serves, what it waits for), and `/metrics` is scraped from the
//! start.

use super::App;
use crate::metrics::Metrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Where the host is in its start, and the app once it serves.
pub struct Startup {
    began: Instant,
    step: Mutex<&'static str>,
    app: OnceLock<Arc<App>>,
    metrics: Arc<Metrics>,
}

impl Startup {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Startup {
            began: Instant::now(),
            step: Mutex::new("starting"),
            app: OnceLock::new(),
            metrics,
        })
    }

    /// The step the host is in now (what `/readyz` says it waits for).
    pub fn step(&self, what: &'static str) {
        tracing::debug!(after = ?self.began.elapsed(), "start: {what}");
        *self.step.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    /// The host serves: `/readyz` is the app's from now on.
    pub fn serving(&self, app: Arc<App>) {
        let _ = self.app.set(app);
        tracing::info!(after = ?self.began.elapsed(), "start: serving");
    }

    /// Why the host is not ready yet while it starts (`None` once it serves).
    fn starting(&self) -> Option<String> {
        if self.app.get().is_some() {
            return None;
        }
        let step = *self.step.lock().unwrap_or_else(|p| p.into_inner());
        Some(format!(
            "starting: {step} ({:.1}s since the start)",
            self.began.elapsed().as_secs_f64()
        ))
    }
}

/// Probes and metrics, for a plain-HTTP port of their own (`--health-listen`): bound
/// before the host's slow steps; the webhook port may require client certificates.
pub fn health_router(startup: Arc<Startup>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(startup)
}

async fn readyz(State(startup): State<Arc<Startup>>) -> Response {
    if let Some(why) = startup.starting() {
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    match startup.app.get() {
        Some(app) => super::ready_answer(app),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting").into_response(),
    }
}

async fn metrics_text(State(startup): State<Arc<Startup>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        startup.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn readyz_names_the_step_while_starting_and_healthz_answers() {
        let startup = Startup::new(Arc::new(Metrics::new()));
        startup.step("loading the policy module");
        let get = |path: &'static str| {
            let router = health_router(startup.clone());
            async move {
                let request = axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap();
                let response = router.oneshot(request).await.unwrap();
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .unwrap();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        assert_eq!(get("/healthz").await, (StatusCode::OK, "ok".into()));
        let (status, body) = get("/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.starts_with("starting: loading the policy module ("),
            "{body}"
        );
        let (status, body) = get("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("workloadspread_host_ready"), "{body}");
    }
}

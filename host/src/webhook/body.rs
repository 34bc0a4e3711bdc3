//! A request's body, read before it may take an evaluation slot (issue #41): a slow or
//! idle sender holds no slot — only the bytes it actually sent, out of a budget shared by
//! every body being read or evaluated — and is cut at a short deadline. Bodies over
//! [`LARGE_BODY`] (or of unknown length) also need one of [`LARGE_SLOTS`] first, so a
//! few large reviews cannot hold the whole budget.

use super::App;
use crate::metrics::Refusal;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// Bodies above this take a large-body slot too (pod reviews are a few KiB).
pub const LARGE_BODY: usize = 1 << 20;
/// Large-body slots.
pub const LARGE_SLOTS: usize = 2;
/// How long a request waits for a slot (evaluation, large body, conversion) before it is
/// refused (503): below the API server's webhook timeout, so the refusal says why instead
/// of timing out.
pub const SLOT_WAIT: Duration = Duration::from_secs(5);

/// Bytes of request bodies read or being read at once, at most: 32 MiB, or room for the
/// large-body slots' bodies at their largest.
pub fn read_budget(max_request_bytes: usize) -> usize {
    (32usize << 20).max(LARGE_SLOTS.saturating_mul(max_request_bytes))
}

/// A body read whole, and its share of the read budget (given back when dropped).
pub struct ReadBody<'a> {
    pub bytes: Bytes,
    _budget: Option<SemaphorePermit<'a>>,
}

/// Reads `request`'s body within `app.body_timeout` and `app.max_request_bytes`, taking
/// the bytes it receives from `app.read_budget` as they arrive.
pub async fn read<'a>(app: &'a App, request: Request) -> Result<ReadBody<'a>, Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let _large = match declared {
        Some(n) if n <= LARGE_BODY => None,
        _ => Some(
            slot(app, &app.large_slots, || {
                format!(
                    "{LARGE_SLOTS} requests over {LARGE_BODY} bytes are already being read; retry"
                )
            })
            .await?,
        ),
    };
    let deadline = Instant::now() + app.body_timeout;
    let mut body = request.into_body();
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0).min(app.max_request_bytes));
    let mut budget: Option<SemaphorePermit<'a>> = None;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(slow(app)),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(unreadable(e)),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > app.max_request_bytes {
            return Err(too_large(app));
        }
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let taken = match tokio::time::timeout_at(deadline, app.read_budget.acquire_many(n)).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(unavailable("the server is shutting down; retry".into())),
            Err(_) => {
                app.metrics.limits.refuse(Refusal::Busy);
                return Err(unavailable(
                    "request bodies being read fill the host's read budget; retry".into(),
                ));
            }
        };
        match budget.as_mut() {
            Some(b) => b.merge(taken),
            None => budget = Some(taken),
        }
        bytes.extend_from_slice(&data);
    }
    Ok(ReadBody {
        bytes: Bytes::from(bytes),
        _budget: budget,
    })
}

/// A permit of `slots` within [`SLOT_WAIT`], or the refusal (503) saying `why`.
pub async fn slot<'a>(
    app: &App,
    slots: &'a Semaphore,
    why: impl FnOnce() -> String,
) -> Result<SemaphorePermit<'a>, Response> {
    match tokio::time::timeout(SLOT_WAIT, slots.acquire()).await {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(_)) => Err(unavailable("the server is shutting down; retry".into())),
        Err(_) => {
            app.metrics.limits.refuse(Refusal::Busy);
            Err(unavailable(why()))
        }
    }
}

/// Answers 413 from the declared length before any of the body is read, so the client
/// (which may wait on `Expect: 100-continue`) gets the reason instead of a reset.
pub async fn refuse_oversized(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<App>>,
    request: Request,
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

pub fn unavailable(message: String) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
}

pub fn too_large(app: &App) -> Response {
    let message = format!(
        "the request body is larger than {} bytes (raise --max-request-bytes)",
        app.max_request_bytes
    );
    (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
}

fn slow(app: &App) -> Response {
    app.metrics.limits.refuse(Refusal::BodyTimeout);
    let message = format!(
        "the request body did not arrive within {:?} (--body-timeout-seconds)",
        app.body_timeout
    );
    (StatusCode::REQUEST_TIMEOUT, message).into_response()
}

fn unreadable(e: axum::Error) -> Response {
    (
        StatusCode::BAD_REQUEST,
        format!("unreadable request body: {e}"),
    )
        .into_response()
}

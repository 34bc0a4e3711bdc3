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
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
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

/// `/convert`'s own read budget (it needs no client certificate: security review R3, a
/// flood of conversions filled the admissions' budget): room for its slots' bodies.
pub fn convert_budget(max_request_bytes: usize) -> usize {
    super::CONVERT_SLOTS.saturating_mul(max_request_bytes)
}

/// The share of a read budget one peer address may hold at once: half (security review
/// R3). One peer cannot hold the whole budget; the API server's own bodies (a few KiB per
/// admission, the large ones on their two slots) stay far below it.
pub fn peer_share(budget: usize) -> usize {
    budget / 2
}

/// Bytes of bodies being read per peer address, each at most [`peer_share`] of a budget.
#[derive(Default)]
pub struct PeerReads(Mutex<HashMap<IpAddr, usize>>);

/// A peer's bytes counted in [`PeerReads`], given back when dropped.
pub struct PeerBytes<'a> {
    reads: &'a PeerReads,
    peer: IpAddr,
    bytes: usize,
}

impl PeerReads {
    /// Counts `n` more bytes of `held` (a peer's, `None` before its first frame) against
    /// `limit`; `false` when that would pass it (nothing counted).
    pub fn take<'a>(
        &'a self,
        peer: IpAddr,
        held: &mut Option<PeerBytes<'a>>,
        n: usize,
        limit: usize,
    ) -> bool {
        let mut reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = reads.get(&peer).copied().unwrap_or(0);
        if now.saturating_add(n) > limit {
            return false;
        }
        reads.insert(peer, now + n);
        match held {
            Some(h) => h.bytes += n,
            None => {
                *held = Some(PeerBytes {
                    reads: self,
                    peer,
                    bytes: n,
                })
            }
        }
        true
    }

    /// Bytes `peer` holds now.
    #[cfg(test)]
    pub fn of(&self, peer: IpAddr) -> usize {
        let reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        reads.get(&peer).copied().unwrap_or(0)
    }
}

impl Drop for PeerBytes<'_> {
    fn drop(&mut self) {
        let mut reads = self.reads.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(now) = reads.get_mut(&self.peer) {
            *now = now.saturating_sub(self.bytes);
            if *now == 0 {
                reads.remove(&self.peer);
            }
        }
    }
}

/// Which budget a body is read into: the admissions' or `/convert`'s.
#[derive(Clone, Copy)]
pub enum Budget {
    Admissions,
    Conversions,
}

/// A body read whole, and its share of the read budget (given back when dropped).
pub struct ReadBody<'a> {
    pub bytes: Bytes,
    _budget: Option<SemaphorePermit<'a>>,
    _peer: Option<PeerBytes<'a>>,
}

/// Reads `request`'s body within `app.body_timeout` and `app.max_request_bytes`, taking
/// the bytes it receives from the budget `which` names as they arrive, and its peer's
/// share of it ([`peer_share`]).
pub async fn read<'a>(
    app: &'a App,
    request: Request,
    which: Budget,
) -> Result<ReadBody<'a>, Response> {
    let (budget, budget_bytes, peer_reads) = match which {
        Budget::Admissions => (
            &app.read_budget,
            read_budget(app.max_request_bytes),
            &app.peer_reads,
        ),
        Budget::Conversions => (
            &app.convert_budget,
            convert_budget(app.max_request_bytes),
            &app.convert_peer_reads,
        ),
    };
    let peer = request
        .extensions()
        .get::<workloadspread_kube::serve::PeerAddr>()
        .map(|p| p.0);
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
    let mut taken_budget: Option<SemaphorePermit<'a>> = None;
    let mut taken_share: Option<PeerBytes<'a>> = None;
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
        if let Some(peer) = peer {
            if !peer_reads.take(peer, &mut taken_share, data.len(), peer_share(budget_bytes)) {
                app.metrics.limits.refuse(Refusal::Busy);
                return Err(unavailable(
                    "this address's request bodies being read fill its share of the host's \
                     read budget; retry"
                        .into(),
                ));
            }
        }
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let taken = match tokio::time::timeout_at(deadline, budget.acquire_many(n)).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(unavailable("the server is shutting down; retry".into())),
            Err(_) => {
                app.metrics.limits.refuse(Refusal::Busy);
                return Err(unavailable(
                    "request bodies being read fill the host's read budget; retry".into(),
                ));
            }
        };
        match taken_budget.as_mut() {
            Some(b) => b.merge(taken),
            None => taken_budget = Some(taken),
        }
        bytes.extend_from_slice(&data);
    }
    Ok(ReadBody {
        bytes: Bytes::from(bytes),
        _budget: taken_budget,
        _peer: taken_share,
    })
}

/// A permit of `slots` within [`SLOT_WAIT`], or the refusal (503) saying `why`. Owned: work
/// that outlives the handler (an evaluation on a blocking thread, going on after the
/// client went away) holds it until it ends (security review R13).
pub async fn slot(
    app: &App,
    slots: &Arc<Semaphore>,
    why: impl FnOnce() -> String,
) -> Result<OwnedSemaphorePermit, Response> {
    match tokio::time::timeout(SLOT_WAIT, slots.clone().acquire_owned()).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Security review R3: one address holds at most its share of a read budget; its bytes
    /// come back when its bodies are done; other addresses keep theirs.
    #[test]
    fn a_peer_holds_at_most_its_share_of_the_read_budget() {
        let reads = PeerReads::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let limit = peer_share(32 << 20);
        assert_eq!(limit, 16 << 20);
        let mut first = None;
        assert!(reads.take(a, &mut first, 10 << 20, limit));
        let mut second = None;
        assert!(
            reads.take(a, &mut second, 6 << 20, limit),
            "up to the share"
        );
        let mut third = None;
        assert!(!reads.take(a, &mut third, 1, limit), "past it: refused");
        assert!(third.is_none());
        let mut other = None;
        assert!(
            reads.take(b, &mut other, 16 << 20, limit),
            "another address"
        );
        drop(first);
        assert_eq!(reads.of(a), 6 << 20);
        assert!(reads.take(a, &mut third, 10 << 20, limit), "given back");
        drop((second, third, other));
        assert_eq!(reads.of(a) + reads.of(b), 0);
        assert!(reads.0.lock().unwrap().is_empty(), "no entry left behind");
    }
}

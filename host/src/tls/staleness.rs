//! Whether the CA bundle reaches the objects it must be in, as this replica sees it
//! (issue #30, item 4). `certs::TlsState::bundle_health` decides; this keeps what it
//! decides from (the Secret's last state, this replica's failed writes and checks of the
//! targets) and reports: the `ca_bundle_stale_seconds` gauge, a warning saying what to
//! do, and — once the served certificate would expire before a fix could land — the
//! reason `/readyz` gives for not being ready.

use super::certs::{Lifetimes, TlsState, Verdict};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Mutex;
use std::time::Duration;

/// An object the bundle goes into, and the call on it that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{verb} {kind} {name}: {error}")]
pub struct TargetError {
    /// E.g. `MutatingWebhookConfiguration`.
    pub kind: &'static str,
    /// The RBAC resource, e.g. `mutatingwebhookconfigurations`.
    pub resource: &'static str,
    pub name: String,
    /// The RBAC verb of the failed call.
    pub verb: &'static str,
    pub error: String,
    /// The API server answered 403.
    pub forbidden: bool,
}

impl TargetError {
    pub fn new(
        kind: &'static str,
        resource: &'static str,
        name: &str,
        verb: &'static str,
        e: anyhow::Error,
    ) -> Self {
        // The API server's answer says it all (the Status' debug form repeats it).
        let status = e
            .chain()
            .find_map(|c| match c.downcast_ref::<kube::Error>() {
                Some(kube::Error::Api(s)) => Some((s.code, s.message.clone())),
                _ => None,
            });
        TargetError {
            kind,
            resource,
            name: name.to_string(),
            verb,
            forbidden: status.as_ref().is_some_and(|(code, _)| *code == 403),
            error: match status {
                Some((code, message)) => format!("{message} ({code})"),
                None => format!("{e:#}"),
            },
        }
    }

    /// What the operator should do about it.
    fn advice(&self) -> String {
        if self.forbidden {
            format!(
                "grant {} on {}/{} to the host's ServiceAccount",
                self.verb, self.resource, self.name
            )
        } else {
            format!(
                "check that the API server answers {} of {} {}",
                self.verb, self.kind, self.name
            )
        }
    }
}

/// A streak of failures, kept from its first.
#[derive(Clone, Debug)]
struct Streak {
    since: i64,
    last: TargetError,
}

#[derive(Default)]
struct Inner {
    state: Option<TlsState>,
    /// Writing the bundle into the targets (`publish::keep_bundles`).
    write: Option<Streak>,
    /// Checking that the targets carry the next CA (`rotation::rotate_once`).
    check: Option<Streak>,
    /// `KIND NAME` of a target the last check found without the next CA.
    lagging: Option<String>,
    /// When the last warning was logged, and for which verdict.
    warned: Option<(Verdict, i64)>,
}

/// This replica's view of the bundle's publication.
pub struct BundleWatch {
    lifetimes: Lifetimes,
    poll_seconds: i64,
    stale: Gauge,
    inner: Mutex<Inner>,
}

/// A warning is repeated this often while the verdict stays the same.
const WARN_EVERY_SECONDS: i64 = 600;

impl BundleWatch {
    /// `poll`: how often the Secret is re-read (and the targets re-checked).
    pub fn new(lifetimes: Lifetimes, poll: Duration, stale: Gauge) -> Self {
        BundleWatch {
            lifetimes,
            poll_seconds: poll.as_secs().max(1) as i64,
            stale,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn poll(&self) -> Duration {
        Duration::from_secs(self.poll_seconds as u64)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Secret's state as last read (or written) by this replica.
    pub fn observed(&self, state: &TlsState) {
        let mut inner = self.lock();
        if state.next_ca.is_none() {
            // Switched (by any replica): nothing left to check.
            inner.check = None;
            inner.lagging = None;
        }
        inner.state = Some(state.clone());
    }

    /// The outcome of writing the bundle into the targets; true for the first failure
    /// of a streak (later ones are summed up by [`BundleWatch::refresh`]'s warning).
    pub fn written(&self, now: i64, outcome: Result<(), &TargetError>) -> bool {
        let mut inner = self.lock();
        let first = outcome.is_err() && inner.write.is_none();
        record(&mut inner.write, now, outcome);
        first
    }

    /// The outcome of checking the targets for the next CA: `Ok(Some(object))` names one
    /// that does not carry it.
    pub fn checked(&self, now: i64, outcome: &Result<Option<String>, TargetError>) {
        let mut inner = self.lock();
        if let Ok(lagging) = outcome {
            inner.lagging = lagging.clone();
        }
        record(&mut inner.check, now, outcome.as_ref().map(|_| ()));
    }

    /// Updates the gauge and logs a warning when the bundle is stale; the reason this
    /// replica is not ready, if the served certificate is (about to be) unusable.
    pub fn refresh(&self, now: i64) -> Option<String> {
        let mut inner = self.lock();
        let state = inner.state.as_ref()?;
        let failing_since = [&inner.write, &inner.check]
            .into_iter()
            .flatten()
            .map(|s| s.since)
            .min();
        let health = state.bundle_health(now, &self.lifetimes, self.poll_seconds, failing_since);
        self.stale.set(health.stale_seconds);
        if health.verdict == Verdict::Current {
            inner.warned = None;
            return None;
        }
        let left = health.expires_at - now;
        let what = if left > 0 {
            format!("the serving certificate stops working in {left}s")
        } else {
            format!("the serving certificate expired {}s ago", -left)
        };
        let reason = format!(
            "the CA bundle has not reached {} for {}s; {what}: {}",
            describe(&inner),
            health.stale_seconds,
            advice(&inner)
        );
        let repeat = inner
            .warned
            .is_none_or(|(v, at)| v != health.verdict || now - at >= WARN_EVERY_SECONDS);
        if repeat {
            inner.warned = Some((health.verdict, now));
            match health.verdict {
                Verdict::Failing => tracing::error!("not ready: {reason}"),
                _ => tracing::warn!("{reason}"),
            }
        }
        (health.verdict == Verdict::Failing).then_some(reason)
    }
}

fn record(streak: &mut Option<Streak>, now: i64, outcome: Result<(), &TargetError>) {
    match outcome {
        Ok(()) => *streak = None,
        Err(e) => match streak {
            Some(s) => s.last = e.clone(),
            None => {
                *streak = Some(Streak {
                    since: now,
                    last: e.clone(),
                })
            }
        },
    }
}

/// Which object and what went wrong last.
fn describe(inner: &Inner) -> String {
    let failure = inner.write.as_ref().or(inner.check.as_ref());
    match (failure, &inner.lagging) {
        (Some(s), _) => format!(
            "{} {} (last error: {})",
            s.last.kind, s.last.name, s.last.error
        ),
        (None, Some(object)) => format!("{object} (it does not carry the next CA)"),
        (None, None) => "its webhook configurations (the next CA is not switched to)".into(),
    }
}

fn advice(inner: &Inner) -> String {
    let failure = inner.write.as_ref().or(inner.check.as_ref());
    match (failure, &inner.lagging) {
        (Some(s), _) => s.last.advice(),
        (None, Some(object)) => format!(
            "something overwrites the caBundle of {object} (a GitOps tool: let it ignore caBundle)"
        ),
        (None, None) => "check the host's log for certificate rotation errors".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> TargetError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "code": 403, "message": "update is forbidden"}))
        .unwrap();
        let e = anyhow::Error::from(kube::Error::Api(Box::new(status)));
        TargetError::new(
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            "ws",
            "update",
            e,
        )
    }

    /// A refused write of a pending next CA: stale (gauge, still ready), then not ready
    /// naming the object, the error and the grant; a switch by another replica clears it.
    #[test]
    fn a_refused_write_is_reported_with_what_to_grant() {
        let l = Lifetimes {
            cert_seconds: 300,
            ca_seconds: 1200,
            grace_seconds: 30,
        };
        let sans = vec!["localhost".to_string()];
        let s0 = TlsState::generate(&sans, 0, &l).unwrap();
        let pending = s0.plan(&sans, 800, &l, |_| false).unwrap().unwrap();
        let gauge = Gauge::default();
        let watch = BundleWatch::new(l, Duration::from_secs(10), gauge.clone());
        watch.observed(&pending);
        assert_eq!(watch.refresh(800), None);
        watch.written(800, Err(&forbidden()));
        assert_eq!(
            watch.refresh(800 + l.stale_after()),
            None,
            "stale, still ready"
        );
        assert_eq!(gauge.get(), l.stale_after());
        // The current CA renews the serving certificate meanwhile, up to its own end.
        let pending = pending.plan(&sans, 1000, &l, |_| false).unwrap().unwrap();
        assert_eq!(pending.serving.not_after, 1200);
        watch.observed(&pending);
        assert_eq!(watch.refresh(1200 - l.fix_lead(10) - 1), None);
        let reason = watch.refresh(1200 - l.fix_lead(10)).expect("not ready");
        for part in [
            "MutatingWebhookConfiguration ws",
            "update is forbidden",
            "grant update on mutatingwebhookconfigurations/ws",
        ] {
            assert!(reason.contains(part), "{part:?} missing from {reason:?}");
        }
        watch.written(1130, Ok(()));
        watch.checked(1130, &Err(forbidden()));
        let switched = pending.plan(&sans, 1131, &l, |_| true).unwrap().unwrap();
        watch.observed(&switched);
        assert_eq!(watch.refresh(1131), None);
        assert_eq!(gauge.get(), 0);
    }
}

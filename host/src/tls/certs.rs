//! Generated certificates that expire and rotate (issue #30, item 4): what the shared
//! Secret holds and when it changes, decided here with the time passed in; `rotation.rs`
//! reads and writes the Secret and serves the result.
//!
//! The Secret holds a CA with its key, the serving certificate it signed, and the CA
//! bundle published in the webhook configurations and the CRD. Any replica may rotate
//! (optimistic concurrency on the Secret):
//!
//! * the serving certificate is re-signed by the same CA once two thirds of its
//!   lifetime have passed — the bundle does not change, so replicas still serving the
//!   old certificate (until their next poll) stay trusted;
//! * a CA due for renewal (two thirds of its lifetime, or too little left for a serving
//!   certificate) is replaced in two steps: a next CA is generated and *added* to the
//!   bundle; only once the bundle has been published for `grace` and the webhook
//!   configurations are seen to carry it does the next CA become the signing CA (and a
//!   serving certificate from it is issued). The old CA stays in the bundle until every
//!   replica has had time to load the new serving certificate (`grace` again). At no
//!   moment does a replica serve a certificate whose CA is missing from the bundle.
//!
//! A Secret written before rotation existed (no CA key) is renewed the same way.

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde::{Deserialize, Serialize};

/// Skew tolerated between this host and the API server: certificates start this early.
const BACKDATE_SECONDS: i64 = 300;

/// How long generated certificates live and how long a bundle change is given to spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub cert_seconds: i64,
    pub ca_seconds: i64,
    /// From publishing a next CA to signing with it, and from a switch to dropping the
    /// old CA: the API server must have the new bundle, replicas the new certificate.
    pub grace_seconds: i64,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            cert_seconds: 365 * 86_400,
            ca_seconds: 5 * 365 * 86_400,
            grace_seconds: 120,
        }
    }
}

/// A certificate and its key (PEM) with the times rotation needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Issued {
    /// The subject common name (a CA's is unique per CA).
    pub name: String,
    #[serde(skip)]
    pub cert_pem: String,
    #[serde(skip)]
    pub key_pem: String,
    pub issued_at: i64,
    pub not_after: i64,
}

impl Issued {
    /// Two thirds of its lifetime have passed.
    fn due(&self, now: i64) -> bool {
        now >= self.issued_at + (self.not_after - self.issued_at) * 2 / 3
    }
}

/// A CA no longer signing, kept in the bundle until `until`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retired {
    #[serde(skip)]
    pub cert_pem: String,
    pub until: i64,
}

/// Everything the shared Secret holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsState {
    /// The signing CA; `None` for a Secret from before rotation (its CA key was not kept).
    pub ca: Option<Issued>,
    /// A CA published in the bundle, not signing yet, and since when.
    pub next_ca: Option<Issued>,
    pub next_published_at: Option<i64>,
    pub retired: Vec<Retired>,
    pub serving: Issued,
    /// The bundle of a Secret from before rotation (trusted until it is retired).
    #[serde(skip)]
    pub legacy_bundle: Option<String>,
    /// Bumped whenever the bundle changes: a replica never writes an older bundle over a
    /// newer one into the webhook configurations.
    pub generation: u64,
}

impl TlsState {
    /// A new CA and a serving certificate for `sans`.
    pub fn generate(sans: &[String], now: i64, l: &Lifetimes) -> Result<Self> {
        let ca = new_ca(now, l.ca_seconds)?;
        let serving = new_serving(sans, &ca, now, l.cert_seconds)?;
        Ok(TlsState {
            ca: Some(ca),
            next_ca: None,
            next_published_at: None,
            retired: vec![],
            serving,
            legacy_bundle: None,
            generation: 1,
        })
    }

    /// The secret replicas sharing generated certificates derive keys from
    /// (`tls::SecretObserver`): the signing CA's key (rotated every few years), else the
    /// serving key.
    pub fn shared_secret(&self) -> &str {
        self.ca
            .as_ref()
            .map_or(&self.serving.key_pem, |ca| &ca.key_pem)
    }

    /// The CAs to trust: the signing one, the next one, the retired ones.
    pub fn bundle(&self) -> String {
        let mut pems: Vec<&str> = vec![];
        pems.extend(self.ca.as_ref().map(|c| c.cert_pem.as_str()));
        pems.extend(self.next_ca.as_ref().map(|c| c.cert_pem.as_str()));
        pems.extend(self.retired.iter().map(|r| r.cert_pem.as_str()));
        pems.extend(self.legacy_bundle.as_deref());
        pems.iter()
            .map(|p| p.trim_end())
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// The state to write at `now`, if anything is due. `next_in_effect`: the webhook
    /// configurations carry the next CA (asked only when a switch is otherwise due).
    pub fn plan(
        &self,
        sans: &[String],
        now: i64,
        l: &Lifetimes,
        next_in_effect: impl FnOnce(&Issued) -> bool,
    ) -> Result<Option<TlsState>> {
        let mut next = self.clone();
        let before = next.retired.len();
        next.retired.retain(|r| r.until > now);
        let mut bundle_changed = next.retired.len() != before;
        let ca_due = |ca: &Option<Issued>| {
            ca.as_ref()
                .is_none_or(|c| c.due(now) || c.not_after - now < l.cert_seconds + l.grace_seconds)
        };
        let mut switched = false;
        if let (Some(candidate), Some(published)) = (&self.next_ca, self.next_published_at) {
            if now >= published + l.grace_seconds && next_in_effect(candidate) {
                switched = true;
                // Switch: the next CA signs; the old one stays trusted for the grace.
                if let Some(old) = next.ca.take() {
                    next.retired.push(Retired {
                        cert_pem: old.cert_pem,
                        until: now + l.grace_seconds,
                    });
                }
                if let Some(legacy) = next.legacy_bundle.take() {
                    next.retired.push(Retired {
                        cert_pem: legacy,
                        until: now + l.grace_seconds,
                    });
                }
                next.serving = new_serving(sans, candidate, now, l.cert_seconds)?;
                next.ca = next.next_ca.take();
                next.next_published_at = None;
                bundle_changed = true;
            }
        } else if ca_due(&self.ca) {
            // Publish a next CA beside the current one; it signs only after the grace.
            next.next_ca = Some(new_ca(now, l.ca_seconds)?);
            next.next_published_at = Some(now);
            bundle_changed = true;
        }
        // Renewed by the current CA also while its successor waits to be carried
        // everywhere (a slow or failing bundle patch): the served certificate lives as
        // long as the CA that signed it, not only until the switch was due.
        if !switched && self.serving.due(now) {
            if let Some(ca) = &next.ca {
                next.serving = new_serving(sans, ca, now, l.cert_seconds)?;
            }
        }
        if bundle_changed {
            next.generation += 1;
        }
        Ok((next != *self || bundle_changed).then_some(next))
    }
}

/// Whether the CA bundle reaches the objects it must be in (the webhook configurations,
/// the CRD's conversion), as one replica sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleHealth {
    /// Seconds the targets have lagged behind the bundle: since this replica's attempts to
    /// write or check them began failing, or since a pending next CA should have been
    /// switched to (its grace and one poll passed). 0 when nothing lags.
    pub stale_seconds: i64,
    /// When the certificate this host serves (or can renew from its signing CA) stops
    /// working.
    pub expires_at: i64,
    pub verdict: Verdict,
}

/// What the host says about the bundle (`docs/operations.md`, *Certificate rotation*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Current, or lagging for less than [`Lifetimes::stale_after`] (a conflict, a timeout
    /// retried at the next poll).
    Current,
    /// Lagging longer: a warning and the stale-seconds metric, still ready — every
    /// replica reads the same Secret, so going not ready now would take every endpoint
    /// away and start the outage this warns of.
    Stale,
    /// Lagging, and the served certificate expires before a fix could take effect (or has
    /// expired): not ready, the outage is certain now and `/readyz` says why.
    Failing,
}

impl Lifetimes {
    /// How long the bundle may lag before the host warns: long enough to outlast what a
    /// retry fixes (at least one grace), short against the time left before a lagging
    /// CA switch turns into an outage (a hundredth of the CA's life: the next CA is
    /// published a third of that life ahead), and never more than 15 minutes so that an
    /// operator hears of it the same day.
    pub fn stale_after(&self) -> i64 {
        (self.ca_seconds / 100).min(15 * 60).max(self.grace_seconds)
    }

    /// How long before the served certificate expires a fix must land for the switch to
    /// the next CA to complete: the bundle re-written (one poll), the switch seen (one
    /// poll), the API server's grace, every replica loading the new certificate (one poll).
    pub fn fix_lead(&self, poll_seconds: i64) -> i64 {
        self.grace_seconds + 3 * poll_seconds
    }
}

impl TlsState {
    /// The bundle's health at `now`, polled every `poll_seconds`; `failing_since`: the
    /// start of this replica's streak of failed writes or checks of the targets.
    pub fn bundle_health(
        &self,
        now: i64,
        l: &Lifetimes,
        poll_seconds: i64,
        failing_since: Option<i64>,
    ) -> BundleHealth {
        let switch_late = match (&self.next_ca, self.next_published_at) {
            (Some(_), Some(published)) => Some(published + l.grace_seconds + poll_seconds),
            _ => None,
        };
        let since = [switch_late, failing_since]
            .into_iter()
            .flatten()
            .filter(|t| *t <= now)
            .min();
        // Renewed up to the signing CA's end, so that is when serving stops working.
        let expires_at = self.ca.as_ref().map_or(self.serving.not_after, |ca| {
            ca.not_after.max(self.serving.not_after)
        });
        let stale_seconds = since.map_or(0, |t| now - t);
        // A served certificate past its end (renewals not written) fails every call.
        let verdict = if now >= self.serving.not_after {
            Verdict::Failing
        } else if since.is_none() || stale_seconds < l.stale_after() {
            Verdict::Current
        } else if expires_at - now <= l.fix_lead(poll_seconds) {
            Verdict::Failing
        } else {
            Verdict::Stale
        };
        BundleHealth {
            stale_seconds,
            expires_at,
            verdict,
        }
    }
}

fn new_ca(now: i64, seconds: i64) -> Result<Issued> {
    // Unique per CA: the bundle may hold two during a switch.
    let name = format!("workloadspread-host CA {now}");
    let key = KeyPair::generate()?;
    let cert = ca_params(&name, now, seconds)?.self_signed(&key)?;
    Ok(Issued {
        name,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        issued_at: now,
        not_after: now + seconds,
    })
}

fn ca_params(name: &str, now: i64, seconds: i64) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = at(now - BACKDATE_SECONDS)?;
    params.not_after = at(now + seconds)?;
    Ok(params)
}

/// A serving certificate for `sans`, signed by `ca` (never outliving it).
fn new_serving(sans: &[String], ca: &Issued, now: i64, seconds: i64) -> Result<Issued> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).context("the CA key in the Secret")?;
    // The issuer as rcgen needs it: same name and key as the stored CA certificate, so
    // what it signs chains to that certificate.
    let issuer: Certificate =
        ca_params(&ca.name, ca.issued_at, ca.not_after - ca.issued_at)?.self_signed(&ca_key)?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "workloadspread-host");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let not_after = (now + seconds).min(ca.not_after);
    params.not_before = at(now - BACKDATE_SECONDS)?;
    params.not_after = at(not_after)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer, &ca_key)?;
    Ok(Issued {
        name: "workloadspread-host".into(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        issued_at: now,
        not_after,
    })
}

fn at(unix: i64) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(unix).context("certificate time out of range")
}

/// Parses `365d`, `12h`, `30m`, `45s` (or plain seconds).
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let (number, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let factor = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use s, m, h or d)"
            ))
        }
    };
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 365d, 12h, 30m or 45s"))?;
    if n <= 0 {
        return Err(format!("{s:?} must be positive"));
    }
    Ok(n * factor)
}

#[cfg(test)]
mod tests;

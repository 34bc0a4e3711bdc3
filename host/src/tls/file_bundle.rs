//! Certificates from files (cert-manager mode, issue #41): the hosts keep the CA bundle of
//! the webhook configurations and the CRD's conversion themselves (cert-manager's
//! cainjector wrote only the current CA: at a CA renewal, replicas still serving the old
//! certificate — the kubelet refreshes a mounted Secret within about a minute, the host
//! re-reads it every `--tls-reload-seconds` — were refused for a minute or two with x509
//! errors). A replica that finds a certificate signed by a CA the bundle lacks publishes the
//! new CA *next to* the old ones first and serves the new certificate only `grace` later; the
//! old CAs stay in the bundle until `overlap` after the new certificate was issued. Every
//! replica derives the same bundle from the same files at the same time (the issue time is
//! in the certificate), and a bundle's generation (that time, then a step when the overlap
//! ends) keeps a replica that has not read the new files from writing an older bundle back.

use super::publish::{Published, Targets};
use super::{CertBundle, CertResolver, SecretObserver};
use crate::clock::unix_now;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The certificate, key and CA files.
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

impl Files {
    fn read(&self) -> anyhow::Result<CertBundle> {
        CertBundle::from_files(&self.cert, &self.key, self.ca.as_deref())
    }
}

/// The PEM certificate blocks of `pem`, each as `-----BEGIN…END…-----\n`.
pub fn blocks(pem: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let end = start + len + END.len();
        out.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    out
}

/// The notBefore (seconds since the epoch) of the first certificate of `pem`.
fn not_before(pem: &str) -> Option<i64> {
    let first = blocks(pem).into_iter().next()?;
    let (_, block) = x509_parser::pem::parse_x509_pem(first.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    Some(cert.validity().not_before.timestamp())
}

/// Whether the first certificate of `leaf` names, as its issuer, the subject of one of the
/// certificates of `cas` (a chain: the last of `leaf` may be a CA itself).
fn issued_by_one_of(leaf: &str, cas: &str) -> bool {
    let subjects: Vec<Vec<u8>> = blocks(cas)
        .iter()
        .chain(blocks(leaf).iter().skip(1))
        .filter_map(|pem| {
            let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
            let cert = block.parse_x509().ok()?;
            Some(cert.subject().as_raw().to_vec())
        })
        .collect();
    let Some(first) = blocks(leaf).into_iter().next() else {
        return false;
    };
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(first.as_bytes()) else {
        return false;
    };
    block.parse_x509().is_ok_and(|cert| {
        subjects
            .iter()
            .any(|s| s.as_slice() == cert.issuer().as_raw())
    })
}

/// The bundle to publish for the files' CA (`ca_pem`) and serving certificate (`leaf`),
/// given the CAs the targets carry now (`live`): the files' CAs, and the live ones until
/// `overlap` seconds after the serving certificate was issued.
pub fn bundle(ca_pem: &str, leaf: &str, live: &[String], now: i64, overlap: i64) -> Published {
    let issued = not_before(leaf).unwrap_or(0).max(0);
    let settled = now >= issued.saturating_add(overlap);
    let mut cas = blocks(ca_pem);
    if !settled {
        for ca in live {
            if !cas.contains(ca) {
                cas.push(ca.clone());
            }
        }
    }
    Published {
        generation: (issued as u64).saturating_mul(2) + u64::from(settled),
        bundle: cas.concat(),
    }
}

/// The CA certificates the targets carry now (the mutating configuration's webhooks and the
/// CRD's conversion); empty where unreadable.
pub async fn live(client: &Client, targets: &Targets) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |pem: &[u8]| {
        for b in blocks(&String::from_utf8_lossy(pem)) {
            if !found.contains(&b) {
                found.push(b);
            }
        }
    };
    const TIMEOUT: Duration = Duration::from_secs(10);
    if let Some(name) = &targets.webhook_config {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        if let Ok(Ok(Some(c))) = tokio::time::timeout(TIMEOUT, api.get_opt(name)).await {
            for w in c.webhooks.iter().flatten() {
                if let Some(b) = &w.client_config.ca_bundle {
                    add(&b.0);
                }
            }
        }
    }
    if let Some(name) = &targets.conversion_crd {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        if let Ok(Ok(Some(crd))) = tokio::time::timeout(TIMEOUT, api.get_opt(name)).await {
            let bundle = crd
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
                .and_then(|c| c.ca_bundle);
            if let Some(b) = bundle {
                add(&b.0);
            }
        }
    }
    found
}

/// How the files are followed.
pub struct Timing {
    pub poll: Duration,
    /// A certificate of a new CA is served this long after the new CA is published.
    pub grace: i64,
    /// Old CAs stay published this long after the new certificate was issued.
    pub overlap: i64,
}

/// Re-reads the files every `timing.poll`: publishes their bundle (with the overlap) to
/// `published` (written to the targets by `publish::keep_bundles`), and serves a new
/// certificate through `resolver` (its key told to `derived`) — at once when its CAs were
/// already served, `grace` after it was first seen otherwise. Runs until the process ends.
#[allow(clippy::too_many_arguments)]
pub async fn keep(
    client: Client,
    targets: Targets,
    files: Files,
    resolver: Arc<CertResolver>,
    derived: Arc<dyn SecretObserver>,
    published: watch::Sender<Published>,
    timing: Timing,
    mut served: CertBundle,
) {
    // The certificate waiting for its CA to be published: its PEM and when it may serve.
    let mut waiting: Option<(String, i64)> = None;
    loop {
        tokio::time::sleep(timing.poll).await;
        let files_now = match files.read() {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("certificate files not read (keeping the served ones): {e:#}");
                continue;
            }
        };
        let now = unix_now();
        let live = live(&client, &targets).await;
        let next = bundle(
            &files_now.ca_pem,
            &files_now.cert_pem,
            &live,
            now,
            timing.overlap,
        );
        published.send_if_modified(|p| {
            let changed = *p != next && next.generation >= p.generation;
            if changed {
                *p = next.clone();
            }
            changed
        });
        if (files_now.cert_pem.as_str(), files_now.key_pem.as_str())
            == (served.cert_pem.as_str(), served.key_pem.as_str())
        {
            continue;
        }
        // Read mid-update (the kubelet swaps the files at once, but a read may straddle it):
        // a certificate its CA file did not sign is read again next time.
        if !issued_by_one_of(&files_now.cert_pem, &files_now.ca_pem) {
            tracing::debug!("the certificate files are being replaced: read again");
            continue;
        }
        let served_cas = blocks(&served.ca_pem);
        let new_ca = blocks(&files_now.ca_pem)
            .iter()
            .any(|ca| !served_cas.contains(ca));
        if new_ca {
            let at = match &waiting {
                Some((cert, at)) if *cert == files_now.cert_pem => *at,
                _ => {
                    tracing::info!(
                        "a certificate of a new CA: the CA is published next to the old ones; \
                         the certificate is served in {}s",
                        timing.grace
                    );
                    now + timing.grace
                }
            };
            waiting = Some((files_now.cert_pem.clone(), at));
            if now < at {
                continue;
            }
        }
        match files_now.certified_key() {
            Ok(key) => {
                resolver.replace(key);
                derived.observe(&files_now.key_pem);
                tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
                served = files_now;
                waiting = None;
            }
            Err(e) => {
                tracing::warn!("serving certificate not reloaded (keeping the old one): {e:#}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(name: &str, not_before: i64) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_before + 86_400).unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_certificate_is_matched_to_the_ca_that_signed_it() {
        let issuer = crate::tls::client_auth::tests::ca;
        let (one, two) = (issuer("one"), issuer("two"));
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["host".to_string()])
            .unwrap()
            .signed_by(&key, &one.0, &one.1)
            .unwrap()
            .pem();
        assert!(issued_by_one_of(&leaf, &one.0.pem()));
        assert!(issued_by_one_of(
            &leaf,
            &format!("{}{}", two.0.pem(), one.0.pem())
        ));
        assert!(
            !issued_by_one_of(&leaf, &two.0.pem()),
            "mid-update: another CA's file"
        );
    }

    #[test]
    fn blocks_are_split_and_normalised() {
        let (a, b) = (cert("a", 1000), cert("b", 1000));
        assert_eq!(blocks(&format!("{a}\n\n{b}")), vec![a.clone(), b]);
        assert!(blocks("no pem").is_empty());
        assert_eq!(not_before(&a), Some(1000));
    }

    /// Issue #41: at a CA change the old CA stays published until the overlap after the new
    /// certificate's issue; replicas agree, and the generation orders the two bundles.
    #[test]
    fn old_cas_stay_for_the_overlap_after_the_new_certificate() {
        let (old_ca, new_ca) = (cert("old CA", 0), cert("new CA", 5_000));
        let leaf = cert("host", 10_000);
        let live = vec![old_ca.clone()];
        let during = bundle(&new_ca, &leaf, &live, 10_100, 600);
        assert_eq!(during.bundle, format!("{new_ca}{old_ca}"));
        // Another replica reading the bundle already written gets the same.
        let again = bundle(&new_ca, &leaf, &blocks(&during.bundle), 10_200, 600);
        assert_eq!(again, during);
        let after = bundle(&new_ca, &leaf, &blocks(&during.bundle), 10_600, 600);
        assert_eq!(after.bundle, new_ca);
        assert!(
            after.generation > during.generation,
            "the settled bundle wins"
        );
        // A replica still on the old files computes an older generation: it writes nothing
        // over the new bundle (publish::needs_patch).
        let old_leaf = cert("host", 2_000);
        let lagging = bundle(&old_ca, &old_leaf, &blocks(&during.bundle), 10_100, 600);
        assert!(lagging.generation < during.generation);
    }
}

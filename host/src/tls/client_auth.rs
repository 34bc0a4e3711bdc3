//! Client certificates of the API server (issue #41): verified against the CA of
//! `--client-ca-file`, re-read when that file changes (a ConfigMap the kubelet updates:
//! no restart), and pinned to an identity — the certificate must name one of
//! `--client-cert-identity` (its subject's common name or a DNS name), as Gatekeeper pins
//! `kube-apiserver`: any other certificate the CA signed is refused.

use anyhow::{bail, Context, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// A client certificate verifier over a CA file, swapped when the file changes.
#[derive(Debug)]
pub struct ReloadingVerifier {
    path: PathBuf,
    current: RwLock<(String, Arc<dyn ClientCertVerifier>)>,
}

/// A verifier for `pem`: a presented certificate must chain to it; callers without one
/// pass the handshake (the webhook routes refuse them, `/convert` and the probes need none).
fn verifier(pem: &str) -> Result<Arc<dyn ClientCertVerifier>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
        roots
            .add(cert.context("parsing the client CA")?)
            .context("adding the client CA")?;
    }
    if roots.is_empty() {
        bail!("no certificate in the client CA PEM");
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")
}

impl ReloadingVerifier {
    pub fn new(path: &Path) -> Result<Arc<Self>> {
        let pem =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let verifier = verifier(&pem)?;
        Ok(Arc::new(ReloadingVerifier {
            path: path.to_path_buf(),
            current: RwLock::new((pem, verifier)),
        }))
    }

    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Re-reads the file; a changed, valid CA replaces the old one for new handshakes
    /// (true). A file that does not parse keeps the old CA (an error, retried next time).
    pub fn reload_if_changed(&self) -> Result<bool> {
        let pem = std::fs::read_to_string(&self.path)
            .with_context(|| format!("reading {}", self.path.display()))?;
        if self.current.read().unwrap_or_else(|p| p.into_inner()).0 == pem {
            return Ok(false);
        }
        let verifier = verifier(&pem)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (pem, verifier);
        Ok(true)
    }

    /// Polls every `period` until the process ends.
    pub async fn watch(self: Arc<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            match self.reload_if_changed() {
                Ok(true) => tracing::info!(file = %self.path.display(), "client CA reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!("client CA not reloaded (keeping the old one): {e:#}"),
            }
        }
    }
}

impl ClientCertVerifier for ReloadingVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No CA names are hinted (they live behind the lock): a client then sends its
    /// certificate whatever its issuer, and the verification decides.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.inner()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// The names a certificate goes by: its subject's common names and its DNS names.
pub fn names_of(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return vec![];
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_string());
            }
        }
    }
    names
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed CA named `name` (also the issuers of `file_bundle`'s tests).
    pub(crate) fn ca(name: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        (params.self_signed(&key).unwrap(), key)
    }

    fn client(cn: &str, dns: &[&str], ca: &(rcgen::Certificate, rcgen::KeyPair)) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.signed_by(&key, &ca.0, &ca.1).unwrap().der().to_vec()
    }

    #[test]
    fn names_are_the_common_name_and_the_dns_names() {
        let ca = ca("webhook client CA");
        let der = client("kube-apiserver", &["apiserver.example"], &ca);
        assert_eq!(names_of(&der), vec!["kube-apiserver", "apiserver.example"]);
        assert!(names_of(b"not a certificate").is_empty());
    }

    #[test]
    fn a_changed_ca_file_replaces_the_ca_for_new_handshakes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let (first, second) = (ca("first"), ca("second"));
        std::fs::write(&path, first.0.pem()).unwrap();
        let verifier = ReloadingVerifier::new(&path).unwrap();
        let now = UnixTime::now();
        let by_first = CertificateDer::from(client("kube-apiserver", &[], &first));
        let by_second = CertificateDer::from(client("kube-apiserver", &[], &second));
        assert!(verifier.verify_client_cert(&by_first, &[], now).is_ok());
        assert!(verifier.verify_client_cert(&by_second, &[], now).is_err());
        assert!(!verifier.reload_if_changed().unwrap(), "unchanged");
        // A half-written file keeps the old CA.
        std::fs::write(&path, "-----BEGIN CERTIFICATE-----\n").unwrap();
        assert!(verifier.reload_if_changed().is_err());
        assert!(verifier.verify_client_cert(&by_first, &[], now).is_ok());
        std::fs::write(&path, second.0.pem()).unwrap();
        assert!(verifier.reload_if_changed().unwrap());
        assert!(verifier.verify_client_cert(&by_second, &[], now).is_ok());
        assert!(verifier.verify_client_cert(&by_first, &[], now).is_err());
    }
}

//! The webhook's TLS (a wing below `webhook/`, which it never imports): certificates from
//! files, or a self-generated CA + serving certificate, optionally shared by all replicas
//! through a Secret (`secret.rs`) and rotated (`certs.rs` decides what is due,
//! `rotation.rs` polls the Secret), whose CA bundle is written out and kept in the webhook
//! configurations and the CRD's conversion (`publish.rs`; with files from cert-manager:
//! `file_bundle.rs`; its health: `staleness.rs`); optionally client certificates required
//! of callers (the API server: `client_auth.rs`). This file: the served certificate and
//! the rustls configuration over it. Keys derived from the shared secret (the webhook's
//! re-invocation tokens) are told it through [`SecretObserver`].

pub mod certs;
pub mod client_auth;
pub mod file_bundle;
pub mod publish;
pub mod rotation;
pub mod secret;
pub mod staleness;

use anyhow::{bail, Context, Result};
use certs::TlsState;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// PEM serving certificate chain, its key, and the CA that signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl CertBundle {
    /// Reads `cert` and `key`; the CA bundle is `ca` when given, else the chain's last
    /// certificate.
    pub fn from_files(cert: &Path, key: &Path, ca: Option<&Path>) -> Result<Self> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let cert_pem = read(cert)?;
        let ca_pem = match ca {
            Some(p) => read(p)?,
            None => last_pem_block(&cert_pem).unwrap_or_else(|| cert_pem.clone()),
        };
        Ok(CertBundle {
            cert_pem,
            key_pem: read(key)?,
            ca_pem,
        })
    }

    /// A fresh CA and a serving certificate for `sans` (default lifetimes).
    #[cfg(test)]
    pub fn generate(sans: &[String]) -> Result<Self> {
        let now = crate::clock::unix_now();
        let state = TlsState::generate(sans, now, &certs::Lifetimes::default())?;
        Ok(Self::from_state(&state))
    }

    /// What a rotation state serves and publishes.
    pub fn from_state(state: &TlsState) -> Self {
        CertBundle {
            cert_pem: state.serving.cert_pem.clone(),
            key_pem: state.serving.key_pem.clone(),
            ca_pem: state.bundle(),
        }
    }

    /// The chain and key as rustls' signing material (checks that they match).
    pub fn certified_key(&self) -> Result<Arc<CertifiedKey>> {
        let certs = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("parsing the serving certificate")?;
        if certs.is_empty() {
            bail!("no certificate in the serving certificate PEM");
        }
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .context("parsing the serving key")?
            .context("no private key in the key PEM")?;
        let provider = rustls::crypto::ring::default_provider();
        let certified = CertifiedKey::from_der(certs, key, &provider)
            .context("serving certificate and key do not match")?;
        Ok(Arc::new(certified))
    }

    /// rustls server configuration with a fixed certificate.
    #[cfg(test)]
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        server_config(Arc::new(CertResolver::new(self.certified_key()?)), None)
    }
}

/// Told the secret that every replica serving the same certificates shares, whenever it
/// is loaded: keys derived from it (the pod webhook's re-invocation tokens,
/// `webhook::reinvoke::TokenKeys`) follow the certificates without TLS knowing of them.
pub trait SecretObserver: Send + Sync {
    fn observe(&self, secret: &str);
}

/// Every API call of the rotation and of the bundle's publication is abandoned after this.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// rustls server configuration over `resolver` (HTTP/1.1: the API server then opens one
/// connection per concurrent call, which a Service spreads over replicas). With `client`
/// (`--client-ca-file`), a certificate a caller presents must be one that CA signed (else
/// the handshake fails) — the API server presents one for the webhooks its admission
/// configuration's kubeConfigFile names; callers without one pass the handshake (the
/// webhook routes refuse them: `webhook::App::client_auth`).
pub fn server_config(
    resolver: Arc<CertResolver>,
    client: Option<Arc<client_auth::ReloadingVerifier>>,
) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?;
    let builder = match client {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The serving certificate, replaceable while serving (new handshakes get the new one).
#[derive(Debug)]
pub struct CertResolver(RwLock<Arc<CertifiedKey>>);

impl CertResolver {
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        CertResolver(RwLock::new(key))
    }

    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        match self.0.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn replace(&self, key: Arc<CertifiedKey>) {
        match self.0.write() {
            Ok(mut k) => *k = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Certificate files watched for rotation (cert-manager, kubelet-projected Secrets).
pub struct FileReloader {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub resolver: Arc<CertResolver>,
    loaded: (String, String),
    /// Told the serving key (keys derived from it: the re-invocation tokens').
    derived: Arc<dyn SecretObserver>,
}

impl FileReloader {
    /// Loads the files once (their key told to `derived`);
    /// [`FileReloader::reload_if_changed`] picks up rotations.
    pub fn new(cert: &Path, key: &Path, derived: Arc<dyn SecretObserver>) -> Result<Self> {
        let bundle = CertBundle::from_files(cert, key, None)?;
        derived.observe(&bundle.key_pem);
        Ok(FileReloader {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            resolver: Arc::new(CertResolver::new(bundle.certified_key()?)),
            loaded: (bundle.cert_pem, bundle.key_pem),
            derived,
        })
    }

    /// Re-reads the files; swaps the certificate when they changed and are a valid pair.
    /// A half-written or mismatched pair keeps the old certificate (retried next time).
    pub fn reload_if_changed(&mut self) -> Result<bool> {
        let bundle = CertBundle::from_files(&self.cert, &self.key, None)?;
        if (bundle.cert_pem.as_str(), bundle.key_pem.as_str())
            == (self.loaded.0.as_str(), self.loaded.1.as_str())
        {
            return Ok(false);
        }
        self.resolver.replace(bundle.certified_key()?);
        self.derived.observe(&bundle.key_pem);
        self.loaded = (bundle.cert_pem, bundle.key_pem);
        Ok(true)
    }

    /// Polls every `period` until the process ends.
    pub async fn watch(mut self, period: std::time::Duration) {
        loop {
            tokio::time::sleep(period).await;
            match self.reload_if_changed() {
                Ok(true) => {
                    tracing::info!(cert = %self.cert.display(), "serving certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!("serving certificate not reloaded (keeping the old one): {e:#}")
                }
            }
        }
    }
}

fn last_pem_block(pem: &str) -> Option<String> {
    let start = pem.rfind("-----BEGIN CERTIFICATE-----")?;
    Some(pem[start..].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bundle_serves_tls() {
        let b = CertBundle::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        assert!(b.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(b.ca_pem, b.cert_pem);
        let config = b.server_config().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let resolver = Arc::new(CertResolver::new(b.certified_key().unwrap()));
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, &b.ca_pem).unwrap();
        let client = client_auth::ReloadingVerifier::new(&ca).unwrap();
        server_config(resolver, Some(client)).unwrap();
        std::fs::write(&ca, "not pem").unwrap();
        let err = client_auth::ReloadingVerifier::new(&ca).unwrap_err();
        assert!(err.to_string().contains("no certificate"), "{err}");
    }

    #[test]
    fn mismatched_key_is_reported() {
        let a = CertBundle::generate(&["a".into()]).unwrap();
        let b = CertBundle::generate(&["b".into()]).unwrap();
        let mixed = CertBundle {
            key_pem: b.key_pem,
            ..a
        };
        let err = mixed.server_config().unwrap_err().to_string();
        assert!(err.contains("do not match"), "{err}");
    }

    #[test]
    fn rotated_files_are_picked_up_and_bad_pairs_are_not() {
        let dir = std::env::temp_dir().join(format!("ws-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let write = |b: &CertBundle| {
            std::fs::write(&cert, &b.cert_pem).unwrap();
            std::fs::write(&key, &b.key_pem).unwrap();
        };
        let (first, second) = (
            CertBundle::generate(&["a".into()]).unwrap(),
            CertBundle::generate(&["a".into()]).unwrap(),
        );
        write(&first);
        struct Nobody;
        impl SecretObserver for Nobody {
            fn observe(&self, _: &str) {}
        }
        let mut reloader = FileReloader::new(&cert, &key, Arc::new(Nobody)).unwrap();
        let served = |r: &FileReloader| r.resolver.current().cert[0].clone();
        let before = served(&reloader);
        assert!(!reloader.reload_if_changed().unwrap(), "unchanged files");
        // Half a rotation (new cert, old key) is refused and the old pair kept.
        std::fs::write(&cert, &second.cert_pem).unwrap();
        assert!(reloader.reload_if_changed().is_err());
        assert_eq!(served(&reloader), before);
        write(&second);
        assert!(reloader.reload_if_changed().unwrap());
        assert_ne!(served(&reloader), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

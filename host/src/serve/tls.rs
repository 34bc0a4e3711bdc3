//! TLS for `serve`: certificates from files, or a self-generated CA + serving
//! certificate (optionally shared by all replicas through a Secret) whose CA bundle is
//! written out and patched into the webhook configurations.

use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

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

    /// A fresh CA and a serving certificate for `sans` (DNS names or IP addresses).
    pub fn generate(sans: &[String]) -> Result<Self> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "workloadspread-host CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca = ca_params.self_signed(&ca_key)?;
        let mut params = CertificateParams::new(sans.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "workloadspread-host");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        Ok(CertBundle {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: ca.pem(),
        })
    }

    /// rustls server configuration (HTTP/1.1: the API server then opens one
    /// connection per concurrent call, which a Service spreads over replicas).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        let certs = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("parsing the serving certificate")?;
        if certs.is_empty() {
            bail!("no certificate in the serving certificate PEM");
        }
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .context("parsing the serving key")?
            .context("no private key in the key PEM")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("serving certificate and key do not match")?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn last_pem_block(pem: &str) -> Option<String> {
    let start = pem.rfind("-----BEGIN CERTIFICATE-----")?;
    Some(pem[start..].to_string())
}

/// Loads the bundle from Secret `namespace/name`, or generates one and creates the
/// Secret; when replicas race, the first create wins and the others read it.
pub async fn shared_bundle(
    client: &Client,
    namespace: &str,
    name: &str,
    sans: &[String],
) -> Result<CertBundle> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..3 {
        if let Some(secret) = api.get_opt(name).await? {
            return from_secret(&secret).with_context(|| format!("Secret {namespace}/{name}"));
        }
        let bundle = CertBundle::generate(sans)?;
        match api
            .create(&PostParams::default(), &to_secret(name, &bundle))
            .await
        {
            Ok(_) => return Ok(bundle),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context(format!("creating Secret {namespace}/{name}")),
        }
    }
    bail!("Secret {namespace}/{name} kept changing while loading it")
}

fn to_secret(name: &str, b: &CertBundle) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        ("tls.crt", &b.cert_pem),
        ("tls.key", &b.key_pem),
        ("ca.crt", &b.ca_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

fn from_secret(s: &Secret) -> Result<CertBundle> {
    let field = |k: &str| -> Result<String> {
        let bytes = s
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .with_context(|| format!("missing {k}"))?;
        String::from_utf8(bytes.0.clone()).with_context(|| format!("{k} is not PEM text"))
    };
    Ok(CertBundle {
        cert_pem: field("tls.crt")?,
        key_pem: field("tls.key")?,
        ca_pem: field("ca.crt")?,
    })
}

/// Sets `caBundle` on every webhook of the Mutating and Validating configurations
/// called `name` (those that exist); retries on conflicts.
pub async fn patch_ca_bundle(client: &Client, name: &str, ca_pem: &str) -> Result<usize> {
    let ca = ByteString(ca_pem.as_bytes().to_vec());
    let mut patched = 0;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for _ in 0..5 {
        let Some(mut c) = mutating.get_opt(name).await? else {
            break;
        };
        for w in c.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ca.clone());
        }
        match mutating.replace(name, &PostParams::default(), &c).await {
            Ok(_) => {
                patched += 1;
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(e).context(format!("patching MutatingWebhookConfiguration {name}"))
            }
        }
    }
    for _ in 0..5 {
        let Some(mut c) = validating.get_opt(name).await? else {
            break;
        };
        for w in c.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ca.clone());
        }
        match validating.replace(name, &PostParams::default(), &c).await {
            Ok(_) => {
                patched += 1;
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(e).context(format!("patching ValidatingWebhookConfiguration {name}"))
            }
        }
    }
    Ok(patched)
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
        let round = from_secret(&to_secret("s", &b)).unwrap();
        assert_eq!(round, b);
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
}

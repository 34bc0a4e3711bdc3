//! `push` and `pull`: the policy module as an OCI artifact with Kubewarden's media types
//! (layer `application/vnd.wasm.content.layer.v1+wasm`, config
//! `application/vnd.wasm.config.v1+json`), as `kwctl push` / `kwctl pull` store it.
//! Single-line metadata annotations become manifest annotations and
//! `io.kubewarden.policy.source` is copied to `org.opencontainers.image.source`.

use anyhow::{bail, ensure, Context, Result};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{OciImageManifest, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

const SOURCE_ANNOTATION: &str = "io.kubewarden.policy.source";
const OCI_SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";

/// Where and how to reach the registry.
pub struct Registry {
    /// Plain HTTP (a registry on loopback without TLS).
    pub plain_http: bool,
    /// `user:password` for basic auth (else anonymous).
    pub credentials: Option<String>,
}

impl Registry {
    fn client(&self) -> Result<Client> {
        // reqwest is built without a bundled provider: use ring, as the rest of the host.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if self.plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        Ok(Client::new(ClientConfig {
            protocol,
            ..Default::default()
        }))
    }

    fn auth(&self) -> Result<RegistryAuth> {
        match &self.credentials {
            None => Ok(RegistryAuth::Anonymous),
            Some(c) => {
                let (user, password) = c
                    .split_once(':')
                    .context("credentials must be user:password")?;
                Ok(RegistryAuth::Basic(user.into(), password.into()))
            }
        }
    }
}

/// `registry://host/repo:tag` (the scheme is optional) as an OCI reference.
pub fn parse_reference(uri: &str) -> Result<Reference> {
    let plain = uri.strip_prefix("registry://").unwrap_or(uri);
    plain
        .parse()
        .with_context(|| format!("{uri:?} is not an OCI reference (registry://host/repo:tag)"))
}

/// Manifest annotations from the module's embedded metadata.
pub fn manifest_annotations(metadata: Option<&Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(annotations) = metadata.and_then(|m| m["annotations"].as_object()) else {
        return out;
    };
    for (k, v) in annotations {
        if let Some(s) = v.as_str().filter(|s| !s.contains('\n')) {
            out.insert(k.clone(), s.to_string());
        }
    }
    if let Some(source) = out.get(SOURCE_ANNOTATION).cloned() {
        out.insert(OCI_SOURCE_ANNOTATION.into(), source);
    }
    out
}

/// Pushes `module` to `uri`; returns the immutable reference (`registry://…@sha256:…`).
pub async fn push(module: &Path, uri: &str, registry: &Registry) -> Result<String> {
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    ensure!(
        wasm.starts_with(b"\0asm"),
        "{} is not a WebAssembly module",
        module.display()
    );
    let metadata = crate::annotate::embedded_metadata(&wasm)?;
    if metadata.is_none() {
        tracing::warn!("the module carries no metadata; run `annotate` first (kwctl refuses to run un-annotated policies without --execution-mode)");
    }
    let reference = parse_reference(uri)?;
    let annotations = manifest_annotations(metadata.as_ref());
    let layer = ImageLayer::new(wasm, WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let config = Config::new(
        serde_json::to_vec(&json!({"architecture": "wasm", "os": "wasip1"}))?,
        WASM_CONFIG_MEDIA_TYPE.to_string(),
        None,
    );
    let manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        (!annotations.is_empty()).then_some(annotations),
    );
    let client = registry.client()?;
    let auth = registry.auth()?;
    client
        .push(&reference, &[layer], config, &auth, Some(manifest))
        .await
        .with_context(|| format!("pushing to {reference}"))?;
    let digest = client
        .fetch_manifest_digest(&reference, &auth)
        .await
        .with_context(|| format!("reading back the digest of {reference}"))?;
    Ok(format!(
        "registry://{}/{}@{digest}",
        reference.resolve_registry(),
        reference.repository()
    ))
}

/// Pulls the policy at `uri` into `out`; returns the manifest digest.
pub async fn pull(uri: &str, out: &Path, registry: &Registry) -> Result<String> {
    let reference = parse_reference(uri)?;
    let client = registry.client()?;
    let image = client
        .pull(&reference, &registry.auth()?, vec![WASM_LAYER_MEDIA_TYPE])
        .await
        .with_context(|| format!("pulling {reference} (a Kubewarden policy artifact)"))?;
    let [layer] = image.layers.as_slice() else {
        bail!(
            "{reference} has {} wasm layers, a policy has exactly one",
            image.layers.len()
        );
    };
    ensure!(
        layer.data.starts_with(b"\0asm"),
        "the layer of {reference} is not a WebAssembly module"
    );
    std::fs::write(out, &layer.data).with_context(|| format!("writing {}", out.display()))?;
    Ok(image.digest.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_annotations() {
        let r = parse_reference("registry://127.0.0.1:5000/policies/ws:v1").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("127.0.0.1:5000", "policies/ws", Some("v1"))
        );
        assert!(parse_reference("registry://").is_err());
        let metadata = json!({"annotations": {
            "io.kubewarden.policy.title": "workloadspread",
            "io.kubewarden.policy.source": "https://example.com/ws",
            "io.kubewarden.policy.usage": "line 1\nline 2"}});
        let a = manifest_annotations(Some(&metadata));
        assert_eq!(a[OCI_SOURCE_ANNOTATION], "https://example.com/ws");
        assert_eq!(a["io.kubewarden.policy.title"], "workloadspread");
        assert!(
            !a.contains_key("io.kubewarden.policy.usage"),
            "multi-line values stay out"
        );
        assert!(manifest_annotations(None).is_empty());
    }
}

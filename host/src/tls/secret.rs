//! The shared Secret of generated certificates (issue #30, item 4): a [`TlsState`] written
//! as PEM entries plus its bookkeeping annotation, read back, and created by the first
//! replica that finds it missing (`rotation.rs` keeps it current).

use super::certs::{Issued, Lifetimes, TlsState};
use super::CALL_TIMEOUT;
use crate::api_call::bounded;
use crate::clock::unix_now;
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use std::collections::BTreeMap;

/// The Secret's rotation bookkeeping (times, names, the bundle generation).
pub const STATE_ANNOTATION: &str = "workloadspread.io/tls-state";

pub fn to_secret(name: &str, state: &TlsState) -> Result<Secret> {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
    };
    put("tls.crt", &state.serving.cert_pem);
    put("tls.key", &state.serving.key_pem);
    put("ca.crt", &state.bundle());
    if let Some(ca) = &state.ca {
        put("ca-signing.crt", &ca.cert_pem);
        put("ca-signing.key", &ca.key_pem);
    }
    if let Some(next) = &state.next_ca {
        put("next-ca.crt", &next.cert_pem);
        put("next-ca.key", &next.key_pem);
    }
    for (i, r) in state.retired.iter().enumerate() {
        put(&format!("retired-{i}.crt"), &r.cert_pem);
    }
    if let Some(legacy) = &state.legacy_bundle {
        put("legacy-ca.crt", legacy);
    }
    let annotations =
        BTreeMap::from([(STATE_ANNOTATION.to_string(), serde_json::to_string(state)?)]);
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(annotations),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    })
}

pub fn from_secret(s: &Secret) -> Result<TlsState> {
    let field = |k: &str| -> Result<Option<String>> {
        match s.data.as_ref().and_then(|d| d.get(k)) {
            None => Ok(None),
            Some(b) => Ok(Some(
                String::from_utf8(b.0.clone()).with_context(|| format!("{k} is not PEM text"))?,
            )),
        }
    };
    let need = |k: &str| field(k)?.with_context(|| format!("missing {k}"));
    let Some(json) = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATE_ANNOTATION))
    else {
        // Written before rotation: no CA key, certificates valid "for ever".
        return Ok(TlsState {
            ca: None,
            next_ca: None,
            next_published_at: None,
            retired: vec![],
            serving: Issued {
                name: "workloadspread-host".into(),
                cert_pem: need("tls.crt")?,
                key_pem: need("tls.key")?,
                issued_at: 0,
                not_after: i64::MAX / 2,
            },
            legacy_bundle: Some(need("ca.crt")?),
            generation: 0,
        });
    };
    let mut state: TlsState =
        serde_json::from_str(json).with_context(|| format!("annotation {STATE_ANNOTATION}"))?;
    state.serving.cert_pem = need("tls.crt")?;
    state.serving.key_pem = need("tls.key")?;
    if let Some(ca) = state.ca.as_mut() {
        ca.cert_pem = need("ca-signing.crt")?;
        ca.key_pem = need("ca-signing.key")?;
    }
    if let Some(next) = state.next_ca.as_mut() {
        next.cert_pem = need("next-ca.crt")?;
        next.key_pem = need("next-ca.key")?;
    }
    for (i, r) in state.retired.iter_mut().enumerate() {
        r.cert_pem = need(&format!("retired-{i}.crt"))?;
    }
    state.legacy_bundle = field("legacy-ca.crt")?;
    Ok(state)
}

/// The Secret's state (and resourceVersion), created when missing; replicas racing to
/// create it read the winner's.
pub async fn load_or_create(
    api: &Api<Secret>,
    name: &str,
    sans: &[String],
    lifetimes: &Lifetimes,
) -> Result<(TlsState, Option<String>)> {
    for _ in 0..3 {
        if let Some(secret) = bounded(CALL_TIMEOUT, api.get_opt(name)).await?? {
            let state = from_secret(&secret).with_context(|| format!("Secret {name}"))?;
            return Ok((state, secret.metadata.resource_version));
        }
        let state = TlsState::generate(sans, unix_now(), lifetimes)?;
        match bounded(
            CALL_TIMEOUT,
            api.create(&PostParams::default(), &to_secret(name, &state)?),
        )
        .await?
        {
            Ok(created) => return Ok((state, created.metadata.resource_version)),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context(format!("creating Secret {name}")),
        }
    }
    bail!("Secret {name} kept changing while loading it")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_round_trip_keeps_every_certificate() {
        let l = Lifetimes {
            cert_seconds: 300,
            ca_seconds: 1200,
            grace_seconds: 30,
        };
        let sans = vec!["localhost".to_string()];
        let s0 = TlsState::generate(&sans, 0, &l).unwrap();
        let s1 = s0.plan(&sans, 900, &l, |_| true).unwrap().unwrap();
        assert!(s1.next_ca.is_some());
        let s2 = s1.plan(&sans, 950, &l, |_| true).unwrap().unwrap();
        assert_eq!(s2.retired.len(), 1);
        for s in [&s0, &s1, &s2] {
            assert_eq!(&from_secret(&to_secret("n", s).unwrap()).unwrap(), s);
        }
        // A Secret from before rotation: three PEMs, no annotation.
        let mut legacy = to_secret("n", &s0).unwrap();
        legacy.metadata.annotations = None;
        let read = from_secret(&legacy).unwrap();
        assert!(read.ca.is_none() && read.legacy_bundle.is_some());
    }
}

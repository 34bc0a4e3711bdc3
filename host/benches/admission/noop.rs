//! The transport floor: a mutating webhook of our own that does nothing — TLS (ECDSA
//! P-256, rustls with ring, as the host), HTTP/1.1 (as the host), every pod CREATE and
//! DELETE answered "allowed" with an empty JSON patch and no other work. What the API
//! server spends calling any webhook at all; the host's rows are read against it.
//!
//! [`Answer::OurPatch`] is the injection floor: the same webhook answering each pod
//! CREATE with the part of the host's patch every bench pod gets (the
//! matched-WorkloadSpread annotation, the host's re-invocation token and the empty
//! `nodeAffinity` the reference always
//! materialises; pods claimed from a reservation also get its label and annotation),
//! computed per request with the host's own `json_patch::diff`, and nothing decided.
//! What the API server spends applying and storing any injecting webhook's answer;
//! [`check_same_injection`] fails the bench when the host's answers stop carrying
//! what this one adds.

use anyhow::{Context, Result};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use workloadspread_core::admission::reserve::RESERVATION_LABEL;
use workloadspread_core::annotation::MatchedWorkloadSpread;
/// `host/src/webhook/reinvoke.rs`'s token annotation (the bench cannot import the binary's
/// modules; the injection check below fails if the two names part).
const TOKEN_ANNOTATION: &str = "workloadspread.io/admission-token";
use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION;
use workloadspread_testkit::{unique_name, wait_for};

/// What the webhook answers a pod CREATE with.
#[derive(Clone, Copy, PartialEq)]
pub enum Answer {
    /// An empty patch: the transport floor.
    Empty,
    /// The host's patch for a bench pod: the injection floor.
    OurPatch,
}

/// A running no-op webhook and its configuration (namespaces labelled
/// `workloadspread.test/noop=<name>` only). Stopped and removed by [`Noop::stop`].
pub struct Noop {
    name: String,
    client: Client,
    calls: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

/// The WorkloadSpread and subset the injection floor names (the bench's spread is
/// `bench`; `a` is its first subset).
const SPREAD: &str = "bench";
const SUBSET: &str = "a";

/// `allowed: true` with `answer`'s JSON patch for the request's uid.
fn review(body: &Value, answer: Answer) -> Value {
    let uid = body["request"]["uid"].clone();
    let object = &body["request"]["object"];
    let creating = body["request"]["operation"] == "CREATE";
    let patch = match answer {
        Answer::OurPatch if creating && object.is_object() => {
            let mut injected = object.clone();
            inject(&mut injected);
            json_patch::diff(object, &injected)
        }
        _ => json_patch::Patch(vec![]),
    };
    let patch = serde_json::to_vec(&patch).unwrap_or_else(|_| b"[]".to_vec());
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(patch)}
    })
}

/// What the host adds to every bench pod it admits into subset `a` (see the module's
/// doc).
fn inject(pod: &mut Value) {
    let matched = MatchedWorkloadSpread {
        name: SPREAD.into(),
        subset: SUBSET.into(),
        uid: None,
    };
    let annotation = matched.to_annotation();
    // The host's re-invocation token (`webhook::reinvoke`): a signed claim of the same
    // shape and size, since every pod the host admits stores one.
    let claim = json!({"namespace": pod["metadata"]["namespace"], "user": "system:serviceaccount:kube-system:replicaset-controller",
        "owner": "00000000-0000-0000-0000-000000000000", "ws": SPREAD, "subset": SUBSET, "at": 1_800_000_000,
        "annotations": {MATCHED_WORKLOADSPREAD_ANNOTATION: annotation}, "labels": {}});
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let token = format!(
        "v1.{}.{}",
        b64.encode(claim.to_string()),
        b64.encode([0u8; 32])
    );
    let metadata = &mut pod["metadata"];
    metadata["annotations"][MATCHED_WORKLOADSPREAD_ANNOTATION] = annotation.into();
    metadata["annotations"][TOKEN_ANNOTATION] = token.into();
    if pod["spec"]["affinity"]["nodeAffinity"].is_null() {
        pod["spec"]["affinity"]["nodeAffinity"] = json!({});
    }
}

/// The annotation keys and added label keys (labels the API server adds itself, the
/// node's topology, aside) of `admitted` when it was sent as `sent`, and its affinity.
type Injection = (Vec<String>, Vec<String>, Value);

fn injection(sent: &Value, admitted: &Value) -> Injection {
    let keys = |pod: &Value, at: &str| -> Vec<String> {
        let mut keys: Vec<String> = pod
            .pointer(at)
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    let before = keys(sent, "/metadata/labels");
    let labels = keys(admitted, "/metadata/labels")
        .into_iter()
        .filter(|k| !before.contains(k) && !k.starts_with("topology.kubernetes.io/"))
        .collect();
    (
        keys(admitted, "/metadata/annotations"),
        labels,
        admitted["spec"]["affinity"].clone(),
    )
}

/// Fails unless every pod the host admitted (`admitted`, as its CREATE returned it;
/// each sent as `sent(name)`) carries what the injection floor adds — its annotations
/// and added labels among the pod's, the same affinity — and some pod got exactly that
/// (the others the reservation's label and annotation besides): the floor is the part
/// of the host's patch every pod gets. The spread of the host's patches is returned
/// for the report.
pub fn check_same_injection(admitted: &[Pod], sent: impl Fn(&str) -> Pod) -> Result<String> {
    let mut seen: Vec<(Injection, usize)> = Vec::new();
    let mut floor = None;
    for pod in admitted {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let sent = serde_json::to_value(sent(name))?;
        let mut injected = sent.clone();
        inject(&mut injected);
        let floor = floor.get_or_insert_with(|| injection(&sent, &injected));
        let ours = injection(&sent, &serde_json::to_value(pod)?);
        let within = |of: &[String], among: &[String]| of.iter().all(|k| among.contains(k));
        anyhow::ensure!(
            within(&floor.0, &ours.0) && within(&floor.1, &ours.1) && floor.2 == ours.2,
            "pod {name}: the host injected {ours:?}, without all the injection floor adds \
             {floor:?}: make noop::inject add only what the host adds to every pod"
        );
        match seen.iter_mut().find(|(i, _)| *i == ours) {
            Some((_, n)) => *n += 1,
            None => seen.push((ours, 1)),
        }
    }
    let floor = floor.context("no admitted pod to compare the injection floor with")?;
    anyhow::ensure!(
        seen.iter().any(|(i, _)| *i == floor),
        "no pod admitted by the host got only what the injection floor adds {floor:?} \
         (the host's: {seen:?}): make noop::inject add what the host adds to every pod"
    );
    let reserved = seen
        .iter()
        .filter(|((_, labels, _), _)| labels.iter().any(|l| l == RESERVATION_LABEL))
        .map(|(_, n)| n)
        .sum::<usize>();
    Ok(format!(
        "{reserved} of {} also got a reservation's label and annotation",
        admitted.len()
    ))
}

impl Noop {
    /// Serves on a free loopback port and registers the configuration.
    pub async fn start(client: &Client, answer: Answer) -> Result<Self> {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        let router = Router::new().route(
            "/mutate",
            post(move |Json(body): Json<Value>| {
                counted.fetch_add(1, Ordering::Relaxed);
                std::future::ready(Json(review(&body, answer)))
            }),
        );
        let server = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let name = unique_name("ws-bench-noop");
        let ca = base64::engine::general_purpose::STANDARD.encode(certified.cert.pem());
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{"name": "noop.workloadspread.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": ca},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                    "operations": ["CREATE", "DELETE"]}],
                "namespaceSelector": {"matchLabels": {"workloadspread.test/noop": name}},
                "failurePolicy": "Fail", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]
        }))?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &config)
            .await?;
        Ok(Noop {
            name,
            client: client.clone(),
            calls,
            server,
        })
    }

    /// Routes namespace `ns` through the webhook and waits until the API server does
    /// (its caches lag): a dry-run pod CREATE that reaches the server.
    pub async fn enroll(&self, ns: &str) -> Result<()> {
        let patch = json!({"metadata": {"labels": {"workloadspread.test/noop": self.name}}});
        Api::<Namespace>::all(self.client.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"name": "noop-probe"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        wait_for(
            "the API server to call the no-op webhook",
            Duration::from_secs(30),
            || async {
                let before = self.calls();
                pods.create(&dry_run, &probe)
                    .await
                    .context("dry-run probe")?;
                Ok((self.calls() > before).then_some(()))
            },
        )
        .await
    }

    /// Admission requests answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub async fn stop(self) -> Result<()> {
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await?;
        self.server.abort();
        Ok(())
    }
}

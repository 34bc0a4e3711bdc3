//! The transport floor: a mutating webhook of our own that does nothing — TLS (ECDSA
//! P-256, rustls with ring, as the host), HTTP/1.1 (as the host), every pod CREATE and
//! DELETE answered "allowed" with an empty JSON patch and no other work. What the API
//! server spends calling any webhook at all; the host's rows are read against it.

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
use workloadspread_testkit::{unique_name, wait_for};

/// A running no-op webhook and its configuration (namespaces labelled
/// `workloadspread.test/noop=<name>` only). Stopped and removed by [`Noop::stop`].
pub struct Noop {
    name: String,
    client: Client,
    calls: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

/// `allowed: true` with an empty JSON patch for the request's uid.
async fn review(Json(body): Json<Value>) -> Json<Value> {
    let uid = body["request"]["uid"].clone();
    let empty = base64::engine::general_purpose::STANDARD.encode("[]");
    Json(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": empty}
    }))
}

impl Noop {
    /// Serves on a free loopback port and registers the configuration.
    pub async fn start(client: &Client) -> Result<Self> {
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
            post(move |body: Json<Value>| {
                counted.fetch_add(1, Ordering::Relaxed);
                review(body)
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

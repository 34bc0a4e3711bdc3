//! Issue #41 (5): the placement survives the admission chain. A mutating webhook ordered
//! after ours removes the pod's node affinity; with `reinvocationPolicy: IfNeeded` the
//! API server calls ours again, which answers as it did the first time — the subset's
//! term injected again — and claims no second slot.

use crate::support::{subsets_of, FleetSetup};
use anyhow::{ensure, Context, Result};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use workloadspread_testkit::{cluster, unique_name};

/// A webhook that removes the node affinity of every pod it is sent (and labels it), as
/// a third-party webhook ordered after ours might. Its configuration sorts after ours.
struct Rewriter {
    name: String,
    client: kube::Client,
    calls: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

impl Rewriter {
    async fn start(client: &kube::Client, namespace: &str) -> Result<Self> {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
        let key = rustls::pki_types::PrivateKeyDer::try_from(certified.key_pair.serialize_der())
            .map_err(anyhow::Error::msg)?;
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        let server = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, calls) = (acceptor.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |r| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        rewrite(r)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let name = format!("zz-{}", unique_name("rewriter"));
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{"name": "rewriter.workloadspread.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/"),
                    "caBundle": base64::engine::general_purpose::STANDARD
                        .encode(certified.cert.pem())},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                    "operations": ["CREATE"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail", "sideEffects": "None", "reinvocationPolicy": "Never",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]}))?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &config)
            .await?;
        Ok(Rewriter {
            name,
            client: client.clone(),
            calls,
            server,
        })
    }

    async fn stop(self) -> Result<()> {
        self.server.abort();
        Api::<MutatingWebhookConfiguration>::all(self.client)
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

async fn rewrite(
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let object = &review["request"]["object"];
    let mut ops = vec![json!({"op": "add", "path": "/metadata/labels/rewritten", "value": "yes"})];
    if object["spec"]["affinity"].is_object() {
        ops.push(json!({"op": "remove", "path": "/spec/affinity"}));
    }
    let patch = base64::engine::general_purpose::STANDARD.encode(json!(ops).to_string());
    let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": true,
            "patchType": "JSONPatch", "patch": patch}});
    Ok(hyper::Response::new(http_body_util::Full::new(
        answer.to_string().into(),
    )))
}

/// The zone the pod's required node affinity pins it to (every term must name it).
fn required_zone(pod: &Pod) -> Option<String> {
    let terms = pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .clone();
    let zones: Vec<String> = terms
        .iter()
        .filter_map(|t| {
            t.match_expressions
                .iter()
                .flatten()
                .find(|e| e.key == "topology.kubernetes.io/zone")
                .and_then(|e| e.values.as_ref()?.first().cloned())
        })
        .collect();
    (zones.len() == terms.len())
        .then(|| zones.first().cloned())
        .flatten()
}

#[tokio::test]
async fn the_placement_survives_a_later_webhook_without_a_second_claim() -> Result<()> {
    let cluster = cluster()?;
    // Every claim written (no reserved slots): one creatingPods entry per claim.
    let Some(s) = FleetSetup::start_with(
        "ws-chain",
        cluster.kubeconfig(),
        None,
        &["--reserve-max", "0"],
    )
    .await?
    else {
        return Ok(());
    };
    let client = s.ns.client();
    let ours: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let patch =
        json!([{"op": "add", "path": "/webhooks/0/reinvocationPolicy", "value": "IfNeeded"}]);
    ours.patch(
        &s.configs.name,
        &PatchParams::default(),
        &Patch::<Value>::Json(serde_json::from_value(patch)?),
    )
    .await?;
    let rewriter = Rewriter::start(&client, s.ns.name()).await?;
    let pods = s.ns.api::<Pod>();
    // Unnamed pods (as a ReplicaSet creates them): a second evaluation would claim again.
    let unnamed = || {
        let mut pod = workloadspread_testkit::webhook::fleet_pod("", &s.fleet_uid);
        pod.metadata.name = None;
        pod.metadata.generate_name = Some("fleet-".into());
        pod
    };
    // The API server's webhook cache takes a moment to include the rewriter: dry runs
    // (which claim nothing) until one comes back rewritten.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    workloadspread_testkit::wait_for(
        "the rewriter in the admission chain",
        std::time::Duration::from_secs(30),
        || async {
            let pod = pods.create(&dry_run, &unnamed()).await?;
            Ok(pod
                .metadata
                .labels
                .is_some_and(|l| l.contains_key("rewritten"))
                .then_some(()))
        },
    )
    .await?;
    let mut created = vec![];
    for _ in 0..3 {
        created.push(pods.create(&PostParams::default(), &unnamed()).await?);
    }
    let placed = subsets_of(&created);
    for pod in &created {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let subset = subsets_of(std::slice::from_ref(pod))
            .into_keys()
            .next()
            .with_context(|| format!("pod {name} was not placed"))?;
        let zone = required_zone(pod);
        ensure!(
            zone.as_deref() == Some(&format!("zone-{subset}")[..]),
            "pod {name} placed in subset {subset} lost its node affinity: {zone:?} ({:?})",
            pod.spec.as_ref().and_then(|s| s.affinity.clone())
        );
    }
    // Security review R12: a pod made from a stored pod's metadata — its token and id label,
    // the same owner and user, well within the token's 60 s — claims a slot of its own.
    let (token, id) = (
        "workloadspread.io/admission-token",
        "workloadspread.io/admission",
    );
    let original = &created[0].metadata;
    let carried = |map: &Option<std::collections::BTreeMap<String, String>>, key: &str| {
        map.as_ref().and_then(|m| m.get(key)).cloned()
    };
    let (Some(stored_token), Some(stored_id)) = (
        carried(&original.annotations, token),
        carried(&original.labels, id),
    ) else {
        anyhow::bail!("the first pod carries no token and id: {original:?}");
    };
    let mut copy = unnamed();
    copy.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(token.into(), stored_token);
    copy.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(id.into(), stored_id.clone());
    let copied = pods.create(&PostParams::default(), &copy).await?;
    ensure!(
        carried(&copied.metadata.labels, id).is_some_and(|i| i != stored_id),
        "the copy kept the stored pod's id: {:?}",
        copied.metadata.labels
    );
    created.push(copied);
    let claims = s.creating(0).await?.len() + s.creating(1).await?.len();
    let reinvoked = s
        .host
        .metric("workloadspread_host_reinvocations_total")
        .await?;
    let rewrites = rewriter.calls.load(Ordering::Relaxed);
    eprintln!(
        "3 pods placed {placed:?} through a later webhook ({rewrites} rewrites): node \
         affinity kept; with a copy of a stored pod's token, {claims} claims, {reinvoked} \
         re-invocations answered without one"
    );
    ensure!(
        claims == 4,
        "{claims} claims for 3 pods and a copy of one (4 wanted): a re-invocation claimed \
         again (more), or the copy's replayed token was honoured (fewer)"
    );
    ensure!(reinvoked >= 3.0, "re-invocations answered: {reinvoked}");
    rewriter.stop().await?;
    s.finish().await
}

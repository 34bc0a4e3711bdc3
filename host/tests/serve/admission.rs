//! Pods admitted and spread: a Deployment's pods arriving mutated with invalid spreads
//! rejected, and a 300-pod burst through two host replicas ending with exact counts.

use crate::support::{fleet_resource, host_bin, subsets_of, ws_crd, ws_resource, zone_subset};
use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use workloadspread_testkit::webhook::{
    apply_crd, policy_wasm, round_robin_proxy, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for};

#[tokio::test]
async fn deployment_pods_arrive_mutated_and_invalid_spreads_are_rejected() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = cluster.namespace("serve").await?;
    let client = ns.client();
    ws_crd(&client).await?;
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-webhook");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let _host = HostProcess::start_on(
        host_bin(),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
        ],
    )
    .await?;
    ensure!(
        configs.has_ca_bundle().await?,
        "the host did not patch the CA bundle"
    );
    configs.enroll(ns.name()).await?;

    let ws_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &ws_resource());
    let invalid: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "bad"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": "1.5"}, {"name": "a"}]}
    }))?;
    let err = ws_api
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("an invalid WorkloadSpread must be rejected");
    let message = err.to_string();
    ensure!(
        message.contains("spec.subsets[0].maxReplicas") && message.contains("must end with '%'"),
        "rejection lacks the field errors: {message}"
    );

    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [zone_subset("a", "zone-a", json!(2)), zone_subset("b", "zone-b", json!(3)),
                        zone_subset("c", "zone-c", Value::Null)]}
    }))?;
    ws_api.create(&PostParams::default(), &ws).await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    }))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await?;
    let pods: Api<Pod> = ns.api();
    let placed = wait_for("6 scheduled pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?.items;
        let scheduled = list
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        Ok((list.len() == 6 && scheduled == 6).then_some(list))
    })
    .await?;
    let counts = subsets_of(&placed);
    ensure!(
        counts == BTreeMap::from([("a".into(), 2), ("b".into(), 3), ("c".into(), 1)]),
        "unexpected spread {counts:?}; first pod {:?}",
        placed.first().map(|p| &p.metadata)
    );
    for p in &placed {
        let subset = subsets_of(std::slice::from_ref(p))
            .into_keys()
            .next()
            .unwrap_or_default();
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        ensure!(
            node.starts_with(&format!("node-{subset}-")),
            "pod {:?} of subset {subset} landed on {node}: {:?}",
            p.metadata.name,
            p.spec.as_ref().map(|s| &s.affinity)
        );
    }
    let status = ws_api.get("web").await?.data["status"].clone();
    let a = &status["versionedSubsetStatuses"]
        .as_object()
        .and_then(|m| m.values().next().cloned())
        .context("no versioned status written")?[0];
    ensure!(a["missingReplicas"] == 0, "subset a status {a}");
    configs.delete().await
}

#[tokio::test]
async fn two_replicas_admit_a_300_pod_burst_with_exact_counts() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = cluster.namespace("burst").await?;
    let client = ns.client();
    ws_crd(&client).await?;
    apply_crd(&client, &fleet_crd()).await?;
    let settings = json!({"customWorkloads": [
        {"group": "burst.workloadspread.test", "kind": "Fleet", "replicasPath": "spec.replicas"}]});
    let secret = format!("{}/host-tls", ns.name());
    let args = |policy: &Path| -> Vec<String> {
        vec![
            "--policy".into(),
            policy.display().to_string(),
            "--settings-json".into(),
            settings.to_string(),
            "--tls-secret".into(),
            secret.clone(),
            "--max-concurrency".into(),
            "128".into(),
        ]
    };
    let hosts = [
        HostProcess::start(host_bin(), cluster.kubeconfig(), &args(&policy)).await?,
        HostProcess::start(host_bin(), cluster.kubeconfig(), &args(&policy)).await?,
    ];
    let proxy = round_robin_proxy(
        hosts
            .iter()
            .map(|h| std::net::SocketAddr::from(([127, 0, 0, 1], h.port)))
            .collect(),
    )
    .await?;
    let name = unique_name("ws-burst");
    // Both replicas share the Secret's CA; the host patches nothing here, the test does.
    let configs = WebhookConfigs::create(&client, &name, &format!("https://{proxy}")).await?;
    let ca = shared_ca(&client, ns.name()).await?;
    patch_ca(&client, &name, &ca).await?;
    configs.enroll(ns.name()).await?;

    let fleets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &fleet_resource());
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "metadata": {"name": "fleet"},
        "spec": {"replicas": 300}}))?;
    let fleet = fleets.create(&PostParams::default(), &fleet).await?;
    let ws_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &ws_resource());
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "burst"},
        "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"},
            "subsets": [zone_subset("a", "zone-a", json!(100)), zone_subset("b", "zone-b", json!(100)),
                        zone_subset("c", "zone-c", Value::Null)]}
    }))?;
    ws_api.create(&PostParams::default(), &ws).await?;
    // Both hosts must list the WorkloadSpread before the burst.
    for host in &hosts {
        host.wait_sees_workloadspread(ns.name(), "burst", &ws.data["spec"]["targetRef"])
            .await?;
    }

    // #26 item 8: no subset over its maximum at any moment of the burst.
    let monitor = workloadspread_testkit::monitor::Monitor::start(
        client.clone(),
        ns.name(),
        "burst",
        fleet_resource(),
        "fleet",
    )
    .await?;
    let uid = fleet.metadata.uid.clone().context("fleet uid")?;
    let pods: Api<Pod> = ns.api();
    let started = Instant::now();
    let results: Vec<Result<Pod, kube::Error>> = futures::stream::iter(0..300)
        .map(|i| {
            let pods = pods.clone();
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("fleet-{i}"), "labels": {"app": "fleet"},
                    "ownerReferences": [{"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
                        "name": "fleet", "uid": uid, "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }))
            .expect("static pod");
            async move { pods.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let rejected: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    ensure!(
        rejected.is_empty(),
        "{} pods rejected, e.g. {:?}",
        rejected.len(),
        rejected.first()
    );
    let all = pods.list(&ListParams::default()).await?.items;
    let counts = subsets_of(&all);
    ensure!(
        counts == BTreeMap::from([("a".into(), 100), ("b".into(), 100), ("c".into(), 100)]),
        "unexpected spread {counts:?}"
    );
    let status = ws_api.get("burst").await?.data["status"].clone();
    let statuses = status["versionedSubsetStatuses"]["versionIgnored"].clone();
    for (i, expected) in [(0, 100), (1, 100)] {
        let s = &statuses[i];
        let creating = s["creatingPods"].as_object().map_or(0, |m| m.len());
        ensure!(
            s["missingReplicas"] == 0 && creating == expected,
            "subset {i} status: missing {} creating {creating}",
            s["missingReplicas"]
        );
    }
    let mut report = vec![];
    for h in &hosts {
        let evaluations = h.metric("workloadspread_host_evaluations_total").await?;
        ensure!(evaluations > 0.0, "replica on {} served nothing", h.port);
        report.push(format!(
            "replica :{} evaluations {evaluations} status writes {} conflicts {}",
            h.port,
            h.metric("workloadspread_host_counter_status_writes_total")
                .await?,
            h.metric("workloadspread_host_counter_conflicts_total")
                .await?
        ));
    }
    eprintln!(
        "burst: 300 pods in {:.2} s ({:.0} pods/s); {}; monitor: {}",
        elapsed.as_secs_f64(),
        300.0 / elapsed.as_secs_f64(),
        report.join("; "),
        monitor.finish()?
    );
    configs.delete().await
}

/// A workload kind no controller acts on, so only the test creates its pods.
fn fleet_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "fleets.burst.workloadspread.test"},
        "spec": {"group": "burst.workloadspread.test", "scope": "Namespaced",
            "names": {"plural": "fleets", "singular": "fleet", "kind": "Fleet", "listKind": "FleetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}}]}})
}

async fn shared_ca(client: &kube::Client, ns: &str) -> Result<String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let s = secrets.get("host-tls").await?;
    let ca = s
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .context("ca.crt in the shared Secret")?;
    Ok(String::from_utf8(ca.0)?)
}

async fn patch_ca(client: &kube::Client, name: &str, ca: &str) -> Result<()> {
    use base64::Engine as _;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]))?;
    let params = kube::api::PatchParams::default();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(name, &params, &kube::api::Patch::<()>::Json(patch.clone()))
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(name, &params, &kube::api::Patch::<()>::Json(patch))
        .await?;
    Ok(())
}

//! Issue #41 (2): no refusal window at install. The webhook configurations exist without
//! webhooks until a host serves: pods created meanwhile are admitted (unspread, as with no
//! webhook at all), not refused. The host writes the webhooks with its CA bundle once it
//! is ready — replacing definitions that differ from its own — and writes them again when
//! a configuration is emptied.

use crate::support::{fleet_resource, host_bin, subsets_of, ws_crd, ws_resource, zone_subset};
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::time::Duration;
use workloadspread_testkit::webhook::{apply_crd, fleet_pod, policy_wasm, HostProcess};
use workloadspread_testkit::{cluster, unique_name, wait_for};

const DIGEST: &str = "workloadspread.io/webhooks-digest";

/// The definitions the chart would render for a host at `base` serving namespace `ns`.
fn definitions(base: &str, ns: &str) -> Value {
    let common = |path: &str, rules: Value| {
        json!({"name": format!("{path}.workloadspread.test"),
            "clientConfig": {"url": format!("{base}/{path}")},
            "rules": rules,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "failurePolicy": "Fail", "sideEffects": "NoneOnDryRun",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 10})
    };
    json!({
        "mutating": [common("mutate", json!([{"apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods"], "operations": ["CREATE", "DELETE"]}]))],
        "validating": [common("validate", json!([{"apiGroups": ["apps.kruise.io"],
            "apiVersions": ["v1alpha1", "v1beta1"], "resources": ["workloadspreads"],
            "operations": ["CREATE", "UPDATE"]}]))],
    })
}

/// Webhooks of configuration `name`: (mutating count, validating count, all with a CA
/// bundle, the digest annotation of the mutating one).
async fn written(
    client: &kube::Client,
    name: &str,
) -> Result<(usize, usize, bool, Option<String>)> {
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    let (mw, vw) = (
        m.webhooks.unwrap_or_default(),
        v.webhooks.unwrap_or_default(),
    );
    let bundles = mw.iter().all(|w| w.client_config.ca_bundle.is_some())
        && vw.iter().all(|w| w.client_config.ca_bundle.is_some());
    let digest = m.metadata.annotations.and_then(|a| a.get(DIGEST).cloned());
    Ok((mw.len(), vw.len(), bundles, digest))
}

#[tokio::test]
async fn webhooks_are_written_once_the_host_serves() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = cluster.namespace("install").await?;
    let client = ns.client();
    ws_crd(&client).await?;
    apply_crd(&client, &workloadspread_testkit::webhook::fleet_crd()).await?;
    let fleets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &fleet_resource());
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
        "metadata": {"name": "fleet"}, "spec": {"replicas": 10}}))?;
    let fleet_uid = fleets
        .create(&PostParams::default(), &fleet)
        .await?
        .metadata
        .uid
        .context("fleet uid")?;
    let target =
        json!({"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"});
    let spread: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "spread"},
        "spec": {"targetRef": target, "subsets": [zone_subset("a", "zone-a", json!(5)),
            zone_subset("b", "zone-b", Value::Null)]}}))?;
    Api::<DynamicObject>::namespaced_with(client.clone(), ns.name(), &ws_resource())
        .create(&PostParams::default(), &spread)
        .await?;
    // What the chart creates: both configurations, the mutating one still holding another
    // release's definitions (an upgrade: another timeout, a port nothing serves, Ignore).
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-install");
    let mut stale = definitions("https://127.0.0.1:1", ns.name())["mutating"].clone();
    stale[0]["failurePolicy"] = json!("Ignore");
    stale[0]["timeoutSeconds"] = json!(3);
    let mutating: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": stale}))?;
    let validating: ValidatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}}))?;
    let m_api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let v_api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    m_api.create(&PostParams::default(), &mutating).await?;
    v_api.create(&PostParams::default(), &validating).await?;
    // No host yet: pods are admitted (unspread), none refused.
    let pods = ns.api::<Pod>();
    for i in 0..3 {
        pods.create(
            &PostParams::default(),
            &fleet_pod(&format!("early-{i}"), &fleet_uid),
        )
        .await
        .with_context(|| format!("pod early-{i} was refused with no host serving"))?;
    }
    let file = std::env::temp_dir().join(format!("{}.yaml", unique_name("webhooks")));
    std::fs::write(
        &file,
        serde_yaml::to_string(&definitions(
            &format!("https://127.0.0.1:{port}"),
            ns.name(),
        ))?,
    )?;
    let settings = workloadspread_testkit::webhook::fleet_settings().to_string();
    let host = HostProcess::start_on(
        host_bin(),
        cluster.kubeconfig(),
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--settings-json".into(),
            settings,
            "--webhook-config".into(),
            name.clone(),
            "--webhooks-file".into(),
            file.display().to_string(),
        ],
    )
    .await?;
    let (m, v, bundles, digest) = wait_for(
        "the host to write its webhooks",
        Duration::from_secs(30),
        || async {
            let seen = written(&client, &name).await?;
            let m = m_api.get(&name).await?;
            let ours = m
                .webhooks
                .unwrap_or_default()
                .first()
                .map(|w| w.failure_policy.clone());
            Ok((seen.1 == 1 && ours == Some(Some("Fail".into()))).then_some(seen))
        },
    )
    .await?;
    ensure!(
        m == 1 && v == 1 && bundles && digest.is_some(),
        "{m} {v} {bundles} {digest:?}"
    );
    // Now pods are spread (the API server's webhook cache catches up first).
    let spread_pod = wait_for(
        "a pod spread by the written webhook",
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            let fleet_uid = fleet_uid.clone();
            async move {
                let pod = pods
                    .create(
                        &PostParams::default(),
                        &fleet_pod(&unique_name("late"), &fleet_uid),
                    )
                    .await?;
                Ok(subsets_of(std::slice::from_ref(&pod)).into_keys().next())
            }
        },
    )
    .await?;
    // A configuration emptied (a re-applied manifest): the host writes the webhooks again.
    let mut emptied = m_api.get(&name).await?;
    emptied.webhooks = None;
    m_api
        .replace(&name, &PostParams::default(), &emptied)
        .await?;
    wait_for(
        "the webhooks written again",
        Duration::from_secs(30),
        || async { Ok((written(&client, &name).await?.0 == 1).then_some(())) },
    )
    .await?;
    eprintln!(
        "3 pods admitted with no host; the host replaced the stale definitions and wrote \
         both configurations with its CA bundle (digest {digest:?}); a pod then went to \
         subset {spread_pod}; an emptied configuration was written again"
    );
    drop(host);
    m_api.delete(&name, &DeleteParams::default()).await?;
    v_api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

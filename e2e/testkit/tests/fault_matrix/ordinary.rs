//! Issue #40: the maximum through *ordinary* operations, with the invariant monitor —
//! capacity is freed by facts the API server stored, never by a request. One host and the
//! controller, integer maxima a 3 / b 5 / c the rest (3 / 5 / 2 at 10 replicas), a
//! Deployment at 10; then a drain blocked by a PodDisruptionBudget, forged reviews POSTed
//! to the host, a pod recreated under its own name, a forged pod UPDATE, a lowered
//! maximum with rebalancing, and churn with the controller stopped.

use crate::common::*;
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DynamicObject, EvictParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use workloadspread_testkit::monitor::{Monitor, Report};
use workloadspread_testkit::pods::subset_of;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{wait_for, TestNamespace};

/// a 3 / b 5 / c the rest.
pub fn integer_spec() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(3)), zone("b", "zone-b", json!(5)), zone("c", "zone-c", Value::Null)]})
}

/// The WorkloadSpread `web` with `spec` (annotated for rebalancing when `rebalance`),
/// seen by the host, and the monitor watching it; no workload yet.
pub async fn watched_spread(
    s: &Stack,
    spec: serde_json::Value,
    rebalance: bool,
) -> Result<(Api<DynamicObject>, Monitor)> {
    let api: Api<DynamicObject> = Api::namespaced_with(s.ns.client(), s.ns.name(), &ws_resource());
    let mut ws = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec});
    if rebalance {
        ws["metadata"]["annotations"] = json!({"workloadspread.io/rebalance": "true"});
    }
    api.create(&PostParams::default(), &serde_json::from_value(ws)?)
        .await?;
    s.host
        .wait_sees_workloadspread(s.ns.name(), "web", &target("Deployment"))
        .await?;
    let monitor = Monitor::start(
        s.ns.client(),
        s.ns.name(),
        "web",
        super::support::deployment_resource(),
        "web",
    )
    .await?;
    Ok((api, monitor))
}

/// The WorkloadSpread (annotated for rebalancing when `rebalance`), the Deployment at
/// 10 replicas spread 3 / 5 / 2 and counted by the controller, and the monitor.
pub async fn spread_ten(s: &Stack, rebalance: bool) -> Result<(Api<DynamicObject>, Monitor)> {
    let (api, monitor) = watched_spread(s, integer_spec(), rebalance).await?;
    create_web_deployment(&s.ns, 10).await?;
    let pods = settled(&s.ns, 10).await?;
    let want = [("a", 3), ("b", 5), ("c", 2)].map(|(k, v)| (k.to_string(), v));
    ensure!(counts(&pods) == want.into(), "placed {:?}", counts(&pods));
    status_matches(&api, &counts(&pods)).await?;
    Ok((api, monitor))
}

/// A zone-a pod (the first by name).
pub async fn a_pod(ns: &TestNamespace) -> Result<Pod> {
    live_pods(ns)
        .await?
        .into_iter()
        .find(|p| subset_of(p).as_deref() == Some("a"))
        .context("a pod in subset a")
}

/// A PodDisruptionBudget allowing no disruption of the workload's pods.
pub async fn no_disruption(ns: &TestNamespace) -> Result<()> {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}))?;
    ns.api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await?;
    Ok(())
}

/// Evicts `pod` every 200 ms, as `kubectl drain` retries, until stopped; counts the
/// refusals (429: the budget allows no disruption). Through a client that does not
/// retry a 429 itself (kube's default does, with backoff, for ever as seen from here).
pub struct Drain {
    stop: Arc<AtomicBool>,
    pub refused: Arc<AtomicUsize>,
    /// Why the drain stopped on its own, if it did.
    failed: Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl Drain {
    pub async fn start(ns: &TestNamespace, pod: &str) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(std::sync::Mutex::new(None));
        let mut config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(workloadspread_testkit::cluster()?.kubeconfig())?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        config.default_retry = false;
        let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, ns.name());
        let (name, flag, count) = (pod.to_string(), stop.clone(), Arc::clone(&refused));
        let why = Arc::clone(&failed);
        let task = tokio::spawn(async move {
            while !flag.load(Ordering::SeqCst) {
                let params = EvictParams::default();
                let evict = pods.evict(&name, &params);
                let outcome = match tokio::time::timeout(Duration::from_secs(15), evict).await {
                    Ok(Err(kube::Error::Api(e))) if e.code == 429 => {
                        count.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }
                    Ok(Ok(_)) => Err(format!("the budget let {name} be evicted")),
                    Ok(Err(e)) => Err(format!("evicting {name}: {e}")),
                    Err(_) => Err(format!("evicting {name}: no answer in 15 s")),
                };
                if let Err(e) = outcome {
                    *why.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    anyhow::bail!(e);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(())
        });
        Ok(Drain {
            stop,
            refused,
            failed,
            task,
        })
    }

    /// Waits for `n` refused evictions.
    pub async fn refused_at_least(&self, n: usize) -> Result<()> {
        wait_for("evictions refused by the budget", SETTLE, || async {
            if let Some(e) = self
                .failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
            {
                anyhow::bail!("the drain stopped: {e}");
            }
            Ok((self.refused.load(Ordering::SeqCst) >= n).then_some(()))
        })
        .await
    }

    pub async fn stop(self) -> Result<usize> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await??;
        Ok(self.refused.load(Ordering::SeqCst))
    }
}

/// Scales the Deployment to each of `steps` in turn, waiting for the pods each time.
pub async fn scale_through(ns: &TestNamespace, steps: &[i32]) -> Result<()> {
    let deployments = ns.api::<Deployment>();
    for &n in steps {
        scale(&deployments, n).await?;
        settled(ns, n as usize).await?;
    }
    Ok(())
}

/// The monitor's verdict and the subset counts, printed with `what`.
pub async fn verdict(ns: &TestNamespace, monitor: Monitor, what: &str) -> Result<Report> {
    let pods = live_pods(ns).await?;
    let report = monitor.finish().with_context(|| what.to_string())?;
    eprintln!("{what}: {:?}; monitor: {report}", counts(&pods));
    Ok(report)
}

/// The AdmissionReview a forger POSTs to the host's `/mutate`: `operation` DELETE of
/// `pod` (its old object), or the CREATE of its eviction.
pub fn forged_review(pod: &Pod, eviction: bool) -> Result<Vec<u8>> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let request = if eviction {
        json!({"uid": "forged-eviction", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
            "name": name, "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:default:anyone"},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}})
    } else {
        json!({"uid": "forged-delete", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name, "namespace": namespace, "operation": "DELETE",
            "userInfo": {"username": "system:serviceaccount:default:anyone"},
            "oldObject": serde_json::to_value(pod)?})
    };
    Ok(serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )?)
}

/// Patches `pod`'s metadata (a merge patch), as `user` when given (impersonated).
pub async fn patch_metadata(
    ns: &TestNamespace,
    pod: &str,
    metadata: Value,
    user: Option<&str>,
) -> Result<Result<(), kube::core::Status>> {
    patch_metadata_as(ns, pod, metadata, user, &PatchParams::default(), false).await
}

/// [`patch_metadata`] with `params` (a dry run goes through admission and stores nothing),
/// through the `status` subresource when `status` (the API server keeps metadata changes
/// made there too).
pub async fn patch_metadata_as(
    ns: &TestNamespace,
    pod: &str,
    metadata: Value,
    user: Option<&str>,
    params: &PatchParams,
    status: bool,
) -> Result<Result<(), kube::core::Status>> {
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(workloadspread_testkit::cluster()?.kubeconfig())?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    if let Some(user) = user {
        config.auth_info.impersonate = Some(user.to_string());
    }
    let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, ns.name());
    let patch = json!({"metadata": metadata});
    let patched = match status {
        false => pods.patch(pod, params, &Patch::Merge(&patch)).await,
        true => pods.patch_status(pod, params, &Patch::Merge(&patch)).await,
    };
    match patched {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(e)) => Ok(Err(*e)),
        Err(e) => Err(e.into()),
    }
}

/// The chart's ValidatingAdmissionPolicy guarding a pod's WorkloadSpread metadata
/// (`charts/workloadspread/templates/pod-metadata-policy.yaml`, its expression read from
/// the same file), bound to `ns`; `writer` is the user it exempts (the controller's
/// service account in the chart).
pub async fn pod_metadata_policy(ns: &TestNamespace, writer: &str) -> Result<()> {
    // The exempt account may patch pods (the controller's RBAC in the chart).
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-writer"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}]}))?;
    ns.api::<k8s_openapi::api::rbac::v1::Role>()
        .create(&PostParams::default(), &role)
        .await?;
    let (sa_ns, sa) = writer
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
        .context("the writer is a service account")?;
    let role_binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "pod-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
        "subjects": [{"kind": "ServiceAccount", "namespace": sa_ns, "name": sa}]}))?;
    ns.api::<k8s_openapi::api::rbac::v1::RoleBinding>()
        .create(&PostParams::default(), &role_binding)
        .await?;
    let metadata = PolicyRule {
        file: "pod-metadata.cel",
        resources: &["pods", "pods/status"],
        operation: "UPDATE",
        message:
            "the WorkloadSpread metadata of a pod is written by the WorkloadSpread controller only",
    };
    chart_policy(ns, writer, "pod-metadata", metadata).await?;
    // The chart's second policy: a Binding's annotations reach its pod (pods/binding).
    let binding = PolicyRule {
        file: "pod-binding.cel",
        resources: &["pods/binding"],
        operation: "CREATE",
        message: "a Binding may not carry the WorkloadSpread annotations of a pod",
    };
    chart_policy(ns, writer, "pod-binding", binding).await
}

/// What one of the chart's pod policies judges (its expression in `files/<file>`).
struct PolicyRule {
    file: &'static str,
    resources: &'static [&'static str],
    operation: &'static str,
    message: &'static str,
}

/// The chart's ValidatingAdmissionPolicy `<ns>-<name>.workloadspread.io` of `rule` and its
/// binding to `ns`, exempting `writer`.
async fn chart_policy(
    ns: &TestNamespace,
    writer: &str,
    name: &str,
    rule: PolicyRule,
) -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let path = workloadspread_testkit::repo_root()
        .join("charts/workloadspread/files")
        .join(rule.file);
    let expression = std::fs::read_to_string(&path)?;
    let name = format!("{}-{name}.workloadspread.io", ns.name());
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "resources": rule.resources, "operations": [rule.operation]}]},
            "matchConditions": [{"name": "not-the-workloadspread-controller",
                "expression": format!("!(request.userInfo.username in [{writer:?}])")}],
            "validations": [{"expression": expression, "reason": "Forbidden",
                "message": rule.message}]}}))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name()}}}}}))?;
    let client = ns.client();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// POSTs a Binding of pod `pod` to node `node` carrying `annotations`.
pub async fn bind(
    ns: &TestNamespace,
    pod: &str,
    node: &str,
    annotations: Value,
) -> Result<Result<(), kube::core::Status>> {
    let body = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod, "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let pods = ns.api::<Pod>();
    match pods
        .create_subresource::<Value, Value>("binding", pod, &PostParams::default(), &body)
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(e)) => Ok(Err(*e)),
        Err(e) => Err(e.into()),
    }
}

//! A deletion cost the controller may not write does not hold back the status: the
//! count admissions work from is written all the same.

use crate::support::{controller_bin, counted_replicas, create_ws, setup, zone};
use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::json;
use std::time::Duration;
use workloadspread_testkit::webhook::ControllerProcess;
use workloadspread_testkit::{cluster, wait_for};

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        kind,
    ))
}

/// Every pod update in the namespace is refused (a ValidatingAdmissionPolicy, as a
/// namespace without the controller's pod write right would answer 403); the pods
/// carry their subset already, so only their costs would be written. The status counts
/// them. (With costs written first and their error returned at once, no status was
/// ever written.)
#[tokio::test]
async fn refused_cost_patches_do_not_hold_back_the_status() -> Result<()> {
    let ns = setup("ctl-refused-costs").await?;
    let client = ns.client();
    let name = ns.name().to_string();
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("ValidatingAdmissionPolicy"));
    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("ValidatingAdmissionPolicyBinding"),
    );
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "false", "message": "pod updates are refused here"}]}}))?;
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels":
                {"kubernetes.io/metadata.name": name}}}}}))?;
    policies.create(&PostParams::default(), &policy).await?;
    bindings.create(&PostParams::default(), &binding).await?;
    let ws = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [zone("a", "zone-a", Some(1)), zone("c", "zone-c", None)]}),
    )
    .await?;
    // Pods admitted into c as a webhook would have placed them (no adoption patch needed).
    let matched = json!({"name": "web", "subset": "c"}).to_string();
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"},
                    "annotations": {"apps.kruise.io/matched-workloadspread": matched}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    // The policy takes effect a moment after it is created: wait until a pod update is
    // refused.
    let pods: Api<Pod> = ns.api();
    wait_for("pod updates refused", Duration::from_secs(60), || async {
        let Some(pod) = pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let probe = json!({"metadata": {"annotations": {"probe": "x"}}});
        let name = pod.metadata.name.unwrap_or_default();
        let refused = pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&probe))
            .await
            .is_err();
        Ok(refused.then_some(()))
    })
    .await?;
    let args = ["--namespace", ns.name()].map(str::to_string);
    let _controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    let result = wait_for(
        "the status counting the 3 pods",
        Duration::from_secs(90),
        || async {
            let status = ws.get("web").await?.data["status"].clone();
            Ok((counted_replicas(&status) == 3).then_some(()))
        },
    )
    .await;
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    result
}

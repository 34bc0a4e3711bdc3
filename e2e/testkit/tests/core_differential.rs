//! `workloadspread-core` against the real API server: strategic merge patch, scheduling
//! and pod-spec validation, and the generated CRD.

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Error};
use serde_json::{json, Value};
use workloadspread_core::field::{FieldError, Path};
use workloadspread_core::smp::patch_pod;
use workloadspread_core::validation::{
    validate_node_selector_term, validate_pod_spec, validate_tolerations,
};
use workloadspread_testkit::cluster;

const SMP_CASES: &str = include_str!("../../../core/testdata/smp_cases.json");

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// A PodTemplate carries a PodTemplateSpec, whose SMP schema is the Pod's.
fn pod_template(name: &str, mut template: Value) -> Result<PodTemplate> {
    if template["spec"]["containers"].is_null() {
        template["spec"]["containers"] = json!([{"name": "base", "image": "x"}]);
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "template": template}),
    )?)
}

#[tokio::test]
async fn strategic_merge_patch_matches_api_server() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("smp").await?;
    let api: Api<PodTemplate> = ns.api();
    let cases: Value = serde_json::from_str(SMP_CASES)?;
    let apply = cases["apply"].as_array().context("apply cases")?;
    for (i, case) in apply.iter().enumerate() {
        let name = format!("case-{i}");
        let stored = api
            .create(
                &PostParams::default(),
                &pod_template(&name, case["original"].clone())?,
            )
            .await?;
        // Patch what the server stored (defaults included), as it does.
        let stored_template = serde_json::to_value(&stored.template)?;
        let ours = patch_pod(&stored_template, &case["patch"])
            .with_context(|| format!("{}", case["name"]))?;
        let ours = api
            .create(&dry_run(), &pod_template(&format!("{name}-ours"), ours)?)
            .await?;
        let params = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let theirs = api
            .patch(
                &name,
                &params,
                &Patch::Strategic(json!({"template": case["patch"]})),
            )
            .await?;
        let (ours, theirs) = (
            serde_json::to_value(&ours.template)?,
            serde_json::to_value(&theirs.template)?,
        );
        if ours != theirs {
            bail!("{}: ours {ours} != API server {theirs}", case["name"]);
        }
    }
    for (i, case) in cases["errors"]
        .as_array()
        .context("error cases")?
        .iter()
        .enumerate()
    {
        let name = format!("err-{i}");
        api.create(
            &PostParams::default(),
            &pod_template(&name, case["original"].clone())?,
        )
        .await?;
        let params = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let server = api
            .patch(
                &name,
                &params,
                &Patch::Strategic(json!({"template": case["patch"]})),
            )
            .await;
        let stored = serde_json::to_value(api.get(&name).await?.template)?;
        let ours = patch_pod(&stored, &case["patch"]);
        match (&ours, &server) {
            (Err(_), Err(Error::Api(_))) => println!("{}: both reject", case["name"]),
            _ => bail!("{}: ours {ours:?} vs API server {server:?}", case["name"]),
        }
    }
    println!(
        "{} strategic merge patch cases agree with the API server",
        apply.len()
    );
    Ok(())
}

/// Field paths the API server reported in a 422.
fn server_paths(err: &kube::core::Status) -> Vec<String> {
    err.details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.clone())
        .collect()
}

async fn server_rejects(api: &Api<Pod>, spec: Value) -> Result<Option<Vec<String>>> {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": spec}))?;
    match api.create(&dry_run(), &pod).await {
        Ok(_) => Ok(None),
        Err(Error::Api(e)) if e.code == 422 => Ok(Some(server_paths(&e))),
        Err(e) => Err(e.into()),
    }
}

fn check(case: &str, ours: &[FieldError], server: Option<Vec<String>>) -> Result<()> {
    match server {
        None if ours.is_empty() => Ok(()),
        Some(paths) if !ours.is_empty() => {
            for e in ours {
                if !paths.iter().any(|p| p == &e.path) {
                    bail!(
                        "{case}: our error path {} not among the API server's {paths:?}",
                        e.path
                    );
                }
            }
            Ok(())
        }
        other => bail!("{case}: ours {ours:?}, API server {other:?}"),
    }
}

#[tokio::test]
async fn scheduling_validation_matches_api_server() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("val-sched").await?;
    let api: Api<Pod> = ns.api();
    let containers = json!([{"name": "c", "image": "x"}]);
    let terms = [
        json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}),
        json!({"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]}),
        json!({"matchExpressions": [{"key": "zone", "operator": "In"}]}),
        json!({"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["1", "2"]}]}),
        json!({"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]}),
        json!({"matchExpressions": [{"key": "-bad-key-", "operator": "Exists"}]}),
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}),
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}),
        json!({"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]}),
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["Bad_Name"]}]}),
    ];
    let base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
    for term in terms {
        let ours =
            validate_node_selector_term(&serde_json::from_value(term.clone())?, &Path::new(base));
        let spec = json!({"containers": containers, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term.clone()]}}}});
        check(&term.to_string(), &ours, server_rejects(&api, spec).await?)?;
    }
    let tolerations = [
        json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]),
        json!([{"key": "k", "operator": "Exists", "value": "v"}]),
        json!([{"operator": "Equal", "value": "v"}]),
        json!([{"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 5, "effect": "NoSchedule"}]),
        json!([{"key": "k", "operator": "Bogus"}]),
        json!([{"key": "k", "operator": "Exists", "effect": "Sometimes"}]),
        json!([{"key": "k", "value": "not valid!"}]),
    ];
    for t in tolerations {
        let ours = validate_tolerations(
            &serde_json::from_value::<Vec<k8s_openapi::api::core::v1::Toleration>>(t.clone())?,
            &Path::new("spec.tolerations"),
        );
        check(
            &t.to_string(),
            &ours,
            server_rejects(&api, json!({"containers": containers, "tolerations": t})).await?,
        )?;
    }
    Ok(())
}

#[tokio::test]
async fn pod_spec_validation_matches_api_server() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("val-pod").await?;
    let api: Api<Pod> = ns.api();
    let specs = [
        json!({"containers": [{"name": "c", "image": "x"}]}),
        json!({"containers": [{"name": "c"}]}),
        json!({"containers": [{"name": "c", "image": "x"}, {"name": "c", "image": "y"}]}),
        json!({"containers": [{"name": "Bad_Name", "image": "x"}]}),
        json!({"containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "missing", "mountPath": "/m"}]}]}),
        json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}], "containers": [{"name": "c", "image": "x"}]}),
        json!({"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 70000}]}]}),
        json!({"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Sometimes"}),
        json!({"containers": [{"name": "c", "image": "x"}], "dnsPolicy": "Bogus"}),
        json!({"containers": [{"name": "c", "image": "x"}], "nodeSelector": {"-bad": "v"}}),
        json!({"initContainers": [{"name": "c", "image": "x"}], "containers": [{"name": "c", "image": "y"}]}),
    ];
    for spec in specs {
        let ours = validate_pod_spec(&spec, &Path::new("spec"));
        check(
            &spec.to_string(),
            &ours,
            server_rejects(&api, spec.clone()).await?,
        )?;
    }
    Ok(())
}

#[tokio::test]
async fn generated_crd_is_accepted_and_enforced() -> Result<()> {
    let cluster = cluster()?;
    let ns = cluster.namespace("crd").await?;
    let client = ns.client();
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let params = PatchParams::apply("workloadspread-tests").force();
    crds.patch(
        "workloadspreads.apps.kruise.io",
        &params,
        &Patch::Apply(&crd),
    )
    .await?;
    let gvk = kube::core::GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "WorkloadSpread");
    let api: Api<kube::core::DynamicObject> =
        Api::namespaced_with(client, ns.name(), &kube::core::ApiResource::from_gvk(&gvk));
    let ws: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "ws"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": 3, "patch": {"metadata": {"labels": {"x": "y"}}, "custom": {"kept": true}}},
                        {"name": "b", "maxReplicas": "50%"}, {"name": "c"}],
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 30}}}
    }))?;
    let created =
        workloadspread_testkit::wait_for("CRD serving", std::time::Duration::from_secs(30), || {
            let (api, ws) = (api.clone(), ws.clone());
            async move { Ok(Some(api.create(&PostParams::default(), &ws).await?)) }
        })
        .await?;
    let subsets = &created.data["spec"]["subsets"];
    if subsets[0]["maxReplicas"] != 3
        || subsets[1]["maxReplicas"] != "50%"
        || subsets[0]["patch"]["custom"]["kept"] != true
    {
        bail!("fields not preserved: {subsets}");
    }
    let mut bad = ws.clone();
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["scheduleStrategy"]["type"] = json!("Random");
    match api.create(&PostParams::default(), &bad).await {
        Err(Error::Api(e)) if e.code == 422 => println!("enum enforced: {}", e.message),
        other => bail!("expected 422 for an invalid scheduleStrategy.type, got {other:?}"),
    }
    Ok(())
}

/// `workloadspread_core::fields` (how the bundled host answers field selectors from its
/// cache) against the API server's own field selection on the CRD's selectable fields:
/// the same WorkloadSpreads for every selector of the table — equality, inequality, both
/// forms of `=`, several requirements, escapes, an empty value.
#[tokio::test]
async fn field_selectors_select_what_the_api_server_selects() -> Result<()> {
    use kube::api::ListParams;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    use workloadspread_core::fields::FieldSelector;
    let cluster = cluster()?;
    let ns = cluster.namespace("fields").await?;
    let client = ns.client();
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.patch(
        "workloadspreads.apps.kruise.io",
        &PatchParams::apply("workloadspread-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let gvk = GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "WorkloadSpread");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, ns.name(), &ApiResource::from_gvk(&gvk));
    // (name, target name; targetRef is required)
    let spreads: [(&str, &str); 4] = [
        ("web", "web"),
        ("web-canary", "web"),
        ("api", "api"),
        ("odd", "a-b.c"),
    ];
    for (name, target) in spreads {
        let spec = json!({"subsets": [{"name": "a"}],
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}});
        let ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": name}, "spec": spec}))?;
        workloadspread_testkit::wait_for("CRD serving", std::time::Duration::from_secs(30), || {
            let (api, ws) = (api.clone(), ws.clone());
            async move { Ok(Some(api.create(&PostParams::default(), &ws).await?)) }
        })
        .await?;
    }
    let all = api.list(&ListParams::default()).await?.items;
    let selectors = [
        "spec.targetRef.name=web".to_string(),
        "spec.targetRef.name==web".into(),
        "spec.targetRef.name!=web".into(),
        "spec.targetRef.name=".into(),
        "spec.targetRef.name!=".into(),
        "spec.targetRef.name=web,metadata.name!=web".into(),
        "metadata.name=api,spec.targetRef.name=api".into(),
        FieldSelector::equals("spec.targetRef.name", "a-b.c"),
        "spec.targetRef.name=nothing".into(),
    ];
    let mut checked = 0;
    for selector in &selectors {
        let theirs = workloadspread_testkit::wait_for(
            "the field selectable",
            std::time::Duration::from_secs(30),
            || async {
                let listed = api.list(&ListParams::default().fields(selector)).await?;
                Ok(Some(listed))
            },
        )
        .await?;
        let mut theirs: Vec<String> = theirs
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        let ours = FieldSelector::parse(Some(selector)).map_err(anyhow::Error::msg)?;
        let mut mine: Vec<String> = all
            .iter()
            .filter(|o| {
                let v = serde_json::to_value(o).unwrap_or(Value::Null);
                ours.matches_object(&v)
            })
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        theirs.sort();
        mine.sort();
        if theirs != mine {
            bail!("{selector}: the API server selects {theirs:?}, ours {mine:?}");
        }
        checked += 1;
    }
    println!("{checked} field selectors select as the API server does");
    Ok(())
}

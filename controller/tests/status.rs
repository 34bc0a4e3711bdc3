//! `workloadspread-controller status` (#29) against the local control plane: a spread on
//! plan, then off plan once a maximum is lowered under the pods (nothing moves them).

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{cluster, wait_for};

fn controller_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-controller"))
}

fn zone(name: &str, zone: &str, max: Value) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}});
    if !max.is_null() {
        s["maxReplicas"] = max;
    }
    s
}

/// `status` as a user runs it: its stdout, failing on a non-zero exit.
fn status(bin: &Path, namespace: &str, output: &str) -> Result<String> {
    let out = Command::new(bin)
        .args([
            "status",
            "-n",
            namespace,
            "web",
            "-o",
            output,
            "--kubeconfig",
        ])
        .arg(cluster()?.kubeconfig())
        .output()?;
    ensure!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test]
async fn status_shows_a_spread_on_plan_and_off_plan() -> Result<()> {
    let Some(stack) = Stack::start("ctl-status", &[]).await? else {
        return Ok(());
    };
    let ns = &stack.ns;
    let spreads: Api<DynamicObject> = Api::namespaced_with(
        ns.client(),
        ns.name(),
        &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "apps.kruise.io",
            "v1beta1",
            "WorkloadSpread",
        )),
    );
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": {"targetRef": target, "subsets": [zone("a", "zone-a", json!("30%")),
            zone("b", "zone-b", json!("50%")), zone("c", "zone-c", Value::Null)]}}))?;
    spreads.create(&PostParams::default(), &ws).await?;
    stack
        .host
        .wait_sees_workloadspread(ns.name(), "web", &target)
        .await?;
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}], "terminationGracePeriodSeconds": 0}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    let bin = controller_bin();
    // 6 replicas: a 2 (30 %), b 3 (50 %), c 1.
    // On plan, and settled: no entries left creating (reserved slots given back) or
    // deleting, no pod outside every subset.
    let settled = |v: &Value| {
        v["outside"] == 0
            && v["subsets"].as_array().is_some_and(|subsets| {
                subsets
                    .iter()
                    .all(|s| s["creating"] == 0 && s["deleting"] == 0)
            })
    };
    let view = wait_for("the spread on plan", Duration::from_secs(90), || async {
        let v: Value = serde_json::from_str(&status(bin, ns.name(), "json")?)?;
        Ok((v["onPlan"] == true && settled(&v)).then_some(v))
    })
    .await?;
    let shape: Vec<(Value, Value, Value)> = view["subsets"]
        .as_array()
        .context("subsets")?
        .iter()
        .map(|s| (s["max"].clone(), s["planned"].clone(), s["pods"].clone()))
        .collect();
    ensure!(
        shape
            == [
                (json!(2), json!(2), json!(2)),
                (json!(3), json!(3), json!(3)),
                (Value::Null, json!(1), json!(1))
            ],
        "{view}"
    );
    ensure!(
        view["nextRemoved"].as_array().is_some_and(|p| p.len() == 5),
        "{view}"
    );
    let table = status(bin, ns.name(), "table")?;
    ensure!(
        table.contains("on plan") && table.contains("next removed on scale-in"),
        "{table}"
    );
    // a's maximum lowered to 1 under its 2 pods, b's set to the 3 it holds, and subset c
    // removed under its pod: off plan, a over its maximum, one pod outside every subset
    // (the plan puts 2 there: 1 in a, 3 in b).
    let lower = json!({"spec": {"subsets": [zone("a", "zone-a", json!(1)),
        zone("b", "zone-b", json!(3))]}});
    spreads
        .patch("web", &PatchParams::default(), &Patch::Merge(&lower))
        .await?;
    let view = wait_for("the spread off plan", Duration::from_secs(60), || async {
        let v: Value = serde_json::from_str(&status(bin, ns.name(), "json")?)?;
        Ok((v["onPlan"] == false && v["outside"] == 1).then_some(v))
    })
    .await?;
    ensure!(view["overMaximum"] == json!(["a"]), "{view}");
    ensure!(view["plannedOutside"] == 2, "{view}");
    let table = status(bin, ns.name(), "table")?;
    ensure!(table.contains("off plan, over the maximum: a"), "{table}");
    // The same as a kubectl plugin: `kubectl workloadspread -n NS web`.
    let dir = tempfile::tempdir()?;
    let plugin = dir.path().join("kubectl-workloadspread");
    std::os::unix::fs::symlink(bin, &plugin)?;
    let out = Command::new(&plugin)
        .args(["-n", ns.name(), "web", "--kubeconfig"])
        .arg(cluster()?.kubeconfig())
        .output()?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout) == table,
        "plugin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pods = ns
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(&ListParams::default())
        .await?;
    eprintln!("status view, {} pods:\n{table}", pods.items.len());
    metric_names_are_exported(&stack).await?;
    stack.finish().await
}

/// Names a scrape exports: every `# TYPE` family and every sample (a counter family
/// `x` is sampled as `x_total`, a histogram as `x_bucket`, `x_sum`, `x_count`).
fn exported(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for line in text.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split_whitespace().next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        };
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            out.insert(n.to_string());
            for suffix in ["_total", "_bucket", "_sum", "_count"] {
                out.insert(format!("{n}{suffix}"));
            }
        }
    }
    out
}

/// #29: every metric the chart's alert rules and Grafana dashboard use is one the running
/// host or controller exports (`e2e/chart/test_monitoring.py names`).
async fn metric_names_are_exported(stack: &Stack) -> Result<()> {
    let root = workloadspread_testkit::repo_root();
    let out = Command::new("python3")
        .arg(root.join("e2e/chart/test_monitoring.py"))
        .arg("names")
        .output()?;
    ensure!(
        out.status.success(),
        "test_monitoring.py names: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let used: Vec<String> = serde_json::from_slice(&out.stdout)?;
    let mut have = exported(&stack.host.get("/metrics").await?);
    have.extend(exported(&stack.controller.get("/metrics").await?));
    let missing: Vec<&String> = used.iter().filter(|n| !have.contains(*n)).collect();
    ensure!(
        missing.is_empty(),
        "the rules or the dashboard use metrics the binaries do not export: {missing:?}"
    );
    eprintln!(
        "{} metrics used by the chart's rules and dashboard, all exported",
        used.len()
    );
    Ok(())
}

//! The controller on the local control plane: adoption of existing pods, status and
//! deletion costs (§4.5), and adaptive rescheduling together with the admission host.

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use workloadspread_testkit::pods::{annotation, ensure_lowest_cost_removed, subset_of, COST};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::webhook::{
    apply_crd, policy_wasm, workspace_binary, ControllerProcess, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for, TestNamespace};

fn controller_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-controller"))
}

fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

async fn setup(hint: &str) -> Result<TestNamespace> {
    let ns = cluster()?.namespace(hint).await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&ns.client(), &serde_json::to_value(&crd)?).await?;
    Ok(ns)
}

fn zone(name: &str, zone: &str, max: Option<i32>) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}});
    if let Some(m) = max {
        s["maxReplicas"] = json!(m);
    }
    s
}

async fn create_ws(ns: &TestNamespace, spec: Value) -> Result<Api<DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ws_resource());
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec}))?;
    api.create(&PostParams::default(), &ws).await?;
    Ok(api)
}

async fn create_deployment(ns: &TestNamespace, replicas: i32) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

/// Pods the status counts over all subsets (`subsetStatuses[].replicas`).
fn counted_replicas(status: &Value) -> i64 {
    status["subsetStatuses"]
        .as_array()
        .map(|a| a.iter().map(|x| x["replicas"].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

/// Costs per subset, sorted (pods without annotations are skipped).
fn costs_by_subset(pods: &[Pod]) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for p in pods {
        if let (Some(s), Some(c)) = (subset_of(p), annotation(p, COST)) {
            out.entry(s)
                .or_default()
                .push(c.parse().unwrap_or(i64::MIN));
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

#[tokio::test]
async fn existing_pods_are_adopted_and_scale_in_is_ordered() -> Result<()> {
    let ns = setup("ctl-adopt").await?;
    // Pods first (scheduled by the scheduler across zones), the WorkloadSpread later.
    create_deployment(&ns, 6).await?;
    let pods: Api<Pod> = ns.api();
    wait_for("6 scheduled pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?.items;
        let bound = list
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        Ok((bound == 6).then_some(()))
    })
    .await?;
    let nodes_by_pod: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|p| {
            Some((
                p.metadata.name.clone()?,
                p.spec.as_ref()?.node_name.clone()?,
            ))
        })
        .collect();
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [zone("a", "zone-a", Some(1)), zone("b", "zone-b", Some(1)), zone("c", "zone-c", None)]}),
    )
    .await?;
    // The reference's cost values (§4.5), checked below; the default rules are covered by
    // the scenario suite. Scoped to the namespace: the other tests here run their own
    // controllers with other rules at the same time.
    let args = ["--rules", "reference", "--namespace", ns.name()].map(str::to_string);
    let _controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    let costs = wait_for(
        "deletion costs on all pods",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let all = list
                .iter()
                .all(|p| annotation(p, COST).is_some() && subset_of(p).is_some());
            Ok(all.then_some(list))
        },
    )
    .await?;
    // Every pod adopted into its node's zone.
    for p in &costs {
        let name = p.metadata.name.clone().unwrap_or_default();
        let node = &nodes_by_pod[&name];
        let subset = subset_of(p).unwrap_or_default();
        ensure!(
            node.starts_with(&format!("node-{subset}-")),
            "{name} on {node} adopted into {subset}"
        );
    }
    // §4.5: within max → 100·(n−i); over max → −100·(i+1); n = 3.
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for node in nodes_by_pod.values() {
        *per_zone.entry(node[5..6].to_string()).or_default() += 1;
    }
    let expected = |subset: &str, positive: i64, negative: i64, max: Option<usize>| {
        let n = per_zone.get(subset).copied().unwrap_or(0);
        let keep = max.map_or(n, |m| m.min(n));
        let mut v = vec![negative; n - keep];
        v.extend(vec![positive; keep]);
        v.sort_unstable();
        (subset.to_string(), v)
    };
    let want: BTreeMap<String, Vec<i64>> = [
        expected("a", 300, -100, Some(1)),
        expected("b", 200, -200, Some(1)),
        expected("c", 100, -300, None),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .collect();
    ensure!(
        costs_by_subset(&costs) == want,
        "costs {:?}, want {want:?}",
        costs_by_subset(&costs)
    );
    let status = wait_for("status", Duration::from_secs(30), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        let replicas = counted_replicas(&s);
        Ok((replicas == 6).then_some(s))
    })
    .await?;
    ensure!(status["observedGeneration"] == 1, "{status}");

    // Scale-in: the ReplicaSet controller removes the pods that carry the lowest costs
    // (over-maximum ones first); the status follows the pods that remain.
    ns.api::<Deployment>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    let after = wait_for("3 pods left", Duration::from_secs(60), || async {
        let mut list = pods.list(&ListParams::default()).await?.items;
        list.retain(|p| p.metadata.deletion_timestamp.is_none());
        Ok((list.len() == 3).then_some(list))
    })
    .await?;
    let removed = ensure_lowest_cost_removed(&costs, &after)?;
    ensure!(removed.len() == 3, "removed {removed:?}");
    wait_for("status of 3 pods", Duration::from_secs(30), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        let replicas = counted_replicas(&s);
        Ok((replicas == 3).then_some(()))
    })
    .await?;
    Ok(())
}

/// Issue #21 (2): pods a best-effort admission labelled pending lose the label once a
/// status that counts them is written (with their deletion costs); a pending pod of
/// another WorkloadSpread keeps it.
#[tokio::test]
async fn pending_labels_are_removed_once_the_status_counts_the_pods() -> Result<()> {
    use workloadspread_core::api::{PENDING_LABEL, PENDING_VALUE};
    let ns = setup("ctl-pending").await?;
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [zone("a", "zone-a", Some(2)), zone("b", "zone-b", None)]}),
    )
    .await?;
    create_deployment(&ns, 3).await?;
    let pods: Api<Pod> = ns.api();
    let workload_pods = wait_for("3 pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok((list.len() == 3).then_some(list))
    })
    .await?;
    // As a best-effort admission leaves them: matched, labelled pending.
    let mark = |ws: &str, subset: &str| {
        json!({"metadata": {"labels": {PENDING_LABEL: PENDING_VALUE}, "annotations": {
            "apps.kruise.io/matched-workloadspread":
                format!(r#"{{"name":"{ws}","subset":"{subset}"}}"#)}}})
    };
    for (p, subset) in workload_pods.iter().zip(["a", "a", "b"]) {
        let name = p.metadata.name.clone().unwrap_or_default();
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(mark("web", subset)),
        )
        .await?;
    }
    let mut other: Pod = serde_json::from_value(json!({"metadata": {"name": "other-spread"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    other.metadata.labels = Some([(PENDING_LABEL.to_string(), PENDING_VALUE.to_string())].into());
    pods.create(&PostParams::default(), &other).await?;
    pods.patch(
        "other-spread",
        &PatchParams::default(),
        &Patch::Strategic(mark("db", "a")),
    )
    .await?;
    let args = ["--namespace", ns.name()].map(str::to_string);
    let _controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    let labelled = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(PENDING_LABEL))
    };
    let list = wait_for(
        "pending labels removed, costs written",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let done = list.iter().all(|p| {
                let mine = p.metadata.name.as_deref() != Some("other-spread");
                !mine || (!labelled(p) && annotation(p, COST).is_some())
            });
            Ok(done.then_some(list))
        },
    )
    .await?;
    let other = list
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("other-spread"))
        .context("the other pod")?;
    ensure!(
        labelled(other),
        "another WorkloadSpread's pending pod lost its label"
    );
    let status = ws_api.get("web").await?.data["status"].clone();
    let replicas: Vec<i64> = status["subsetStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["replicas"].as_i64().unwrap_or(-1))
        .collect();
    ensure!(replicas == [2, 1], "the status counts the pods: {status}");
    Ok(())
}

/// Issue #19: the controller caches the pods of a namespace only while it has a
/// WorkloadSpread (plus a grace period): none before the first, the cache's first list
/// brings the existing pods, none a grace period after the last is deleted, and a new
/// WorkloadSpread starts it again.
#[tokio::test]
async fn pods_are_cached_only_while_the_namespace_has_a_workloadspread() -> Result<()> {
    const GAUGE: &str = "workloadspread_controller_pod_cache_namespaces";
    let ns = setup("ctl-podcache").await?;
    create_deployment(&ns, 2).await?;
    let args = ["--namespace", ns.name(), "--pod-cache-grace-seconds", "1"].map(str::to_string);
    let controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    ensure!(
        controller.metric(GAUGE).await? == 0.0,
        "pods cached before any WorkloadSpread"
    );
    let spec = json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "subsets": [zone("a", "zone-a", Some(1)), zone("b", "zone-b", None), zone("c", "zone-c", None)]});
    let counted = |ws_api: Api<DynamicObject>| async move {
        wait_for(
            "the status to count both pods",
            Duration::from_secs(60),
            || async {
                let s = ws_api.get("web").await?.data["status"].clone();
                let replicas = counted_replicas(&s);
                Ok((replicas == 2).then_some(()))
            },
        )
        .await
    };
    let ws_api = create_ws(&ns, spec.clone()).await?;
    counted(ws_api.clone()).await?;
    ensure!(
        controller.metric(GAUGE).await? == 1.0,
        "the namespace's pods are not cached"
    );
    ws_api.delete("web", &Default::default()).await?;
    wait_for("the pod cache to stop", Duration::from_secs(30), || async {
        Ok((controller.metric(GAUGE).await? == 0.0).then_some(()))
    })
    .await?;
    let ws_api = create_ws(&ns, spec).await?;
    counted(ws_api).await?;
    ensure!(controller.metric(GAUGE).await? == 1.0);
    Ok(())
}

#[tokio::test]
async fn unschedulable_subset_is_rescheduled_and_recovers() -> Result<()> {
    let (Some(policy), Some(host_bin)) = (policy_wasm()?, workspace_binary("workloadspread-host")?)
    else {
        return Ok(());
    };
    let ns = setup("ctl-resched").await?;
    let client = ns.client();
    let kubeconfig = cluster()?.kubeconfig();
    let port = workloadspread_testkit::webhook::free_port()?;
    let name = unique_name("ws-resched");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let _host = HostProcess::start_on(
        &host_bin,
        kubeconfig,
        port,
        &[
            "--policy".into(),
            policy.display().to_string(),
            "--webhook-config".into(),
            name.clone(),
        ],
    )
    .await?;
    configs.enroll(ns.name()).await?;
    let controller = ControllerProcess::start(
        controller_bin(),
        kubeconfig,
        &[
            "--reschedule-hold-seconds".into(),
            "6".into(),
            "--namespace".into(),
            ns.name().into(),
        ],
    )
    .await?;
    // Subset "x" has no nodes: its pods stay Pending/Unschedulable.
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 2}},
            "subsets": [zone("x", "zone-x", Some(2)), zone("b", "zone-b", None)]}),
    )
    .await?;
    create_deployment(&ns, 2).await?;
    let pods: Api<Pod> = ns.api();
    let condition = |s: &Value| -> Option<String> {
        s["subsetStatuses"][0]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Schedulable")
            .and_then(|c| c["status"].as_str().map(str::to_string))
    };
    wait_for(
        "subset x marked unschedulable",
        Duration::from_secs(60),
        || async {
            let s = ws_api.get("web").await?.data["status"].clone();
            Ok((condition(&s).as_deref() == Some("False")).then_some(()))
        },
    )
    .await
    .with_context(|| controller.log_text())?;
    let placed = wait_for(
        "2 pods scheduled in zone-b",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let in_b: Vec<&Pod> = list
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| subset_of(p).as_deref() == Some("b"))
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| n.starts_with("node-b-"))
                })
                .collect();
            Ok((in_b.len() == 2).then_some(in_b.len()))
        },
    )
    .await;
    let placed = match placed {
        Ok(n) => n,
        Err(e) => {
            let list: Vec<Value> = pods.list(&ListParams::default()).await?.items.iter()
                .map(|p| json!({"name": p.metadata.name, "subset": subset_of(p), "deleting": p.metadata.deletion_timestamp.is_some(),
                    "node": p.spec.as_ref().and_then(|s| s.node_name.clone())})).collect();
            let status = ws_api.get("web").await?.data["status"].clone();
            return Err(e.context(format!("pods {}\nstatus {status}", json!(list))));
        }
    };
    ensure!(placed == 2);
    ensure!(
        controller
            .metric("workloadspread_controller_pods_rescheduled_total")
            .await?
            >= 1.0
    );
    wait_for(
        "subset x recovered after the hold",
        Duration::from_secs(60),
        || async {
            let s = ws_api.get("web").await?.data["status"].clone();
            Ok((condition(&s).as_deref() == Some("True")).then_some(()))
        },
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    ensure!(
        reasons.iter().any(|r| r == "RecoverSchedulable"),
        "events: {reasons:?}"
    );
    // Scale-in afterwards: one pod left in b, and the recovered subset x counts none.
    ns.api::<Deployment>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    wait_for("status x 0 / b 1", Duration::from_secs(60), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        let replicas = |i: usize| s["subsetStatuses"][i]["replicas"].as_i64();
        Ok((replicas(0) == Some(0) && replicas(1) == Some(1)).then_some(()))
    })
    .await?;
    configs.delete().await
}

/// Issue #17 (5): three subsets, the first two without nodes, `rescheduleCriticalSeconds`
/// (4 s) above the configured hold (3 s). The hold is stretched to 3 × 4 s, so subset x is
/// still unschedulable when the pods give up on y: both pods reach b after two moves
/// each and stay there (with the configured 3 s they bounced between x and y for ever).
#[tokio::test]
async fn rescheduling_through_three_subsets_reaches_the_last_one() -> Result<()> {
    let controller_args = ["--reschedule-hold-seconds", "3"];
    let Some(stack) = Stack::start_with("ctl-resched3", &[], &controller_args).await? else {
        return Ok(());
    };
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    create_ws(
        &stack.ns,
        json!({"targetRef": target,
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 4}},
            "subsets": [zone("x", "zone-x", Some(2)), zone("y", "zone-y", Some(2)), zone("b", "zone-b", None)]}),
    )
    .await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), "web", &target)
        .await?;
    create_deployment(&stack.ns, 2).await?;
    let pods: Api<Pod> = stack.ns.api();
    wait_for(
        "both pods running in b",
        Duration::from_secs(90),
        || async {
            let mut list = pods.list(&ListParams::default()).await?.items;
            list.retain(|p| p.metadata.deletion_timestamp.is_none());
            let in_b = list.iter().filter(|p| {
                subset_of(p).as_deref() == Some("b")
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            });
            Ok((list.len() == 2 && in_b.count() == 2).then_some(()))
        },
    )
    .await
    .with_context(|| stack.controller.log_text())?;
    let moved = stack
        .controller
        .metric("workloadspread_controller_pods_rescheduled_total")
        .await?;
    ensure!(moved == 4.0, "{moved} reschedules (want 2 pods × 2 moves)");
    stack.finish().await
}

/// Issue #17 (9): two replicas with leader election (6 s lease: renew deadline 4 s, retry
/// 0.8 s). The leader is paused (SIGSTOP: a hung or cut-off process); the standby takes
/// over by its own clock once the Lease stopped changing for a lease duration, and keeps
/// the status up to date. When the old leader resumes it steps down without writing
/// anything: its last renewal is past the deadline, which fences every write. (It used to
/// keep leading for a whole lease duration after a failed renewal, and compared the
/// holder's clock with its own.)
#[tokio::test]
async fn a_paused_leader_is_replaced_and_never_writes_again() -> Result<()> {
    let ns = setup("ctl-leader").await?;
    let lease = unique_name("lease");
    let args = |identity: &str| leader_args(ns.name(), &lease, identity);
    let kubeconfig = cluster()?.kubeconfig();
    let mut a = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("a"), "debug")?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let holder = || async {
        let l = leases.get_opt(&lease).await?;
        anyhow::Ok(l.and_then(|l| l.spec?.holder_identity))
    };
    wait_for("a leads", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("a")).then_some(()))
    })
    .await?;
    let b = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("b"), "debug")?;
    // A standby passes its readiness probe (else two replicas never become available).
    let standby = wait_for("b ready as a standby", Duration::from_secs(30), || async {
        Ok(Some(b.readiness().await?).filter(|(ok, _)| *ok))
    })
    .await?;
    ensure!(standby.1.starts_with("standby"), "b's /readyz: {standby:?}");
    let ws_api = create_ws(
        &ns,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            // The last subset matches every node: without a webhook the scheduler may put a
            // pod in any zone (zone-c too), and the status must count both pods wherever.
            "subsets": [zone("a", "zone-a", Some(1)), {"name": "rest"}]}),
    )
    .await?;
    create_deployment(&ns, 2).await?;
    let replicas = |want: i64| {
        let ws_api = ws_api.clone();
        move || {
            let ws_api = ws_api.clone();
            async move {
                let s = ws_api.get("web").await?.data["status"].clone();
                let n = counted_replicas(&s);
                Ok((n == want).then_some(()))
            }
        }
    };
    wait_for(
        "status of 2 pods by a",
        Duration::from_secs(60),
        replicas(2),
    )
    .await
    .with_context(|| a.log_text())?;

    let signal = |sig: &str, pid: u32| {
        std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
    };
    signal("-STOP", a.pid())?;
    let paused = std::time::Instant::now();
    wait_for("b takes over", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("b")).then_some(()))
    })
    .await
    .with_context(|| b.log_text())?;
    let takeover = paused.elapsed();
    // A spec change only a leader acts on: b writes the status of generation 2.
    let spec = json!({"spec": {"subsets": [zone("a", "zone-a", Some(2)), {"name": "rest"}]}});
    ws_api
        .patch("web", &PatchParams::default(), &Patch::Merge(&spec))
        .await?;
    wait_for("b writes generation 2", Duration::from_secs(60), || async {
        let s = ws_api.get("web").await?.data["status"].clone();
        Ok((s["observedGeneration"] == 2).then_some(()))
    })
    .await
    .with_context(|| b.log_text())?;

    let written_before = a.log_text().matches("status written").count();
    signal("-CONT", a.pid())?;
    let resumed = std::time::Instant::now();
    wait_for("a steps down and exits", Duration::from_secs(20), || {
        let exited = a.exited();
        async move { Ok(exited.then_some(())) }
    })
    .await
    .with_context(|| a.log_text())?;
    let log = a.log_text();
    eprintln!(
        "failover: b leads {:.1} s after a was paused; a stepped down {:.1} s after it resumed",
        takeover.as_secs_f64(),
        resumed.elapsed().as_secs_f64()
    );
    ensure!(
        log.matches("status written").count() == written_before,
        "a wrote after it resumed:\n{log}"
    );
    ensure!(
        log.contains("stepping down") || log.contains("leadership lost"),
        "{log}"
    );
    ensure!(holder().await?.as_deref() == Some("b"));
    drop(b);
    Ok(())
}

/// A replica `identity` electing on Lease `lease` (6 s) and reconciling only `namespace`.
fn leader_args(namespace: &str, lease: &str, identity: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        namespace,
        "--lease-name",
        lease,
        "--identity",
        identity,
        "--lease-duration-seconds",
        "6",
        "--namespace",
        namespace,
    ]
    .map(str::to_string)
    .to_vec()
}

/// Issue #17 (9), the network side: the leader's connection to the API server hangs (a
/// partition: bytes swallowed, socket open). It must stop acting at its renew deadline,
/// before the standby may take the Lease (a whole lease duration after it last saw it
/// change): never two leaders at once.
#[tokio::test]
async fn a_partitioned_leader_stops_before_the_standby_leads() -> Result<()> {
    use std::sync::atomic::Ordering;
    use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via, Faults};
    let ns = setup("ctl-partition").await?;
    let lease = unique_name("lease");
    let args = |identity: &str| leader_args(ns.name(), &lease, identity);
    let kubeconfig = cluster()?.kubeconfig();
    let faults = Faults {
        delay: Duration::ZERO,
        reset_every: 0,
        reset_after: Duration::ZERO,
        ..Faults::default()
    };
    let (via, proxy) = fault_proxy(api_server_addr(kubeconfig)?, faults).await?;
    let partitioned = kubeconfig_via(kubeconfig, via)?;
    let mut a = ControllerProcess::spawn(controller_bin(), &partitioned, &args("a"), "debug")?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let holder = || async {
        let l = leases.get_opt(&lease).await?;
        anyhow::Ok(l.and_then(|l| l.spec?.holder_identity))
    };
    wait_for("a leads", Duration::from_secs(30), || async {
        Ok((holder().await?.as_deref() == Some("a")).then_some(()))
    })
    .await?;
    let b = ControllerProcess::spawn(controller_bin(), kubeconfig, &args("b"), "debug")?;
    // b is a standby that has seen a's Lease renewed before the partition starts.
    wait_for("b is waiting", Duration::from_secs(30), || async {
        Ok(b.log_text()
            .contains("waiting for leadership")
            .then_some(()))
    })
    .await?;

    proxy.hang.store(true, Ordering::SeqCst);
    let cut = std::time::Instant::now();
    let (mut a_stopped, mut b_leads) = (None, None);
    while (a_stopped.is_none() || b_leads.is_none()) && cut.elapsed() < Duration::from_secs(40) {
        let stepped_down = a.log_text().contains("stepping down") || a.exited();
        if a_stopped.is_none() && stepped_down {
            a_stopped = Some(cut.elapsed());
        }
        if b_leads.is_none() && holder().await?.as_deref() == Some("b") {
            b_leads = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.hang.store(false, Ordering::SeqCst);
    eprintln!("partition: a stopped after {a_stopped:?}, b leads after {b_leads:?}");
    let a_stopped =
        a_stopped.with_context(|| format!("a never stepped down:\n{}", a.log_text()))?;
    let b_leads = b_leads.with_context(|| format!("b never took over:\n{}", b.log_text()))?;
    ensure!(
        a_stopped < b_leads,
        "two leaders: b led after {b_leads:?}, a stepped down only after {a_stopped:?}\n{}",
        a.log_text()
    );
    Ok(())
}

fn workload_crd(group: &str, kind: &str, plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                "listKind": format!("{kind}List")},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

/// Issue #17 (8): a WorkloadSpread's percentages follow its workload when only the
/// workload changes — for OpenKruise's CloneSet and for a custom kind from
/// `--custom-workloads` whose CRD appears after the controller started (the controller
/// used to watch neither: the status kept the old replica count).
#[tokio::test]
async fn percentages_follow_a_cloneset_and_a_custom_workload_when_they_scale() -> Result<()> {
    let ns = setup("ctl-kinds").await?;
    let client = ns.client();
    apply_crd(
        &client,
        &workload_crd("apps.kruise.io", "CloneSet", "clonesets"),
    )
    .await?;
    let custom_group = "pools.workloadspread.test";
    let custom = std::env::temp_dir().join(format!("{}.yaml", unique_name("custom")));
    std::fs::write(
        &custom,
        format!("- group: {custom_group}\n  kind: Pool\n  replicasPath: spec.size\n"),
    )?;
    let args: Vec<String> = [
        "--namespace",
        ns.name(),
        "--custom-workloads",
        custom.to_str().context("temp path")?,
    ]
    .map(str::to_string)
    .to_vec();
    let controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    apply_crd(&client, &workload_crd(custom_group, "Pool", "pools")).await?;

    let ws_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &ws_resource());
    let cases = [
        ("apps.kruise.io", "CloneSet", "clonesets", "replicas"),
        (custom_group, "Pool", "pools", "size"),
    ];
    for (group, kind, plural, field) in cases {
        let resource = ApiResource {
            group: group.into(),
            version: "v1alpha1".into(),
            api_version: format!("{group}/v1alpha1"),
            kind: kind.into(),
            plural: plural.into(),
        };
        let workloads: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns.name(), &resource);
        let name = kind.to_lowercase();
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": resource.api_version, "kind": kind,
            "metadata": {"name": name}, "spec": {field: 10}}))?;
        workloads.create(&PostParams::default(), &object).await?;
        let ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": resource.api_version, "kind": kind, "name": name},
                "subsets": [
                    {"name": "a", "maxReplicas": "50%", "requiredNodeSelector": {"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}},
                    {"name": "b"}]}}))?;
        ws_api.create(&PostParams::default(), &ws).await?;
        let missing_in_a = |want: i64| {
            let ws_api = ws_api.clone();
            let name = name.clone();
            move || {
                let ws_api = ws_api.clone();
                let name = name.clone();
                async move {
                    let s = ws_api.get(&name).await?.data["status"].clone();
                    let a = s["subsetStatuses"]
                        .as_array()
                        .and_then(|a| a.iter().find(|x| x["name"] == "a"))
                        .map(|x| x["missingReplicas"].clone());
                    Ok((a == Some(json!(want))).then_some(()))
                }
            }
        };
        wait_for(
            &format!("{kind}: 5 missing in a at 10 replicas"),
            Duration::from_secs(30),
            missing_in_a(5),
        )
        .await
        .with_context(|| controller.log_text())?;
        let scale = json!({"spec": {field: 4}});
        workloads
            .patch(&name, &PatchParams::default(), &Patch::Merge(&scale))
            .await?;
        wait_for(
            &format!("{kind}: 2 missing in a once scaled to 4"),
            Duration::from_secs(30),
            missing_in_a(2),
        )
        .await
        .with_context(|| controller.log_text())?;
    }
    drop(controller);
    std::fs::remove_file(&custom)?;
    Ok(())
}

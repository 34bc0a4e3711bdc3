//! Per-namespace work: pods of namespaces without a WorkloadSpread skip the guest, only
//! namespaces holding one are cached, and a WorkloadSpread the watch has not delivered
//! yet is found by a live list of its namespace.

use crate::support::{host_bin, ws_crd, ws_resource, MATCHED};
use anyhow::{ensure, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::time::Duration;
use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via, Faults};
use workloadspread_testkit::webhook::{policy_wasm, HostProcess};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

/// A pod admission request (create, delete or eviction) as the API server sends it.
fn pod_review(uid: &str, namespace: &str, operation: &str, sub: &str, object: Value) -> Vec<u8> {
    let kind = if sub == "eviction" { "Eviction" } else { "Pod" };
    let (group, version) = if sub == "eviction" {
        ("policy", "v1")
    } else {
        ("", "v1")
    };
    let name = object["metadata"]["name"].clone();
    let mut request = json!({"uid": uid, "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace, "name": name, "operation": operation,
        "userInfo": {"username": "test"}});
    if sub == "eviction" {
        request["subResource"] = json!("eviction");
    }
    match operation {
        "DELETE" => request["oldObject"] = object,
        _ => request["object"] = object,
    }
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": request}),
    )
    .expect("static review")
}

/// Issue #19 (2): pods of a namespace without a WorkloadSpread are answered without the
/// guest — and the answer is the guest's. A host with `--evaluate-unrelated` runs the
/// module on the same requests; both answers must be equal, byte for byte, and only the
/// default host counts them as skipped. Once a WorkloadSpread exists in the namespace,
/// its pods go to the guest again.
#[tokio::test]
async fn unrelated_pods_skip_the_guest_with_the_guests_answer() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let unrelated = cluster.namespace("unrelated").await?;
    let spread = cluster.namespace("spread").await?;
    ws_crd(&unrelated.client()).await?;
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let spreads: Api<DynamicObject> =
        Api::namespaced_with(spread.client(), spread.name(), &ws_resource());
    let ws = |ns: &str| -> Result<DynamicObject> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "apps.kruise.io/v1beta1",
            "kind": "WorkloadSpread", "metadata": {"name": "web", "namespace": ns},
            "spec": {"targetRef": target, "subsets": [{"name": "a"}]}}),
        )?)
    };
    spreads
        .create(&PostParams::default(), &ws(spread.name())?)
        .await?;
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a = vec!["--policy".to_string(), policy.display().to_string()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let skipping = HostProcess::start(host_bin(), cluster.kubeconfig(), &args(&[])).await?;
    let evaluating = HostProcess::start(
        host_bin(),
        cluster.kubeconfig(),
        &args(&["--evaluate-unrelated"]),
    )
    .await?;
    for host in [&skipping, &evaluating] {
        host.wait_sees_workloadspread(spread.name(), "web", &target)
            .await?;
    }
    let owned = |name: &str| {
        json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid", "controller": true}],
            "annotations": {MATCHED: "{\"name\":\"web\",\"subset\":\"a\"}"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    };
    let bare = json!({"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "gone"}});
    let ns = unrelated.name();
    let corpus = [
        pod_review("create-owned", ns, "CREATE", "", owned("p1")),
        pod_review("create-bare", ns, "CREATE", "", bare.clone()),
        pod_review("delete-matched", ns, "DELETE", "", owned("p2")),
        pod_review("evict", ns, "CREATE", "eviction", eviction),
    ];
    let skipped = "workloadspread_host_unrelated_pod_requests_total";
    for review in &corpus {
        let (code_s, fast) = skipping.post("/mutate", review).await?;
        let (code_e, guest) = evaluating.post("/mutate", review).await?;
        ensure!(
            code_s == 200 && code_e == 200 && fast == guest,
            "answers differ:\n skipped: {fast}\n guest:   {guest}"
        );
        ensure!(
            serde_json::from_str::<Value>(&fast)?["response"]["allowed"] == true,
            "{fast}"
        );
    }
    ensure!(skipping.metric(skipped).await? == corpus.len() as f64);
    ensure!(evaluating.metric(skipped).await? == 0.0);

    // A pod of the namespace that has a WorkloadSpread is the guest's, on both hosts.
    let (_, fast) = skipping
        .post(
            "/mutate",
            &pod_review("spread-ns", spread.name(), "CREATE", "", bare.clone()),
        )
        .await?;
    ensure!(
        skipping.metric(skipped).await? == corpus.len() as f64,
        "{fast}"
    );
    // And so is every pod of the unrelated namespace once it has one.
    let unrelated_spreads: Api<DynamicObject> =
        Api::namespaced_with(unrelated.client(), ns, &ws_resource());
    unrelated_spreads
        .create(&PostParams::default(), &ws(ns)?)
        .await?;
    skipping
        .wait_sees_workloadspread(ns, "web", &target)
        .await?;
    let (_, body) = skipping
        .post("/mutate", &pod_review("after", ns, "CREATE", "", bare))
        .await?;
    ensure!(
        skipping.metric(skipped).await? == corpus.len() as f64,
        "skipped after a WorkloadSpread appeared: {body}"
    );
    Ok(())
}

/// The host's `workloadspread_host_cached_objects` for `kind` in `namespace` (`None`:
/// no such series, the namespace is not cached).
async fn cached_objects(host: &HostProcess, kind: &str, namespace: &str) -> Result<Option<f64>> {
    let text = host.get("/metrics").await?;
    let wanted = [
        format!("kind=\"{kind}\""),
        format!("namespace=\"{namespace}\""),
    ];
    Ok(text
        .lines()
        .filter(|l| l.starts_with("workloadspread_host_cached_objects{"))
        .filter(|l| wanted.iter().all(|w| l.contains(w.as_str())))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok()))
}

/// Issue #19 (3): the host caches pods (and every other namespaced kind) only in the
/// namespaces that hold a WorkloadSpread — memory follows what is spread, not the
/// cluster. A namespace's caches start when its first WorkloadSpread appears and stop a
/// grace period after the last one went. Pods are cached only where the policy does not
/// count with the counter (`mode: best-effort` here, or `--no-counter`: the policy lists
/// a namespace's pending pods at each admission); with it see
/// [`with_the_counter_pods_are_read_live_not_watched`].
#[tokio::test]
async fn only_namespaces_holding_a_workloadspread_are_cached() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let plain = cluster.namespace("plain").await?;
    let spread = cluster.namespace("spread").await?;
    ws_crd(&plain.client()).await?;
    let pod = |name: String| -> Result<Pod> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))?)
    };
    for i in 0..20 {
        plain
            .api::<Pod>()
            .create(&PostParams::default(), &pod(format!("p{i}"))?)
            .await?;
    }
    for i in 0..5 {
        spread
            .api::<Pod>()
            .create(&PostParams::default(), &pod(format!("s{i}"))?)
            .await?;
    }
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let ws = |ns: &str| -> Result<DynamicObject> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "apps.kruise.io/v1beta1",
            "kind": "WorkloadSpread", "metadata": {"name": "web", "namespace": ns},
            "spec": {"targetRef": target, "subsets": [{"name": "a"}]}}),
        )?)
    };
    let spreads = |ns: &TestNamespace| -> Api<DynamicObject> {
        Api::namespaced_with(ns.client(), ns.name(), &ws_resource())
    };
    spreads(&spread)
        .create(&PostParams::default(), &ws(spread.name())?)
        .await?;
    let args = [
        "--policy".to_string(),
        policy.display().to_string(),
        "--namespace-cache-grace-seconds".into(),
        "1".into(),
        // The counter is offered, but the settings do not count with it.
        "--settings-json".into(),
        r#"{"mode": "best-effort"}"#.into(),
    ];
    let host = HostProcess::start(host_bin(), cluster.kubeconfig(), &args).await?;
    let pods_cached = |ns: &'static str, want: Option<f64>| {
        let host = &host;
        let namespace = if ns == "plain" {
            plain.name()
        } else {
            spread.name()
        }
        .to_string();
        move || {
            let namespace = namespace.clone();
            async move { Ok((cached_objects(host, "Pod", &namespace).await? == want).then_some(())) }
        }
    };
    wait_for(
        "5 pods cached in the spread namespace",
        Duration::from_secs(30),
        pods_cached("spread", Some(5.0)),
    )
    .await?;
    ensure!(
        cached_objects(&host, "Pod", plain.name()).await?.is_none(),
        "the namespace without a WorkloadSpread is cached"
    );
    spreads(&plain)
        .create(&PostParams::default(), &ws(plain.name())?)
        .await?;
    wait_for(
        "its 20 pods cached once it has one",
        Duration::from_secs(30),
        pods_cached("plain", Some(20.0)),
    )
    .await?;
    spreads(&plain).delete("web", &Default::default()).await?;
    wait_for(
        "its cache dropped after the grace period",
        Duration::from_secs(30),
        pods_cached("plain", None),
    )
    .await?;
    ensure!(cached_objects(&host, "Pod", spread.name()).await? == Some(5.0));
    Ok(())
}

/// Issue #43: with the counter, the host does not watch pods at all — the policy reads a
/// pod only for an eviction, and a watch would have the API server send (and the host
/// decode) every event of every pod of a spread namespace, several per admitted pod. The
/// spread namespace's other kinds are watched; an eviction's pod is read live and
/// answered.
#[tokio::test]
async fn with_the_counter_pods_are_read_live_not_watched() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let spread = cluster.namespace("live-pods").await?;
    ws_crd(&spread.client()).await?;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p0"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))?;
    spread
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?;
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let ws: DynamicObject = serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1beta1",
        "kind": "WorkloadSpread", "metadata": {"name": "web", "namespace": spread.name()},
        "spec": {"targetRef": target, "subsets": [{"name": "a"}]}}))?;
    Api::<DynamicObject>::namespaced_with(spread.client(), spread.name(), &ws_resource())
        .create(&PostParams::default(), &ws)
        .await?;
    let args = ["--policy".to_string(), policy.display().to_string()];
    let host = HostProcess::start(host_bin(), cluster.kubeconfig(), &args).await?;
    let ns = spread.name().to_string();
    wait_for(
        "the spread namespace's ReplicaSets watched",
        Duration::from_secs(30),
        || {
            let (host, ns) = (&host, ns.clone());
            async move {
                Ok((cached_objects(host, "ReplicaSet", &ns).await? == Some(0.0)).then_some(()))
            }
        },
    )
    .await?;
    let cached = cached_objects(&host, "Pod", &ns).await?;
    ensure!(
        cached.is_none(),
        "{cached:?} pods cached beside the counter"
    );
    let pod_reads = || host.metric_with("workloadspread_host_live_reads_total", "kind=\"Pod\"");
    let before = pod_reads().await?;
    for (uid, name) in [("evict-p0", "p0"), ("evict-gone", "gone")] {
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name}});
        let review = pod_review(uid, &ns, "CREATE", "eviction", eviction);
        let (code, body) = host.post("/mutate", &review).await?;
        ensure!(
            code == 200 && serde_json::from_str::<Value>(&body)?["response"]["allowed"] == true,
            "eviction of {name}: {code} {body}"
        );
    }
    let reads = pod_reads().await? - before;
    ensure!(reads == 2.0, "{reads} live pod reads for two evictions");
    let cached = cached_objects(&host, "Pod", &ns).await?;
    ensure!(
        cached.is_none(),
        "{cached:?} pods cached after the evictions"
    );
    Ok(())
}

/// Issue #28: a custom workload kind (here `Fleet`, granted by the settings'
/// `customWorkloads`) is watched in the namespaces holding a WorkloadSpread once the
/// policy first reads it, like the built-in kinds: a pod's admission reads its workload
/// from that cache instead of a live GET per pod (1.2–2.6 ms of a 4 ms evaluation at
/// concurrency 1 in `make bench`). Only the first reads, before the watch's first list,
/// go to the API server (`workloadspread_host_live_reads_total`).
#[tokio::test]
async fn custom_workloads_are_read_from_the_namespace_cache() -> Result<()> {
    let Some(setup) =
        crate::support::FleetSetup::start("custom-cache", cluster()?.kubeconfig()).await?
    else {
        return Ok(());
    };
    let fleet_reads = || {
        setup
            .host
            .metric_with("workloadspread_host_live_reads_total", "kind=\"Fleet\"")
    };
    ensure!(setup.create_pod("p0").await?.as_deref() == Some("a"));
    ensure!(
        fleet_reads().await? >= 1.0,
        "the first read of the Fleet kind is not live"
    );
    let ns = setup.ns.name().to_string();
    wait_for(
        "the Fleet cached in the spread namespace",
        Duration::from_secs(30),
        || {
            let ns = ns.clone();
            let host = &setup.host;
            async move { Ok((cached_objects(host, "Fleet", &ns).await? == Some(1.0)).then_some(())) }
        },
    )
    .await?;
    let before = fleet_reads().await?;
    let mut placed = Vec::new();
    for i in 1..8 {
        placed.push(setup.create_pod(&format!("p{i}")).await?);
    }
    let after = fleet_reads().await?;
    ensure!(
        after == before,
        "{} live Fleet reads for 7 pods once the Fleet was cached",
        after - before
    );
    // a (max 5) holds p0..p4, b the rest: the cached Fleet decides as the live one did.
    let a = placed.iter().filter(|s| s.as_deref() == Some("a")).count();
    ensure!(a == 4 && placed.len() == 7, "placed {placed:?}");
    setup.finish().await
}

/// The JSON patch of a `/mutate` answer (`Value::Null` when the pod is left unchanged).
fn patch_of(body: &str) -> Result<Value> {
    use base64::Engine;
    let review: Value = serde_json::from_str(body)?;
    let Some(encoded) = review["response"]["patch"].as_str() else {
        return Ok(Value::Null);
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded)?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// A WorkloadSpread CREATE (a dry run if `dry_run`) as the API server sends it to the
/// validating webhook.
fn ws_review(uid: &str, namespace: &str, object: &Value, dry_run: bool) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview", "request": {"uid": uid,
        "kind": {"group": "apps.kruise.io", "version": "v1beta1", "kind": "WorkloadSpread"},
        "resource": {"group": "apps.kruise.io", "version": "v1beta1",
            "resource": "workloadspreads"},
        "namespace": namespace, "name": object["metadata"]["name"], "operation": "CREATE",
        "userInfo": {"username": "test"}, "object": object, "dryRun": dry_run}}),
    )?)
}

/// A WorkloadSpread created a moment before its workload's first pod, with the host's
/// watches lagging the API server by a second (a fault proxy, as a busy host's or a far
/// API server's do; seen in CI under load: a Deployment's first pod admitted unspread).
/// The pod is still spread: before deciding a pod creation in a namespace where its
/// cache holds no WorkloadSpread, the host lists the namespace's WorkloadSpreads live
/// and waits for its watch to deliver the missing one. An earlier pod of the namespace
/// had the (empty) list remembered: the WorkloadSpread's CREATE, validated by the host,
/// drops it. The race is checked to have happened (`Missed`; a host so slow that the
/// watch won is retried in a fresh namespace, three times at most). A namespace without
/// any answers five pods with one list, not five, also after a dry-run and a refused
/// WorkloadSpread CREATE there.
#[tokio::test]
async fn a_workloadspread_the_watch_has_not_delivered_yet_spreads_the_first_pod() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let quiet = cluster.namespace("quiet").await?;
    ws_crd(&quiet.client()).await?;
    let lagging = Faults {
        lag: Duration::from_secs(1),
        ..Faults::default()
    };
    let (via, _) = fault_proxy(api_server_addr(cluster.kubeconfig())?, lagging).await?;
    let kubeconfig = kubeconfig_via(cluster.kubeconfig(), via)?;
    let args = ["--policy".to_string(), policy.display().to_string()];
    let host = HostProcess::start(host_bin(), &kubeconfig, &args).await?;
    let owned = |name: &str, rs_uid: &str| {
        json!({"metadata": {"name": name, "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": rs_uid, "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    };
    let lookups = "workloadspread_host_workloadspread_lookups_total";
    let ws = json!({"apiVersion": "apps.kruise.io/v1beta1",
        "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
            "subsets": [{"name": "a"}]}});
    let mut raced = false;
    for attempt in 0..3 {
        let ns = cluster.namespace("lagging").await?;
        let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))?;
        let rs = ns
            .api::<ReplicaSet>()
            .create(&PostParams::default(), &rs)
            .await?;
        let rs_uid = rs.metadata.uid.unwrap_or_default();
        let (code, body) = host
            .post(
                "/mutate",
                &pod_review("before", ns.name(), "CREATE", "", owned("web-0", &rs_uid)),
            )
            .await?;
        ensure!(code == 200 && patch_of(&body)?.is_null(), "{body}");
        let missed = host.metric_with(lookups, "result=\"Missed\"").await?;
        let (code, body) = host
            .post("/validate", &ws_review("ws-create", ns.name(), &ws, false)?)
            .await?;
        ensure!(code == 200 && body.contains("\"allowed\":true"), "{body}");
        Api::<DynamicObject>::namespaced_with(ns.client(), ns.name(), &ws_resource())
            .create(&PostParams::default(), &serde_json::from_value(ws.clone())?)
            .await?;
        let (code, body) = host
            .post(
                "/mutate",
                &pod_review("first", ns.name(), "CREATE", "", owned("web-1", &rs_uid)),
            )
            .await?;
        ensure!(
            code == 200 && patch_of(&body)?.to_string().contains(r#"\"subset\":\"a\""#),
            "the first pod was not spread by the WorkloadSpread created before it: {body}"
        );
        if host.metric_with(lookups, "result=\"Missed\"").await? > missed {
            raced = true;
            break;
        }
        eprintln!(
            "  attempt {attempt}: the watch delivered the WorkloadSpread before the pod came"
        );
    }
    ensure!(
        raced,
        "in three attempts the watch always delivered the WorkloadSpread before the pod came"
    );

    // Five pods of a namespace without a WorkloadSpread make one list between them, also
    // when WorkloadSpread CREATEs that are never stored come after the first pod: one the
    // host refuses, then a dry run (`kubectl apply --dry-run=server`, a GitOps diff).
    // Either, taken for a real CREATE, would drop the remembered list.
    let quiet_pod = |i: usize| {
        pod_review(
            &format!("quiet-{i}"),
            quiet.name(),
            "CREATE",
            "",
            owned(&format!("web-{i}"), "other-uid"),
        )
    };
    let listed = host.metric_with(lookups, "result=\"Listed\"").await?;
    let unchanged = |code: u16, body: &str| -> Result<()> {
        ensure!(
            code == 200 && patch_of(body)?.is_null(),
            "a pod of a namespace without a WorkloadSpread was changed: {body}"
        );
        Ok(())
    };
    let (code, body) = host.post("/mutate", &quiet_pod(0)).await?;
    unchanged(code, &body)?;
    let mut invalid = ws.clone();
    invalid["spec"]["subsets"] = json!([{"name": "a", "maxReplicas": -1}]);
    let (code, body) = host
        .post(
            "/validate",
            &ws_review("invalid", quiet.name(), &invalid, false)?,
        )
        .await?;
    ensure!(code == 200 && body.contains("\"allowed\":false"), "{body}");
    let (code, body) = host
        .post("/validate", &ws_review("dry", quiet.name(), &ws, true)?)
        .await?;
    ensure!(code == 200 && body.contains("\"allowed\":true"), "{body}");
    for i in 1..5 {
        let (code, body) = host.post("/mutate", &quiet_pod(i)).await?;
        unchanged(code, &body)?;
    }
    let listed_quiet = host.metric_with(lookups, "result=\"Listed\"").await? - listed;
    ensure!(
        listed_quiet == 1.0,
        "five pods of one namespace without a WorkloadSpread listed {listed_quiet} times"
    );
    Ok(())
}

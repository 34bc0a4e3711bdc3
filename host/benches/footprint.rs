//! Memory and CPU of the host and the controller as the cluster grows (#19): one spread
//! workload of 500 pods (a Fleet, 3 subsets) admitted by one host replica in exact mode
//! and counted by the controller, then 1 000, 5 000 and 10 000 unrelated pods (bare
//! pods bound to KWOK nodes in namespaces without a WorkloadSpread, enrolled in the
//! webhook like every namespace of a real cluster). After each level: resident memory
//! (VmRSS) of both processes, and the CPU time each spent while the level's pods were
//! created and settled. Then (#31) 1 000 WorkloadSpreads in one namespace, each over a
//! Fleet of 10 pods (`WS_FOOTPRINT_SPREADS` for fewer): memory, CPU per admission and
//! per reconcile. Prints a Markdown table. Needs the local control plane (`make bench`
//! starts it), `make policy` and a release controller in the target directory.

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use workloadspread_testkit::webhook::{
    apply_crd, bundled_fleet_settings, fleet_crd, fleet_pod, free_port, policy_wasm,
    ControllerProcess, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for, TestNamespace};

const SPREAD_PODS: usize = 500;
const LEVELS: [usize; 3] = [1_000, 5_000, 10_000];
/// Unrelated pods are spread over this many namespaces.
const NAMESPACES: usize = 10;
const CONCURRENCY: usize = 32;
const SETTLE: Duration = Duration::from_secs(300);
/// How long the processes are watched doing nothing once every spread pod is counted.
const IDLE: Duration = Duration::from_secs(30);
const RECONCILES: &str = "workloadspread_controller_reconcile_duration_seconds_count";
const EVALUATIONS: &str = "workloadspread_host_evaluation_duration_seconds_count";

#[path = "footprint/many.rs"]
mod many;

/// Resident memory and CPU time (user + system) of a process, from `/proc`.
#[derive(Clone, Copy)]
struct Usage {
    rss_mb: f64,
    cpu_s: f64,
}

fn usage(pid: u32) -> Result<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")?;
    let cpu_s = workloadspread_testkit::measure::cpu_seconds(pid)?;
    Ok(Usage {
        rss_mb: rss_kb / 1024.0,
        cpu_s,
    })
}

fn release_controller() -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workloadspread_testkit::repo_root().join("target"));
    let path = target.join("release").join("workloadspread-controller");
    if !path.exists() {
        bail!(
            "{} is missing (cargo build --release -p workloadspread-controller)",
            path.display()
        );
    }
    Ok(path)
}

fn dynamic_api(ns: &TestNamespace, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(ns.client(), ns.name(), &resource)
}

/// The Fleet and its WorkloadSpread; returns the Fleet's uid.
async fn create_spread(ns: &TestNamespace) -> Result<String> {
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
        "metadata": {"name": "fleet"}, "spec": {"replicas": SPREAD_PODS}}))?;
    let fleet = dynamic_api(ns, "burst.workloadspread.test", "v1", "Fleet")
        .create(&PostParams::default(), &fleet)
        .await?;
    let spread: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "bench"},
        "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"},
            "subsets": [{"name": "a", "maxReplicas": SPREAD_PODS / 3}, {"name": "b", "maxReplicas": SPREAD_PODS / 3}, {"name": "c"}]}}))?;
    dynamic_api(ns, "apps.kruise.io", "v1beta1", "WorkloadSpread")
        .create(&PostParams::default(), &spread)
        .await?;
    fleet.metadata.uid.context("the Fleet has no uid")
}

/// A bare pod bound to `node` (no scheduler work), as unrelated workloads' pods are.
fn unrelated_pod(name: &str, node: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "unrelated", "tier": "backend"}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1.0",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "env": [{"name": "MODE", "value": "bench"}]}]}}))?)
}

/// Creates `pods` (name, pod) through `api`s, `CONCURRENCY` at a time.
async fn create_all(pods: Vec<(Api<Pod>, Pod)>) -> Result<()> {
    let results: Vec<Result<()>> = futures::stream::iter(pods)
        .map(|(api, pod)| async move {
            api.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {:?}", pod.metadata.name))?;
            Ok(())
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Waits until `want` pods of `ns` are Running.
async fn running(ns: &TestNamespace, want: usize) -> Result<()> {
    let pods: Api<Pod> = ns.api();
    wait_for(
        &format!("{want} running pods in {}", ns.name()),
        SETTLE,
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await?.items;
                let n = list
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                Ok((n >= want).then_some(()))
            }
        },
    )
    .await
}

/// Waits until the WorkloadSpread's status counts `want` pods in all.
async fn counted(ns: &TestNamespace, want: i64) -> Result<()> {
    let api = dynamic_api(ns, "apps.kruise.io", "v1beta1", "WorkloadSpread");
    wait_for("the status to count the spread pods", SETTLE, || {
        let api = api.clone();
        async move {
            let ws = api.get("bench").await?;
            let n: i64 = ws.data["status"]["subsetStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s["replicas"].as_i64().unwrap_or(0))
                .sum();
            Ok((n == want).then_some(()))
        }
    })
    .await
}

/// Samples both processes a few times over two seconds (the allocator returns memory
/// lazily) and keeps the largest resident size.
async fn sample(host: u32, controller: u32) -> Result<(Usage, Usage)> {
    let (mut h, mut c) = (usage(host)?, usage(controller)?);
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (h2, c2) = (usage(host)?, usage(controller)?);
        h = Usage {
            rss_mb: h.rss_mb.max(h2.rss_mb),
            cpu_s: h2.cpu_s,
        };
        c = Usage {
            rss_mb: c.rss_mb.max(c2.rss_mb),
            cpu_s: c2.cpu_s,
        };
    }
    Ok((h, c))
}

fn print_row(
    what: &str,
    unrelated: usize,
    seconds: f64,
    now: (Usage, Usage),
    before: (Usage, Usage),
) {
    println!(
        "| {what} | {unrelated} | {:.1} MB | {:.1} MB | {:.1} s | {:.1} s | {seconds:.0} s |",
        now.0.rss_mb,
        now.1.rss_mb,
        now.0.cpu_s - before.0.cpu_s,
        now.1.cpu_s - before.1.cpu_s,
    );
}

/// The goal line: host RSS with 10 000 unrelated pods ≤ 100 MB, and flat (growing by
/// at most 5 MB from the first level to the last).
fn print_summary(at_level: &[(Usage, Usage)]) {
    let (Some(first), Some(last)) = (at_level.first(), at_level.last()) else {
        return;
    };
    let growth = last.0.rss_mb - first.0.rss_mb;
    let met = last.0.rss_mb <= 100.0 && growth <= 5.0;
    println!(
        "* Host RSS with {} unrelated pods ≤ 100 MB and flat in their number: **{}**, {:.1} MB \
         ({:+.1} MB from {} to {} unrelated pods); the controller: {:.1} MB ({:+.1} MB).",
        LEVELS[LEVELS.len() - 1],
        if met { "met" } else { "not met" },
        last.0.rss_mb,
        growth,
        LEVELS[0],
        LEVELS[LEVELS.len() - 1],
        last.1.rss_mb,
        last.1.rss_mb - first.1.rss_mb,
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        bail!("policy/policy.wasm is missing (make policy)");
    };
    let controller_bin = release_controller()?;
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&client, &serde_json::to_value(&crd)?).await?;
    apply_crd(&client, &fleet_crd()).await?;
    let spread_ns = cluster.namespace("footprint-spread").await?;
    let mut unrelated_ns = Vec::new();
    for _ in 0..NAMESPACES {
        unrelated_ns.push(cluster.namespace("footprint-other").await?);
    }
    let uid = create_spread(&spread_ns).await?;

    let port = free_port()?;
    let name = unique_name("ws-footprint");
    let configs =
        WebhookConfigs::create(&client, &name, &format!("https://127.0.0.1:{port}")).await?;
    let args = [
        "--policy".into(),
        policy.display().to_string(),
        "--settings-json".into(),
        bundled_fleet_settings().to_string(),
        "--webhook-config".into(),
        name,
    ];
    let bin = Path::new(env!("CARGO_BIN_EXE_workloadspread-host"));
    let host = HostProcess::start_on(bin, cluster.kubeconfig(), port, &args).await?;
    let custom = std::env::temp_dir().join(format!("{}.yaml", unique_name("fleet")));
    std::fs::write(
        &custom,
        "- group: burst.workloadspread.test\n  kind: Fleet\n  replicasPath: spec.replicas\n",
    )?;
    let custom_arg = format!("--custom-workloads={}", custom.display());
    let controller =
        ControllerProcess::start(&controller_bin, cluster.kubeconfig(), &[custom_arg]).await?;
    let (host_pid, controller_pid) = (host.pid(), controller.pid());
    configs.enroll(spread_ns.name()).await?;
    for ns in &unrelated_ns {
        configs.enroll(ns.name()).await?;
    }
    let idle = sample(host_pid, controller_pid).await?;

    println!(
        "| phase | unrelated pods | host RSS | controller RSS | host CPU | controller CPU | wall |"
    );
    println!("|---|---|---|---|---|---|---|");
    print_row("started", 0, 0.0, idle, idle);
    let started = Instant::now();
    let spread_api: Api<Pod> = spread_ns.api();
    let spread_pods = (0..SPREAD_PODS)
        .map(|i| (spread_api.clone(), fleet_pod(&format!("fleet-{i}"), &uid)))
        .collect();
    create_all(spread_pods).await?;
    running(&spread_ns, SPREAD_PODS).await?;
    counted(&spread_ns, SPREAD_PODS as i64).await?;
    let mut before = idle;
    let now = sample(host_pid, controller_pid).await?;
    print_row(
        &format!("{SPREAD_PODS} spread pods"),
        0,
        started.elapsed().as_secs_f64(),
        now,
        before,
    );
    before = now;

    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    if nodes.is_empty() {
        bail!("no KWOK nodes");
    }
    let mut made = 0;
    let mut at_level = Vec::new();
    for level in LEVELS {
        let started = Instant::now();
        let pods = (made..level)
            .map(|i| {
                let ns = &unrelated_ns[i % NAMESPACES];
                let pod = unrelated_pod(&format!("other-{i}"), &nodes[i % nodes.len()])?;
                Ok((ns.api::<Pod>(), pod))
            })
            .collect::<Result<Vec<_>>>()?;
        create_all(pods).await?;
        for (k, ns) in unrelated_ns.iter().enumerate() {
            running(ns, (0..level).filter(|i| i % NAMESPACES == k).count()).await?;
        }
        made = level;
        let now = sample(host_pid, controller_pid).await?;
        at_level.push(now);
        print_row(
            "unrelated pods created",
            level,
            started.elapsed().as_secs_f64(),
            now,
            before,
        );
        before = now;
    }
    print_summary(&at_level);

    // #31: many WorkloadSpreads in one namespace.
    let spreads = many::spreads()?;
    let many_ns = cluster.namespace("footprint-many").await?;
    configs.enroll(many_ns.name()).await?;
    let unrelated = LEVELS[LEVELS.len() - 1];
    let counts = || async {
        anyhow::Ok((
            controller.metric(RECONCILES).await?,
            host.metric(EVALUATIONS).await?,
        ))
    };
    let started = Instant::now();
    let uids = many::create_spreads(&many_ns, spreads).await?;
    let now = sample(host_pid, controller_pid).await?;
    print_row(
        &format!("{spreads} WorkloadSpreads created in one namespace"),
        unrelated,
        started.elapsed().as_secs_f64(),
        now,
        before,
    );
    before = now;
    let (reconciles_before, evaluations_before) = counts().await?;
    let started = Instant::now();
    many::admit_pods(&many_ns, &uids).await?;
    let pods_admitted = sample(host_pid, controller_pid).await?;
    let (reconciles, evaluations) = counts().await?;
    print_row(
        &format!(
            "{} pods of them admitted and counted",
            spreads * many::PODS_PER_SPREAD
        ),
        unrelated,
        started.elapsed().as_secs_f64(),
        pods_admitted,
        before,
    );
    before = pods_admitted;
    // A measurement window, not a wait: what the processes spend holding it all.
    tokio::time::sleep(IDLE).await;
    let idle_end = sample(host_pid, controller_pid).await?;
    let (idle_reconciles, _) = counts().await?;
    print_row(
        &format!("idle {} s", IDLE.as_secs()),
        unrelated,
        IDLE.as_secs_f64(),
        idle_end,
        before,
    );
    let per = |cpu: f64, n: f64| if n > 0.0 { cpu / n * 1e3 } else { 0.0 };
    let admissions = evaluations - evaluations_before;
    let admitted_reconciles = reconciles - reconciles_before;
    println!(
        "* {spreads} WorkloadSpreads of {} pods each in one namespace: host {:.1} MB, controller \
         {:.1} MB; admitting and counting their pods: {:.2} ms host CPU per admission \
         ({admissions:.0}), {:.2} ms controller CPU per reconcile ({admitted_reconciles:.0} \
         reconciles); idle {} s: {:.0} reconciles, {:.1} s controller CPU.",
        many::PODS_PER_SPREAD,
        pods_admitted.0.rss_mb,
        pods_admitted.1.rss_mb,
        per(pods_admitted.0.cpu_s - now.0.cpu_s, admissions),
        per(pods_admitted.1.cpu_s - now.1.cpu_s, admitted_reconciles),
        IDLE.as_secs(),
        idle_reconciles - reconciles,
        idle_end.1.cpu_s - pods_admitted.1.cpu_s,
    );
    configs.delete().await?;
    drop(host);
    drop(controller);
    let cleanup: Vec<TestNamespace> = unrelated_ns
        .into_iter()
        .chain([spread_ns, many_ns])
        .collect();
    drop(cleanup);
    Ok(())
}

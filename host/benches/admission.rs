//! Webhook admissions through the real API server: pods of one workload created at
//! concurrency 1 / 8 / 64 with no webhook (the API server's own cost), with a no-op
//! webhook of our own (the transport floor, `noop`), with the host and the controller
//! running together with their defaults (what users run), with the host's
//! defaults alone (reserved slots and group commit), with group commit alone
//! (`--reserve-max 0`), and with one status write per claim (`--reserve-max 0
//! --max-batch 1`, the reference algorithm); one host replica, exact mode. Then pods
//! of a namespace without a WorkloadSpread through the same webhook, answered without
//! the guest (the default) and with it (`--evaluate-unrelated`).
//!
//! The pods are bound to a KWOK node at creation and frozen (no scheduler binding, no
//! kubelet status writes), so a row times admission and not the scheduler and kubelets
//! racing the next create on the same 2 cores; one more no-webhook row ("pods scheduled")
//! creates them as the bench did before, to show what that added.
//!
//! Then API writes per admitted pod across all components, from the API server's
//! `apiserver_request_total` (`workloadspread_testkit::api_writes`): per row during the
//! series, and for a 200-pod Deployment scale-out with host and controller, counted
//! until everything settled.
//!
//! Per row: pods/s, the end-to-end latency of each pod CREATE as its client sees it
//! (p50/p99), the mean webhook call as the API server measures it
//! (`apiserver_admission_webhook_admission_duration_seconds`), the mean evaluation in
//! the host, and the host's status writes and 409 conflicts. Prints a Markdown table.
//! Needs the local control plane (`make bench` starts it) and `make policy`.

use anyhow::{Context, Result};
use axum::http::Request;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use workloadspread_testkit::api_writes::Writes;
use workloadspread_testkit::measure::{
    cpu_seconds, machine_busy_seconds, sum_metric, HistogramReading, Percentiles,
};
use workloadspread_testkit::webhook::{
    apply_crd, bundled_fleet_settings, fleet_crd, fleet_pod, free_port, policy_wasm,
    ControllerProcess, HostProcess, WebhookConfigs,
};
use workloadspread_testkit::{cluster, unique_name, wait_for, TestNamespace, KWOK_FROZEN_LABEL};

#[path = "admission/focus.rs"]
mod focus;
#[path = "admission/goals.rs"]
mod goals;
#[path = "admission/kruise.rs"]
mod kruise;
#[path = "admission/noop.rs"]
mod noop;
#[path = "admission/profile.rs"]
mod profile;
#[path = "admission/scale_in.rs"]
mod scale_in;
#[path = "admission/scale_out.rs"]
mod scale_out;
#[path = "admission/sequence.rs"]
mod sequence;
#[path = "admission/summary.rs"]
mod summary;
use focus::{Focus, Scope};
use summary::{find, ms, ms_places, print_row, print_summary};

/// Pods per series: [`DEFAULT_PODS`], or `WS_BENCH_PODS` (read once by
/// [`read_pods_per_series`] at start) to lengthen a series for profiling (`WS_BENCH_PROFILE`).
static PODS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
const DEFAULT_PODS: usize = 256;

fn pods_per_series() -> usize {
    *PODS.get_or_init(|| DEFAULT_PODS)
}

/// Reads `WS_BENCH_PODS`; a value that is not a number of at least 3 (one per subset) is
/// an error, not a silent default.
fn read_pods_per_series() -> Result<()> {
    let pods = match std::env::var("WS_BENCH_PODS") {
        Err(_) => DEFAULT_PODS,
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 3)
            .with_context(|| format!("WS_BENCH_PODS={v}: expected a number of pods, at least 3"))?,
    };
    anyhow::ensure!(
        PODS.set(pods).is_ok() || pods_per_series() == pods,
        "pods per series read twice"
    );
    Ok(())
}
const CONCURRENCY: [usize; 3] = [1, 8, 64];
/// The API server's histogram of webhook calls, labelled with the webhook's name.
const APISERVER_WEBHOOK_SECONDS: &str = "apiserver_admission_webhook_admission_duration_seconds";
const MUTATING_WEBHOOK: &str = "name=\"mutate.workloadspread.test\"";
/// The API server's own CPU counter (Go's process collector).
const APISERVER_CPU_SECONDS: &str = "process_cpu_seconds_total";
/// The host's histogram of fence reads (`counter::fence`).
const HOST_SPEC_READ_SECONDS: &str = "workloadspread_host_counter_spec_read_duration_seconds";
/// The host's histogram of evaluations, labelled with the endpoint.
const HOST_EVALUATION_SECONDS: &str = "workloadspread_host_evaluation_duration_seconds";

/// Whether pods go through our webhook, and how it batches counter writes; or pods
/// of a namespace without a WorkloadSpread ("unrelated": most pods of a cluster), which
/// the host answers without the guest unless `evaluate` (`--evaluate-unrelated`).
#[derive(Clone, Copy, PartialEq)]
enum Webhook {
    None,
    /// No webhook, pods left to the scheduler and KWOK (the bench's pods until #28).
    NoneScheduled,
    /// The no-op webhook (`noop`): the transport floor.
    Noop,
    /// The no-op webhook answering with the host's patch: the injection floor.
    NoopPatch,
    /// The host with its defaults and the controller (release build) with its defaults.
    HostAndController,
    Batching {
        window_ms: u64,
        max_batch: u16,
        reserve_max: u16,
    },
    Unrelated {
        evaluate: bool,
    },
    /// OpenKruise v1.9.0's kruise-manager (webhook and controller), with its client's
    /// defaults or, `lifted`, with [`kruise::LIFTED`].
    Kruise {
        lifted: bool,
    },
}

/// The host's defaults (`--reserve-max 32 --batch-window-ms 0 --max-batch 512`).
const RESERVED: Webhook = Webhook::Batching {
    window_ms: 0,
    max_batch: 512,
    reserve_max: 32,
};
/// Every claim written before it is answered, concurrent ones in one write.
const GROUP_COMMIT: Webhook = Webhook::Batching {
    window_ms: 0,
    max_batch: 512,
    reserve_max: 0,
};
const ONE_WRITE_PER_CLAIM: Webhook = Webhook::Batching {
    window_ms: 0,
    max_batch: 1,
    reserve_max: 0,
};

impl Webhook {
    fn label(self) -> String {
        match self {
            Webhook::None => "none".into(),
            Webhook::NoneScheduled => "none, pods scheduled and run by KWOK".into(),
            Webhook::Noop => "no-op webhook (floor)".into(),
            Webhook::NoopPatch => "no-op webhook answering with our patch".into(),
            Webhook::HostAndController => "host + controller (defaults)".into(),
            Webhook::Kruise { lifted: false } => "OpenKruise v1.9.0 (defaults)".into(),
            Webhook::Kruise { lifted: true } => format!(
                "OpenKruise v1.9.0, client limits lifted (qps {}, burst {})",
                kruise::LIFTED.0,
                kruise::LIFTED.1
            ),
            Webhook::Unrelated { evaluate: false } => "unrelated pods (default)".into(),
            Webhook::Unrelated { evaluate: true } => {
                "unrelated pods, guest run (`--evaluate-unrelated`)".into()
            }
            w if w == RESERVED => "reserved slots (default)".into(),
            w if w == GROUP_COMMIT => "group commit, no reservation".into(),
            w if w == ONE_WRITE_PER_CLAIM => "one write per claim".into(),
            Webhook::Batching {
                window_ms,
                max_batch,
                reserve_max,
            } => {
                format!("window {window_ms} ms, max batch {max_batch}, reserve {reserve_max}")
            }
        }
    }
}

/// What the webhook side reported for one row (OpenKruise's: the API server's count of
/// its status writes and 409s; it exports no evaluation time).
struct WebhookFigures {
    call_mean: Duration,
    evaluation_mean: Option<Duration>,
    /// The host's fence reads (`counter::fence`): how many, and their mean duration.
    spec_reads: Option<HistogramReading>,
    status_writes: f64,
    conflicts: f64,
}

struct Row {
    webhook: Webhook,
    concurrency: usize,
    per_second: f64,
    create: Percentiles,
    figures: Option<WebhookFigures>,
    /// API writes during the series beyond the pod creates, per pod (all components).
    writes_per_pod: f64,
    /// CPU per pod during the series.
    cpu: CpuPerPod,
    /// Host + controller rows: how the host's patches compare with the injection floor's.
    injected: Option<String>,
}

/// CPU used during a series per pod created: the API server's
/// (`process_cpu_seconds_total`, etcd not included) and, for host rows, the host's and
/// the controller's together (`/proc/<pid>/stat`): where a webhook's cost lands on a
/// small cluster's cores.
struct CpuPerPod {
    apiserver: Duration,
    ours: Option<Duration>,
    /// Every process of the machine together (`/proc/stat`): the cluster, etcd, the
    /// bench's client (and the no-op webhook, which runs in it), the host and controller.
    machine: Duration,
    /// Cores the machine kept busy on average during the series.
    busy_cores: f64,
}

/// CPU seconds of the host and the controller of `running` (none for other rows).
fn our_cpu(running: &Running) -> Result<Option<f64>> {
    match running {
        Running::Host(a) => {
            let (host, controller) = a.cpu_seconds()?;
            Ok(Some(host + controller))
        }
        Running::Kruise(m) => Ok(Some(cpu_seconds(m.pid())?)),
        Running::Nothing | Running::Noop(_) => Ok(None),
    }
}

fn per_pod(seconds: f64) -> Duration {
    Duration::from_secs_f64((seconds / pods_per_series() as f64).max(0.0))
}

/// A running host replica with its webhook configurations; the namespace is enrolled.
/// With `controller`, the controller for that namespace runs too.
struct Admission {
    configs: WebhookConfigs,
    host: HostProcess,
    controller: Option<ControllerProcess>,
}

impl Admission {
    /// CPU seconds used so far by the host and by the controller (0 without one).
    fn cpu_seconds(&self) -> Result<(f64, f64)> {
        let controller = match &self.controller {
            Some(c) => cpu_seconds(c.pid())?,
            None => 0.0,
        };
        Ok((cpu_seconds(self.host.pid())?, controller))
    }
}

/// What the webhook side of a series is.
enum Running {
    Nothing,
    Noop(noop::Noop),
    Host(Admission),
    Kruise(workloadspread_testkit::kruise::KruiseManager),
}

fn dynamic_api(
    client: &Client,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Creates the Fleet (a workload no controller acts on) and, if `spread`, its
/// WorkloadSpread; returns the Fleet's uid, which the pods name as their owner.
async fn create_workload(ns: &TestNamespace, spread: bool) -> Result<String> {
    let client = ns.client();
    kruise::ours(&client).await?;
    let uid = create_fleet(ns).await?;
    if !spread {
        return Ok(uid);
    }
    let spread: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": "bench"},
        "spec": {"targetRef": {"apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet", "name": "fleet"},
            "subsets": [{"name": "a", "maxReplicas": pods_per_series() / 3}, {"name": "b", "maxReplicas": pods_per_series() / 3}, {"name": "c"}]}}))?;
    dynamic_api(
        &client,
        ns.name(),
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    )
    .create(&PostParams::default(), &spread)
    .await?;
    Ok(uid)
}

/// Creates the Fleet; returns its uid.
async fn create_fleet(ns: &TestNamespace) -> Result<String> {
    let client = ns.client();
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "burst.workloadspread.test/v1", "kind": "Fleet",
        "metadata": {"name": "fleet"}, "spec": {"replicas": pods_per_series()}}))?;
    let fleet = dynamic_api(
        &client,
        ns.name(),
        "burst.workloadspread.test",
        "v1",
        "Fleet",
    )
    .create(&PostParams::default(), &fleet)
    .await?;
    fleet.metadata.uid.context("the Fleet has no uid")
}

async fn start_admission(policy: &Path, ns: &TestNamespace, webhook: Webhook) -> Result<Admission> {
    let (window_ms, max_batch, reserve_max, evaluate) = match webhook {
        Webhook::Batching {
            window_ms,
            max_batch,
            reserve_max,
        } => (window_ms, max_batch, reserve_max, false),
        Webhook::Unrelated { evaluate } => (0, 512, 32, evaluate),
        Webhook::HostAndController => (0, 512, 32, false),
        Webhook::None
        | Webhook::NoneScheduled
        | Webhook::Noop
        | Webhook::NoopPatch
        | Webhook::Kruise { .. } => {
            anyhow::bail!("not a host row")
        }
    };
    let port = free_port()?;
    let name = unique_name("ws-bench");
    let configs =
        WebhookConfigs::create(&ns.client(), &name, &format!("https://127.0.0.1:{port}")).await?;
    let args = [
        "--policy".into(),
        policy.display().to_string(),
        "--settings-json".into(),
        bundled_fleet_settings().to_string(),
        "--batch-window-ms".into(),
        window_ms.to_string(),
        "--max-batch".into(),
        max_batch.to_string(),
        "--reserve-max".into(),
        reserve_max.to_string(),
        "--webhook-config".into(),
        name,
    ];
    let mut args = args.to_vec();
    if evaluate {
        args.push("--evaluate-unrelated".into());
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_workloadspread-host"));
    let host = HostProcess::start_on(bin, cluster()?.kubeconfig(), port, &args).await?;
    configs.enroll(ns.name()).await?;
    let controller = match webhook {
        Webhook::HostAndController => Some(start_controller(ns.name()).await?),
        _ => None,
    };
    // The WorkloadSpread was created before the host: ready means its cache holds it.
    Ok(Admission {
        configs,
        host,
        controller,
    })
}

/// The release controller `make bench` builds beside the bench's host binary.
fn controller_bin() -> Result<std::path::PathBuf> {
    let host = Path::new(env!("CARGO_BIN_EXE_workloadspread-host"));
    let bin = host.with_file_name("workloadspread-controller");
    anyhow::ensure!(
        bin.exists(),
        "{} is missing (cargo build --release -p workloadspread-controller)",
        bin.display()
    );
    Ok(bin)
}

/// The controller with its defaults for namespace `ns`, knowing the Fleet kind.
async fn start_controller(ns: &str) -> Result<ControllerProcess> {
    let custom = std::env::temp_dir().join(format!("{}.yaml", unique_name("fleet-kind")));
    std::fs::write(
        &custom,
        "- group: burst.workloadspread.test\n  kind: Fleet\n  replicasPath: spec.replicas\n",
    )?;
    let args = [
        "--namespace".to_string(),
        ns.to_string(),
        "--custom-workloads".into(),
        custom.display().to_string(),
    ];
    ControllerProcess::start(&controller_bin()?, cluster()?.kubeconfig(), &args).await
}

/// A KWOK node to bind the bench's pods to.
async fn bench_node(client: &Client) -> Result<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default().limit(1)).await?;
    list.items
        .into_iter()
        .find_map(|n| n.metadata.name)
        .context("the cluster has no node")
}

/// A bench pod: bound to `node` and frozen (scheduler and KWOK leave it alone), or
/// left to them when `node` is `None`.
fn bench_pod(name: &str, uid: &str, node: Option<&str>) -> Pod {
    let mut pod = fleet_pod(name, uid);
    if let Some(node) = node {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(KWOK_FROZEN_LABEL.into(), "bench".into());
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_string());
        }
    }
    pod
}

pub(crate) async fn apiserver_metrics(client: &Client) -> Result<String> {
    let request = Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

/// Creates the pods `concurrency` at a time; returns each CREATE's latency, the pods
/// as the API server stored them (after admission), and the wall time of the whole
/// series. Any rejected pod fails the row.
async fn create_pods(
    pods: &Api<Pod>,
    uid: &str,
    node: Option<&str>,
    concurrency: usize,
) -> Result<(Vec<Duration>, Vec<Pod>, Duration)> {
    let started = Instant::now();
    let results: Vec<Result<(Duration, Pod)>> = futures::stream::iter(0..pods_per_series())
        .map(|i| {
            let (pods, pod) = (pods.clone(), bench_pod(&format!("fleet-{i}"), uid, node));
            async move {
                let sent = Instant::now();
                let created = pods
                    .create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating pod fleet-{i}"))?;
                Ok((sent.elapsed(), created))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let (latencies, created) = results.into_iter().collect::<Result<(Vec<_>, Vec<_>)>>()?;
    Ok((latencies, created, elapsed))
}

/// Removes the row's pods at once (no kubelet would confirm a graceful delete) so
/// they do not load the API server and scheduler during the next row.
async fn remove_pods(pods: &Api<Pod>) -> Result<()> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete_collection(&now, &ListParams::default()).await?;
    wait_for(
        "the bench pods to be gone",
        Duration::from_secs(120),
        || async {
            Ok(pods
                .list(&ListParams::default().limit(1))
                .await?
                .items
                .is_empty()
                .then_some(()))
        },
    )
    .await
}

async fn webhook_figures(
    admission: &Admission,
    apiserver_before: HistogramReading,
    client: &Client,
) -> Result<WebhookFigures> {
    let apiserver = apiserver_metrics(client).await?;
    let host = admission.host.get("/metrics").await?;
    let calls =
        HistogramReading::from_text(&apiserver, APISERVER_WEBHOOK_SECONDS, MUTATING_WEBHOOK);
    let evaluations =
        HistogramReading::from_text(&host, HOST_EVALUATION_SECONDS, "endpoint=\"Mutate\"");
    // A renamed metric or label would otherwise print as a plausible 0.0 ms.
    let observed = [calls.count - apiserver_before.count, evaluations.count];
    anyhow::ensure!(
        observed.iter().all(|&n| n >= pods_per_series() as f64),
        "expected {} webhook calls in the API server's and the host's histograms, saw {observed:?}",
        pods_per_series()
    );
    Ok(WebhookFigures {
        call_mean: calls.mean_since(apiserver_before),
        evaluation_mean: Some(evaluations.mean_since(HistogramReading::default())),
        spec_reads: Some(HistogramReading::from_text(
            &host,
            HOST_SPEC_READ_SECONDS,
            "",
        )),
        status_writes: sum_metric(&host, "workloadspread_host_counter_status_writes_total"),
        conflicts: sum_metric(&host, "workloadspread_host_counter_conflicts_total"),
    })
}

/// Starts what answers the series' pods (OpenKruise: [`kruise::start`]).
async fn start_webhook(policy: &Path, ns: &TestNamespace, webhook: Webhook) -> Result<Running> {
    Ok(match webhook {
        Webhook::None | Webhook::NoneScheduled => Running::Nothing,
        Webhook::Noop | Webhook::NoopPatch => {
            let answer = match webhook {
                Webhook::NoopPatch => noop::Answer::OurPatch,
                _ => noop::Answer::Empty,
            };
            let noop = noop::Noop::start(&ns.client(), answer).await?;
            noop.enroll(ns.name()).await?;
            Running::Noop(noop)
        }
        w => Running::Host(start_admission(policy, ns, w).await?),
    })
}

async fn measure(policy: &Path, webhook: Webhook, concurrency: usize) -> Result<Row> {
    let ns = cluster()?.namespace("bench-admission").await?;
    let client = ns.client();
    let spread = !matches!(webhook, Webhook::Unrelated { .. });
    let (uid, running) = match webhook {
        Webhook::Kruise { lifted } => {
            let (uid, manager) = kruise::start(&ns, lifted).await?;
            (uid, Running::Kruise(manager))
        }
        w => {
            let uid = create_workload(&ns, spread).await?;
            (uid, start_webhook(policy, &ns, w).await?)
        }
    };
    let node = match webhook {
        Webhook::NoneScheduled => None,
        _ => Some(bench_node(&client).await?),
    };
    let metrics = apiserver_metrics(&client).await?;
    let apiserver_before =
        HistogramReading::from_text(&metrics, APISERVER_WEBHOOK_SECONDS, MUTATING_WEBHOOK);
    let apiserver_before_text = metrics.clone();
    let writes_before = Writes::from_metrics(&metrics);
    let apiserver_cpu_before = sum_metric(&metrics, APISERVER_CPU_SECONDS);
    let ours_before = our_cpu(&running)?;
    let machine_before = machine_busy_seconds()?;
    let pods: Api<Pod> = ns.api();
    let profiled: Vec<(&str, u32)> = match &running {
        Running::Host(a) => std::iter::once(("host", a.host.pid()))
            .chain(a.controller.as_ref().map(|c| ("controller", c.pid())))
            .collect(),
        Running::Kruise(m) => vec![("kruise-manager", m.pid())],
        Running::Nothing | Running::Noop(_) => Vec::new(),
    };
    let profile = profile::during_series(&client, webhook.label(), concurrency, &profiled)?;
    let (latencies, admitted, elapsed) =
        create_pods(&pods, &uid, node.as_deref(), concurrency).await?;
    let ours_after = our_cpu(&running)?;
    let machine = machine_busy_seconds()? - machine_before;
    // After the readings: a profile that outlasts the series does not count its idle end.
    profile.finish().await?;
    let metrics = apiserver_metrics(&client).await?;
    let writes = Writes::from_metrics(&metrics).since(&writes_before);
    let apiserver_cpu = sum_metric(&metrics, APISERVER_CPU_SECONDS) - apiserver_cpu_before;
    anyhow::ensure!(
        apiserver_cpu > 0.0,
        "the API server's {APISERVER_CPU_SECONDS} did not grow during the series"
    );
    let cpu = CpuPerPod {
        apiserver: per_pod(apiserver_cpu),
        ours: ours_before
            .zip(ours_after)
            .map(|(before, after)| per_pod(after - before)),
        machine: per_pod(machine),
        busy_cores: machine / elapsed.as_secs_f64(),
    };
    let mut injected = None;
    let figures = match running {
        Running::Host(admission) => {
            if webhook == Webhook::HostAndController {
                injected = Some(noop::check_same_injection(&admitted, |name| {
                    bench_pod(name, &uid, node.as_deref())
                })?);
            }
            let figures = webhook_figures(&admission, apiserver_before, &client).await?;
            admission.configs.delete().await?;
            drop(admission.controller);
            Some(figures)
        }
        Running::Noop(noop) => {
            anyhow::ensure!(
                noop.calls() >= pods_per_series() as u64,
                "the no-op webhook answered {} calls for {} pods",
                noop.calls(),
                pods_per_series()
            );
            noop.stop().await?;
            None
        }
        Running::Kruise(manager) => {
            let figures = kruise::figures(&client, &apiserver_before_text).await;
            manager.stop().await?;
            Some(figures?)
        }
        Running::Nothing => None,
    };
    remove_pods(&pods).await?;
    Ok(Row {
        webhook,
        concurrency,
        per_second: pods_per_series() as f64 / elapsed.as_secs_f64(),
        create: Percentiles::of(latencies),
        figures,
        writes_per_pod: writes.beyond_creates() / pods_per_series() as f64,
        cpu,
        injected,
    })
}

/// Rounds of the repeated concurrency-1 series.
const ROUNDS: usize = 5;

/// The concurrency-1 series the goals compare, run `ROUNDS` times interleaved (none,
/// matched, unrelated, none, ...) so drift of the machine falls on all of them alike;
/// the median p50 of each.
async fn repeated_at_1(policy: &Path, focus: Focus) -> Result<Vec<(Webhook, Duration)>> {
    let webhooks: Vec<Webhook> = [
        Webhook::None,
        Webhook::Noop,
        Webhook::NoopPatch,
        Webhook::HostAndController,
        RESERVED,
        Webhook::Unrelated { evaluate: false },
        Webhook::Kruise { lifted: false },
        Webhook::Kruise { lifted: true },
    ]
    .into_iter()
    .filter(|w| focus.includes(*w))
    .collect();
    let mut p50s: Vec<Vec<Duration>> = vec![vec![]; webhooks.len()];
    for _ in 0..ROUNDS {
        for (w, series) in webhooks.iter().zip(p50s.iter_mut()) {
            series.push(measure(policy, *w, 1).await?.create.p50);
        }
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let medians: Vec<(Webhook, Duration)> = webhooks
        .into_iter()
        .zip(p50s.into_iter().map(median))
        .collect();
    let shown: Vec<String> = medians
        .iter()
        .map(|(w, d)| format!("{} {}", w.label(), ms(*d)))
        .collect();
    println!();
    println!(
        "* Concurrency 1, median p50 of {ROUNDS} interleaved series: {}.",
        shown.join("; ")
    );
    Ok(medians)
}

#[tokio::main]
async fn main() -> Result<()> {
    read_pods_per_series()?;
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let client = cluster()?.client().await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    // Ours, also where an interrupted run left OpenKruise's.
    workloadspread_testkit::kruise::ensure_workloadspread_crd(
        &client,
        &serde_json::to_value(&crd)?,
    )
    .await?;
    apply_crd(&client, &fleet_crd()).await?;
    let scope = Scope::from_env()?;
    let with_kruise = kruise::read_build()?;
    anyhow::ensure!(
        with_kruise || scope != Scope::OpenKruise,
        "WS_BENCH_FOCUS=openkruise needs WS_KRUISE_MANAGER and WS_KRUISE_MANIFESTS (e2e/kruise/kruise.sh build|manifests)"
    );
    let focus = Focus {
        scope,
        kruise: with_kruise,
    };
    if scope == Scope::Sequence {
        return sequence::run(&policy, focus.kruise).await;
    }
    if scope == Scope::ScaleIn {
        return scale_in::run(&policy).await;
    }
    // A fresh API server and etcd are slower for their first few hundred writes: a
    // series nobody records, so the first row (no webhook) is not the slowest by accident.
    for &concurrency in focus.concurrency() {
        measure(&policy, Webhook::None, concurrency).await?;
    }
    println!(
        "| webhook | concurrency | pods/s | CREATE p50 | CREATE p99 | webhook call (mean) | evaluation (mean) | host status writes | conflicts | API writes per pod beyond its create | API server CPU per pod | host + controller CPU per pod | machine CPU per pod (cores busy) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let all = [
        Webhook::None,
        Webhook::NoneScheduled,
        Webhook::Noop,
        Webhook::NoopPatch,
        Webhook::HostAndController,
        RESERVED,
        GROUP_COMMIT,
        ONE_WRITE_PER_CLAIM,
        Webhook::Unrelated { evaluate: false },
        Webhook::Unrelated { evaluate: true },
        Webhook::Kruise { lifted: false },
        Webhook::Kruise { lifted: true },
    ];
    let webhooks: Vec<Webhook> = all.into_iter().filter(|w| focus.includes(*w)).collect();
    for &webhook in &webhooks {
        for &concurrency in focus.concurrency() {
            let row = measure(&policy, webhook, concurrency).await?;
            print_row(&row);
            rows.push(row);
        }
    }
    let repeated = repeated_at_1(&policy, focus).await?;
    print_summary(&rows, &repeated);
    kruise::print_summary(&rows, &repeated, focus.kruise);
    if focus.scope != Scope::WholeSystem {
        sequence::run(&policy, focus.kruise).await?;
    }
    if focus.scope != Scope::OpenKruise {
        scale_out::run(&policy).await?;
    }
    if focus.scope == Scope::All {
        scale_in::run(&policy).await?;
    }
    Ok(())
}

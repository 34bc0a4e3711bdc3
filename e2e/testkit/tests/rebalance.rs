//! Issue #27 on the local control plane: rebalancing (opt-in) converges a spread that
//! admission could not keep — a best-effort burst's overshoot, an Adaptive subset
//! schedulable again, a lowered maximum — through the Eviction API, a
//! PodDisruptionBudget holding at every observed moment; without the annotation the
//! same situations are left alone. Each test runs an annotated workload (`web`) and an
//! unannotated twin (`twin`) side by side under one controller: the twin had every
//! chance the other had to be rebalanced, and must not be.
//!
//! And the "done when": best-effort admission (the stand-in for Kubewarden's
//! policy-server: no counter capability, parallel evaluations on the host's caches)
//! with rebalancing lands on the planner's spread at every step of
//! 0 → 10 → 4 → 12 → 20 → 7 → 15.

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::api::REBALANCE_ANNOTATION;
use workloadspread_core::rules::planned_spread;
use workloadspread_testkit::convergence::{SpreadWatch, StepLimits};
use workloadspread_testkit::measure::sum_metric_with;
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

const ZONE: &str = "topology.kubernetes.io/zone";
/// Bound of every convergence wait (a loaded 2-core machine).
const CONVERGE: Duration = Duration::from_secs(240);
const EVICTIONS: &str = "workloadspread_controller_rebalance_evictions_total";

fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

fn zone(name: &str, zone: &str, max: Value) -> Value {
    let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
        {"key": ZONE, "operator": "In", "values": [zone]}]}});
    if !max.is_null() {
        s["maxReplicas"] = max;
    }
    s
}

fn target(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name})
}

/// WorkloadSpread `name` over Deployment `name`, annotated for rebalancing when `on`.
async fn create_ws(
    stack: &Stack,
    name: &str,
    spec: &Value,
    on: bool,
) -> Result<Api<DynamicObject>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(stack.ns.client(), stack.ns.name(), &ws_resource());
    let mut spec = spec.clone();
    spec["targetRef"] = target(name);
    let mut object = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": name}, "spec": spec});
    if on {
        object["metadata"]["annotations"] = json!({REBALANCE_ANNOTATION: "true"});
    }
    api.create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), name, &target(name))
        .await?;
    Ok(api)
}

async fn create_deployment(ns: &TestNamespace, name: &str, replicas: i32) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}],
                    "terminationGracePeriodSeconds": 0}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

async fn scale(ns: &TestNamespace, name: &str, replicas: i32) -> Result<()> {
    let patch = json!({"spec": {"replicas": replicas}});
    ns.api::<Deployment>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The spread `planned_spread` gives `spec` at `replicas`, as counts by subset name
/// ("" = outside every subset), zeros left out.
fn plan(spec: &Value, replicas: usize) -> Result<BTreeMap<String, usize>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let spread = planned_spread(&ws, replicas);
    let mut out: BTreeMap<String, usize> = ws
        .spec
        .subsets
        .iter()
        .zip(spread.subsets)
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.name.clone(), n))
        .collect();
    if spread.unplaced > 0 {
        out.insert(String::new(), spread.unplaced);
    }
    Ok(out)
}

/// The bounded subsets' maxima at `replicas`.
fn maxima(spec: &Value, replicas: usize) -> Result<BTreeMap<String, usize>> {
    let ws: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let total = i32::try_from(replicas)?;
    Ok(ws
        .spec
        .subsets
        .iter()
        .filter_map(|s| {
            let m = s.max_replicas.as_ref()?;
            let v = workloadspread_core::percent::scaled_value(m, total).ok()?;
            Some((s.name.clone(), usize::try_from(v).ok()?))
        })
        .collect())
}

/// "a / b / c" of `counts` in the order of `names` (plus "/ n unplaced" when any).
fn shape(counts: &BTreeMap<String, usize>, names: &[&str]) -> String {
    let mut out = names
        .iter()
        .map(|n| counts.get(*n).copied().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join("/");
    if let Some(n) = counts.get("").filter(|n| **n > 0) {
        out.push_str(&format!(" +{n} unplaced"));
    }
    out
}

/// Live pods of app `name` (not being deleted), by name.
async fn pod_names(ns: &TestNamespace, name: &str) -> Result<BTreeSet<String>> {
    let lp = ListParams::default().labels(&format!("app={name}"));
    Ok(ns
        .api::<Pod>()
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Whether the status of `name` counts exactly `want` per subset, with no admission or
/// deletion in flight.
async fn status_is(
    api: &Api<DynamicObject>,
    name: &str,
    want: &BTreeMap<String, usize>,
) -> Result<bool> {
    let status = api.get(name).await?.data["status"].clone();
    let subsets = status["subsetStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let empty = |v: &Value| v.as_object().is_none_or(|o| o.is_empty());
    Ok(!subsets.is_empty()
        && subsets.iter().all(|s| {
            let n = want
                .get(s["name"].as_str().unwrap_or_default())
                .copied()
                .unwrap_or(0);
            s["replicas"].as_i64() == Some(n as i64)
                && empty(&s["creatingPods"])
                && empty(&s["deletingPods"])
        }))
}

/// Waits until the watch shows `want` with every pod healthy and the status agrees.
async fn converged(
    watch: &SpreadWatch,
    api: &Api<DynamicObject>,
    name: &str,
    want: &BTreeMap<String, usize>,
    stack: &Stack,
) -> Result<Duration> {
    let started = Instant::now();
    wait_for(&format!("{name} on {want:?}"), CONVERGE, || async {
        let on = watch.counts() == *want && status_is(api, name, want).await?;
        Ok(on.then_some(()))
    })
    .await
    .with_context(|| {
        format!(
            "{name}: pods per subset {:?}; controller log:\n{}",
            watch.counts(),
            tail(&stack.controller.log_text(), 40)
        )
    })?;
    Ok(started.elapsed())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Rebalancing evictions the controller made (and refused ones).
async fn evictions(stack: &Stack) -> Result<(u64, u64)> {
    let text = stack.controller.get("/metrics").await?;
    let count = |result: &str| {
        sum_metric_with(&text, EVICTIONS, &format!("result=\"{result}\"")).max(0.0) as u64
    };
    Ok((count("evicted"), count("refused")))
}

/// Events with `reason` recorded on WorkloadSpread `name`.
async fn events(ns: &TestNamespace, name: &str, reason: &str) -> Result<usize> {
    let list = ns.api::<Event>().list(&ListParams::default()).await?.items;
    Ok(list
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count())
}

/// The twin was left alone: the same pods as when it settled, still where they were,
/// and no rebalancing event.
async fn left_alone(
    stack: &Stack,
    settled: &BTreeSet<String>,
    watch: &SpreadWatch,
    spread: &BTreeMap<String, usize>,
) -> Result<()> {
    let now = pod_names(&stack.ns, "twin").await?;
    ensure!(
        now == *settled,
        "the unannotated twin's pods changed: {:?} gone, {:?} new",
        settled.difference(&now).collect::<Vec<_>>(),
        now.difference(settled).collect::<Vec<_>>()
    );
    ensure!(
        watch.counts() == *spread,
        "twin moved: {:?} vs {spread:?}",
        watch.counts()
    );
    let evicted = events(&stack.ns, "twin", "RebalanceEvicted").await?;
    ensure!(evicted == 0, "{evicted} rebalancing events on the twin");
    Ok(())
}

fn controller_args(max_evictions: usize, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--rebalance-max-evictions".to_string(),
        max_evictions.to_string(),
        "--rebalance-interval-seconds".into(),
        "1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A best-effort burst 0 → 60 over a = 10 / b = 10 / c = rest overshoots; rebalancing
/// brings every subset to plan, a PodDisruptionBudget never violated: first it allows no
/// disruption (every eviction is refused, retried each interval, nothing moves), then one
/// at a time (three evictions allowed per second by the controller; at every observed
/// moment at least 59 of the 60 pods are healthy). The guest runs the reference rules
/// here: first fit, so the burst overshoots for sure (the planned rules' spread choice
/// often lands a burst of 60 on the plan).
#[tokio::test]
async fn best_effort_burst_is_rebalanced_within_a_disruption_budget() -> Result<()> {
    let settings = json!({"mode": "best-effort", "rules": "reference"}).to_string();
    let args = controller_args(3, &["--rules", "reference"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(stack) =
        Stack::start_with("rebal-burst", &["--settings-json", &settings], &args).await?
    else {
        return Ok(());
    };
    let spec = json!({"subsets": [zone("a", "zone-a", json!(10)), zone("b", "zone-b", json!(10)),
        zone("c", "zone-c", Value::Null)]});
    let web = create_ws(&stack, "web", &spec, true).await?;
    let twin = create_ws(&stack, "twin", &spec, false).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}))?;
    let pdbs = stack.ns.api::<PodDisruptionBudget>();
    pdbs.create(&PostParams::default(), &pdb).await?;
    for name in ["web", "twin"] {
        create_deployment(&stack.ns, name, 0).await?;
    }
    let watch = SpreadWatch::start(&stack.ns, "app=web").await?;
    let twin_watch = SpreadWatch::start(&stack.ns, "app=twin").await?;
    let limits = StepLimits {
        replicas: 60,
        max: maxima(&spec, 60)?,
        max_unavailable: Some(1),
    };
    watch.begin_step(limits.clone());
    twin_watch.begin_step(StepLimits {
        max_unavailable: None,
        ..limits
    });
    let want = plan(&spec, 60)?;
    let started = Instant::now();
    for name in ["web", "twin"] {
        scale(&stack.ns, name, 60).await?;
    }
    // The budget allows nothing: the evictions are refused, retried, and nothing moves.
    let landed = wait_for("web landed and an eviction refused", CONVERGE, || async {
        let (_, refused) = evictions(&stack).await?;
        Ok(watch.landed().filter(|_| refused >= 2))
    })
    .await
    .with_context(|| tail(&stack.controller.log_text(), 40))?;
    let (evicted, refused_first) = evictions(&stack).await?;
    ensure!(
        evicted == 0,
        "{evicted} evictions while the budget allowed none"
    );
    ensure!(
        watch.counts() == landed && watch.lowest_healthy() == Some(60),
        "pods moved while the budget allowed no disruption: {:?}, fewest healthy {:?}",
        watch.counts(),
        watch.lowest_healthy()
    );
    // The twin: settled (60 healthy pods, status exact) before web may move a pod.
    let twin_landed = wait_for("twin settled", CONVERGE, || async {
        let counts = twin_watch.counts();
        let ok = twin_watch.landed().is_some() && status_is(&twin, "twin", &counts).await?;
        Ok(ok.then_some(counts))
    })
    .await?;
    let twin_pods = pod_names(&stack.ns, "twin").await?;
    let patch = json!({"spec": {"maxUnavailable": 1}});
    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let took = converged(&watch, &web, "web", &want, &stack).await?;
    let surplus: usize = landed
        .iter()
        .map(|(s, &n)| n.saturating_sub(want.get(s).copied().unwrap_or(0)))
        .sum();
    let (evicted, refused) = evictions(&stack).await?;
    let (breaches, moments) = watch.breaches();
    ensure!(breaches.is_empty(), "the budget was broken: {breaches:?}");
    ensure!(
        surplus > 0,
        "the burst landed on the plan: {landed:?} (nothing to rebalance)"
    );
    ensure!(
        evicted as usize == surplus,
        "{evicted} evictions for a surplus of {surplus} ({landed:?})"
    );
    left_alone(&stack, &twin_pods, &twin_watch, &twin_landed).await?;
    let names = ["a", "b", "c"];
    eprintln!(
        "rebalance burst 0 → 60 (a=10/b=10/c=rest, best effort, first fit): landed {}, plan {}; \
         {evicted} evictions ({refused_first} refused while the budget allowed none, {refused} \
         in all), on plan {:.1} s after the scale ({:.1} s once the budget allowed one); fewest \
         healthy pods {:?} of 60 (budget: 59) over {moments} observed moments; twin landed {} \
         and was left alone",
        shape(&landed, &names),
        shape(&want, &names),
        started.elapsed().as_secs_f64(),
        took.as_secs_f64(),
        watch.lowest_healthy(),
        shape(&twin_landed, &names),
    );
    stack.finish().await
}

/// Labels every zone-a node with `key=open` on creation, removes it on drop: zone-a
/// becomes schedulable for subsets requiring that label, for this test only.
struct OpenZone {
    key: String,
    nodes: Vec<String>,
}

impl OpenZone {
    async fn open(key: &str) -> Result<Self> {
        let client = cluster()?.client().await?;
        let api: Api<Node> = Api::all(client);
        let lp = ListParams::default().labels(&format!("{ZONE}=zone-a"));
        let nodes: Vec<String> = api
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        ensure!(!nodes.is_empty(), "no zone-a node");
        for n in &nodes {
            let patch = json!({"metadata": {"labels": {key: "open"}}});
            api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(OpenZone {
            key: key.to_string(),
            nodes,
        })
    }
}

impl Drop for OpenZone {
    fn drop(&mut self) {
        let (key, nodes) = (self.key.clone(), std::mem::take(&mut self.nodes));
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let (Ok(rt), Ok(c)) = (rt, cluster()) {
                rt.block_on(async {
                    if let Ok(client) = c.client().await {
                        let api: Api<Node> = Api::all(client);
                        for n in nodes {
                            let patch = json!({"metadata": {"labels": {key.as_str(): null}}});
                            let _ = api
                                .patch(&n, &PatchParams::default(), &Patch::Merge(&patch))
                                .await;
                        }
                    }
                });
            }
        })
        .join();
    }
}

/// Adaptive: subset a's nodes are closed (its pods stay Pending), so its pods are
/// rescheduled into b; once a's nodes open and its hold expires, rebalancing moves
/// them back; the twin keeps them in b.
#[tokio::test]
async fn adaptive_subset_schedulable_again_gets_its_pods_back() -> Result<()> {
    let args = controller_args(3, &["--reschedule-hold-seconds", "8"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(stack) = Stack::start_with("rebal-adaptive", &[], &args).await? else {
        return Ok(());
    };
    let key = format!("rebalance.workloadspread.test/{}", stack.ns.name());
    let mut a = zone("a", "zone-a", json!(3));
    a["requiredNodeSelector"]["matchExpressions"]
        .as_array_mut()
        .context("expressions")?
        .push(json!({"key": key, "operator": "In", "values": ["open"]}));
    let spec = json!({"scheduleStrategy": {"type": "Adaptive",
            "adaptive": {"rescheduleCriticalSeconds": 2}},
        "subsets": [a, zone("b", "zone-b", Value::Null)]});
    let web = create_ws(&stack, "web", &spec, true).await?;
    let twin = create_ws(&stack, "twin", &spec, false).await?;
    let watch = SpreadWatch::start(&stack.ns, "app=web").await?;
    let twin_watch = SpreadWatch::start(&stack.ns, "app=twin").await?;
    for name in ["web", "twin"] {
        create_deployment(&stack.ns, name, 6).await?;
    }
    let all_in_b: BTreeMap<String, usize> = [("b".to_string(), 6)].into();
    let moved = converged(&watch, &web, "web", &all_in_b, &stack).await?;
    converged(&twin_watch, &twin, "twin", &all_in_b, &stack).await?;
    let twin_pods = pod_names(&stack.ns, "twin").await?;
    let (before, _) = evictions(&stack).await?;
    ensure!(before == 0, "{before} evictions while a was unschedulable");
    let _open = OpenZone::open(&key).await?;
    let back: BTreeMap<String, usize> = [("a".to_string(), 3), ("b".to_string(), 3)].into();
    watch.begin_step(StepLimits {
        replicas: 6,
        max: maxima(&spec, 6)?,
        max_unavailable: None,
    });
    let took = converged(&watch, &web, "web", &back, &stack).await?;
    let (evicted, refused) = evictions(&stack).await?;
    ensure!(evicted == 3, "{evicted} evictions to move 3 pods back");
    // The twin's subset a is schedulable again too (the same hold): nothing moved.
    wait_for("twin's subset a schedulable again", CONVERGE, || async {
        let status = twin.get("twin").await?.data["status"].clone();
        let schedulable = status["subsetStatuses"][0]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Schedulable" && c["status"] == "True");
        Ok(schedulable.then_some(()))
    })
    .await?;
    left_alone(&stack, &twin_pods, &twin_watch, &all_in_b).await?;
    eprintln!(
        "rebalance adaptive: a closed → 0/6 in {:.1} s; a opened → 3/3 in {:.1} s (the \
         subset's hold is 8 s); {evicted} evictions, {refused} refused; twin left at 0/6",
        moved.as_secs_f64(),
        took.as_secs_f64(),
    );
    stack.finish().await
}

/// A maximum lowered 50 % → 30 % at 10 replicas: the surplus (2 pods) moves from a to
/// b; the twin keeps 5/5.
#[tokio::test]
async fn lowered_maximum_moves_the_surplus() -> Result<()> {
    let args = controller_args(3, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(stack) = Stack::start_with("rebal-max", &[], &args).await? else {
        return Ok(());
    };
    let spec =
        json!({"subsets": [zone("a", "zone-a", json!("50%")), zone("b", "zone-b", Value::Null)]});
    let web = create_ws(&stack, "web", &spec, true).await?;
    let twin = create_ws(&stack, "twin", &spec, false).await?;
    let watch = SpreadWatch::start(&stack.ns, "app=web").await?;
    let twin_watch = SpreadWatch::start(&stack.ns, "app=twin").await?;
    for name in ["web", "twin"] {
        create_deployment(&stack.ns, name, 10).await?;
    }
    let even = plan(&spec, 10)?;
    ensure!(
        even == BTreeMap::from([("a".into(), 5), ("b".into(), 5)]),
        "{even:?}"
    );
    converged(&watch, &web, "web", &even, &stack).await?;
    converged(&twin_watch, &twin, "twin", &even, &stack).await?;
    let twin_pods = pod_names(&stack.ns, "twin").await?;
    let lowered =
        json!({"subsets": [zone("a", "zone-a", json!("30%")), zone("b", "zone-b", Value::Null)]});
    let want = plan(&lowered, 10)?;
    for (api, name) in [(&web, "web"), (&twin, "twin")] {
        let patch = json!({"spec": {"subsets": lowered["subsets"]}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let took = converged(&watch, &web, "web", &want, &stack).await?;
    let (evicted, refused) = evictions(&stack).await?;
    ensure!(evicted == 2, "{evicted} evictions to move 2 pods");
    // The twin's status follows the edit (a over its new maximum) before it is judged.
    wait_for("twin's status for the new maximum", CONVERGE, || async {
        let status = twin.get("twin").await?.data["status"].clone();
        Ok((status["observedGeneration"].as_i64() == Some(2)
            && status_is(&twin, "twin", &even).await?)
            .then_some(()))
    })
    .await?;
    left_alone(&stack, &twin_pods, &twin_watch, &even).await?;
    eprintln!(
        "rebalance max 50% → 30%: 5/5 → {} in {:.1} s ({evicted} evictions, {refused} refused); \
         twin left at 5/5 (a over its maximum by 2)",
        shape(&want, &["a", "b"]),
        took.as_secs_f64(),
    );
    stack.finish().await
}

/// The steps of issue #27's table.
const SEQUENCE: [usize; 6] = [10, 4, 12, 20, 7, 15];

fn sequence_spec() -> Value {
    json!({"subsets": [zone("a", "zone-a", json!("30%")), zone("b", "zone-b", json!("50%")),
        zone("c", "zone-c", Value::Null)]})
}

/// One line of the step table.
struct StepReport {
    replicas: usize,
    plan: BTreeMap<String, usize>,
    landed: BTreeMap<String, usize>,
    peak: usize,
    settled: BTreeMap<String, usize>,
    took: Duration,
    evictions: u64,
}

impl std::fmt::Display for StepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = ["a", "b", "c"];
        write!(
            f,
            "| {:>3} | {} | {} | {} | {} | {:.1} s | {} |",
            self.replicas,
            shape(&self.plan, &names),
            shape(&self.landed, &names),
            self.peak,
            shape(&self.settled, &names),
            self.took.as_secs_f64(),
            self.evictions
        )
    }
}

/// Runs [`SEQUENCE`] on Deployment `web` (best-effort admission, planned rules): each
/// step starts once the previous one settled and at least 3 s after it started. With
/// `rebalance`, a step settles on the plan; without, once the status counts the pods
/// where they landed.
async fn run_sequence(hint: &str, rebalance: bool) -> Result<Option<Vec<StepReport>>> {
    let settings = json!({"mode": "best-effort"}).to_string();
    let args = controller_args(3, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller_args: &[&str] = if rebalance { &args } else { &[] };
    let Some(stack) =
        Stack::start_with(hint, &["--settings-json", &settings], controller_args).await?
    else {
        return Ok(None);
    };
    let spec = sequence_spec();
    let web = create_ws(&stack, "web", &spec, rebalance).await?;
    create_deployment(&stack.ns, "web", 0).await?;
    let watch = SpreadWatch::start(&stack.ns, "app=web").await?;
    let mut reports = vec![];
    let mut last_start: Option<Instant> = None;
    for replicas in SEQUENCE {
        if let Some(t) = last_start {
            let gap = Duration::from_secs(3).saturating_sub(t.elapsed());
            tokio::time::sleep(gap).await;
        }
        let want = plan(&spec, replicas)?;
        watch.begin_step(StepLimits {
            replicas,
            max: maxima(&spec, replicas)?,
            max_unavailable: None,
        });
        let (evicted_before, _) = evictions(&stack).await?;
        last_start = Some(Instant::now());
        scale(&stack.ns, "web", i32::try_from(replicas)?).await?;
        let took = if rebalance {
            converged(&watch, &web, "web", &want, &stack).await?
        } else {
            let started = Instant::now();
            wait_for(&format!("{replicas} pods counted"), CONVERGE, || async {
                let counts = watch.counts();
                let ok = watch.landed().is_some()
                    && counts.values().sum::<usize>() == replicas
                    && status_is(&web, "web", &counts).await?;
                Ok(ok.then_some(()))
            })
            .await?;
            started.elapsed()
        };
        let (evicted_after, _) = evictions(&stack).await?;
        reports.push(StepReport {
            replicas,
            plan: want,
            landed: watch.landed().unwrap_or_default(),
            peak: watch.step_peak().0,
            settled: watch.counts(),
            took,
            evictions: evicted_after - evicted_before,
        });
    }
    stack.finish().await?;
    Ok(Some(reports))
}

fn table(title: &str, reports: &[StepReport]) -> String {
    let mut out = format!(
        "{title}\n| replicas | plan | landed | peak overshoot | settled | time to settle | evictions |\n|---:|---|---|---:|---|---:|---:|\n"
    );
    for r in reports {
        out.push_str(&format!("{r}\n"));
    }
    out
}

/// Issue #27, done when: best-effort admission with rebalancing lands on the planner's
/// spread at every step of 0 → 10 → 4 → 12 → 20 → 7 → 15 (3 s apart at least).
#[tokio::test]
async fn best_effort_with_rebalancing_lands_on_the_plan_at_every_step() -> Result<()> {
    let Some(reports) = run_sequence("rebal-seq", true).await? else {
        return Ok(());
    };
    eprintln!(
        "{}",
        table(
            "best effort + rebalancing (0 → 10 → 4 → 12 → 20 → 7 → 15):",
            &reports
        )
    );
    for r in &reports {
        ensure!(r.settled == r.plan, "{r}");
    }
    Ok(())
}

/// The admission's own overshoot, without rebalancing (for the report: run with
/// `--ignored`, against the current binaries or, with `CARGO_TARGET_DIR` and
/// `WS_POLICY_WASM` pointing elsewhere, older ones). It requires only that each step's
/// status ends exact.
#[tokio::test]
#[ignore = "measurement for docs/operations.md; ~1 min"]
async fn measure_best_effort_overshoot_without_rebalancing() -> Result<()> {
    let Some(reports) = run_sequence("rebal-measure", false).await? else {
        return Ok(());
    };
    eprintln!(
        "{}",
        table(
            "best effort, no rebalancing (0 → 10 → 4 → 12 → 20 → 7 → 15):",
            &reports
        )
    );
    Ok(())
}

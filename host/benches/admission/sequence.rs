//! The scale sequence 0 → 10 → 4 → 12 → 20 → 7 → 15 of a Deployment spread over the
//! three zones of the local cluster (pods scheduled by kube-scheduler, run by KWOK, removed
//! by the ReplicaSet controller in deletion-cost order), for host + controller and for
//! OpenKruise v1.9.0 (defaults), each under two WorkloadSpreads: 30 % / 50 % / the rest,
//! and 3 / 4 / the rest. Each step waits until every pod runs and every placed pod carries
//! a deletion cost (what a scale-in needs to pick the right pods), then compares the
//! pods per subset with `core`'s planner (`plan::plan_with`, planned rules) for the step.

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::rules::Rules;
use workloadspread_testkit::api_writes::Writes;
use workloadspread_testkit::pods::{cost_of, counts, status_counts, subset_of};
use workloadspread_testkit::specs::alpha_spec;
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

const SEQUENCE: [i32; 6] = [10, 4, 12, 20, 7, 15];
/// How long one step may take to settle before it counts as off plan.
const SETTLE: Duration = Duration::from_secs(90);

/// The two spreads, as (label, maxReplicas of zone-a and zone-b).
fn spreads() -> [(&'static str, Value, Value); 2] {
    [
        ("30 % / 50 % / rest", json!("30%"), json!("50%")),
        ("3 / 4 / rest", json!(3), json!(4)),
    ]
}

/// The v1beta1 spec (ours; the planner's input) of a spread.
pub(super) fn spec(a: &Value, b: &Value) -> Value {
    let zone = |name: &str, max: &Value| {
        let mut s = json!({"name": name, "requiredNodeSelector": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [format!("zone-{name}")]}]}});
        if !max.is_null() {
            s["maxReplicas"] = max.clone();
        }
        s
    };
    json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "subsets": [zone("a", a), zone("b", b), zone("c", &Value::Null)]})
}

/// One system's result over both spreads.
struct Outcome {
    label: String,
    on_plan: usize,
    /// Settled steps with a subset above its (scaled) maximum.
    over_max: usize,
    steps: usize,
    settle: Vec<Duration>,
    off_plan: Vec<String>,
    status_writes: f64,
    conflicts: f64,
    writes_per_pod: f64,
}

/// Runs the sequence for host + controller and, when built, OpenKruise; prints the
/// lines for `docs/benchmarks.md`.
pub async fn run(policy: &Path, with_kruise: bool) -> Result<()> {
    let mut outcomes = vec![run_system(policy, super::Webhook::HostAndController).await?];
    if with_kruise {
        outcomes.push(run_system(policy, super::Webhook::Kruise { lifted: false }).await?);
    }
    println!();
    for o in &outcomes {
        let mean =
            o.settle.iter().map(Duration::as_secs_f64).sum::<f64>() / o.settle.len().max(1) as f64;
        let max = o.settle.iter().max().copied().unwrap_or_default();
        println!(
            "* Scale sequence 0 → 10 → 4 → 12 → 20 → 7 → 15 (a Deployment over three zones, spreads 30 % / 50 % / rest and 3 / 4 / rest), {}: on the planned spread at **{} of {}** steps, a subset above its maximum at {}; settled in {:.1} s mean, {:.1} s at most; {:.0} WorkloadSpread status writes ({:.0} conflicts), {:.2} API writes per pod created beyond its create{}.",
            o.label,
            o.on_plan,
            o.steps,
            o.over_max,
            mean,
            max.as_secs_f64(),
            o.status_writes,
            o.conflicts,
            o.writes_per_pod,
            if o.off_plan.is_empty() {
                String::new()
            } else {
                format!("; off plan: {}", o.off_plan.join("; "))
            }
        );
    }
    Ok(())
}

async fn run_system(policy: &Path, system: super::Webhook) -> Result<Outcome> {
    let mut outcome = Outcome {
        label: system.label(),
        on_plan: 0,
        over_max: 0,
        steps: 0,
        settle: vec![],
        off_plan: vec![],
        status_writes: 0.0,
        conflicts: 0.0,
        writes_per_pod: 0.0,
    };
    let mut created = 0.0;
    let mut beyond = 0.0;
    for (label, a, b) in spreads() {
        let ns = cluster()?.namespace("bench-sequence").await?;
        let client = ns.client();
        let beta = spec(&a, &b);
        // What answers the pods, then the spread, then the Deployment at 0.
        let running = match system {
            super::Webhook::Kruise { lifted } => {
                let manager = super::kruise::start_manager(lifted).await?;
                create_spread(&ns, "v1alpha1", alpha_spec(&beta)).await?;
                Running::Kruise(manager)
            }
            w => {
                super::kruise::ours(&client).await?;
                create_spread(&ns, "v1beta1", beta.clone()).await?;
                Running::Host(super::start_admission(policy, &ns, w).await?)
            }
        };
        create_deployment(&ns).await?;
        let typed: WorkloadSpread =
            serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": beta}))?;
        let planned = workloadspread_core::plan::plan_with(&typed, &SEQUENCE, None, Rules::Planned);
        let before_text = super::apiserver_metrics(&client).await?;
        let before = Writes::from_metrics(&before_text);
        let deployments: Api<Deployment> = ns.api();
        let version = match system {
            super::Webhook::Kruise { .. } => "v1alpha1",
            _ => "v1beta1",
        };
        let spreads = super::dynamic_api(
            &client,
            ns.name(),
            "apps.kruise.io",
            version,
            "WorkloadSpread",
        );
        for (step, &replicas) in planned.iter().zip(SEQUENCE.iter()) {
            let started = Instant::now();
            deployments
                .patch(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
            let settled = settled(&ns, &spreads, replicas as usize, SETTLE).await;
            outcome.steps += 1;
            let want: BTreeMap<String, usize> = step
                .subsets
                .iter()
                .filter(|s| s.pods > 0)
                .map(|s| (s.name.clone(), s.pods))
                .collect();
            match settled {
                Ok(pods) => {
                    outcome.settle.push(started.elapsed());
                    let got = counts(&pods);
                    let over = step.subsets.iter().any(|s| {
                        s.max_replicas.is_some_and(|max| {
                            got.get(&s.name).copied().unwrap_or(0)
                                > usize::try_from(max).unwrap_or(0)
                        })
                    });
                    outcome.over_max += usize::from(over);
                    if got == want {
                        outcome.on_plan += 1;
                    } else {
                        outcome
                            .off_plan
                            .push(format!("{label} at {replicas}: {got:?}, planned {want:?}"));
                    }
                }
                Err(e) => outcome.off_plan.push(format!(
                    "{label} at {replicas}: not settled in {} s ({e:#})",
                    SETTLE.as_secs()
                )),
            }
        }
        let after_text = super::apiserver_metrics(&client).await?;
        let writes = Writes::from_metrics(&after_text).since(&before);
        outcome.status_writes += writes.get("PUT", "workloadspreads", "status");
        outcome.conflicts += conflicts(&after_text) - conflicts(&before_text);
        created += writes.get("POST", "pods", "");
        beyond += writes.beyond_creates();
        match running {
            Running::Kruise(manager) => manager.stop().await?,
            Running::Host(admission) => admission.configs.delete().await?,
        }
    }
    outcome.writes_per_pod = beyond / created.max(1.0);
    Ok(outcome)
}

enum Running {
    Kruise(workloadspread_testkit::kruise::KruiseManager),
    Host(super::Admission),
}

/// 409s the API server answered to WorkloadSpread status writes so far.
fn conflicts(metrics: &str) -> f64 {
    workloadspread_testkit::api_writes::answered(metrics, "PUT", "workloadspreads", "status", "409")
}

pub(super) async fn create_spread(ns: &TestNamespace, version: &str, spec: Value) -> Result<()> {
    let spread: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("apps.kruise.io/{version}"), "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": spec}))?;
    super::dynamic_api(
        &ns.client(),
        ns.name(),
        "apps.kruise.io",
        version,
        "WorkloadSpread",
    )
    .create(&PostParams::default(), &spread)
    .await?;
    Ok(())
}

pub(super) async fn create_deployment(ns: &TestNamespace) -> Result<()> {
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}],
                    "terminationGracePeriodSeconds": 0}}}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

/// Waits until `total` live pods run, every placed one carries a deletion cost and the
/// WorkloadSpread's status counts them exactly with nothing in flight: the system has
/// caught up, as the scenario suite waits before its next step (a scale right after
/// pods vanished would otherwise meet counters that have not yet seen it).
pub(super) async fn settled(
    ns: &TestNamespace,
    spreads: &Api<DynamicObject>,
    total: usize,
    within: Duration,
) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = ns.api();
    wait_for(
        &format!("{total} running pods with deletion costs, counted by the status"),
        within,
        || {
            let pods = pods.clone();
            let spreads = spreads.clone();
            async move {
                let live: Vec<Pod> = pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                let running = live
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                let costed = live
                    .iter()
                    .all(|p| subset_of(p).is_none() || cost_of(p).is_some());
                if !(live.len() == total && running == total && costed) {
                    return Ok(None);
                }
                let status = spreads.get("web").await?.data["status"].clone();
                Ok(status_counts(&status, &counts(&live)).then_some(live))
            }
        },
    )
    .await
    .context("the step did not settle")
}

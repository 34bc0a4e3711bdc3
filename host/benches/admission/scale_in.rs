//! Issue #65 at the sizes users run: a Deployment under 30 % / 50 % / the rest, scaled out
//! and in as the issue measured it — 0 → 600 → 60 and 0 → 3 000 → 300 — with host and
//! controller running their defaults (planned rules) and the invariant monitor watching
//! every moment. The percent plans of 600/60 and 3 000/300 are not nested with the levels
//! between: the old ranking ended 19 / 30 / 11 (maximum 18) and 91 / 150 / 59 (maximum 90).
//! Each level waits until every pod runs, carries its deletion cost and is counted; then
//! the pods per subset are compared with the maxima and with `core`'s planner.

use super::sequence::{create_deployment, create_spread, settled, spec};
use super::{kruise, start_admission, Webhook};
use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::rules::Rules;
use workloadspread_testkit::cluster;
use workloadspread_testkit::monitor::{Max, Monitor};
use workloadspread_testkit::pods::counts;

/// The scale-ins of the issue, each from a Deployment at 0.
const SCALE_INS: [[i32; 2]; 2] = [[600, 60], [3000, 300]];
/// How long one level may take to settle (3 000 pods through the webhook and KWOK).
const SETTLE: Duration = Duration::from_secs(900);

pub async fn run(policy: &Path) -> Result<()> {
    println!();
    for levels in SCALE_INS {
        let line = scale_in(policy, &levels).await?;
        println!("{line}");
    }
    Ok(())
}

/// One scale-in; the line for `docs/benchmarks.md`.
async fn scale_in(policy: &Path, levels: &[i32]) -> Result<String> {
    let ns = cluster()?.namespace("bench-scale-in").await?;
    let client = ns.client();
    let (a, b) = (json!("30%"), json!("50%"));
    let beta = spec(&a, &b);
    kruise::ours(&client).await?;
    create_spread(&ns, "v1beta1", beta.clone()).await?;
    let admission = start_admission(policy, &ns, Webhook::HostAndController).await?;
    create_deployment(&ns).await?;
    let monitor = Monitor::start(
        client.clone(),
        ns.name(),
        "web",
        ApiResource::erase::<Deployment>(&()),
        "web",
    )
    .await?;
    let typed: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": beta}))?;
    let planned = workloadspread_core::plan::plan_with(&typed, levels, None, Rules::Planned);
    let spreads = super::dynamic_api(
        &client,
        ns.name(),
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    );
    let deployments: Api<Deployment> = ns.api();
    let mut steps = vec![];
    for (step, &replicas) in planned.iter().zip(levels) {
        let started = Instant::now();
        deployments
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await?;
        let pods = settled(&ns, &spreads, replicas as usize, SETTLE).await?;
        let got = counts(&pods);
        let shape = |count: &dyn Fn(&str) -> usize| {
            ["a", "b", "c"].map(|s| count(s).to_string()).join(" / ")
        };
        let held = |s: &str| got.get(s).copied().unwrap_or(0);
        let plan = |s: &str| {
            step.subsets
                .iter()
                .find(|p| p.name == s)
                .map_or(0, |p| p.pods)
        };
        let over: Vec<String> = [("a", &a), ("b", &b)]
            .into_iter()
            .filter_map(|(s, max)| {
                let max = Max::parse(max).at(i64::from(replicas))?;
                (held(s) as i64 > max).then(|| format!("{s} {} > {max}", held(s)))
            })
            .collect();
        steps.push(format!(
            "{replicas}: {} (plan {}{}; settled in {:.0} s)",
            shape(&held),
            shape(&plan),
            if over.is_empty() {
                ", within every maximum".to_string()
            } else {
                format!(", **above a maximum: {}**", over.join(", "))
            },
            started.elapsed().as_secs_f64()
        ));
    }
    let monitored = match monitor.finish() {
        Ok(report) => format!("the monitor saw no moment above a maximum ({report})"),
        Err(e) => format!("**the monitor saw moments above a maximum**: {e:#}"),
    };
    admission.configs.delete().await?;
    Ok(format!(
        "* Scale-in {} of a Deployment under 30 % / 50 % / rest (issue #65), host + controller: {}; {monitored}.",
        levels
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(" → "),
        steps.join("; ")
    ))
}

//! Scale sequences compared with the planner at every step, under both rules.

use crate::common::*;
use crate::support::{create_deployment, create_ws, monitor, planned_counts};
use anyhow::{ensure, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::rules::Rules;
use workloadspread_testkit::pods::ensure_lowest_cost_removed;
use workloadspread_testkit::stack::Stack;

/// Issue #16: the steps of [`SEQUENCE`] are applied as a user applies them, without
/// waiting for the controller between the scale and the workload's reaction. Under the
/// planned rules every settled step must *equal* the planner's spread for it, and every
/// scale-in must remove the lowest-cost pods; under the reference's rules the table of
/// where each step lands is printed (docs/semantics.md) and only exactness is required.
const SEQUENCE: [i32; 6] = [10, 4, 12, 20, 7, 15];

fn percent_spread() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!("30%")), zone("b", "zone-b", json!("50%")), zone("c", "zone-c", Value::Null)]})
}

fn integer_spread() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(3)), zone("b", "zone-b", json!(4)), zone("c", "zone-c", Value::Null)]})
}

fn minimum_spread() -> Value {
    let mut a = zone("a", "zone-a", json!(4));
    a["minReplicas"] = json!(2);
    let mut b = zone("b", "zone-b", json!(5));
    b["minReplicas"] = json!(2);
    json!({"targetRef": target("Deployment"), "subsets": [a, b, zone("c", "zone-c", Value::Null)]})
}

/// Runs [`SEQUENCE`] under `rules`; returns one line per step: replicas, spread on the
/// cluster, the planner's spread, deletion-cost patches the controller wrote.
async fn run_sequence(hint: &str, spec: Value, rules: Rules) -> Result<Option<Vec<String>>> {
    let settings = json!({"rules": rules.as_str()}).to_string();
    let host_args = ["--settings-json", settings.as_str()];
    let controller_args = ["--rules", rules.as_str()];
    let Some(stack) = Stack::start_with(hint, &host_args, &controller_args).await? else {
        return Ok(None);
    };
    let ws = create_ws(&stack, spec.clone()).await?;
    create_deployment(&stack, 0, json!({})).await?;
    stack
        .host
        .wait_sees_workloadspread(stack.ns.name(), "web", &target("Deployment"))
        .await?;
    let typed: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))?;
    let planned = workloadspread_core::plan::plan_with(&typed, &SEQUENCE, None, rules);
    // Under the planned rules no subset is over its maximum at any moment (#26 item 8);
    // the reference rules are OpenKruise's, judged on their own terms below.
    let watching = match rules {
        Rules::Planned => Some(monitor(&stack.ns).await?),
        Rules::Reference => None,
    };
    let deployments = stack.ns.api::<Deployment>();
    let patches = "workloadspread_controller_deletion_cost_patches_total";
    let mut before: Vec<Pod> = vec![];
    let mut lines = vec![];
    for (step, &replicas) in planned.iter().zip(SEQUENCE.iter()) {
        let patches_before = stack.controller.metric(patches).await?;
        scale(&deployments, replicas).await?;
        let pods = settled(&stack.ns, replicas as usize).await?;
        let got = counts(&pods);
        let status = status_matches(&ws, &got).await?;
        let want = planned_counts(step);
        if rules == Rules::Planned {
            ensure!(
                got == want,
                "{replicas} replicas: cluster {got:?}, planner {want:?}; status {status}"
            );
            if (replicas as usize) < before.len() {
                ensure_lowest_cost_removed(&before, &pods)?;
            }
        }
        // Costs settle with the status (the controller patches pods first).
        before = live_pods(&stack.ns).await?;
        let written = stack.controller.metric(patches).await? - patches_before;
        lines.push(format!(
            "{replicas:>3}: cluster {} planner {} cost patches {written}",
            shape(&got, &typed),
            shape(&want, &typed)
        ));
    }
    if let Some(m) = watching {
        lines.push(format!("monitor: {}", m.finish()?));
    }
    stack.finish().await?;
    Ok(Some(lines))
}

/// "a / b / c" in spec order.
fn shape(counts: &BTreeMap<String, usize>, ws: &WorkloadSpread) -> String {
    let per: Vec<String> = ws
        .spec
        .subsets
        .iter()
        .map(|s| counts.get(&s.name).copied().unwrap_or(0).to_string())
        .collect();
    per.join(" / ")
}

async fn sequence_test(hint: &str, spec: Value, rules: Rules) -> Result<()> {
    if let Some(lines) = run_sequence(hint, spec, rules).await? {
        eprintln!("{hint} ({} rules):\n{}", rules.as_str(), lines.join("\n"));
    }
    Ok(())
}

#[tokio::test]
async fn percent_spread_lands_on_the_planner_at_every_step() -> Result<()> {
    sequence_test("seq-percent", percent_spread(), Rules::Planned).await
}

#[tokio::test]
async fn integer_spread_lands_on_the_planner_at_every_step() -> Result<()> {
    sequence_test("seq-integer", integer_spread(), Rules::Planned).await
}

#[tokio::test]
async fn minimum_spread_lands_on_the_planner_at_every_step() -> Result<()> {
    sequence_test("seq-minimum", minimum_spread(), Rules::Planned).await
}

#[tokio::test]
async fn percent_spread_under_the_reference_rules() -> Result<()> {
    sequence_test("seq-percent-ref", percent_spread(), Rules::Reference).await
}

#[tokio::test]
async fn integer_spread_under_the_reference_rules() -> Result<()> {
    sequence_test("seq-integer-ref", integer_spread(), Rules::Reference).await
}

#[tokio::test]
async fn minimum_spread_under_the_reference_rules() -> Result<()> {
    sequence_test("seq-minimum-ref", minimum_spread(), Rules::Reference).await
}

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
use workloadspread_testkit::monitor::Max;
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

/// Issue #65: scale-ins from 600 to levels where the percent plans are not nested (with
/// ceil rounding 61 plans 19/31/11 under 30 %/50 %/rest and 60 plans 18/30/12): the old
/// ranking left zone-a 19 of a maximum of 18 after 600 → 60.
const SCALE_IN_600_TO_60: [i32; 2] = [600, 60];

/// Issue #65: 600 → 0 in steps of 1 % (6 pods), each step settled and judged.
fn descent_600_to_0() -> Vec<i32> {
    (0..=100).rev().map(|p| p * 6).collect()
}

/// Runs `sequence` under `rules`; returns one line per step: replicas, spread on the
/// cluster, the planner's spread, deletion-cost patches the controller wrote. Under the
/// planned rules every settled step is within every maximum (judged with the monitor's
/// scaling, not core's) and equals the planner's.
async fn run_sequence(
    hint: &str,
    spec: Value,
    rules: Rules,
    sequence: &[i32],
) -> Result<Option<Vec<String>>> {
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
    let planned = workloadspread_core::plan::plan_with(&typed, sequence, None, rules);
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
    let mut above = vec![];
    for (step, &replicas) in planned.iter().zip(sequence.iter()) {
        let patches_before = stack.controller.metric(patches).await?;
        scale(&deployments, replicas).await?;
        let pods = settled(&stack.ns, replicas as usize).await?;
        let got = counts(&pods);
        let status = status_matches(&ws, &got).await?;
        let want = planned_counts(step);
        let over = above_maxima(&spec, &got, replicas);
        if !over.is_empty() {
            above.push(format!("{replicas}: {}", over.join(", ")));
        }
        if rules == Rules::Planned {
            ensure!(
                over.is_empty(),
                "{replicas} replicas: {} (cluster {got:?}, planner {want:?})",
                over.join(", ")
            );
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
    lines.push(format!(
        "settled steps above a maximum: {}{}",
        above.len(),
        if above.is_empty() {
            String::new()
        } else {
            format!(" ({})", above.join("; "))
        }
    ));
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

/// The subsets of `counts` above their maximum at `replicas`, as "a 19 > 18".
fn above_maxima(spec: &Value, counts: &BTreeMap<String, usize>, replicas: i32) -> Vec<String> {
    let subsets = spec["subsets"].as_array().cloned().unwrap_or_default();
    subsets
        .iter()
        .filter_map(|s| {
            let name = s["name"].as_str()?;
            let max = Max::parse(&s["maxReplicas"]).at(i64::from(replicas))?;
            let held = counts.get(name).copied().unwrap_or(0) as i64;
            (held > max).then(|| format!("{name} {held} > {max}"))
        })
        .collect()
}

async fn sequence_test(hint: &str, spec: Value, rules: Rules) -> Result<()> {
    sequence_test_of(hint, spec, rules, &SEQUENCE).await
}

async fn sequence_test_of(hint: &str, spec: Value, rules: Rules, sequence: &[i32]) -> Result<()> {
    if let Some(lines) = run_sequence(hint, spec, rules, sequence).await? {
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

#[tokio::test]
async fn percent_scale_in_600_to_60_stays_within_every_maximum() -> Result<()> {
    sequence_test_of(
        "seq-600-60",
        percent_spread(),
        Rules::Planned,
        &SCALE_IN_600_TO_60,
    )
    .await
}

#[tokio::test]
async fn percent_descent_600_to_0_stays_within_every_maximum_at_every_step() -> Result<()> {
    sequence_test_of(
        "seq-descent",
        percent_spread(),
        Rules::Planned,
        &descent_600_to_0(),
    )
    .await
}

/// OpenKruise's own costs: not judged (compatibility), the steps above a maximum printed
/// (docs/semantics.md says how often the reference ends a scale-in above one).
#[tokio::test]
async fn percent_scale_in_600_to_60_under_the_reference_rules() -> Result<()> {
    sequence_test_of(
        "seq-600-60-ref",
        percent_spread(),
        Rules::Reference,
        &SCALE_IN_600_TO_60,
    )
    .await
}

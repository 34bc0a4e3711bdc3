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
#[path = "rebalance/sequence.rs"]
mod sequence;
#[path = "rebalance/support.rs"]
mod support;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams, PostParams};
use sequence::{run_sequence, table};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::*;
use workloadspread_testkit::cluster;
use workloadspread_testkit::convergence::{SpreadWatch, StepLimits};
use workloadspread_testkit::faults::{api_server_addr, fault_proxy, kubeconfig_via, Faults};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::wait_for;

/// How long the events of evictions already made may take to be recorded.
const SETTLE_EVENTS: Duration = Duration::from_secs(30);

/// A best-effort burst 0 → 60 over a = 10 / b = 10 / c = rest overshoots; rebalancing
/// brings every subset to plan, a PodDisruptionBudget never violated: first it allows no
/// disruption (every eviction is refused, retried each interval, nothing moves), then one
/// at a time (three evictions allowed per second by the controller; at every observed
/// moment at least 59 of the 60 pods are healthy). The guest runs the reference rules
/// here (first fit: the planned rules' spread choice often lands a burst of 60 on the
/// plan), and the host's watches lag the API server by a second, as a busy
/// policy-server's reflectors do: the burst overshoots for sure (with fresh caches
/// and a slow API server, the ReplicaSet's batches were once admitted one by one and
/// landed on the plan, leaving nothing to rebalance).
#[tokio::test]
async fn best_effort_burst_is_rebalanced_within_a_disruption_budget() -> Result<()> {
    let settings = json!({"mode": "best-effort", "rules": "reference"}).to_string();
    let args = controller_args(3, &["--rules", "reference"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kubeconfig = cluster()?.kubeconfig();
    let lagging = Faults {
        lag: Duration::from_secs(1),
        ..Faults::default()
    };
    let (via, _) = fault_proxy(api_server_addr(kubeconfig)?, lagging).await?;
    let host_kubeconfig = kubeconfig_via(kubeconfig, via)?;
    let host_args = ["--settings-json", settings.as_str()];
    let Some(stack) = Stack::start_via("rebal-burst", &host_kubeconfig, &host_args, &args).await?
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
    let seen = std::sync::Mutex::new((0, 0));
    let landed = wait_for("web landed and an eviction refused", CONVERGE, || async {
        let (evicted, refused) = evictions(&stack).await?;
        *seen.lock().unwrap_or_else(|p| p.into_inner()) = (evicted, refused);
        Ok(watch.landed().filter(|_| refused >= 2))
    })
    .await
    .with_context(|| {
        format!(
            "pods now {:?}, landed {:?}, plan {want:?}, (evicted, refused) {:?}; \
             controller log:\n{}",
            watch.counts(),
            watch.landed(),
            seen.lock().unwrap_or_else(|p| p.into_inner()),
            tail(&stack.controller.log_text(), 40)
        )
    })?;
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
    // Each eviction, and each refusal, is an Event on the WorkloadSpread.
    let recorded = wait_for(
        "an event per eviction and refusal",
        SETTLE_EVENTS,
        || async {
            let e = events(&stack.ns, "web", "RebalanceEvicted").await?;
            let r = events(&stack.ns, "web", "RebalanceEvictionRefused").await?;
            Ok((e == evicted as usize && r >= refused_first as usize).then_some((e, r)))
        },
    )
    .await
    .with_context(|| format!("{evicted} evicted, {refused} refused"))?;
    left_alone(&stack, &twin_pods, &twin_watch, &twin_landed).await?;
    let names = ["a", "b", "c"];
    eprintln!(
        "rebalance burst 0 → 60 (a=10/b=10/c=rest, best effort, first fit): landed {}, plan {}; \
         {evicted} evictions ({refused_first} refused while the budget allowed none, {refused} \
         in all), on plan {:.1} s after the scale ({:.1} s once the budget allowed one); fewest \
         healthy pods {:?} of 60 (budget: 59) over {moments} observed moments; events \
         (evicted, refused) {recorded:?}; twin landed {} and was left alone",
        shape(&landed, &names),
        shape(&want, &names),
        started.elapsed().as_secs_f64(),
        took.as_secs_f64(),
        watch.lowest_healthy(),
        shape(&twin_landed, &names),
    );
    stack.finish().await
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

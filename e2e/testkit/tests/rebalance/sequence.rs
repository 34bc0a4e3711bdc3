//! The step sequence, run on one Deployment with best-effort admission, and
//! its table.

use super::support::{
    controller_args, converged, create_deployment, create_ws, evictions, maxima, plan, scale,
    shape, status_is, zone, CONVERGE,
};
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use workloadspread_testkit::convergence::{SpreadWatch, StepLimits};
use workloadspread_testkit::stack::Stack;
use workloadspread_testkit::wait_for;

/// The steps of issue #27's table.
pub const SEQUENCE: [usize; 6] = [10, 4, 12, 20, 7, 15];

pub fn sequence_spec() -> Value {
    json!({"subsets": [zone("a", "zone-a", json!("30%")), zone("b", "zone-b", json!("50%")),
        zone("c", "zone-c", Value::Null)]})
}

/// One line of the step table.
pub struct StepReport {
    pub replicas: usize,
    pub plan: BTreeMap<String, usize>,
    pub landed: BTreeMap<String, usize>,
    pub peak: usize,
    pub settled: BTreeMap<String, usize>,
    pub took: Duration,
    pub evictions: u64,
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
pub async fn run_sequence(hint: &str, rebalance: bool) -> Result<Option<Vec<StepReport>>> {
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

pub fn table(title: &str, reports: &[StepReport]) -> String {
    let mut out = format!(
        "{title}\n| replicas | plan | landed | peak overshoot | settled | time to settle | evictions |\n|---:|---|---|---:|---|---:|---:|\n"
    );
    for r in reports {
        out.push_str(&format!("{r}\n"));
    }
    out
}

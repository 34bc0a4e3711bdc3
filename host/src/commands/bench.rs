//! `bench`: one request N times through the module and natively.

use super::{Offline, PolicyArgs};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    /// AdmissionRequest or AdmissionReview JSON.
    #[arg(short = 'r', long)]
    pub request_path: PathBuf,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Objects answering the policy's reads (as for `run`); repeatable.
    #[arg(long)]
    pub cluster_state: Vec<PathBuf>,
    /// Do not offer the counter capability.
    #[arg(long)]
    pub no_counter: bool,
    #[arg(short = 'n', long, default_value_t = 2000)]
    pub iterations: usize,
    /// Pooling-allocator instance slots, as for `serve` (0 = allocate on demand).
    #[arg(long, default_value_t = 0)]
    pub pool_instances: u32,
    /// Instances kept between evaluations, as for `serve` (0: a fresh one for each).
    #[arg(long, default_value_t = 0)]
    pub reuse_instances: usize,
    /// Answer the policy's reads with whole objects, ignoring its `field_masks` (what a
    /// Kubewarden host older than the masks does), to compare.
    #[arg(long)]
    pub ignore_field_masks: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The policy module (default: policy/policy.wasm of this workspace).
    pub policy: Option<PathBuf>,
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let Offline {
        request,
        settings,
        engine,
        objects,
    } = Offline::load(
        &args.request_path,
        &args.policy_args,
        args.policy.as_ref(),
        &args.cluster_state,
        super::Instances {
            pool: args.pool_instances,
            reuse: args.reuse_instances,
        },
    )?;
    let bench_input = crate::bench::BenchInput {
        engine: &engine,
        request: &request,
        settings: &settings,
        objects: &objects,
        counter: !args.no_counter,
        iterations: args.iterations.max(1),
        ignore_field_masks: args.ignore_field_masks,
    };
    crate::bench::same_answers(&bench_input)?;
    // Warm-up: page in the compiled module, the native code and the allocator.
    let _ = crate::bench::wasm_and_native(&crate::bench::BenchInput {
        iterations: 20,
        ..bench_input
    });
    let (wasm, native) = crate::bench::wasm_and_native(&bench_input);
    let ratio = wasm.p50.as_secs_f64() / native.p50.as_secs_f64().max(1e-9);
    if args.json {
        let s = |x: &crate::bench::Summary| {
            serde_json::json!({"iterations": x.iterations,
            "p50_us": x.p50.as_secs_f64() * 1e6, "p99_us": x.p99.as_secs_f64() * 1e6,
            "mean_us": x.mean.as_secs_f64() * 1e6, "per_second": x.per_second()})
        };
        println!(
            "{}",
            serde_json::json!({"wasm": s(&wasm), "native": s(&native), "p50_ratio": ratio})
        );
    } else {
        for (name, x) in [("wasm", &wasm), ("native", &native)] {
            println!(
                "{name:<7} n={} p50={:?} p99={:?} mean={:?} ({:.0}/s on one thread)",
                x.iterations,
                x.p50,
                x.p99,
                x.mean,
                x.per_second()
            );
        }
        println!("wasm/native p50 ratio: {ratio:.2}");
    }
    Ok(())
}

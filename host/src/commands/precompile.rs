//! `precompile`: the policy module compiled ahead of time for the engine `serve` runs
//! (`make images` ships it in the host image; `serve --precompiled-dir` loads it).

use super::{default_policy, engine_options, Instances, PolicyArgs};
use crate::engine::PolicyEngine;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct PrecompileArgs {
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// As `serve --pool-instances` (the compiled code is the same with and without the
    /// pooling allocator today; the file's name would tell if that changed).
    #[arg(long, default_value_t = 0)]
    pub pool_instances: u32,
    /// Directory to write into (the file is named after the module and the engine
    /// configuration: `serve` finds the one that fits).
    #[arg(short = 'o', long)]
    pub out_dir: PathBuf,
    /// The policy module (default: policy/policy.wasm of this workspace).
    pub policy: Option<PathBuf>,
}

pub fn precompile(args: PrecompileArgs) -> Result<()> {
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    let wasm = std::fs::read(&policy).with_context(|| format!("reading {}", policy.display()))?;
    let instances = Instances {
        pool: args.pool_instances,
        reuse: 0,
    };
    let options = engine_options(&args.policy_args, instances)?;
    let path = PolicyEngine::precompile(&wasm, &options, &args.out_dir)?;
    println!("{}", path.display());
    Ok(())
}

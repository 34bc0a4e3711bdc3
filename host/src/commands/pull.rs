//! `pull`: a policy module from an OCI registry, as `kwctl pull`.

use super::current_thread_runtime;
use super::push::RegistryArgs;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Where to write the module.
    #[arg(short = 'o', long)]
    pub output_path: PathBuf,
    /// Source, e.g. registry://127.0.0.1:5000/policies/workloadspread:v0.1.0
    pub uri: String,
}

pub fn pull(args: PullArgs) -> Result<()> {
    let registry = args.registry.registry();
    let digest = current_thread_runtime()?.block_on(crate::oci::pull(
        &args.uri,
        &args.output_path,
        &registry,
    ))?;
    println!(
        "pulled {} ({digest}) to {}",
        args.uri,
        args.output_path.display()
    );
    Ok(())
}

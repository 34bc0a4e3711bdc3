//! `workloadspread-host`: runs the WorkloadSpread policy module outside Kubewarden.
// Two audited exceptions, each with its SAFETY note: loading the precompiled policy
// module (`engine/precompiled.rs`) and the engine's CPU baseline (`engine/baseline.rs`).
#![deny(unsafe_code)]

mod annotate;
mod api_call;
mod bench;
mod capabilities;
mod clock;
mod commands;
mod counter;
mod engine;
mod index;
mod metrics;
mod oci;
mod offline;
mod tls;
mod webhook;

use clap::{Parser, Subcommand};
pub(crate) use clock::now;
use commands::annotate::AnnotateArgs;
use commands::bench::BenchArgs;
use commands::openkruise::OpenKruiseArgs;
use commands::precompile::PrecompileArgs;
use commands::pull::PullArgs;
use commands::push::PushArgs;
use commands::run::RunArgs;
use commands::serve::ServeArgs;
use commands::uninstall::UninstallArgs;

#[derive(Parser)]
#[command(
    name = "workloadspread-host",
    version,
    about = "Bundled host for the WorkloadSpread policy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one admission request offline (kwctl run compatible output).
    Run(RunArgs),
    /// Serve the policy as an HTTPS admission webhook with exact counters.
    Serve(Box<ServeArgs>),
    /// Compile the module for the engine `serve` runs (the image ships the result, so
    /// that the host starts without compiling).
    Precompile(PrecompileArgs),
    /// Evaluate one request N times through the module and natively; print p50/p99.
    Bench(BenchArgs),
    /// Embed metadata in the module (`io.kubewarden.metadata`), as `kwctl annotate`.
    Annotate(AnnotateArgs),
    /// Push the (annotated) module to an OCI registry, as `kwctl push`.
    Push(PushArgs),
    /// Pull a policy module from an OCI registry into a file, as `kwctl pull`.
    Pull(PullArgs),
    /// Remove the webhook configurations and the CRD's conversion webhook before the
    /// host goes (the chart's pre-delete hook).
    Uninstall(UninstallArgs),
    /// Take OpenKruise's WorkloadSpread validation out (`hand-over`, once its
    /// WorkloadSpread gate is off) or put it back (`hand-back`): docs/operations.md,
    /// "Coming from OpenKruise".
    Openkruise(OpenKruiseArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let result = match Cli::parse().command {
        Command::Run(args) => commands::run::run(args),
        Command::Serve(args) => commands::serve::serve(*args),
        Command::Bench(args) => commands::bench::bench(args),
        Command::Precompile(args) => commands::precompile::precompile(args),
        Command::Annotate(args) => commands::annotate::annotate(args),
        Command::Push(args) => commands::push::push(args),
        Command::Pull(args) => commands::pull::pull(args),
        Command::Uninstall(args) => commands::uninstall::uninstall(args),
        Command::Openkruise(args) => commands::openkruise::openkruise(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

//! `workloadspread-host`: runs the WorkloadSpread policy module outside Kubewarden.
#![forbid(unsafe_code)]

mod capabilities;
mod engine;
mod run;
mod state;
mod wapc;

use anyhow::{Context, Result};
use capabilities::AllowList;
use clap::{Args, Parser, Subcommand};
use engine::{EngineOptions, PolicyEngine};
use serde_json::Value;
use state::ClusterState;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
}

#[derive(Args)]
struct RunArgs {
    /// AdmissionRequest or AdmissionReview JSON; `-` reads stdin.
    #[arg(short = 'r', long)]
    request_path: PathBuf,
    /// Settings as JSON.
    #[arg(long, conflicts_with = "settings_path")]
    settings_json: Option<String>,
    /// Settings file (YAML or JSON).
    #[arg(short = 's', long)]
    settings_path: Option<PathBuf>,
    /// Grant the Kubernetes reads the policy declares (metadata.yml contextAwareResources).
    #[arg(long)]
    allow_context_aware: bool,
    /// Objects answering the policy's reads and holding WorkloadSpread counters
    /// (files or directories of YAML/JSON; repeatable).
    #[arg(long)]
    cluster_state: Vec<PathBuf>,
    /// Write the WorkloadSpreads (with updated statuses) to this file after the run.
    #[arg(long)]
    output_state: Option<PathBuf>,
    /// Do not offer the counter capability (behave like Kubewarden's policy-server).
    #[arg(long)]
    no_counter: bool,
    /// Evaluation deadline in seconds.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
    /// wasmtime compilation cache directory (`none` disables it).
    #[arg(long, default_value_os_t = default_cache_dir())]
    cache_dir: PathBuf,
    /// The policy module (default: policy/policy.wasm of this workspace).
    policy: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let result = match Cli::parse().command {
        Command::Run(args) => cmd_run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("workloadspread").join("wasmtime")
}

fn default_policy() -> PathBuf {
    std::env::var_os("WS_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policy/policy.wasm"))
}

fn read_input(path: &PathBuf) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn settings(args: &RunArgs) -> Result<Value> {
    if let Some(json) = &args.settings_json {
        return serde_json::from_str(json).context("--settings-json");
    }
    match &args.settings_path {
        Some(p) => serde_yaml::from_str(&read_input(p)?)
            .with_context(|| format!("parsing {}", p.display())),
        None => Ok(Value::Object(Default::default())),
    }
}

fn now() -> workloadspread_core::Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    workloadspread_core::timestamp_since_epoch(since)
}

fn cmd_run(args: RunArgs) -> Result<()> {
    let input: Value =
        serde_json::from_str(&read_input(&args.request_path)?).context("request is not JSON")?;
    let request = run::admission_request(&input)?;
    let settings = settings(&args)?;
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    let cache_dir = (args.cache_dir.as_os_str() != "none").then(|| args.cache_dir.clone());
    let options = EngineOptions {
        timeout: Duration::from_secs_f64(args.timeout),
        cache_dir,
        ..EngineOptions::default()
    };
    let engine = PolicyEngine::from_file(&policy, options)?;
    let mut objects = vec![];
    for path in &args.cluster_state {
        objects.extend(ClusterState::load_objects(path)?);
    }
    let allow = AllowList {
        capabilities: vec![],
        // Without --allow-context-aware no Kubernetes read is granted (as kwctl).
        resources: (!args.allow_context_aware).then(Vec::new),
    };
    let state = Arc::new(ClusterState::new(objects, allow, !args.no_counter, now()));
    run::validate_settings(&engine, &settings, state.clone())?;
    let response = run::evaluate(&engine, &request, &settings, state.clone());
    println!("{}", serde_json::to_string(&response)?);
    if let Some(out) = &args.output_state {
        let docs: Vec<String> = state
            .workloadspreads()
            .iter()
            .map(serde_yaml::to_string)
            .collect::<Result<_, _>>()?;
        std::fs::write(out, docs.join("---\n"))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

//! One module per command (as kwctl has), and what they share: the policy options,
//! settings, the engine and the offline inputs of `run` and `bench`.

pub mod annotate;
pub mod bench;
pub mod openkruise;
pub mod precompile;
pub mod pull;
pub mod push;
pub mod run;
pub mod serve;
pub mod uninstall;

use crate::engine::{EngineOptions, PolicyEngine};
use crate::offline::state::ClusterState;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Options shared by every command that evaluates the policy.
#[derive(Args, Clone)]
pub struct PolicyArgs {
    /// Settings as JSON.
    #[arg(long, conflicts_with = "settings_path")]
    pub settings_json: Option<String>,
    /// Settings file (YAML or JSON).
    #[arg(short = 's', long)]
    pub settings_path: Option<PathBuf>,
    /// Evaluation deadline in seconds: the guest's own execution (time blocked in host
    /// calls, which have their own timeouts, does not count).
    #[arg(long, default_value_t = 2.0)]
    pub timeout: f64,
    /// Wall-clock bound of one evaluation in seconds, its host calls included; keep it
    /// below the webhook's timeoutSeconds (past that the API server no longer waits; the
    /// chart passes timeoutSeconds - 2).
    #[arg(long, default_value_t = 8.0)]
    pub evaluation_deadline: f64,
    /// Linear memory cap per policy instance, in MiB.
    #[arg(long, default_value_t = 256)]
    pub max_memory_mib: usize,
    /// wasmtime compilation cache directory (`none` disables it). Entries are written
    /// once and never recompressed in the background (wasmtime's default would, at zstd
    /// level 20, after 256 loads).
    #[arg(long, default_value_os_t = default_cache_dir())]
    pub cache_dir: PathBuf,
}

pub fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("workloadspread").join("wasmtime")
}

pub fn default_policy() -> PathBuf {
    std::env::var_os("WS_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policy/policy.wasm"))
}

pub fn read_input(path: &PathBuf) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub fn settings(args: &PolicyArgs) -> Result<Value> {
    if let Some(json) = &args.settings_json {
        return serde_json::from_str(json).context("--settings-json");
    }
    match &args.settings_path {
        Some(p) => serde_yaml::from_str(&read_input(p)?)
            .with_context(|| format!("parsing {}", p.display())),
        None => Ok(Value::Object(Default::default())),
    }
}

/// How instances are allocated and kept: pooling-allocator slots (0: on demand) and
/// idle instances kept between evaluations (0: a fresh one for each).
#[derive(Clone, Copy, Debug, Default)]
pub struct Instances {
    pub pool: u32,
    pub reuse: usize,
}

pub fn engine_options(args: &PolicyArgs, instances: Instances) -> Result<EngineOptions> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    if !(args.evaluation_deadline.is_finite() && args.evaluation_deadline > 0.0) {
        anyhow::bail!("--evaluation-deadline must be a positive number of seconds");
    }
    let cache_dir = (args.cache_dir.as_os_str() != "none").then(|| args.cache_dir.clone());
    Ok(EngineOptions {
        timeout: Duration::from_secs_f64(args.timeout),
        total: Duration::from_secs_f64(args.evaluation_deadline),
        max_memory_bytes: args.max_memory_mib << 20,
        pool_instances: instances.pool,
        cache_dir,
        reuse: instances.reuse,
    })
}

/// What `run` and `bench` evaluate: the request, settings, compiled module and the
/// objects answering its reads.
pub struct Offline {
    pub request: Value,
    pub settings: Value,
    pub engine: PolicyEngine,
    pub objects: Vec<Value>,
}

impl Offline {
    fn load(
        request_path: &PathBuf,
        policy_args: &PolicyArgs,
        policy: Option<&PathBuf>,
        cluster_state: &[PathBuf],
        instances: Instances,
    ) -> Result<Self> {
        let input: Value =
            serde_json::from_str(&read_input(request_path)?).context("request is not JSON")?;
        let policy = policy.cloned().unwrap_or_else(default_policy);
        let mut objects = vec![];
        for path in cluster_state {
            objects.extend(ClusterState::load_objects(path)?);
        }
        Ok(Offline {
            request: crate::engine::evaluate::admission_request(&input)?,
            settings: settings(policy_args)?,
            engine: PolicyEngine::from_file(&policy, engine_options(policy_args, instances)?)?,
            objects,
        })
    }
}

//! `run`: one admission request offline, kwctl run compatible.

use super::{read_input, Offline, PolicyArgs};
use crate::capabilities::{AllowList, Capabilities, HostCallError};
use crate::clock::now;
use crate::offline::state::ClusterState;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct RunArgs {
    /// AdmissionRequest or AdmissionReview JSON; `-` reads stdin.
    #[arg(short = 'r', long)]
    pub request_path: PathBuf,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Grant the Kubernetes reads the policy declares (metadata.yml contextAwareResources).
    #[arg(long)]
    pub allow_context_aware: bool,
    /// Objects answering the policy's reads and holding WorkloadSpread counters
    /// (files or directories of YAML/JSON; repeatable).
    #[arg(long)]
    pub cluster_state: Vec<PathBuf>,
    /// Write the WorkloadSpreads (with updated statuses) to this file after the run.
    #[arg(long)]
    pub output_state: Option<PathBuf>,
    /// Do not offer the counter capability (behave like Kubewarden's policy-server).
    #[arg(long)]
    pub no_counter: bool,
    /// Answer the policy's reads from a kwctl session file (FIFO; requests must match).
    #[arg(long, conflicts_with = "cluster_state")]
    pub replay_host_capabilities_interactions: Option<PathBuf>,
    /// As kwctl 1.36's: its parser accepts "opa", "gatekeeper", "kubewarden" and "wasi",
    /// and then refuses "kubewarden" with its own message — no value runs a waPC module
    /// there, and none does here (`e2e/policy.bats`). Without it the module's metadata
    /// decides, as in kwctl.
    #[arg(short = 'e', long, value_parser = ["opa", "gatekeeper", "kubewarden", "wasi"])]
    pub execution_mode: Option<String>,
    /// The policy module (default: policy/policy.wasm of this workspace).
    pub policy: Option<PathBuf>,
}

/// What kwctl 1.36 makes of an execution mode its parser accepted: "kubewarden" is
/// refused with its message; the others run modules this host does not (Rego, WASI).
fn execution_mode_refusal(mode: &str) -> String {
    match mode {
        "kubewarden" => format!(
            "Unknown policy execution mode \"{mode}\". Valid values are \"kubewarden-wapc\", \"opa\", \"gatekeeper\""
        ),
        other => format!(
            "execution mode {other} is not supported: workloadspread-host runs kubewarden-wapc \
             modules (omit --execution-mode: the module's metadata says kubewarden-wapc)"
        ),
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    if let Some(mode) = &args.execution_mode {
        anyhow::bail!("{}", execution_mode_refusal(mode));
    }
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
        super::Instances::default(),
    )?;
    let allow = AllowList {
        capabilities: vec![],
        // Without --allow-context-aware no Kubernetes read is granted (as kwctl).
        resources: (!args.allow_context_aware).then(Vec::new),
        group_kinds: vec![],
    };
    if let Some(session) = &args.replay_host_capabilities_interactions {
        let replay = Arc::new(crate::offline::replay::Replay::load(&read_input(session)?)?);
        let logged = Arc::new(LoggedFailures(replay.clone()));
        crate::engine::evaluate::validate_settings(&engine, &settings, logged.clone())?;
        let response = crate::engine::evaluate::evaluate(&engine, &request, &settings, logged);
        println!("{}", serde_json::to_string(&response)?);
        if replay.leftovers() > 0 {
            eprintln!(
                "warning: {} recorded exchanges were not used",
                replay.leftovers()
            );
        }
        return Ok(());
    }
    let state = Arc::new(ClusterState::new(objects, allow, !args.no_counter, now()));
    let logged = Arc::new(LoggedFailures(state.clone()));
    crate::engine::evaluate::validate_settings(&engine, &settings, logged.clone())?;
    let response = crate::engine::evaluate::evaluate(&engine, &request, &settings, logged);
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

/// Reports every failed host call on stderr, as kwctl does (it logs them as errors): a
/// command that is quiet here is quiet under kwctl.
struct LoggedFailures<C>(Arc<C>);

impl<C: Capabilities> Capabilities for LoggedFailures<C> {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        let answer = self.0.call(binding, namespace, operation, payload);
        if let Err(e) = &answer {
            eprintln!(
                "ERROR host call {binding}/{namespace}/{operation} failed: {}",
                e.guest_text()
            );
        }
        answer
    }

    fn log(&self, message: &str) {
        self.0.log(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_modes_are_kwctls() {
        assert_eq!(
            execution_mode_refusal("kubewarden"),
            "Unknown policy execution mode \"kubewarden\". Valid values are \"kubewarden-wapc\", \"opa\", \"gatekeeper\""
        );
        assert!(execution_mode_refusal("wasi").contains("omit --execution-mode"));
    }
}

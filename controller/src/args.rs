//! The command line: the commands and their arguments, parsed in one place.

use crate::{capacity, rebalance};
use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use workloadspread_core::controller::ReconcileOptions;
use workloadspread_core::rules::Rules;
use workloadspread_core::version::VersionedKinds;
use workloadspread_core::workload::{CustomWorkload, WorkloadKinds};

#[derive(Parser)]
#[command(
    name = "workloadspread-controller",
    version,
    about = "WorkloadSpread controller"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the controller against a cluster.
    Run(RunArgs),
    /// Compute one reconcile from files and print what the controller would do (JSON).
    Reconcile(ReconcileArgs),
    /// Print per-subset counts and the scale-in order for a series of replica counts.
    Plan(PlanArgs),
    /// Show one WorkloadSpread live: per subset maximum, planned count, pods, creating
    /// and deleting; pods outside every subset; the next pods a scale-in removes.
    Status(StatusArgs),
}

/// `reconcile --offline`: one reconcile from files (the `offline` module).
#[derive(Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub(crate) rules: RuleArgs,
    /// Required: compute from files only (no cluster access).
    #[arg(long)]
    pub(crate) offline: bool,
    /// The WorkloadSpread (YAML/JSON, v1beta1 or v1alpha1).
    #[arg(long = "workloadspread", short = 'w')]
    pub(crate) workloadspread: PathBuf,
    /// Files or directories with the workload, its ReplicaSets, pods and nodes
    /// (e.g. `kubectl get deploy,rs,pods,nodes -o yaml`); repeatable.
    #[arg(long = "objects", short = 'o')]
    pub(crate) objects: Vec<PathBuf>,
    /// The reconcile's "now" (RFC 3339; default: the current time).
    #[arg(long)]
    pub(crate) now: Option<String>,
}

/// `plan`: the planner stepped through replica counts (the `offline` module).
#[derive(Args)]
pub struct PlanArgs {
    /// Replica counts to step through from 0, e.g. `10,4,0`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) replicas: Vec<i32>,
    /// Nodes (YAML/JSON file or directory, e.g. `kubectl get nodes -o yaml`): pods are
    /// scheduled onto them and stay Pending where none fits; Adaptive reschedules.
    #[arg(long)]
    pub(crate) nodes: Option<PathBuf>,
    /// `text` (tables) or `json` (the planner's steps, as the playground receives them).
    #[arg(short, long, default_value = "text", value_parser = ["text", "json"])]
    pub(crate) output: String,
    /// Admission and deletion-cost rules: "planned" (default) or "reference" (OpenKruise's).
    #[arg(long, default_value = "planned", value_parser = parse_rules)]
    pub(crate) rules: workloadspread_core::rules::Rules,
    /// The WorkloadSpread (YAML/JSON).
    pub(crate) file: PathBuf,
}

/// `status`: one WorkloadSpread live (the `status` module).
#[derive(Args)]
pub struct StatusArgs {
    /// The WorkloadSpread.
    pub(crate) name: String,
    /// Its namespace (default: the kubeconfig context's, else "default").
    #[arg(short = 'n', long)]
    pub(crate) namespace: Option<String>,
    /// `table` (default) or `json`.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    pub(crate) output: String,
    /// Pods on the scale-in path to show.
    #[arg(long, default_value_t = 5)]
    pub(crate) next: usize,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) rules: RuleArgs,
}

/// Rules shared by the online and offline reconcile.
#[derive(Args, Clone)]
pub struct RuleArgs {
    /// Workload kinds (lower-case) whose pods are counted per version.
    #[arg(long, value_delimiter = ',', default_value = "deployment,replicaset")]
    pub(crate) versioned_status_kinds: Vec<String>,
    /// YAML/JSON list of custom workload kinds ({group, kind, replicasPath, subResources}).
    #[arg(long)]
    pub(crate) custom_workloads: Option<PathBuf>,
    /// Seconds an admitted pod holds its slot before it must exist (reference: 30).
    #[arg(long, default_value_t = 30)]
    pub(crate) creating_window_seconds: i64,
    /// Seconds a deleted pod's slot stays released while it still exists (reference: 15).
    #[arg(long, default_value_t = 15)]
    pub(crate) deleting_window_seconds: i64,
    /// Seconds a subset stays unschedulable after a reschedule (reference: 300).
    #[arg(long, default_value_t = 300)]
    pub(crate) reschedule_hold_seconds: i64,
    /// Deletion costs: "planned" ranks the whole scale-in path (costs 1000000 − level);
    /// "reference" writes OpenKruise's values (docs/semantics.md).
    #[arg(long, default_value = "planned", value_parser = parse_rules)]
    pub(crate) rules: Rules,
    /// Rebalance every WorkloadSpread not annotated `workloadspread.io/rebalance: "false"`
    /// (default: only those annotated "true"): evict pods above their subset's planned
    /// count so that their replacements land where the plan has room (docs/operations.md).
    #[arg(long)]
    pub(crate) rebalance: bool,
    /// Most pods evicted per WorkloadSpread per interval.
    #[arg(long, default_value_t = 1)]
    pub(crate) rebalance_max_evictions: usize,
    /// The rebalancing interval, in seconds (also how long a refused eviction waits).
    #[arg(long, default_value_t = 30)]
    pub(crate) rebalance_interval_seconds: u64,
}

pub fn parse_rules(s: &str) -> Result<Rules, String> {
    s.parse()
}

impl RuleArgs {
    pub fn kinds(&self) -> Result<WorkloadKinds> {
        let custom: Vec<CustomWorkload> = match &self.custom_workloads {
            Some(p) => serde_yaml::from_str(
                &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            )
            .with_context(|| format!("parsing {}", p.display()))?,
            None => vec![],
        };
        Ok(WorkloadKinds { custom })
    }

    pub fn versioned(&self) -> VersionedKinds {
        VersionedKinds::new(&self.versioned_status_kinds)
    }

    pub fn rebalance(&self) -> Result<rebalance::Settings> {
        anyhow::ensure!(
            self.rebalance_interval_seconds > 0,
            "--rebalance-interval-seconds must be positive"
        );
        Ok(rebalance::Settings {
            default: self.rebalance,
            max_evictions: self.rebalance_max_evictions,
            interval: Duration::from_secs(self.rebalance_interval_seconds),
        })
    }

    pub fn options(&self) -> Result<ReconcileOptions> {
        use k8s_openapi::jiff::SignedDuration;
        for (flag, v) in [
            ("--creating-window-seconds", self.creating_window_seconds),
            ("--deleting-window-seconds", self.deleting_window_seconds),
            ("--reschedule-hold-seconds", self.reschedule_hold_seconds),
        ] {
            anyhow::ensure!(v > 0, "{flag} must be positive");
        }
        Ok(ReconcileOptions {
            creating_window: SignedDuration::from_secs(self.creating_window_seconds),
            deleting_window: SignedDuration::from_secs(self.deleting_window_seconds),
            reschedule_hold: SignedDuration::from_secs(self.reschedule_hold_seconds),
            rules: self.rules,
        })
    }
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub(crate) rules: RuleArgs,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Only watch and reconcile this namespace (default: all namespaces).
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Address for /metrics, /healthz and /readyz (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(crate) metrics_listen: std::net::SocketAddr,
    /// Open connections of that port at most: probes and scrapes need a few. At the cap
    /// the heaviest peer's longest-waiting connection is shed (never one with a request in
    /// flight), so a pod holding connections open cannot stop the kubelet's probes.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_connections: usize,
    /// Reconcile only while holding the Lease (run several replicas for availability).
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub(crate) lease_namespace: String,
    #[arg(long, default_value = "workloadspread-controller")]
    pub(crate) lease_name: String,
    /// This replica's identity in the Lease.
    #[arg(long, env = "HOSTNAME", default_value = "workloadspread-controller")]
    pub(crate) identity: String,
    /// Seconds without renewal after which another replica may take the Lease.
    #[arg(long, default_value_t = 15)]
    pub(crate) lease_duration_seconds: u64,
    /// Seconds a namespace's pods stay cached after its last WorkloadSpread is gone (pods
    /// are cached only in namespaces that have one).
    #[arg(long, default_value_t = 60)]
    pub(crate) pod_cache_grace_seconds: u64,
    /// WorkloadSpreads reconciled concurrently (reference: 3).
    #[arg(long, default_value_t = 3)]
    pub(crate) concurrency: u16,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub(crate) log_format: String,
    /// Never delete pods (adaptive rescheduling off; the chart then grants no pod delete):
    /// pods that would be rescheduled are reported in a warning event instead.
    #[arg(long)]
    pub(crate) no_reschedule: bool,
    /// A creatingPods entry older than this whose pod neither the cache nor a live read
    /// shows is dropped before the creating window ends (a refused or forged admission's
    /// claim); 0 keeps every entry for the whole window. Must exceed how long pod
    /// admission takes after this project's webhook answered.
    #[arg(long, default_value_t = 10)]
    pub(crate) creating_drop_seconds: i64,
    /// One WorkloadSpread's status is written at most once per this many milliseconds:
    /// a burst of pods costs one status write per interval, carrying all that changed
    /// (admissions never wait for it: the host counts claims itself). 0 writes at once.
    #[arg(long, default_value_t = 1000)]
    pub(crate) status_interval_ms: u64,
    /// Adaptive rescheduling on the provisioner's facts only by the timers, as OpenKruise:
    /// no pod events read (stuck pods move after rescheduleCriticalSeconds), no node room
    /// read (held subsets come back when their hold ends; rebalancing may move pods into
    /// a subset without room).
    #[arg(long)]
    pub(crate) no_capacity_signals: bool,
    /// One more pod event that means something for a stuck pod, as
    /// REASON[@SOURCE]=no-capacity|capacity-coming (repeatable; besides cluster-autoscaler's
    /// and Karpenter's own, docs/operations.md "Elastic capacity").
    #[arg(long = "capacity-signal", value_parser = parse_signal)]
    pub(crate) capacity_signals: Vec<workloadspread_core::controller::capacity::SignalRule>,
    /// How long (seconds) a stuck pod whose capacity a provisioner is adding may wait in
    /// its subset in all, past rescheduleCriticalSeconds; 0: not past it. The
    /// WorkloadSpread annotation workloadspread.io/capacity-wait-seconds overrides it.
    #[arg(long, default_value_t = 0)]
    pub(crate) capacity_wait_seconds: u64,
}

fn parse_signal(s: &str) -> Result<workloadspread_core::controller::capacity::SignalRule, String> {
    workloadspread_core::controller::capacity::parse_rule(s)
}

impl RunArgs {
    /// The capacity reader's settings.
    pub fn capacity(&self) -> capacity::Settings {
        let mut rules = workloadspread_core::controller::capacity::default_rules();
        rules.extend(self.capacity_signals.iter().cloned());
        capacity::Settings {
            enabled: !self.no_capacity_signals,
            rules,
            wait_seconds: self.capacity_wait_seconds,
            poll: Duration::from_secs(2),
        }
    }
}

/// Run as `kubectl-workloadspread` (a kubectl plugin: `kubectl workloadspread -n NS
/// NAME`), the arguments are those of `status`.
pub fn parse_cli() -> Cli {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let plugin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("kubectl-workloadspread"));
    if plugin {
        args.insert(1, "status".into());
    }
    Cli::parse_from(args)
}

//! `workloadspread-controller`: keeps WorkloadSpread statuses true, orders scale-in
//! with deletion costs, adopts existing pods and reschedules unschedulable ones.
#![forbid(unsafe_code)]

mod args;
mod backoff;
mod calls;
mod capacity;
mod contest;
mod context;
mod converge;
mod creating;
mod fetch;
mod inputs;
mod leader;
mod metrics;
mod offline;
mod pacing;
mod placeholders;
mod pod_caches;
mod rebalance;
mod reconciler;
mod status;
mod watch;
mod workloads;
mod writer;
mod writes;

use args::{parse_cli, Command};

fn main() {
    let cli = parse_cli();
    let json_logs = matches!(&cli.command, Command::Run(a) if a.log_format == "json");
    init_logging(json_logs);
    let result = match cli.command {
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(watch::run(args))),
        Command::Reconcile(args) => offline::reconcile(args),
        Command::Plan(args) => offline::plan(args),
        Command::Status(args) => status::status(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn init_logging(json: bool) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

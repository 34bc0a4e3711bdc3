//! Where the API server's CPU goes during a series: with `WS_BENCH_PROFILE=<dir>`, each
//! row fetches a CPU profile of the API server (its `/debug/pprof/profile`, on by
//! default) over the first `WS_BENCH_PROFILE_SECONDS` (default 5) of the series and
//! writes it to `<dir>/<row>-c<concurrency>.pprof` (`go tool pprof -top` reads it).
//! The series should outlast the profile: lengthen it with `WS_BENCH_PODS`. Rows with
//! our processes (or OpenKruise's) also get a `perf record -g` of each over the same
//! seconds, `<dir>/<row>-c<concurrency>-<process>.perf` (`perf report` reads it), when
//! `perf` is installed. Off by default: `make bench` measures without a profiler running,
//! then takes the profiles in a run of its own (`scripts/bench.sh`).

use anyhow::{Context, Result};
use axum::http::Request;
use futures::AsyncReadExt;
use kube::Client;
use std::path::PathBuf;
use tokio::task::JoinHandle;

/// A profile being taken, or nothing when profiling is off; with the `perf` recorders
/// of our processes.
pub(crate) struct Profile(Option<JoinHandle<Result<()>>>, Vec<tokio::process::Child>);

/// Starts a profile of the API server named after the row, if `WS_BENCH_PROFILE` is set,
/// and one of each of `processes` (name, pid) with `perf` where it is installed;
/// a `WS_BENCH_PROFILE_SECONDS` that is not a whole number of seconds is an error.
pub(crate) fn during_series(
    client: &Client,
    row: String,
    concurrency: usize,
    processes: &[(&str, u32)],
) -> Result<Profile> {
    let Some(dir) = std::env::var_os("WS_BENCH_PROFILE").map(PathBuf::from) else {
        return Ok(Profile(None, Vec::new()));
    };
    let seconds: u64 = match std::env::var("WS_BENCH_PROFILE_SECONDS") {
        Err(_) => 5,
        Ok(v) => v.parse().ok().filter(|&s| s > 0).with_context(|| {
            format!("WS_BENCH_PROFILE_SECONDS={v}: expected a whole number of seconds")
        })?,
    };
    let name: String = row
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("{name}-c{concurrency}.pprof"));
    std::fs::create_dir_all(&dir)?;
    let mut recorders = Vec::new();
    for (process, pid) in processes {
        let out = dir.join(format!("{name}-c{concurrency}-{process}.perf"));
        let started = tokio::process::Command::new("perf")
            .args([
                "record",
                "-q",
                "-F",
                "499",
                "-g",
                "-p",
                &pid.to_string(),
                "-o",
            ])
            .arg(&out)
            .args(["--", "sleep", &seconds.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        match started {
            Ok(child) => recorders.push(child),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("no perf installed: {process} is not profiled");
            }
            Err(e) => return Err(e).context("starting perf"),
        }
    }
    let client = client.clone();
    Ok(Profile(
        Some(tokio::spawn(async move {
            let request =
                Request::get(format!("/debug/pprof/profile?seconds={seconds}")).body(Vec::new())?;
            let mut body = Vec::new();
            client
                .request_stream(request)
                .await
                .context("fetching the API server's CPU profile")?
                .read_to_end(&mut body)
                .await?;
            std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("API server profile: {}", path.display());
            Ok(())
        })),
        recorders,
    ))
}

impl Profile {
    /// Waits for the profile (it may end after the series) and writes it.
    pub(crate) async fn finish(self) -> Result<()> {
        for mut recorder in self.1 {
            let status = recorder.wait().await.context("waiting for perf")?;
            anyhow::ensure!(status.success(), "perf record ended with {status}");
        }
        match self.0 {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}

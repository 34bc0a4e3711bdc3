//! The host's clocks: the shared ones (`workloadspread_kube::clock`: wall time for what
//! other processes read, the process's monotonic time for durations measured inside it)
//! and whole seconds since the epoch for certificate lifetimes. The counter's clock, with
//! the fault tests' offset, is `counter::CounterSettings::clock_offset`.

pub use workloadspread_kube::clock::{monotonic_now, now};

/// Seconds since the epoch (certificate lifetimes, re-invocation tokens).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

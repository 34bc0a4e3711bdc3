//! The host's clocks: wall time for what other processes read (stamps in a status), the
//! process's monotonic time for durations measured inside it, and the counter's clock
//! with the fault tests' offset.

/// Wall time now.
pub fn now() -> workloadspread_core::Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    workloadspread_core::timestamp_since_epoch(since)
}

/// This process's monotonic time as a timestamp (its start's wall time plus the time
/// elapsed since): for durations measured inside the process only (how long a
/// placeholder has been seen), which a step of the wall clock must not stretch or cut.
pub fn monotonic_now() -> workloadspread_core::Timestamp {
    static START: std::sync::OnceLock<(std::time::Instant, std::time::Duration)> =
        std::sync::OnceLock::new();
    let (at, wall) = START.get_or_init(|| {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (std::time::Instant::now(), wall)
    });
    workloadspread_core::timestamp_since_epoch(*wall + at.elapsed())
}

/// Seconds added to this process's wall clock by [`skewed_now`] (`serve
/// --clock-offset-seconds`, for fault tests: a host whose clock is off).
static CLOCK_OFFSET_SECONDS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Sets [`skewed_now`]'s offset.
pub fn set_clock_offset(seconds: i64) {
    CLOCK_OFFSET_SECONDS.store(seconds, std::sync::atomic::Ordering::Relaxed);
}

/// [`now`] moved by the configured offset: the clock the counter stamps with.
pub fn skewed_now() -> workloadspread_core::Timestamp {
    let offset = CLOCK_OFFSET_SECONDS.load(std::sync::atomic::Ordering::Relaxed);
    now() + k8s_openapi::jiff::SignedDuration::from_secs(offset)
}

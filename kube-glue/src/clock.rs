//! The clocks both binaries read: wall time for what other processes read (stamps in a
//! status), and the process's monotonic time for durations measured inside it.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};
use workloadspread_core::Timestamp;

/// Wall time now (`core` never reads a clock itself).
pub fn now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    workloadspread_core::timestamp_since_epoch(since)
}

/// This process's monotonic time as a timestamp (its start's wall time plus the time
/// elapsed since): for durations measured inside the process only, which a step of the
/// wall clock must not stretch or cut.
pub fn monotonic_now() -> Timestamp {
    static START: OnceLock<(Instant, Duration)> = OnceLock::new();
    let (at, wall) = START.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        (Instant::now(), wall)
    });
    workloadspread_core::timestamp_since_epoch(*wall + at.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_time_moves_forward_from_the_wall_clock_at_start() {
        let a = monotonic_now();
        let b = monotonic_now();
        assert!(b >= a);
        let wall = now();
        assert!(wall.duration_since(a).as_secs().abs() < 5);
    }
}

//! What one caller can make the host do (issue #30): a per-namespace rate of pod
//! creations that may claim a slot, how many admissions are in flight, how long a
//! request may take to arrive, and whether the worst case of all of it fits the
//! container's memory limit (checked at start).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Memory the host needs besides its evaluations (caches, buffers, the compiled module).
pub const RESERVE_MIB: u64 = 192;
/// Host-side copies of one request body while it is decoded (the body, its JSON tree,
/// the guest's payload), as a multiple of its size (`host/tests/security.rs` measures the
/// peak under 8 MiB bodies).
pub const BODY_COPIES: u64 = 4;
/// Most namespaces whose claim buckets are kept; idle full buckets are dropped first.
const MAX_BUCKETS: usize = 4096;

/// A token bucket per namespace: `burst` claims at once, refilled at `per_second`.
pub struct ClaimLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl ClaimLimiter {
    /// `per_second` 0 disables the limit.
    pub fn new(per_second: f64, burst: u32) -> Self {
        ClaimLimiter {
            per_second,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.per_second > 0.0
    }

    /// Takes one token of `namespace` at `now`; false when its bucket is empty.
    pub fn try_take(&self, namespace: &str, now: Instant) -> bool {
        if !self.enabled() {
            return true;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(namespace) {
            self.forget_full(&mut buckets, now);
        }
        let bucket = buckets.entry(namespace.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    /// Buckets that have refilled are the same as no bucket: drop them (bounded map).
    fn forget_full(&self, buckets: &mut HashMap<String, Bucket>, now: Instant) {
        let full_after = Duration::from_secs_f64(self.burst / self.per_second);
        buckets.retain(|_, b| now.saturating_duration_since(b.at) < full_after);
        if buckets.len() >= MAX_BUCKETS {
            // Every bucket is active: drop the oldest half (a namespace then starts full).
            let mut ages: Vec<Instant> = buckets.values().map(|b| b.at).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            buckets.retain(|_, b| b.at > cut);
        }
    }

    /// The refusal message (what to do included).
    pub fn refusal(&self, namespace: &str) -> String {
        format!(
            "namespace {namespace} created pods that may claim a WorkloadSpread slot faster than \
             {} per second (burst {}); the pod's controller retries on its own — if this rate is \
             expected, raise the host's --claim-rate/--claim-burst (chart host.claimRate)",
            self.per_second, self.burst
        )
    }
}

/// What the memory worst case depends on.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    /// `--max-concurrency`.
    pub concurrency: usize,
    /// `--max-memory-mib`.
    pub max_memory_mib: usize,
    /// `--max-request-bytes`.
    pub max_request_bytes: usize,
    /// Connections open at most, every listener's (`--max-connections` and
    /// `--health-max-connections`).
    pub connections: usize,
}

/// Worst-case memory in MiB: every slot with a guest at its cap and the copies of a body of
/// up to `super::LARGE_BODY`, the few large-body slots (`super::LARGE_SLOTS`) with those of
/// bodies of up to `max_request_bytes`, the read budgets (`super::body::read_budget`, and
/// `/convert`'s, `super::body::convert_budget`), which hold the bodies themselves (read
/// before a slot is taken, issue #41), every open connection's buffers
/// (`workloadspread_kube::serve::CONNECTION_BYTES`; security review item "connection
/// buffers in the memory-fit check"), and the reserve.
pub fn worst_case_mib(sizing: Sizing) -> u64 {
    let mib = |bytes: usize| (bytes as u64).div_ceil(1 << 20);
    let small = mib(sizing.max_request_bytes.min(super::LARGE_BODY));
    let large = mib(sizing.max_request_bytes.saturating_sub(super::LARGE_BODY));
    let large_slots = sizing.concurrency.min(super::LARGE_SLOTS) as u64;
    let copies = BODY_COPIES - 1;
    let connections = sizing
        .connections
        .saturating_mul(workloadspread_kube::serve::CONNECTION_BYTES);
    (sizing.concurrency as u64).saturating_mul(sizing.max_memory_mib as u64 + copies * small)
        + large_slots * copies * large
        + mib(super::body::read_budget(sizing.max_request_bytes))
        + mib(super::body::convert_budget(sizing.max_request_bytes))
        + mib(connections)
        + RESERVE_MIB
}

/// A configuration whose worst case exceeds the container's memory limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "--max-concurrency {} evaluations with --max-memory-mib {}, --max-request-bytes {} and \
     {} connections need {need} MiB at their worst (guests at their cap, bodies decoded \
     {BODY_COPIES} times, connection buffers, {RESERVE_MIB} MiB for the rest), over the \
     memory limit of {limit_mib} MiB: lower --max-concurrency (at most {fits} fit), \
     --max-memory-mib, --max-request-bytes or --max-connections, or raise the container's \
     memory limit",
    sizing.concurrency, sizing.max_memory_mib, sizing.max_request_bytes, sizing.connections
)]
pub struct MemoryMisfit {
    limit_mib: u64,
    sizing: Sizing,
    need: u64,
    /// The most evaluations that would fit.
    fits: usize,
}

/// Refuses a configuration whose worst case exceeds the container's memory limit: the
/// kernel would kill the host under load (and with `failurePolicy: Fail`, pods with it).
pub fn check_memory_fit(limit_mib: u64, sizing: Sizing) -> Result<(), MemoryMisfit> {
    let need = worst_case_mib(sizing);
    if need <= limit_mib {
        return Ok(());
    }
    let fits = (1..=sizing.concurrency)
        .rev()
        .find(|&c| {
            worst_case_mib(Sizing {
                concurrency: c,
                ..sizing
            }) <= limit_mib
        })
        .unwrap_or(0);
    Err(MemoryMisfit {
        limit_mib,
        sizing,
        need,
        fits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_its_burst_then_its_rate() {
        let limiter = ClaimLimiter::new(10.0, 5);
        let t0 = Instant::now();
        let taken = (0..8).filter(|_| limiter.try_take("a", t0)).count();
        assert_eq!(taken, 5, "the burst");
        assert!(limiter.try_take("b", t0), "namespaces are separate");
        assert!(!limiter.try_take("a", t0 + Duration::from_millis(50)));
        assert!(
            limiter.try_take("a", t0 + Duration::from_millis(100)),
            "10/s"
        );
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..8).filter(|_| limiter.try_take("a", later)).count(), 5);
        assert!(limiter.refusal("a").contains("--claim-rate"));
        assert!(ClaimLimiter::new(0.0, 1).try_take("a", t0), "0 disables");
    }

    #[test]
    fn buckets_stay_bounded() {
        let limiter = ClaimLimiter::new(1.0, 2);
        let t0 = Instant::now();
        for i in 0..(MAX_BUCKETS * 2) {
            limiter.try_take(&format!("ns-{i}"), t0 + Duration::from_millis(i as u64));
        }
        assert!(limiter.buckets.lock().unwrap().len() <= MAX_BUCKETS);
    }

    #[test]
    fn memory_fit_is_checked_with_what_to_change() {
        let sizing = |concurrency, max_memory_mib| Sizing {
            concurrency,
            max_memory_mib,
            max_request_bytes: 8 << 20,
            connections: 512 + 64,
        };
        // The old defaults: 256 evaluations of up to 256 MiB under a 1 GiB limit.
        let err = check_memory_fit(1024, sizing(256, 256))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("at most 2 fit") && err.contains("--max-concurrency"),
            "{err}"
        );
        // The chart's defaults fit: 16 × (32 + 3 × 1) + 2 × 3 × 7 + 32 (read budget) + 16
        // (/convert's) + 576 connections × 192 KiB (108) + 192.
        assert_eq!(
            worst_case_mib(sizing(16, 32)),
            16 * 35 + 2 * 3 * 7 + 32 + 16 + 108 + 192
        );
        check_memory_fit(1024, sizing(16, 32)).unwrap();
        // Connections count: 10 000 of them do not fit beside the rest.
        let crowded = Sizing {
            connections: 10_000,
            ..sizing(16, 32)
        };
        assert!(check_memory_fit(1024, crowded).is_err());
    }
}

//! Rebalancing, applied (`core::controller::rebalance` decides): evicts the pods the
//! planner names through `policy/v1` Eviction, so PodDisruptionBudgets hold; a refused
//! eviction (429: a budget allows no disruption now) is retried a later interval. At
//! most `--rebalance-max-evictions` per WorkloadSpread per `--rebalance-interval-seconds`.
//! Each eviction is an Event on the WorkloadSpread and a metric.

use crate::metrics::Metrics;
use crate::writer::{Evicted, WriteError, Writer};
use crate::writes::ws_reference;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::rebalance::{Hold, Rebalance};
use workloadspread_core::controller::Event;

/// The cluster default and the rate limit (`RebalanceArgs` in `main`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Rebalance WorkloadSpreads without the annotation.
    pub default: bool,
    pub max_evictions: usize,
    pub interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default: false,
            max_evictions: 1,
            interval: Duration::from_secs(30),
        }
    }
}

/// Evictions made per WorkloadSpread within the interval (entries older than the
/// interval are dropped; a WorkloadSpread without recent evictions holds no entry).
pub struct Limiter {
    pub settings: Settings,
    recent: Mutex<HashMap<(String, String), Vec<Instant>>>,
}

impl Limiter {
    pub fn new(settings: Settings) -> Self {
        Limiter {
            settings,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Evictions still allowed now, and when the next one is allowed if none is.
    pub fn budget(&self, key: &(String, String)) -> (usize, Option<Duration>) {
        self.budget_at(key, Instant::now())
    }

    fn budget_at(&self, key: &(String, String), now: Instant) -> (usize, Option<Duration>) {
        let interval = self.settings.interval;
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.retain(|_, times| {
            times.retain(|t| now.duration_since(*t) < interval);
            !times.is_empty()
        });
        let used = recent.get(key).map_or(0, Vec::len);
        let left = self.settings.max_evictions.saturating_sub(used);
        let next = (left == 0)
            .then(|| recent.get(key).and_then(|t| t.iter().min().copied()))
            .flatten()
            .map(|oldest| interval.saturating_sub(now.duration_since(oldest)));
        (left, next)
    }

    /// Counts an eviction (or a refused one: the budget said no, wait the interval).
    pub fn record(&self, key: (String, String)) {
        self.record_at(key, Instant::now());
    }

    fn record_at(&self, key: (String, String), at: Instant) {
        self.recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .push(at);
    }
}

/// Evicts what `plan` names within `limiter`'s budget; returns when to reconcile again
/// (the next interval, while the spread is off plan).
pub async fn apply(
    ws: &WorkloadSpread,
    plan: &Rebalance,
    limiter: &Limiter,
    writer: &Writer,
    metrics: &Metrics,
) -> Result<Option<Duration>, WriteError> {
    let key = (ws.namespace().to_string(), ws.name().to_string());
    let interval = limiter.settings.interval;
    match &plan.hold {
        Some(Hold::Off) | Some(Hold::Unsupported(_)) | Some(Hold::OnPlan) => return Ok(None),
        Some(Hold::RateLimited) => return Ok(limiter.budget(&key).1.or(Some(interval))),
        Some(hold) => {
            tracing::debug!(workloadspread = %key.1, namespace = %key.0, "not rebalancing: {hold}");
            // Off plan and held: looked at again once an interval, whatever clears the
            // hold (a workload's status, a pod's readiness, the last admission counted)
            // — not every such change reaches this WorkloadSpread as a watch event.
            return Ok(Some(interval));
        }
        None => {}
    }
    for eviction in &plan.evictions {
        let outcome = writer.evict(ws.namespace(), &eviction.pod).await?;
        limiter.record(key.clone());
        let event = match &outcome {
            Evicted::Done => {
                metrics.rebalance_evictions(Metrics::EVICTED).inc();
                tracing::info!(workloadspread = %key.1, namespace = %key.0, pod = %eviction.pod,
                    "rebalancing: evicted ({})", eviction.message);
                Event::normal(
                    "RebalanceEvicted",
                    format!(
                        "Evicted Pod {} (deletion cost {}): {}",
                        eviction.pod, eviction.cost, eviction.message
                    ),
                )
            }
            Evicted::Refused(why) => {
                metrics.rebalance_evictions(Metrics::REFUSED).inc();
                tracing::info!(workloadspread = %key.1, namespace = %key.0, pod = %eviction.pod,
                    "rebalancing: eviction refused, retried in {interval:?}: {why}");
                Event::normal(
                    "RebalanceEvictionRefused",
                    format!(
                        "Eviction of Pod {} refused ({why}); retried in {}s",
                        eviction.pod,
                        interval.as_secs()
                    ),
                )
            }
            Evicted::Gone => continue,
        };
        writer.event(&ws_reference(ws), &event).await;
        if matches!(outcome, Evicted::Refused(_)) {
            break;
        }
    }
    Ok(Some(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_allows_max_evictions_per_interval() {
        let limiter = Limiter::new(Settings {
            default: true,
            max_evictions: 2,
            interval: Duration::from_millis(300),
        });
        let key = ("ns".to_string(), "web".to_string());
        let other = ("ns".to_string(), "db".to_string());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(limiter.budget_at(&key, at(0)), (2, None));
        limiter.record_at(key.clone(), at(0));
        assert_eq!(limiter.budget_at(&key, at(10)).0, 1);
        limiter.record_at(key.clone(), at(100));
        assert_eq!(
            limiter.budget_at(&key, at(200)),
            (0, Some(Duration::from_millis(100))),
            "the oldest eviction leaves the interval at 300 ms"
        );
        assert_eq!(
            limiter.budget_at(&other, at(200)),
            (2, None),
            "per WorkloadSpread"
        );
        assert_eq!(limiter.budget_at(&key, at(300)).0, 1);
        assert_eq!(limiter.budget_at(&key, at(400)), (2, None));
        let entries = limiter.recent.lock().unwrap().len();
        assert_eq!(entries, 0, "expired entries are dropped");
    }
}

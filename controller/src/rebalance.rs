//! Rebalancing, applied (`core::controller::rebalance` decides): evicts the pods the
//! planner names through `policy/v1` Eviction, so PodDisruptionBudgets hold; a refused
//! eviction (429: a budget allows no disruption now) is retried a later interval. At
//! most `--rebalance-max-evictions` per WorkloadSpread per `--rebalance-interval-seconds`.
//! Each eviction is an Event on the WorkloadSpread and a metric.

use crate::context::{Context, Error};
use crate::metrics::Metrics;
use crate::writes::publish_event;
use k8s_openapi::api::core::v1::Pod;
use kube::api::EvictParams;
use kube::Api;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::rebalance::{Hold, Rebalance};
use workloadspread_core::controller::Event;

/// Bound of one eviction call.
const EVICT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// How an eviction ended.
enum Outcome {
    Evicted,
    /// 429: a PodDisruptionBudget allows no disruption now.
    Refused(String),
    Gone,
}

/// Evicts what `plan` names; returns when to reconcile again (the next interval, while
/// the spread is off plan).
pub async fn apply(
    ws: &WorkloadSpread,
    plan: &Rebalance,
    ctx: &Context,
) -> Result<Option<Duration>, Error> {
    let key = (ws.namespace().to_string(), ws.name().to_string());
    let interval = ctx.limiter.settings.interval;
    match &plan.hold {
        Some(Hold::Off) | Some(Hold::Unsupported(_)) | Some(Hold::OnPlan) => return Ok(None),
        Some(Hold::RateLimited) => return Ok(ctx.limiter.budget(&key).1.or(Some(interval))),
        Some(hold) => {
            tracing::debug!(workloadspread = %key.1, namespace = %key.0, "not rebalancing: {hold}");
            // Off plan and held: looked at again once an interval, whatever clears the
            // hold (a workload's status, a pod's readiness, the last admission counted)
            // — not every such change reaches this WorkloadSpread as a watch event.
            return Ok(Some(interval));
        }
        None => {}
    }
    let pods: Api<Pod> = Api::namespaced(ctx.evictions.clone(), ws.namespace());
    for eviction in &plan.evictions {
        crate::context::ensure_leading(ctx)?;
        let outcome = evict(&pods, &eviction.pod).await?;
        ctx.limiter.record(key.clone());
        let event = match &outcome {
            Outcome::Evicted => {
                ctx.metrics.rebalance_evictions(Metrics::EVICTED).inc();
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
            Outcome::Refused(why) => {
                ctx.metrics.rebalance_evictions(Metrics::REFUSED).inc();
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
            Outcome::Gone => continue,
        };
        publish_event(ws, &event, ctx).await;
        if matches!(outcome, Outcome::Refused(_)) {
            break;
        }
    }
    Ok(Some(interval))
}

async fn evict(pods: &Api<Pod>, name: &str) -> Result<Outcome, Error> {
    let params = EvictParams::default();
    let result = tokio::time::timeout(EVICT_TIMEOUT, pods.evict(name, &params))
        .await
        .map_err(|_| Error::Timeout(EVICT_TIMEOUT))?;
    match result {
        Ok(_) => Ok(Outcome::Evicted),
        Err(kube::Error::Api(s)) if s.code == 429 => Ok(Outcome::Refused(s.message)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Outcome::Gone),
        Err(e) => Err(Error::Evict {
            pod: name.to_string(),
            source: Box::new(e),
        }),
    }
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

//! The limits' metrics: requests refused before evaluation, connections shed, claims
//! rate-limited, evaluations running.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Why the host refused a request before evaluating it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Refusal {
    /// The namespace's pod creations exceeded `--claim-rate`/`--claim-burst`.
    ClaimRate,
    /// Every evaluation slot stayed busy for the whole wait.
    Busy,
    /// The body did not arrive within `--request-read-timeout-seconds`.
    BodyTimeout,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub reason: Refusal,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    pub namespace: String,
}

/// A listener of the host.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Listener {
    Webhook,
    Health,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: Listener,
}

/// Counters of the limits (registered with the host's metrics).
#[derive(Clone, Default)]
pub struct LimitMetrics {
    pub refused: Family<RefusalLabels, Counter>,
    pub claims_limited: Family<NamespaceLabels, Counter>,
    /// Connections shed at a listener's cap (`workloadspread_kube::serve::shed`).
    pub shed: Family<ListenerLabels, Counter>,
    /// Policy evaluations running, each holding an evaluation slot: at most
    /// `--max-concurrency`, also when their clients went away (security review R13).
    pub evaluations_running: Gauge,
}

impl LimitMetrics {
    pub fn register(&self, registry: &mut Registry) {
        // Every reason exported from the start (0): rate() and alerts see the series.
        for reason in [Refusal::ClaimRate, Refusal::Busy, Refusal::BodyTimeout] {
            self.refused
                .get_or_create(&RefusalLabels { reason })
                .inc_by(0);
        }
        registry.register(
            "refused_requests",
            "Requests refused before evaluation: claim rate, all slots busy, body too slow",
            self.refused.clone(),
        );
        for listener in [Listener::Webhook, Listener::Health] {
            self.shed
                .get_or_create(&ListenerLabels { listener })
                .inc_by(0);
        }
        registry.register(
            "connections_shed",
            "Connections closed at the listener's --max-connections while waiting on their clients: the heaviest peer's longest-waiting (a connection with a request in flight is never shed)",
            self.shed.clone(),
        );
        registry.register(
            "evaluations_running",
            "Policy evaluations running, each holding one of --max-concurrency slots (one whose client went away holds its slot until it ends)",
            self.evaluations_running.clone(),
        );
        registry.register(
            "claims_rate_limited",
            "Pod creations refused per namespace by the claim rate limit (--claim-rate)",
            self.claims_limited.clone(),
        );
    }

    pub fn refuse(&self, reason: Refusal) {
        self.refused.get_or_create(&RefusalLabels { reason }).inc();
    }
}

/// Counts one evaluation as running until dropped.
pub struct Running(Gauge);

impl Running {
    pub fn start(metrics: &LimitMetrics) -> Self {
        metrics.evaluations_running.inc();
        Running(metrics.evaluations_running.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

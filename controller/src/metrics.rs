//! Prometheus metrics of the controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpreadStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubsetLabels {
    pub namespace: String,
    pub workloadspread: String,
    pub subset: String,
}

/// Pod patches by purpose.
#[derive(Default)]
pub struct Patches {
    pub deletion_cost: Counter,
    pub adoption: Counter,
    /// Pods whose pending label was removed (the status counts them).
    pub pending_label: Counter,
}

pub struct Metrics {
    registry: Registry,
    pub reconcile_duration: Histogram,
    pub reconcile_errors: Counter,
    pub subset_pods: Family<SubsetLabels, Gauge>,
    pub patches: Patches,
    pub rescheduled: Counter,
    pub status_writes: Counter,
    pub conflicts: Counter,
    /// Namespaces whose pods are cached (those with a WorkloadSpread, plus a grace).
    pub pod_cache_namespaces: Gauge,
    /// creatingPods entries dropped early: no pod carries them (`--creating-drop-seconds`).
    pub creating_dropped: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("workloadspread_controller");
        let reconcile_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let reconcile_errors = Counter::default();
        let subset_pods = Family::<SubsetLabels, Gauge>::default();
        let patches = Patches::default();
        let rescheduled = Counter::default();
        let status_writes = Counter::default();
        let conflicts = Counter::default();
        let pod_cache_namespaces = Gauge::default();
        let creating_dropped = Counter::default();
        registry.register(
            "creating_dropped_early",
            "creatingPods entries dropped before the creating window: no pod carries them (a live read confirmed)",
            creating_dropped.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile time",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles",
            reconcile_errors.clone(),
        );
        registry.register(
            "subset_pods",
            "Active pods per subset (status.replicas)",
            subset_pods.clone(),
        );
        registry.register(
            "deletion_cost_patches",
            "Pod deletion-cost patches",
            patches.deletion_cost.clone(),
        );
        registry.register(
            "pending_label_removals",
            "Pods whose workloadspread.io/pending label was removed once the status counted them",
            patches.pending_label.clone(),
        );
        registry.register(
            "adoption_patches",
            "Existing pods adopted into a subset",
            patches.adoption.clone(),
        );
        registry.register(
            "pods_rescheduled",
            "Unschedulable pods deleted for rescheduling",
            rescheduled.clone(),
        );
        registry.register(
            "status_writes",
            "WorkloadSpread status writes",
            status_writes.clone(),
        );
        registry.register(
            "status_conflicts",
            "Status writes answered 409 (re-read and recomputed)",
            conflicts.clone(),
        );
        registry.register(
            "pod_cache_namespaces",
            "Namespaces whose pods are watched (those with a WorkloadSpread)",
            pod_cache_namespaces.clone(),
        );
        Metrics {
            registry,
            creating_dropped,
            pod_cache_namespaces,
            reconcile_duration,
            reconcile_errors,
            subset_pods,
            patches,
            rescheduled,
            status_writes,
            conflicts,
        }
    }

    pub fn observe_reconcile(&self, took: Duration, failed: bool) {
        self.reconcile_duration.observe(took.as_secs_f64());
        if failed {
            self.reconcile_errors.inc();
        }
    }

    pub fn record_subsets(&self, namespace: &str, name: &str, status: &WorkloadSpreadStatus) {
        for s in &status.subset_statuses {
            self.subset_pods
                .get_or_create(&SubsetLabels {
                    namespace: namespace.to_string(),
                    workloadspread: name.to_string(),
                    subset: s.name.clone(),
                })
                .set(i64::from(s.replicas));
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

//! Prometheus metrics of the controller.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpreadStatus;
use workloadspread_core::controller::view::StatusView;

mod labels;

pub use labels::*;

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
    /// Failed reconciles by kind (`context::Error::metric_label`).
    pub reconcile_errors: Family<FailureLabels, Counter>,
    /// Failed writes by what they wrote and how they failed (`writer::Writer`).
    write_failures: Family<WriteFailureLabels, Counter>,
    pub subset_pods: Family<SubsetLabels, Gauge>,
    pub patches: Patches,
    pub rescheduled: Counter,
    pub status_writes: Counter,
    pub conflicts: Counter,
    /// Namespaces whose pods are cached (those with a WorkloadSpread, plus a grace).
    pub pod_cache_namespaces: Gauge,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// Per subset: `maxReplicas` for the workload's current replicas, the planned count.
    pub subset_maximum: Family<SubsetLabels, Gauge>,
    pub subset_planned: Family<SubsetLabels, Gauge>,
    /// Per WorkloadSpread: 1 while its pods match the planned spread.
    pub on_plan: Family<SpreadLabels, Gauge>,
    /// WorkloadSpreads another manager writes too, left alone (the `contest` module).
    pub contested: Gauge,
    /// Placeholders expired (a host died holding reserved slots).
    pub placeholders_expired: Counter,
    /// Per WorkloadSpread: age of the oldest pod labelled pending at the last reconcile.
    pub pending_oldest: Family<SpreadLabels, Gauge>,
    /// Rebalancing evictions by result ([`Metrics::EVICTED`], [`Metrics::REFUSED`]).
    rebalance: Family<ResultLabels, Counter>,
    /// creatingPods entries dropped early: no pod carries them (`--creating-drop-seconds`).
    pub creating_dropped: Counter,
    /// Connections shed at the metrics port's cap (`workloadspread_kube::serve`).
    pub connections_shed: Counter,
    /// Reconciles deferred to the end of the status interval (the `pacing` module).
    pub reconciles_deferred: Counter,
    /// Stuck pods rescheduled, by cause (`timer`, `no_capacity`, `wait_expired`; #42).
    fallbacks: Family<CauseLabels, Counter>,
    /// Held subsets brought back early because a node has room (#42).
    pub recovered_on_capacity: Counter,
    /// Reads of provisioner events and nodes' pods, by result (#42).
    capacity_reads: Family<ReadLabels, Counter>,
    /// Waits for coming capacity, by how they ended (#42).
    capacity_waits: Family<OutcomeLabels, Counter>,
    /// The subsets exported per WorkloadSpread (namespace, name): their series go with a
    /// subset that is no longer in the spec, and all of them with the WorkloadSpread
    /// (issue #41: the labels are names tenants choose; churn must not grow the registry).
    series: Mutex<BTreeMap<(String, String), BTreeSet<String>>>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("workloadspread_controller");
        let reconcile_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let reconcile_errors = Family::<FailureLabels, Counter>::default();
        // Every kind exported from the start (0): rate() and alerts see the series.
        for kind in ReconcileFailure::ALL {
            reconcile_errors
                .get_or_create(&FailureLabels { kind })
                .inc_by(0);
        }
        let write_failures = Family::<WriteFailureLabels, Counter>::default();
        for write in WriteTarget::ALL {
            for kind in WriteFailure::ALL {
                write_failures
                    .get_or_create(&WriteFailureLabels { write, kind })
                    .inc_by(0);
            }
        }
        registry.register(
            "write_failures",
            "Failed writes by what they wrote (write: Status, Adoption, PodMetadata, Deletion, Eviction, Event) and how they failed (kind: NotLeader (the Lease was not renewed in time: not sent), Timeout (no answer in time), Api (refused, or the API server was unreachable))",
            write_failures.clone(),
        );
        let subset_pods = Family::<SubsetLabels, Gauge>::default();
        let patches = Patches::default();
        let rescheduled = Counter::default();
        let status_writes = Counter::default();
        let conflicts = Counter::default();
        let pod_cache_namespaces = Gauge::default();
        let rebalance = Family::<ResultLabels, Counter>::default();
        // Both results exported from the start (0): rate() and alerts see the series.
        for result in [Self::EVICTED, Self::REFUSED] {
            rebalance.get_or_create(&ResultLabels { result }).inc_by(0);
        }
        registry.register(
            "rebalance_evictions",
            "Pods evicted to rebalance a spread (result=evicted), or whose eviction a \
             PodDisruptionBudget refused (result=refused)",
            rebalance.clone(),
        );
        let connections_shed = Counter::default();
        registry.register(
            "connections_shed",
            "Connections of the metrics and probe port closed at its --max-connections while waiting on their clients: the heaviest peer's longest-waiting (security review R9)",
            connections_shed.clone(),
        );
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
        let reconciles_deferred = Counter::default();
        registry.register(
            "reconciles_deferred",
            "Reconciles deferred to the end of the status interval after a status write (a burst coalesced: --status-interval-ms)",
            reconciles_deferred.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by kind: Api (an API call failed), Timeout (one did not answer in time), Conflicts (the status kept conflicting), CachesNotSynced, NotLeader (the Lease was not renewed in time: nothing written), PodMetadata (a deletion-cost or pending-label patch failed), Evict (a rebalancing eviction failed), Input (the workload or its pods could not be read), Decode",
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
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica leads (holds the Lease, or runs without leader election); standbys 0",
            leader.clone(),
        );
        let subset_maximum = Family::<SubsetLabels, Gauge>::default();
        registry.register(
            "subset_maximum",
            "maxReplicas of each limited subset for the workload's current replicas",
            subset_maximum.clone(),
        );
        let subset_planned = Family::<SubsetLabels, Gauge>::default();
        registry.register(
            "subset_planned",
            "The planner's pod count per subset for the workload's current replicas",
            subset_planned.clone(),
        );
        let contested = Gauge::default();
        registry.register(
            "contested_workloadspreads",
            "WorkloadSpreads whose status another manager (OpenKruise's with its WorkloadSpread gate on?) wrote after this controller started: it leaves them alone; their Contested events and /readyz say which and what to do",
            contested.clone(),
        );
        let on_plan = Family::<SpreadLabels, Gauge>::default();
        registry.register(
            "on_plan",
            "1 while every subset holds its planned count of the workload's pods",
            on_plan.clone(),
        );
        let placeholders_expired = Counter::default();
        registry.register(
            "placeholders_expired",
            "Reserved-slot placeholders expired by the controller: a host died (or lost the API server) holding them",
            placeholders_expired.clone(),
        );
        let pending_oldest = Family::<SpreadLabels, Gauge>::default();
        registry.register(
            "pending_oldest_seconds",
            "Age of the oldest pod labelled workloadspread.io/pending at the WorkloadSpread's last reconcile (0: none)",
            pending_oldest.clone(),
        );
        let fallbacks = Family::<CauseLabels, Counter>::default();
        for cause in ["timer", "no_capacity", "wait_expired"] {
            fallbacks.get_or_create(&CauseLabels { cause }).inc_by(0);
        }
        registry.register(
            "fallbacks",
            "Stuck pods deleted to be rescheduled to a later subset, by cause: timer \
             (rescheduleCriticalSeconds), no_capacity (a provisioner said it adds none), \
             wait_expired (capacity was coming, not within the wait bound)",
            fallbacks.clone(),
        );
        let recovered_on_capacity = Counter::default();
        registry.register(
            "subsets_recovered_on_capacity",
            "Unschedulable subsets made schedulable before their hold ended: a node they select has room for the pod",
            recovered_on_capacity.clone(),
        );
        let capacity_reads = Family::<ReadLabels, Counter>::default();
        for what in ["events", "node_pods"] {
            for result in ["ok", "error"] {
                capacity_reads
                    .get_or_create(&ReadLabels { what, result })
                    .inc_by(0);
            }
        }
        registry.register(
            "capacity_reads",
            "Reads of a stuck pod's events (what=events) and of a node's pods (what=node_pods), by result",
            capacity_reads.clone(),
        );
        let capacity_waits = Family::<OutcomeLabels, Counter>::default();
        for outcome in ["landed", "no_capacity", "expired", "gone"] {
            capacity_waits
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(0);
        }
        registry.register(
            "capacity_waits",
            "Stuck pods that waited past rescheduleCriticalSeconds for capacity a provisioner \
             was adding, by how the wait ended: landed (scheduled), no_capacity (the provisioner \
             then said no), expired (the wait bound passed), gone (deleted otherwise)",
            capacity_waits.clone(),
        );
        Metrics {
            registry,
            capacity_waits,
            fallbacks,
            recovered_on_capacity,
            capacity_reads,
            leader,
            subset_maximum,
            subset_planned,
            on_plan,
            contested,
            placeholders_expired,
            pending_oldest,
            rebalance,
            creating_dropped,
            connections_shed,
            reconciles_deferred,
            pod_cache_namespaces,
            reconcile_duration,
            reconcile_errors,
            write_failures,
            subset_pods,
            patches,
            rescheduled,
            status_writes,
            conflicts,
            series: Mutex::default(),
        }
    }

    pub const EVICTED: &'static str = "evicted";

    /// One capacity read (`what`: events | node_pods).
    pub fn capacity_read(&self, what: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.capacity_reads
            .get_or_create(&ReadLabels { what, result })
            .inc();
    }

    /// One wait for coming capacity ended (`capacity::Reader::ended_waits`).
    pub fn wait_ended(&self, outcome: &'static str) {
        self.capacity_waits
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// One stuck pod rescheduled for `cause` (`Cause::label`).
    pub fn fallback(&self, cause: &'static str) {
        self.fallbacks.get_or_create(&CauseLabels { cause }).inc();
    }
    pub const REFUSED: &'static str = "refused";

    /// The rebalancing evictions counter of one result.
    pub fn rebalance_evictions(&self, result: &'static str) -> Counter {
        self.rebalance
            .get_or_create(&ResultLabels { result })
            .clone()
    }

    /// A reconcile that took `took` and failed with an error of kind `failed`, if it did.
    pub fn observe_reconcile(&self, took: Duration, failed: Option<ReconcileFailure>) {
        self.reconcile_duration.observe(took.as_secs_f64());
        if let Some(kind) = failed {
            self.reconcile_errors
                .get_or_create(&FailureLabels { kind })
                .inc();
        }
    }

    /// A `write` that failed `kind`.
    pub fn write_failed(&self, write: WriteTarget, kind: WriteFailure) {
        self.write_failures
            .get_or_create(&WriteFailureLabels { write, kind })
            .inc();
    }

    /// Notes that `namespace/name` exports the series of `subsets` and no others: the
    /// series of a subset it exported before and not now are removed.
    fn track(&self, namespace: &str, name: &str, subsets: BTreeSet<String>) {
        let key = (namespace.to_string(), name.to_string());
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let before = series.insert(key, subsets.clone()).unwrap_or_default();
        for gone in before.difference(&subsets) {
            self.remove_subset(namespace, name, gone);
        }
    }

    fn remove_subset(&self, namespace: &str, name: &str, subset: &str) {
        let labels = SubsetLabels {
            namespace: namespace.to_string(),
            workloadspread: name.to_string(),
            subset: subset.to_string(),
        };
        self.subset_pods.remove(&labels);
        self.subset_maximum.remove(&labels);
        self.subset_planned.remove(&labels);
    }

    /// Removes every series of the WorkloadSpreads not in `live` (namespace, name).
    pub fn retain(&self, live: &HashSet<(String, String)>) {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<(String, String)> = series
            .keys()
            .filter(|k| !live.contains(*k))
            .cloned()
            .collect();
        for (namespace, name) in gone {
            for subset in series
                .remove(&(namespace.clone(), name.clone()))
                .unwrap_or_default()
            {
                self.remove_subset(&namespace, &name, &subset);
            }
            let spread = SpreadLabels {
                namespace,
                workloadspread: name,
            };
            self.on_plan.remove(&spread);
            self.pending_oldest.remove(&spread);
        }
    }

    /// WorkloadSpreads with series exported.
    #[cfg(test)]
    fn exported_workloadspreads(&self) -> usize {
        self.series.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Records the live view of one WorkloadSpread (`core::controller::view`).
    pub fn record_view(&self, view: &StatusView) {
        let spread = SpreadLabels {
            namespace: view.namespace.clone(),
            workloadspread: view.name.clone(),
        };
        self.on_plan
            .get_or_create(&spread)
            .set(i64::from(view.on_plan));
        for s in &view.subsets {
            let labels = SubsetLabels {
                namespace: view.namespace.clone(),
                workloadspread: view.name.clone(),
                subset: s.name.clone(),
            };
            let planned = i64::try_from(s.planned).unwrap_or(i64::MAX);
            self.subset_planned.get_or_create(&labels).set(planned);
            match s.max {
                Some(max) => {
                    self.subset_maximum
                        .get_or_create(&labels)
                        .set(i64::from(max));
                }
                None => {
                    self.subset_maximum.remove(&labels);
                }
            }
        }
    }

    /// Records the age of the oldest pod labelled pending (`None`: none).
    pub fn record_pending(&self, namespace: &str, name: &str, oldest: Option<Duration>) {
        let labels = SpreadLabels {
            namespace: namespace.to_string(),
            workloadspread: name.to_string(),
        };
        let seconds = oldest.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.pending_oldest.get_or_create(&labels).set(seconds);
    }

    pub fn record_subsets(&self, namespace: &str, name: &str, status: &WorkloadSpreadStatus) {
        let subsets = status
            .subset_statuses
            .iter()
            .map(|s| s.name.clone())
            .collect();
        self.track(namespace, name, subsets);
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
        workloadspread_kube::metrics::encode(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloadspread_core::api::v1beta1::WorkloadSpreadSubsetStatus;

    fn status(subsets: &[&str]) -> WorkloadSpreadStatus {
        WorkloadSpreadStatus {
            subset_statuses: subsets
                .iter()
                .map(|n| WorkloadSpreadSubsetStatus {
                    name: n.to_string(),
                    replicas: 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Issue #41: series go with their subset and their WorkloadSpread.
    #[test]
    fn series_are_removed_with_their_subset_and_workloadspread() {
        let m = Metrics::new();
        m.record_subsets("ns", "a", &status(&["x", "y"]));
        m.record_pending("ns", "a", None);
        m.record_subsets("ns", "b", &status(&["x"]));
        let text = m.encode();
        assert!(text.contains(r#"subset="y""#), "{text}");
        m.record_subsets("ns", "a", &status(&["x"]));
        assert!(
            !m.encode().contains(r#"subset="y""#),
            "a subset removed from the spec"
        );
        m.retain(&HashSet::from([("ns".to_string(), "b".to_string())]));
        let text = m.encode();
        assert!(!text.contains(r#"workloadspread="a""#), "{text}");
        assert!(text.contains(r#"workloadspread="b""#), "{text}");
        assert_eq!(m.exported_workloadspreads(), 1);
    }
}

//! Prometheus metrics of `serve` (`/metrics`, OpenMetrics text).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod limits;
pub use limits::*;

/// Which webhook path served an evaluation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Endpoint {
    Mutate,
    Validate,
}

/// How an evaluation ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    Allowed,
    Mutated,
    Rejected,
    /// The policy could not be evaluated (timeout, trap, host failure).
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvalLabels {
    pub endpoint: Endpoint,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: Endpoint,
}

/// Counter operation results.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum CounterResult {
    /// A subset was claimed / a slot was released.
    Done,
    /// No candidate had room / nothing to release.
    Noop,
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CounterLabels {
    pub op: CounterOp,
    pub result: CounterResult,
}

/// A kind the policy reads.
/// A namespace's cache of a kind (namespaces holding a WorkloadSpread only).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub kind: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub api_version: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum CounterOp {
    Claim,
    Release,
    Unclaim,
}

/// What happened to reserved slots (`docs/counter-protocol.md`, *Reserved slots*).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReservationEvent {
    /// Placeholders written.
    Reserved,
    /// Claims answered from a placeholder, without a write.
    Taken,
    /// Placeholders renamed to their pod's key.
    Settled,
    /// Unused placeholders given back.
    Returned,
    /// Claims that waited because placeholders held the room (another replica's, or
    /// this one's being given back).
    Waited,
    /// Stale placeholders (a dead holder's) settled to the pod that names them.
    StaleSettled,
    /// Stale placeholders no pod names, dropped: their slots freed.
    StaleDropped,
    /// Handed-out placeholders whose settle write failed: kept, and settled by the next
    /// write (or, given up, by whoever finds them stale).
    SettleFailed,
    /// Reads of a WorkloadSpread's uid and generation that confirm hand-outs (one read
    /// serves every hand-out decided before it began: `counter::fence`).
    SpecRead,
    /// Hand-outs withdrawn because the stored spec had moved past the copy they were
    /// decided on (an edit the watch had not brought yet); the claims were decided again.
    SpecMoved,
}

/// How a live list of a namespace's WorkloadSpreads ended (`index::lookup`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum LookupResult {
    /// Listed (one request to the API server).
    Listed,
    /// The list failed or did not come in time: the pod was decided from the cache.
    Failed,
    /// The list showed a WorkloadSpread the watch had not delivered when it began (the
    /// pod waited for it; without the list it would have been admitted unspread).
    Missed,
    /// The watch did not deliver it in time: the pod was refused.
    Behind,
}

/// What a read of a pod whose deletion the status records found
/// (`counter::departures`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum DepartureResult {
    /// Deleted, finished or gone: its slot is free.
    Departed,
    /// Still running (a refused or pending deletion): its slot stays taken.
    Running,
    /// The read failed or came late: counted as running.
    Failed,
}

/// What resolving an overdue entry did (`counter::overdue`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ExpiredAction {
    /// Moved into (or out of) the subset's `replicas`.
    Folded,
    /// Removed (the pod never came, departed with its claim, or a deletion refused).
    Dropped,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExpiredLabels {
    pub action: ExpiredAction,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DepartureLabels {
    pub result: DepartureResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    pub result: LookupResult,
}

/// Why the policy module was compiled at start (`engine::precompiled::Fallback::reason`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompiledLabels {
    pub reason: String,
}

/// A failed host call's kind (`capabilities::HostCallError::metric_label`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostCallErrorLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HolderLabels {
    pub holder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReservationLabels {
    pub event: ReservationEvent,
}

/// All metrics of the host.
pub struct Metrics {
    pub registry: Registry,
    pub evaluations: Family<EvalLabels, Counter>,
    pub latency: Family<EndpointLabels, Histogram>,
    pub counter_ops: Family<CounterLabels, Counter>,
    pub batch_size: Histogram,
    /// How long each fence read took (`counter::fence`): what a hand-out waits for
    /// beyond its decision when no read begun after it is already under way.
    pub spec_read_seconds: Histogram,
    pub status_writes: Counter,
    pub conflicts: Counter,
    /// Reads of pods whose deletion the status records, before claims are decided.
    pub departures: Family<DepartureLabels, Counter>,
    /// Releases the stored pod contradicted (subset, version, owner): recorded nowhere.
    pub contradicted_releases: Counter,
    /// Entries the controller left past the expiry, resolved by the host.
    pub expired: Family<ExpiredLabels, Counter>,
    /// Status writes not answered within the call timeout (they may have landed: the
    /// object is read again before the next attempt).
    pub unanswered_writes: Counter,
    /// 1 while the API server does not serve a kind the policy reads.
    pub kind_not_served: Family<KindLabels, Gauge>,
    /// Counter operations dropped because their waiter had given up.
    pub abandoned: Counter,
    /// Pod requests answered without the guest: no WorkloadSpread in their namespace.
    pub unrelated: Counter,
    /// Objects cached per kind and namespace (namespaces holding a WorkloadSpread).
    pub cached_objects: Family<CacheLabels, Gauge>,
    /// Policy reads the watch caches could not answer, made live against the API server.
    pub live_reads: Family<KindLabels, Counter>,
    /// Live lists of a namespace's WorkloadSpreads before its pods are decided.
    pub lookups: Family<LookupLabels, Counter>,
    pub reservations: Family<ReservationLabels, Counter>,
    /// Counter queues alive (one per WorkloadSpread with recent counter work).
    pub counter_queues: Gauge,
    /// WorkloadSpreads another manager writes too, left alone (`index::contests`).
    pub contested: Gauge,
    /// 1 while the host can decide (its caches listed, every required kind served).
    pub ready: Gauge,
    /// This replica's placeholder prefix (1 for its id).
    pub holder: Family<HolderLabels, Gauge>,
    /// Requests refused by the host's limits (`webhook::limits`).
    pub limits: LimitMetrics,
    /// Seconds the CA bundle has not reached a target (`tls::staleness`); 0 when current.
    pub ca_bundle_stale: Gauge,
    /// 1 (per reason) when this process compiled the policy module instead of loading it
    /// precompiled.
    pub policy_compiled: Family<CompiledLabels, Gauge>,
    /// Seconds the policy module took to load (or compile) at start.
    pub policy_load_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Re-invocations of the pod webhook answered as the first invocation, without a claim.
    pub reinvocations: Counter,
    /// Failed host calls of the policy, by kind.
    pub host_call_errors: Family<HostCallErrorLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("workloadspread_host");
        let evaluations = Family::<EvalLabels, Counter>::default();
        let latency = Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        let counter_ops = Family::<CounterLabels, Counter>::default();
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        let spec_read_seconds = Histogram::new(exponential_buckets(0.00025, 2.0, 14));
        let status_writes = Counter::default();
        let conflicts = Counter::default();
        let departures = Family::<DepartureLabels, Counter>::default();
        for result in [
            DepartureResult::Departed,
            DepartureResult::Running,
            DepartureResult::Failed,
        ] {
            departures
                .get_or_create(&DepartureLabels { result })
                .inc_by(0);
        }
        let expired = Family::<ExpiredLabels, Counter>::default();
        for action in [ExpiredAction::Folded, ExpiredAction::Dropped] {
            expired.get_or_create(&ExpiredLabels { action }).inc_by(0);
        }
        let unanswered_writes = Counter::default();
        let kind_not_served = Family::<KindLabels, Gauge>::default();
        let abandoned = Counter::default();
        let contradicted_releases = Counter::default();
        let unrelated = Counter::default();
        let cached_objects = Family::<CacheLabels, Gauge>::default();
        let live_reads = Family::<KindLabels, Counter>::default();
        let lookups = Family::<LookupLabels, Counter>::default();
        for result in [
            LookupResult::Listed,
            LookupResult::Failed,
            LookupResult::Missed,
            LookupResult::Behind,
        ] {
            lookups.get_or_create(&LookupLabels { result }).inc_by(0);
        }
        let reservations = Family::<ReservationLabels, Counter>::default();
        // Every event exported from the start (0): rate() and alerts see the series.
        for event in [
            ReservationEvent::Reserved,
            ReservationEvent::Taken,
            ReservationEvent::Settled,
            ReservationEvent::Returned,
            ReservationEvent::Waited,
            ReservationEvent::StaleSettled,
            ReservationEvent::StaleDropped,
            ReservationEvent::SettleFailed,
            ReservationEvent::SpecRead,
            ReservationEvent::SpecMoved,
        ] {
            reservations
                .get_or_create(&ReservationLabels { event })
                .inc_by(0);
        }
        let limits = LimitMetrics::default();
        limits.register(&mut registry);
        registry.register(
            "reservations",
            "Reserved slots: placeholders reserved, taken by claims without a write, settled, returned; claims that waited for placeholders in their way; stale placeholders (a dead holder's) settled to the pod naming them or dropped",
            reservations.clone(),
        );
        let holder = Family::<HolderLabels, Gauge>::default();
        registry.register(
            "reservation_holder",
            "This replica's reserved-slot holder id: placeholders ~<holder>.<n> in a status are its own",
            holder.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 while the host can decide (every required kind served, caches listed): /readyz",
            ready.clone(),
        );
        let ca_bundle_stale = Gauge::default();
        registry.register(
            "ca_bundle_stale_seconds",
            "Seconds the generated CA bundle has not reached a webhook configuration or the CRD (a write or check failing, or the next CA not switched to in time); 0 when current. /readyz fails once the serving certificate would expire before a fix could land",
            ca_bundle_stale.clone(),
        );
        let policy_compiled = Family::<CompiledLabels, Gauge>::default();
        registry.register(
            "policy_compiled_at_start",
            "1 when this host compiled the policy module at start (CPU-seconds, slow under a CPU limit) instead of loading the module precompiled for its engine: reason missing (no precompiled module for this module and engine configuration), refused (wasmtime refused it), not_configured (no --precompiled-dir)",
            policy_compiled.clone(),
        );
        let policy_load_seconds = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "policy_load_seconds",
            "Seconds the policy module took to load (precompiled) or compile at start",
            policy_load_seconds.clone(),
        );
        let reinvocations = Counter::default();
        registry.register(
            "reinvocations",
            "Re-invocations of the pod webhook (a later webhook changed the pod) answered as the first invocation was: the same subset injected again, no second claim",
            reinvocations.clone(),
        );
        let host_call_errors = Family::<HostCallErrorLabels, Counter>::default();
        for kind in crate::capabilities::HOST_CALL_ERROR_KINDS {
            let _ = host_call_errors.get_or_create(&HostCallErrorLabels { kind });
        }
        registry.register(
            "host_call_errors",
            "Host calls of the policy that failed, by kind: NotFound (the object does not exist: normal for a deleted owner), Denied (not granted by the policy's capabilities), Invalid/Unknown (a request the host cannot serve), Api (the API server failed or did not answer in time), the counter's (Gone, Recreated, Conflict, Write, Read, Timeout, NoAnswer, Stopped, Internal: see the counter's log), Internal",
            host_call_errors.clone(),
        );
        let contested = Gauge::default();
        registry.register(
            "contested_workloadspreads",
            "WorkloadSpreads whose status another manager (OpenKruise's with its WorkloadSpread gate on?) wrote after this host started: their pods pass unchanged and no new claim is made in them; the log and the controller's event say what to do",
            contested.clone(),
        );
        let counter_queues = Gauge::default();
        registry.register(
            "counter_queues",
            "Counter queues alive: one per WorkloadSpread with counter work in the last idle period",
            counter_queues.clone(),
        );
        registry.register(
            "cached_objects",
            "Objects cached per kind and namespace: only namespaces holding a WorkloadSpread are watched",
            cached_objects.clone(),
        );
        registry.register(
            "live_reads",
            "Policy reads the watch caches could not answer (an object created a moment ago, a namespace whose watch has no first list yet, a kind read for the first time), made live against the API server",
            live_reads.clone(),
        );
        registry.register(
            "workloadspread_lookups",
            "Live lists of a namespace's WorkloadSpreads before its pod creations are decided (namespaces where the cache holds none; one per namespace per 30 s): listed, failed (pod decided from the cache, as before the check), missed (the list showed one the watch had not delivered yet: the pod waited for it), behind (the watch did not deliver it within 2 s: pod refused)",
            lookups.clone(),
        );
        registry.register(
            "unrelated_pod_requests",
            "Pod admission requests answered without the policy: no WorkloadSpread in their namespace",
            unrelated.clone(),
        );
        registry.register(
            "counter_abandoned",
            "Counter operations dropped unapplied because their waiter had given up",
            abandoned.clone(),
        );
        registry.register(
            "kind_not_served",
            "1 while the API server does not serve a kind the policy reads (not ready if required)",
            kind_not_served.clone(),
        );
        registry.register(
            "evaluations",
            "Admission requests evaluated",
            evaluations.clone(),
        );
        registry.register(
            "evaluation_duration_seconds",
            "Time to answer an admission request",
            latency.clone(),
        );
        registry.register(
            "counter_operations",
            "Counter claims and releases",
            counter_ops.clone(),
        );
        registry.register(
            "counter_batch_size",
            "Counter operations committed per status write",
            batch_size.clone(),
        );
        registry.register_with_unit(
            "counter_spec_read_duration",
            "How long each read confirming hand-outs against the stored spec took (one read serves every hand-out decided before it began)",
            prometheus_client::registry::Unit::Seconds,
            spec_read_seconds.clone(),
        );
        registry.register(
            "counter_status_writes",
            "WorkloadSpread status writes by the counter",
            status_writes.clone(),
        );
        registry.register(
            "counter_conflicts",
            "Status writes rejected with 409 Conflict (re-read and re-applied)",
            conflicts.clone(),
        );
        registry.register(
            "counter_departure_reads",
            "Reads of pods whose deletion the status records, before claims are decided: a deletion frees its slot only once departed",
            departures.clone(),
        );
        registry.register(
            "counter_contradicted_releases",
            "Releases whose subset, version or owner the stored pod contradicts (forged reviews): nothing recorded",
            contradicted_releases.clone(),
        );
        registry.register(
            "counter_entries_expired",
            "Claims and deletions the controller left past --counter-expiry-seconds, resolved from the pods (it is down)",
            expired.clone(),
        );
        registry.register(
            "counter_unanswered_writes",
            "Status writes with no answer within the call timeout (they may have landed: the object is read again)",
            unanswered_writes.clone(),
        );
        Metrics {
            registry,
            limits,
            policy_compiled,
            policy_load_seconds,
            reinvocations,
            host_call_errors,
            ca_bundle_stale,
            reservations,
            counter_queues,
            contested,
            ready,
            holder,
            unrelated,
            cached_objects,
            live_reads,
            lookups,
            evaluations,
            latency,
            counter_ops,
            batch_size,
            spec_read_seconds,
            status_writes,
            conflicts,
            departures,
            contradicted_releases,
            expired,
            unanswered_writes,
            kind_not_served,
            abandoned,
        }
    }

    /// Counts `n` reservation `event`s.
    pub fn reservation(&self, event: ReservationEvent, n: usize) {
        self.reservations
            .get_or_create(&ReservationLabels { event })
            .inc_by(n as u64);
    }

    /// The OpenMetrics text exposition.
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

    #[test]
    fn exposition_names() {
        let m = Metrics::new();
        m.evaluations
            .get_or_create(&EvalLabels {
                endpoint: Endpoint::Mutate,
                outcome: Outcome::Mutated,
            })
            .inc();
        m.batch_size.observe(3.0);
        m.spec_read_seconds.observe(0.001);
        let text = m.encode();
        assert!(text.contains(
            r#"workloadspread_host_evaluations_total{endpoint="Mutate",outcome="Mutated"} 1"#
        ));
        assert!(text.contains("workloadspread_host_counter_batch_size_count 1"));
        assert!(
            text.contains("workloadspread_host_counter_spec_read_duration_seconds_count 1"),
            "{text}"
        );
    }

    /// Before any failure, every kind of failed host call has its series at 0.
    #[test]
    fn host_call_errors_are_exported_at_zero() {
        let text = Metrics::new().encode();
        for kind in crate::capabilities::HOST_CALL_ERROR_KINDS {
            let series =
                format!(r#"workloadspread_host_host_call_errors_total{{kind="{kind}"}} 0"#);
            assert!(text.contains(&series), "no {series} in:\n{text}");
        }
    }
}

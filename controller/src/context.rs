//! What every reconcile shares: the [`Context`] (clients, caches, settings, the
//! [`Writer`] every write goes through) and the [`Error`] a reconcile fails with (counted
//! and retried by kind: `backoff`).

use crate::backoff::Backoff;
use crate::calls::CallError;
use crate::capacity;
use crate::contest::Standing;
use crate::inputs::InputError;
use crate::leader::Leadership;
use crate::metrics::{Metrics, ReconcileFailure, WriteTarget};
use crate::pacing::StatusPacing;
use crate::placeholders::Placeholders;
use crate::pod_caches::PodCaches;
use crate::rebalance;
use crate::workloads::Workloads;
use crate::writer::{WriteError, Writer};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::SignedDuration;
use kube::api::ApiResource;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workloadspread_core::controller::ReconcileOptions;
use workloadspread_core::version::VersionedKinds;
use workloadspread_core::workload::WorkloadKinds;
use workloadspread_core::Timestamp;

/// Default spacing of one WorkloadSpread's status writes (`--status-interval-ms`).
pub const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// Shared state of the reconciler.
pub struct Context {
    pub client: Client,
    /// Pods of the namespaces that have a WorkloadSpread (`crate::pod_caches`).
    pub pods: Arc<PodCaches>,
    pub nodes: Store<Node>,
    /// Cached workloads and ReplicaSets (`crate::workloads`).
    pub workloads: Arc<Workloads>,
    pub kinds: WorkloadKinds,
    pub versioned: VersionedKinds,
    pub options: ReconcileOptions,
    pub metrics: Arc<Metrics>,
    pub clock: fn() -> Timestamp,
    /// Every write: fenced by the Lease, bounded, failures counted by kind.
    pub writer: Writer,
    /// Consecutive failures per WorkloadSpread: when to retry.
    pub backoff: Backoff,
    /// When each placeholder was first seen, per WorkloadSpread.
    pub placeholders: Placeholders,
    /// Rebalancing's default and rate limit.
    pub limiter: rebalance::Limiter,
    /// API resources discovered, by (apiVersion, kind).
    pub(crate) resources: Mutex<HashMap<(String, String), ApiResource>>,
    /// Adaptive rescheduling may delete pods (`--no-reschedule` turns it off).
    pub reschedule: bool,
    /// Drop creatingPods entries whose pod is confirmed absent after this long.
    pub early_drop: Option<SignedDuration>,
    /// Status writes per WorkloadSpread at most once per interval.
    pub pacing: StatusPacing,
    /// Provisioner signals and node room (off by default).
    pub capacity: capacity::Reader,
    /// Spreads another manager writes too: left alone.
    pub standing: Arc<Standing>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        pods: Arc<PodCaches>,
        nodes: Store<Node>,
        workloads: Arc<Workloads>,
        kinds: WorkloadKinds,
        versioned: VersionedKinds,
        options: ReconcileOptions,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        clock: fn() -> Timestamp,
        leadership: Arc<Leadership>,
    ) -> Self {
        Context {
            writer: Writer::new(client.clone(), recorder, leadership, metrics.clone()),
            backoff: Backoff::default(),
            client,
            pods,
            nodes,
            workloads,
            kinds,
            versioned,
            options,
            metrics,
            clock,
            placeholders: Placeholders::default(),
            limiter: rebalance::Limiter::new(Default::default()),
            resources: Mutex::new(HashMap::new()),
            reschedule: true,
            early_drop: None,
            pacing: StatusPacing::new(STATUS_INTERVAL),
            capacity: capacity::Reader::new(Default::default()),
            standing: Arc::default(),
        }
    }

    /// Sharing what is contested with `/readyz`.
    pub fn with_standing(mut self, standing: Arc<Standing>) -> Self {
        self.standing = standing;
        self
    }

    /// Reading provisioner signals and node room with `settings` (#42).
    pub fn with_capacity(mut self, settings: capacity::Settings) -> Self {
        self.capacity = capacity::Reader::new(settings);
        self
    }

    /// Status writes per WorkloadSpread at most once per `interval` (zero: no pacing).
    pub fn with_status_interval(mut self, interval: Duration) -> Self {
        self.pacing = StatusPacing::new(interval);
        self
    }

    /// With rebalancing's default and rate limit, evicting through `evictions`.
    pub fn with_rebalancing(mut self, settings: rebalance::Settings, evictions: Client) -> Self {
        self.limiter = rebalance::Limiter::new(settings);
        self.writer = self.writer.with_evictions(evictions);
        self
    }

    pub fn with_safety(mut self, reschedule: bool, early_drop: Option<SignedDuration>) -> Self {
        self.reschedule = reschedule;
        self.early_drop = early_drop;
        self
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] Box<kube::Error>),
    #[error("decoding {what}: {source}")]
    Decode {
        what: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("patching the deletion cost or pending label of pod {pod}: {source}")]
    PodMetadata {
        pod: String,
        source: Box<kube::Error>,
    },
    #[error("the pod, node or workload caches are not synced yet")]
    CachesNotSynced,
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("status of {0} kept conflicting")]
    Conflicts(String),
    #[error("not the leader (the Lease was not renewed in time): nothing written")]
    NotLeader,
    #[error("evicting pod {pod} to rebalance: {source}")]
    Evict {
        pod: String,
        source: Box<kube::Error>,
    },
}

impl Error {
    /// The `kind` label a failed reconcile is counted under
    /// (`workloadspread_controller_reconcile_errors_total`).
    pub fn metric_label(&self) -> ReconcileFailure {
        match self {
            Error::Kube(_) => ReconcileFailure::Api,
            Error::Decode { .. } => ReconcileFailure::Decode,
            Error::Input(_) => ReconcileFailure::Input,
            Error::PodMetadata { .. } => ReconcileFailure::PodMetadata,
            Error::CachesNotSynced => ReconcileFailure::CachesNotSynced,
            Error::Timeout(_) => ReconcileFailure::Timeout,
            Error::Conflicts(_) => ReconcileFailure::Conflicts,
            Error::NotLeader => ReconcileFailure::NotLeader,
            Error::Evict { .. } => ReconcileFailure::Evict,
        }
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::Kube(Box::new(e))
    }
}

impl From<CallError> for Error {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Timeout(d) => Error::Timeout(d),
            CallError::Api(e) => Error::Kube(e),
        }
    }
}

/// A failed write keeps the kind it was counted under before the Writer: a refused
/// cost or pending-label patch is `PodMetadata`, a refused eviction `Evict`, any other
/// refused write `Api`.
impl From<WriteError> for Error {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::NotLeader => Error::NotLeader,
            WriteError::Timeout(d) => Error::Timeout(d),
            WriteError::Api {
                write: WriteTarget::PodMetadata,
                target,
                source,
            } => Error::PodMetadata {
                pod: target,
                source,
            },
            WriteError::Api {
                write: WriteTarget::Eviction,
                target,
                source,
            } => Error::Evict {
                pod: target,
                source,
            },
            WriteError::Api { source, .. } => Error::Kube(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind a reconcile fails with is exported from the start.
    #[test]
    fn every_failure_kind_is_a_known_label() {
        let decode = serde_json::from_str::<u8>("x").unwrap_err();
        let failures = [
            Error::from(kube::Error::Discovery(
                kube::error::DiscoveryError::MissingResource("x".into()),
            )),
            Error::Decode {
                what: "status".into(),
                source: decode,
            },
            Error::CachesNotSynced,
            Error::Timeout(crate::calls::API_TIMEOUT),
            Error::Conflicts("ns/web".into()),
            Error::NotLeader,
        ];
        let mut seen = std::collections::HashSet::new();
        for e in &failures {
            let label = e.metric_label();
            assert!(
                ReconcileFailure::ALL.contains(&label),
                "{label:?} not exported"
            );
            seen.insert(label);
        }
        assert_eq!(seen.len(), failures.len(), "two kinds share a label");
        let unique: std::collections::HashSet<_> = ReconcileFailure::ALL.iter().collect();
        assert_eq!(unique.len(), ReconcileFailure::ALL.len());
    }

    /// A write failing through the Writer is counted under the kind it had before it.
    #[test]
    fn a_failed_write_keeps_its_reconcile_failure_kind() {
        let refused = |write| WriteError::Api {
            write,
            target: "p".into(),
            source: Box::new(kube::Error::Api(
                kube::core::Status::failure("no", "Forbidden")
                    .with_code(403)
                    .boxed(),
            )),
        };
        let expected = [
            (WriteTarget::PodMetadata, ReconcileFailure::PodMetadata),
            (WriteTarget::Eviction, ReconcileFailure::Evict),
            (WriteTarget::Status, ReconcileFailure::Api),
            (WriteTarget::Adoption, ReconcileFailure::Api),
            (WriteTarget::Deletion, ReconcileFailure::Api),
        ];
        for (write, kind) in expected {
            assert_eq!(
                Error::from(refused(write)).metric_label(),
                kind,
                "{write:?}"
            );
        }
        let pod = Error::from(refused(WriteTarget::PodMetadata)).to_string();
        assert!(
            pod.starts_with("patching the deletion cost or pending label of pod p: "),
            "{pod}"
        );
        assert_eq!(
            Error::from(WriteError::NotLeader).metric_label(),
            ReconcileFailure::NotLeader
        );
        let timeout = Error::from(WriteError::Timeout(crate::calls::API_TIMEOUT));
        assert_eq!(timeout.metric_label(), ReconcileFailure::Timeout);
        let read = Error::from(CallError::Timeout(crate::calls::API_TIMEOUT));
        assert_eq!(read.metric_label(), ReconcileFailure::Timeout);
    }
}

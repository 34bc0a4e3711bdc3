//! The label sets of the controller's metrics.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpreadLabels {
    pub namespace: String,
    pub workloadspread: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// Why a reconcile failed, as counted (`context::Error::metric_label`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReconcileFailure {
    /// An API call failed.
    Api,
    Decode,
    /// The workload or its pods could not be read.
    Input,
    /// A deletion-cost or pending-label patch failed.
    PodMetadata,
    CachesNotSynced,
    /// An API call did not answer in time.
    Timeout,
    /// The status kept conflicting.
    Conflicts,
    /// The Lease was not renewed in time: nothing written.
    NotLeader,
    /// A rebalancing eviction failed.
    Evict,
}

impl ReconcileFailure {
    /// Every kind, exported from the start.
    pub const ALL: [ReconcileFailure; 9] = [
        ReconcileFailure::Api,
        ReconcileFailure::Decode,
        ReconcileFailure::Input,
        ReconcileFailure::PodMetadata,
        ReconcileFailure::CachesNotSynced,
        ReconcileFailure::Timeout,
        ReconcileFailure::Conflicts,
        ReconcileFailure::NotLeader,
        ReconcileFailure::Evict,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: ReconcileFailure,
}

/// What a write wrote (`writer::Writer`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteTarget {
    /// A WorkloadSpread's status.
    Status,
    /// A patch adopting an existing pod into a subset.
    Adoption,
    /// A deletion-cost or pending-label patch.
    PodMetadata,
    /// The deletion of a pod stuck unschedulable.
    Deletion,
    /// A rebalancing eviction.
    Eviction,
    Event,
}

impl WriteTarget {
    pub const ALL: [WriteTarget; 6] = [
        WriteTarget::Status,
        WriteTarget::Adoption,
        WriteTarget::PodMetadata,
        WriteTarget::Deletion,
        WriteTarget::Eviction,
        WriteTarget::Event,
    ];
}

/// How a write failed (`writer::WriteError::kind`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteFailure {
    /// The Lease was not renewed in time: not sent.
    NotLeader,
    /// No answer in time.
    Timeout,
    /// The API server refused it, or could not be reached.
    Api,
}

impl WriteFailure {
    pub const ALL: [WriteFailure; 3] = [
        WriteFailure::NotLeader,
        WriteFailure::Timeout,
        WriteFailure::Api,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteFailureLabels {
    pub write: WriteTarget,
    pub kind: WriteFailure,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    pub what: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubsetLabels {
    pub namespace: String,
    pub workloadspread: String,
    pub subset: String,
}

//! The Kubernetes glue both binaries use, written once (#44, item 5): how a component
//! configures its API client ([`client`]), when it stops ([`signal`]), its clocks
//! ([`clock`]), how it reads manifests ([`manifests`]) and a WorkloadSpread through the
//! dynamic API ([`resource`]), how it writes a WorkloadSpread's status ([`status`]) and
//! serves its metrics ([`metrics`]) and its HTTP ports ([`serve`]: connection limits,
//! shedding, deadlines), and whether OpenKruise owns WorkloadSpreads ([`openkruise`]). `core` keeps the rules and stays pure (no I/O,
//! builds for wasm32); this crate is the I/O both shells share, and only that.

pub mod client;
pub mod clock;
pub mod manifests;
pub mod metrics;
pub mod openkruise;
pub mod resource;
pub mod serve;
pub mod signal;
pub mod status;

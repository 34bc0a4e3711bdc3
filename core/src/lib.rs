//! WorkloadSpread semantics, compatible with OpenKruise's `apps.kruise.io` WorkloadSpread.
//!
//! This crate is pure: no I/O, no clock (callers pass `now`), no randomness (callers pass
//! generated ids). The admission policy (Wasm guest), the bundled host and the controller
//! only move data in and out of it. Deliberate differences from the reference are listed
//! in `docs/semantics.md`.
#![forbid(unsafe_code)]

pub mod api;
pub mod smp;

/// Label selector type used in the API (re-exported for callers without k8s-openapi).
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
/// Timestamps used throughout (`now` is always passed in by the caller).
pub use k8s_openapi::jiff::Timestamp;
pub mod admission;
pub mod annotation;
pub mod contest;
pub mod controller;
pub mod counter;
#[cfg(feature = "crd")]
pub mod crd;
pub mod field;
pub mod fields;
pub mod hostcall;
pub mod inject;
#[cfg(feature = "yaml")]
pub mod manifests;
pub mod masks;
pub mod names;
pub mod percent;
pub mod plan;
pub mod pods;
pub mod replicas;
pub mod rules;
pub mod selector;
pub mod validation;
pub mod version;
pub mod workload;

/// A wall-clock reading (time since the Unix epoch, e.g. from `SystemTime`) as a
/// `Timestamp`; the epoch when out of range. Callers read the clock, core stays pure.
pub fn timestamp_since_epoch(since: std::time::Duration) -> Timestamp {
    let secs = i64::try_from(since.as_secs()).unwrap_or(0);
    Timestamp::new(secs, since.subsec_nanos() as i32).unwrap_or(Timestamp::UNIX_EPOCH)
}

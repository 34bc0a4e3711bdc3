//! The Kubernetes glue both binaries use, written once (#44, item 5): how a component
//! configures its API client ([`client`]), when it stops ([`signal`]) and how it reads a
//! WorkloadSpread through the dynamic API ([`resource`]). `core` keeps the
//! rules and stays pure (no I/O, builds for wasm32); this crate is the I/O both shells
//! share, and only that.

pub mod client;
pub mod resource;
pub mod signal;

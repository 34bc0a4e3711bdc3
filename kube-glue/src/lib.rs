//! The Kubernetes glue both binaries use, written once (#44, item 5): how a component
//! configures its API client ([`client`]) and when it stops ([`signal`]). `core` keeps the
//! rules and stays pure (no I/O, builds for wasm32); this crate is the I/O both shells
//! share, and only that.

pub mod client;
pub mod signal;

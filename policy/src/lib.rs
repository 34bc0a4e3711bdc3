//! The WorkloadSpread admission policy as a waPC guest.
//!
//! Loaded by Kubewarden's policy-server, `kwctl run` or this project's bundled host.
//! Every decision comes from the core crate; this crate decodes requests, asks the
//! host for what it needs and encodes answers.
#![deny(unsafe_code)]

pub mod settings;

pub use settings::Settings;

use kubewarden_policy_sdk::{
    protocol_version_guest, validate_settings, wapc_guest::register_function,
};

/// waPC entry point: registers the operations the host may call.
// `no_mangle` counts as unsafe code: the symbol name is the waPC ABI.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn wapc_init() {
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

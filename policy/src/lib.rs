//! The WorkloadSpread admission policy as a waPC guest.
//!
//! Loaded by Kubewarden's policy-server, `kwctl run` or this project's bundled host.
//! Every decision comes from `workloadspread-core`; this crate decodes requests, asks
//! the host for what it needs (through [`host::Host`]) and encodes answers.
#![deny(unsafe_code)]

pub mod host;
pub mod lookup;
pub mod outcome;
pub mod pods;
pub mod settings;
pub mod workloadspreads;

pub use settings::Settings;

use host::{wapc_host, Host};
use kubewarden_policy_sdk::request::{KubernetesAdmissionRequest, ValidationRequest};
use kubewarden_policy_sdk::response::ValidationResponse;
use kubewarden_policy_sdk::wapc_guest::{register_function, CallResult};
use kubewarden_policy_sdk::{protocol_version_guest, validate_settings};
use outcome::Outcome;
use workloadspread_core::Timestamp;

/// The module's allocator: talc instead of Rust's default dlmalloc for wasm. An
/// evaluation allocates a JSON tree per request and per host answer; with talc the
/// evaluations took 7-12 % less time (docs/benchmarks.md, guest vs native, #28).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// waPC entry point: registers the operations the host may call.
// `no_mangle` counts as unsafe code: the symbol name is the waPC ABI.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

/// waPC `validate`.
fn validate(payload: &[u8]) -> CallResult {
    validate_payload(payload, &wapc_host(), wall_clock())
}

/// The `validate` operation on its raw payload, with the host and the clock as parameters:
/// the guest's entry point, and the same bytes-to-bytes work natively (the benchmark's
/// native side).
pub fn validate_payload(payload: &[u8], host: &dyn Host, now: Timestamp) -> CallResult {
    let request: ValidationRequest<Settings> = match ValidationRequest::new(payload) {
        Ok(r) => r,
        Err(e) => {
            return respond(Outcome::reject(
                format!("invalid admission request: {e}"),
                400,
            ))
        }
    };
    respond(evaluate(&request.settings, &request.request, host, now))
}

/// Current time from WASI's clock (the epoch if the host gives none).
fn wall_clock() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    workloadspread_core::timestamp_since_epoch(since)
}

/// Dispatches one admission request (native-testable: the host is a parameter).
pub fn evaluate(
    settings: &Settings,
    req: &KubernetesAdmissionRequest,
    host: &dyn Host,
    now: Timestamp,
) -> Outcome {
    let ctx = pods::Ctx {
        settings,
        host,
        now,
        request_uid: &req.uid,
        counter: Default::default(),
    };
    // Dispatch on the object's kind: the SDK does not decode `request.resource`.
    match (
        req.kind.kind.as_str(),
        req.sub_resource.as_str(),
        req.operation.as_str(),
    ) {
        // A dry run must not claim or release a slot; a WorkloadSpread is still validated
        // (`kubectl apply --dry-run=server` must show the errors, as OpenKruise's does).
        ("Pod", _, _) | ("Eviction", _, _) if req.dry_run => Outcome::accept(),
        ("Pod", "", "CREATE") => pods::create(&ctx, &req.object, &req.namespace),
        ("Pod", "", "DELETE") => pods::release(&ctx, &req.old_object),
        ("Eviction", "eviction", "CREATE") => {
            pods::evict(&ctx, &req.object, &req.namespace, &req.name)
        }
        ("WorkloadSpread", "", "CREATE") => {
            workloadspreads::validate(settings, host, &req.kind.version, &req.object, None)
        }
        ("WorkloadSpread", "", "UPDATE") => workloadspreads::validate(
            settings,
            host,
            &req.kind.version,
            &req.object,
            Some(&req.old_object),
        ),
        _ => Outcome::accept(),
    }
}

fn respond(outcome: Outcome) -> CallResult {
    let non_empty = |m: std::collections::BTreeMap<String, String>| {
        (!m.is_empty()).then(|| m.into_iter().collect())
    };
    let response = match outcome {
        Outcome::Accept { audit, warnings } => ValidationResponse {
            accepted: true,
            message: None,
            code: None,
            mutated_object: None,
            audit_annotations: non_empty(audit),
            warnings: (!warnings.is_empty()).then_some(warnings),
        },
        Outcome::Mutate { object, audit } => ValidationResponse {
            accepted: true,
            message: None,
            code: None,
            mutated_object: Some(object),
            audit_annotations: non_empty(audit),
            warnings: None,
        },
        Outcome::Reject { message, code } => ValidationResponse {
            accepted: false,
            message: Some(message),
            code: Some(code),
            mutated_object: None,
            audit_annotations: None,
            warnings: None,
        },
    };
    Ok(serde_json::to_vec(&response)?)
}

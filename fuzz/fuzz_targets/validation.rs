//! WorkloadSpread decoding and validation (create, and update against itself) for
//! either API version. Properties: no panic; the result is deterministic (no
//! hash-order dependence in the error list).
#![no_main]
use libfuzzer_sys::fuzz_target;
use workloadspread_core::api::decode_workloadspread;
use workloadspread_core::validation::{validate_create, validate_update, ValidationContext};
use workloadspread_core::workload::{SpreadTarget, WorkloadKinds};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(ws) = decode_workloadspread(&value) else {
        return;
    };
    let kinds = WorkloadKinds::default();
    let template = value.get("template");
    let ctx = ValidationContext {
        workload_template: template,
        others: &[SpreadTarget::of(&ws)],
        kinds: &kinds,
    };
    let first = validate_create(&ws, &ctx);
    assert_eq!(first, validate_create(&ws, &ctx));
    let _ = validate_update(&ws, &ws, &ctx);
});

//! Strategic merge patch for Pods: `original NUL patch` (JSON texts). Properties: no
//! panic; patching with `{}` returns the original unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use workloadspread_core::smp::patch_pod;
use workloadspread_fuzz::split2;

fuzz_target!(|data: &[u8]| {
    let (original, patch) = split2(data);
    let (Ok(original), Ok(patch)) = (
        serde_json::from_str::<Value>(&original),
        serde_json::from_str::<Value>(&patch),
    ) else {
        return;
    };
    let _ = patch_pod(&original, &patch);
    if original.is_object() {
        if let Ok(same) = patch_pod(&original, &json!({})) {
            assert_eq!(same, original, "an empty patch changed the object");
        }
    }
});

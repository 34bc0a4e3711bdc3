//! JavaScript exports. Results are JSON strings so the page needs no generated
//! TypeScript types and the native tests see exactly what the browser sees.
#![allow(unsafe_code)] // wasm-bindgen's generated glue

use serde::Serialize;
use wasm_bindgen::prelude::wasm_bindgen;

fn to_json<T: Serialize>(value: &T) -> String {
    // Serializing these plain structs cannot fail; keep a JSON answer even if it did.
    serde_json::to_string(value)
        .unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}).to_string())
}

/// `validate(manifest)` → JSON [`crate::Validation`].
#[wasm_bindgen]
pub fn validate(manifest: &str) -> String {
    to_json(&crate::validate(manifest))
}

/// `plan(manifest, steps, nodes)` → JSON [`crate::Plan`].
#[wasm_bindgen]
pub fn plan(manifest: &str, steps: &str, nodes: &str) -> String {
    to_json(&crate::plan(manifest, steps, nodes))
}

/// `examples()` → JSON list of [`crate::examples::Example`].
#[wasm_bindgen]
pub fn examples() -> String {
    to_json(&crate::examples::EXAMPLES)
}

/// The crate version (shown in the page footer).
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

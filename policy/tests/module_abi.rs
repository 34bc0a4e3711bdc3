//! Checks the compiled policy module's waPC surface: its imports come only from
//! `wapc` and `wasi_snapshot_preview1`, and it exports what every waPC host calls.
//!
//! The module is built by `make policy`; `make test` sets `WS_REQUIRE_WASM=1` so a
//! missing module fails the run instead of skipping.

use std::path::PathBuf;
use wasmparser::{Parser, Payload};

/// The nine imports a waPC host provides.
const WAPC_IMPORTS: [&str; 9] = [
    "__guest_request",
    "__guest_response",
    "__guest_error",
    "__host_call",
    "__host_response",
    "__host_response_len",
    "__host_error",
    "__host_error_len",
    "__console_log",
];

fn module_path() -> PathBuf {
    match std::env::var_os("WS_POLICY_WASM") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policy.wasm"),
    }
}

struct Surface {
    imports: Vec<(String, String)>,
    exports: Vec<String>,
    data: Vec<u8>,
}

fn read_surface(bytes: &[u8]) -> Surface {
    let mut s = Surface {
        imports: Vec::new(),
        exports: Vec::new(),
        data: Vec::new(),
    };
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.expect("valid wasm") {
            Payload::ImportSection(reader) => {
                for imp in reader.into_imports() {
                    let imp = imp.expect("import");
                    s.imports
                        .push((imp.module.to_string(), imp.name.to_string()));
                }
            }
            Payload::ExportSection(reader) => {
                for exp in reader {
                    s.exports.push(exp.expect("export").name.to_string());
                }
            }
            Payload::DataSection(reader) => {
                for data in reader {
                    s.data.extend_from_slice(data.expect("data segment").data);
                }
            }
            _ => {}
        }
    }
    s
}

/// The built module, or `None` (skip) when it is not built and not required.
fn module_bytes() -> Option<Vec<u8>> {
    let path = module_path();
    let Ok(bytes) = std::fs::read(&path) else {
        assert!(
            std::env::var("WS_REQUIRE_WASM").is_err(),
            "{} missing: run `make policy`",
            path.display()
        );
        eprintln!("skipped: {} not built (run `make policy`)", path.display());
        return None;
    };
    Some(bytes)
}

/// Size budget: policy-server compiles every module at start; keep it small.
const MAX_MODULE_BYTES: usize = 4 * 1024 * 1024;

#[test]
fn policy_module_size_and_host_capabilities() {
    let Some(bytes) = module_bytes() else { return };
    println!("policy.wasm: {} bytes", bytes.len());
    assert!(
        bytes.len() < MAX_MODULE_BYTES,
        "module is {} bytes",
        bytes.len()
    );
    let s = read_surface(&bytes);
    let contains = |needle: &str| s.data.windows(needle.len()).any(|w| w == needle.as_bytes());
    // Declared in metadata.yml `hostCapabilities`, and nothing else from Kubewarden.
    for used in ["get_resource", "list_resources_by_namespace", "kubewarden"] {
        assert!(contains(used), "module does not reference {used}");
    }
    for unused in [
        "list_resources_all",
        "can_i",
        "v1/dns_lookup_host",
        "v2/verify",
    ] {
        assert!(
            !contains(unused),
            "module references undeclared capability {unused}"
        );
    }
    assert!(
        contains("workloadspread") && contains("v1/claim"),
        "counter capability strings missing"
    );
}

#[test]
fn policy_module_has_the_wapc_surface() {
    let Some(bytes) = module_bytes() else { return };
    let s = read_surface(&bytes);
    for (module, name) in &s.imports {
        match module.as_str() {
            "wapc" => assert!(
                WAPC_IMPORTS.contains(&name.as_str()),
                "unknown wapc import {name}"
            ),
            "wasi_snapshot_preview1" => {}
            other => panic!("unexpected import module {other}::{name}"),
        }
    }
    for needed in [
        "__guest_request",
        "__guest_response",
        "__guest_error",
        "__host_call",
    ] {
        assert!(
            s.imports.iter().any(|(m, n)| m == "wapc" && n == needed),
            "module does not import wapc.{needed}: {:?}",
            s.imports
        );
    }
    for needed in ["memory", "wapc_init", "__guest_call"] {
        assert!(
            s.exports.iter().any(|e| e == needed),
            "module does not export {needed}"
        );
    }
}

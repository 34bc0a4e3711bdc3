use super::*;
use crate::capabilities::{Capabilities, HostCallError};
use crate::engine::{EngineOptions, PolicyEngine};
use std::sync::Arc;

/// Answers every host call with an error (the test module makes none).
struct NoCalls;
impl Capabilities for NoCalls {
    fn call(&self, b: &str, n: &str, o: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
        Err(HostCallError::Internal(format!(
            "unexpected call {b}/{n}/{o}"
        )))
    }
}

/// A waPC guest answering `answer` to every call.
fn module(answer: &str) -> Vec<u8> {
    let wat = format!(
        r#"(module
  (import "wapc" "__guest_response" (func $guest_response (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{answer}")
  (func (export "__guest_call") (param i32 i32) (result i32)
    (call $guest_response (i32.const 0) (i32.const {len}))
    (i32.const 1)))"#,
        len = answer.len()
    );
    wat::parse_str(&wat).expect("test module")
}

fn answer(engine: &PolicyEngine) -> Vec<u8> {
    engine.call("validate", b"{}", Arc::new(NoCalls)).unwrap()
}

fn pooled() -> EngineOptions {
    EngineOptions {
        pool_instances: 2,
        max_memory_bytes: 16 << 20,
        ..EngineOptions::default()
    }
}

/// Issue #41: the module precompiled by `precompile` is what the engine loads; the
/// directory's name for it changes with the module and with the engine configuration.
#[test]
fn a_precompiled_module_is_loaded_instead_of_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = module("precompiled");
    let path = PolicyEngine::precompile(&wasm, &EngineOptions::default(), dir.path()).unwrap();
    let (engine, loaded) =
        PolicyEngine::load(&wasm, EngineOptions::default(), Some(dir.path())).unwrap();
    assert_eq!(loaded, Loaded::Precompiled(path.clone()));
    assert_eq!(answer(&engine), b"precompiled");
    // Another module: another name. The pooling allocator compiles the same code: the
    // image's artifact serves a host run with --pool-instances too.
    let other =
        PolicyEngine::precompile(&module("other"), &EngineOptions::default(), dir.path()).unwrap();
    assert_ne!(other, path);
    let (engine, loaded) = PolicyEngine::load(&wasm, pooled(), Some(dir.path())).unwrap();
    assert_eq!(loaded, Loaded::Precompiled(path));
    assert_eq!(answer(&engine), b"precompiled");
}

/// An engine configured unlike ours (fuel metering on): what it compiles carries another
/// compatibility hash, and wasmtime refuses it.
fn foreign_artifact(wasm: &[u8]) -> Vec<u8> {
    let mut config = wasmtime::Config::new();
    config.consume_fuel(true).epoch_interruption(true);
    let engine = Engine::new(&config).unwrap();
    engine.precompile_module(wasm).unwrap()
}

/// Without a fitting artifact the module is compiled, and the reason says what was found.
#[test]
fn without_a_fitting_artifact_the_module_is_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = module("compiled");
    let (engine, loaded) = PolicyEngine::load(&wasm, EngineOptions::default(), None).unwrap();
    assert_eq!(loaded, Loaded::Compiled(Fallback::NotConfigured));
    assert_eq!(answer(&engine), b"compiled");
    // Only an artifact of another module.
    let other =
        PolicyEngine::precompile(&module("other"), &EngineOptions::default(), dir.path()).unwrap();
    let (engine, loaded) =
        PolicyEngine::load(&wasm, EngineOptions::default(), Some(dir.path())).unwrap();
    let Loaded::Compiled(why @ Fallback::Missing { .. }) = loaded else {
        panic!("{loaded:?}");
    };
    assert_eq!(why.reason(), "missing");
    let name = other.file_name().unwrap().to_string_lossy().into_owned();
    assert!(why.to_string().contains(&name), "{why}");
    assert_eq!(answer(&engine), b"compiled");
}

/// An artifact under the expected name that wasmtime refuses — made for another engine
/// configuration (wasmtime's own check), or not an artifact at all — is compiled past.
#[test]
fn an_artifact_wasmtime_refuses_is_compiled_past() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = module("refused");
    let expected = PolicyEngine::precompile(&wasm, &EngineOptions::default(), dir.path()).unwrap();
    std::fs::write(&expected, foreign_artifact(&wasm)).unwrap();
    let (engine, loaded) =
        PolicyEngine::load(&wasm, EngineOptions::default(), Some(dir.path())).unwrap();
    let Loaded::Compiled(Fallback::Refused { path, error }) = loaded else {
        panic!("{loaded:?}");
    };
    assert_eq!(path, expected);
    assert!(error.contains("compiled with"), "wasmtime's check: {error}");
    assert_eq!(answer(&engine), b"refused");
    std::fs::write(&expected, b"\x7fELF not really").unwrap();
    let (_, loaded) =
        PolicyEngine::load(&wasm, EngineOptions::default(), Some(dir.path())).unwrap();
    let Loaded::Compiled(why @ Fallback::Refused { .. }) = loaded else {
        panic!("{loaded:?}");
    };
    assert_eq!(why.reason(), "refused");
}

//! `annotate`: embed policy metadata in the module's `io.kubewarden.metadata` custom
//! section, as `kwctl annotate` does (metadata.yml as JSON plus the `protocolVersion`
//! the module reports, and the README as `io.kubewarden.policy.usage`).

use crate::capabilities::{Capabilities, HostCallError};
use crate::engine::PolicyEngine;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// Name of the custom section Kubewarden reads metadata from.
pub const METADATA_SECTION: &str = "io.kubewarden.metadata";
const USAGE_ANNOTATION: &str = "io.kubewarden.policy.usage";

/// A host that grants nothing (`protocol_version` needs no capability).
struct NoCapabilities;
impl Capabilities for NoCapabilities {
    fn call(&self, binding: &str, _: &str, _: &str, _: &[u8]) -> Result<Vec<u8>, HostCallError> {
        Err(HostCallError::unknown_binding(binding))
    }
}

/// Checks the fields every Kubewarden metadata needs.
pub fn check_metadata(metadata: &Value) -> Result<()> {
    if !metadata["rules"].is_array() {
        bail!("metadata: `rules` must be a list");
    }
    if !metadata["mutating"].is_boolean() {
        bail!("metadata: `mutating` (true/false) is required");
    }
    for (i, rule) in metadata["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["apiGroups", "apiVersions", "resources", "operations"] {
            if !rule[field].is_array() {
                bail!("metadata: rules[{i}].{field} must be a list");
            }
        }
    }
    Ok(())
}

/// The module with `metadata` (plus `protocolVersion` and the optional usage text)
/// in its metadata section, replacing an earlier one.
pub fn annotate(
    wasm: &[u8],
    engine: &PolicyEngine,
    mut metadata: Value,
    usage: Option<String>,
) -> Result<Vec<u8>> {
    check_metadata(&metadata)?;
    let answer = engine
        .call("protocol_version", b"", Arc::new(NoCapabilities))
        .context("calling the module's protocol_version")?;
    let version: Value = serde_json::from_slice(&answer).context("protocol_version answer")?;
    metadata["protocolVersion"] = version;
    if let Some(text) = usage {
        metadata["annotations"][USAGE_ANNOTATION] = text.into();
    }
    let payload = serde_json::to_vec(&metadata)?;
    let section = wasm_encoder::CustomSection {
        name: Cow::Borrowed(METADATA_SECTION),
        data: Cow::Borrowed(&payload),
    };
    rebuild(wasm, METADATA_SECTION, &section)
}

/// The JSON in the module's metadata section, if any.
pub fn embedded_metadata(wasm: &[u8]) -> Result<Option<Value>> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::CustomSection(c) = payload? {
            if c.name() == METADATA_SECTION {
                return Ok(Some(
                    serde_json::from_slice(c.data()).context("metadata section is not JSON")?,
                ));
            }
        }
    }
    Ok(None)
}

/// `wasm` without custom sections named `name`; every other section is copied as is,
/// followed by `extra`.
fn rebuild(wasm: &[u8], name: &str, extra: &wasm_encoder::CustomSection<'_>) -> Result<Vec<u8>> {
    let mut module = wasm_encoder::Module::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        if let wasmparser::Payload::CustomSection(c) = &payload {
            if c.name() != name {
                module.section(&wasm_encoder::CustomSection {
                    name: Cow::Borrowed(c.name()),
                    data: Cow::Borrowed(c.data()),
                });
            }
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            let data = wasm
                .get(usize::try_from(range.start)?..usize::try_from(range.end)?)
                .context("section out of bounds")?;
            module.section(&wasm_encoder::RawSection { id, data });
        }
    }
    module.section(extra);
    Ok(module.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineOptions;

    const GUEST: &str = r#"(module
      (import "wapc" "__guest_response" (func $r (param i32 i32)))
      (memory (export "memory") 1)
      (data (i32.const 0) "\"v1\"")
      (func (export "__guest_call") (param i32 i32) (result i32)
        (call $r (i32.const 0) (i32.const 4)) (i32.const 1))
      (@custom "other" "keep me"))"#;

    #[test]
    fn embeds_metadata_with_protocol_version_and_reannotates() {
        let wasm = wat::parse_str(GUEST).unwrap();
        let engine = PolicyEngine::new(&wasm, EngineOptions::default()).unwrap();
        let metadata = serde_json::json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods"], "operations": ["CREATE"]}], "mutating": true, "annotations": {"a": "b"}});
        let once = annotate(&wasm, &engine, metadata.clone(), Some("# usage".into())).unwrap();
        let read = embedded_metadata(&once).unwrap().unwrap();
        assert_eq!(read["protocolVersion"], "v1");
        assert_eq!(read["annotations"]["io.kubewarden.policy.usage"], "# usage");
        let twice = annotate(&once, &engine, metadata, None).unwrap();
        let sections: Vec<String> = wasmparser::Parser::new(0)
            .parse_all(&twice)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::CustomSection(c) => Some(c.name().to_string()),
                _ => None,
            })
            .collect();
        let metadata_sections = sections.iter().filter(|s| *s == METADATA_SECTION).count();
        assert_eq!(metadata_sections, 1, "{sections:?}");
        assert!(
            sections.iter().any(|s| s == "other"),
            "others kept: {sections:?}"
        );
        assert!(embedded_metadata(&twice).unwrap().unwrap()["annotations"]
            .get("io.kubewarden.policy.usage")
            .is_none());
        PolicyEngine::new(&twice, EngineOptions::default()).expect("still a valid module");
    }

    #[test]
    fn incomplete_metadata_is_refused() {
        let err =
            check_metadata(&serde_json::json!({"rules": [{"apiGroups": [""]}], "mutating": true}));
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("rules[0].apiVersions"));
        assert!(check_metadata(&serde_json::json!({"rules": []})).is_err());
    }
}

//! The policy module precompiled for the engine's configuration (issue #41): compiling the
//! 2 MB module with Cranelift takes ~15 CPU-seconds, which a host limited to 100m of CPU
//! cannot afford at start. `precompile` (run when the image is built) writes wasmtime's
//! artifact (`Engine::precompile_module`) into a directory under a name made of the
//! module's digest and the engine's compatibility hash
//! (`Engine::precompile_compatibility_hash`); `serve --precompiled-dir` loads the file of
//! that name (`Module::deserialize`, which checks the artifact against the engine once
//! more), and compiles the module itself — with a warning and a metric — when there is
//! none or wasmtime refuses it.

use sha2::{Digest, Sha256};
use std::fmt;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use wasmtime::{Engine, Module, Precompiled};

/// Why the module was compiled at start instead of loaded precompiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// No directory of precompiled modules was given.
    NotConfigured,
    /// The directory holds no artifact for this module and engine configuration.
    Missing { dir: PathBuf, holds: Vec<String> },
    /// wasmtime refused the artifact of that name.
    Refused { path: PathBuf, error: String },
}

impl Fallback {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Fallback::NotConfigured => "not_configured",
            Fallback::Missing { .. } => "missing",
            Fallback::Refused { .. } => "refused",
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::NotConfigured => write!(f, "no --precompiled-dir"),
            Fallback::Missing { dir, holds } => write!(
                f,
                "{} holds no precompiled module for this module and engine configuration \
                 (it holds {holds:?}; another module, a host of another version, or a CPU \
                 without the engine's baseline changes the name)",
                dir.display()
            ),
            Fallback::Refused { path, error } => {
                write!(f, "wasmtime refused {}: {error}", path.display())
            }
        }
    }
}

/// Where the compiled module came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    Precompiled(PathBuf),
    Compiled(Fallback),
}

/// SHA-256 as a `std::hash::Hasher`, to digest wasmtime's compatibility hash into a name
/// that is the same in every process of this binary.
struct Sha256Hasher(Sha256);

impl std::hash::Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The artifact's file name for `wasm` under `engine`'s configuration.
pub fn artifact_name(engine: &Engine, wasm: &[u8]) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.0.update(b"workloadspread precompiled policy v1\0");
    hasher.0.update(Sha256::digest(wasm));
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let digest = hasher.0.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.cwasm")
}

/// Compiles `wasm` for `engine` into `dir` (created if needed); returns the file written.
pub fn precompile(engine: &Engine, wasm: &[u8], dir: &Path) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let artifact = engine
        .precompile_module(wasm)
        .map_err(|e| anyhow::anyhow!("compiling the policy module: {e:#}"))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(artifact_name(engine, wasm));
    let partial = path.with_extension("cwasm.partial");
    std::fs::write(&partial, artifact).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

/// The module for `wasm`: the precompiled artifact in `dir` when there is one wasmtime
/// accepts, else compiled here (wasmtime's compilation cache applies).
pub fn load(engine: &Engine, wasm: &[u8], dir: Option<&Path>) -> anyhow::Result<(Module, Loaded)> {
    let fallback = match dir {
        None => Fallback::NotConfigured,
        Some(dir) => {
            let path = dir.join(artifact_name(engine, wasm));
            match std::fs::read(&path) {
                Ok(bytes) => match deserialize(engine, &bytes) {
                    Ok(module) => return Ok((module, Loaded::Precompiled(path))),
                    Err(error) => Fallback::Refused {
                        path,
                        error: format!("{error:#}"),
                    },
                },
                Err(_) => Fallback::Missing {
                    dir: dir.to_path_buf(),
                    holds: artifacts_in(dir),
                },
            }
        }
    };
    let module = Module::new(engine, wasm)?;
    Ok((module, Loaded::Compiled(fallback)))
}

/// A module from an artifact of `Engine::precompile_module`.
fn deserialize(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Module> {
    anyhow::ensure!(
        Engine::detect_precompiled(bytes) == Some(Precompiled::Module),
        "not a precompiled wasmtime module"
    );
    // SAFETY: `Module::deserialize` runs the machine code in `bytes` without verifying
    // it, so the bytes must come from `Engine::precompile_module` of this wasmtime. They
    // do: the artifact is read from the directory the operator names (in the image, the
    // read-only /policy/precompiled written by this binary's `precompile` when the image
    // was built: as trusted as the binary itself), under the name derived from the
    // module's digest and this engine's compatibility hash, and wasmtime checks its
    // header (version, target, flags, tunables, features) against the engine before use.
    #[allow(unsafe_code)]
    let module = unsafe { Module::deserialize(engine, bytes) }?;
    Ok(module)
}

/// The artifact names in `dir` (for the warning), at most 8.
fn artifacts_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    names.sort();
    names.truncate(8);
    names
}

#[cfg(test)]
mod tests;

//! `annotate`: embed metadata in the module, as `kwctl annotate`.

use super::read_input;
use crate::engine::{EngineOptions, PolicyEngine};
use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;

#[derive(Args)]
pub struct AnnotateArgs {
    /// metadata.yml
    #[arg(short = 'm', long)]
    pub metadata_path: PathBuf,
    /// README to embed as `io.kubewarden.policy.usage`.
    #[arg(short = 'u', long)]
    pub usage_path: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output_path: PathBuf,
    /// The module to annotate.
    pub wasm_path: PathBuf,
}

pub fn annotate(args: AnnotateArgs) -> Result<()> {
    let wasm = std::fs::read(&args.wasm_path)
        .with_context(|| format!("reading {}", args.wasm_path.display()))?;
    let metadata: Value = serde_yaml::from_str(&read_input(&args.metadata_path)?)
        .with_context(|| format!("parsing {}", args.metadata_path.display()))?;
    let usage = args.usage_path.as_ref().map(read_input).transpose()?;
    let engine = PolicyEngine::new(&wasm, EngineOptions::default())?;
    let annotated = crate::annotate::annotate(&wasm, &engine, metadata, usage)?;
    std::fs::write(&args.output_path, annotated)
        .with_context(|| format!("writing {}", args.output_path.display()))
}

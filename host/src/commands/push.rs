//! `push`: the module to an OCI registry, as `kwctl push`.

use super::current_thread_runtime;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct RegistryArgs {
    /// Talk plain HTTP to the registry (e.g. one on loopback without TLS).
    #[arg(long)]
    pub plain_http: bool,
    /// Basic-auth credentials `user:password` (default: anonymous); also $WS_REGISTRY_AUTH.
    #[arg(long, env = "WS_REGISTRY_AUTH", hide_env_values = true)]
    pub registry_auth: Option<String>,
}

impl RegistryArgs {
    pub fn registry(&self) -> crate::oci::Registry {
        crate::oci::Registry {
            plain_http: self.plain_http,
            credentials: self.registry_auth.clone(),
        }
    }
}

#[derive(Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// `text` prints the immutable reference; `json` prints {"immutable_ref": …} like kwctl.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
    /// The module (annotated: `make annotated-policy`).
    pub wasm_path: PathBuf,
    /// Destination, e.g. registry://127.0.0.1:5000/policies/workloadspread:v0.1.0
    pub uri: String,
}

pub fn push(args: PushArgs) -> Result<()> {
    let registry = args.registry.registry();
    let immutable = current_thread_runtime()?.block_on(crate::oci::push(
        &args.wasm_path,
        &args.uri,
        &registry,
    ))?;
    match args.output.as_str() {
        "json" => println!("{}", serde_json::json!({ "immutable_ref": immutable })),
        _ => println!("{immutable}"),
    }
    Ok(())
}

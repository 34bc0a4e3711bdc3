//! `workloadspread-controller status [-n NAMESPACE] NAME [-o table|json]` (also run as the
//! kubectl plugin `kubectl workloadspread`): the live view of one WorkloadSpread, read
//! with the user's kubeconfig — per subset the maximum for the workload's current
//! replicas, the planned count, pods, creating and deleting entries; pods outside every
//! subset; the next pods a scale-in removes; on plan or not
//! (`workloadspread_core::controller::view`).

use crate::args::StatusArgs;
use crate::inputs::workload_view;
use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::pinned_kind;
use serde_json::Value;
use std::time::Duration;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::controller::view::{status_view, table, StatusView};

/// Bound of each API call.
const TIMEOUT: Duration = Duration::from_secs(15);

pub fn status(args: StatusArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let text = rt.block_on(render(&args))?;
    print!("{text}");
    Ok(())
}

async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = kube::Result<T>>,
) -> Result<T> {
    tokio::time::timeout(TIMEOUT, call)
        .await
        .with_context(|| format!("{what}: no answer in {TIMEOUT:?}"))?
        .with_context(|| what.to_string())
}

async fn client(args: &StatusArgs) -> Result<(kube::Client, String)> {
    let config = workloadspread_kube::client::config(
        args.kubeconfig.as_deref(),
        workloadspread_core::contest::CONTROLLER_MANAGER,
    )
    .await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    Ok((kube::Client::try_from(config)?, namespace))
}

/// The view, as the chosen output.
pub async fn render(args: &StatusArgs) -> Result<String> {
    let (client, ns) = client(args).await?;
    let spreads: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &workloadspread_kube::resource::workloadspread_resource(),
    );
    let object = bounded(
        &format!("reading WorkloadSpread {ns}/{}", args.name),
        spreads.get(&args.name),
    )
    .await?;
    let ws: WorkloadSpread = crate::fetch::decode(&object)?;
    let workload = match ws.spec.target_ref.as_ref() {
        None => None,
        Some(t) => {
            let (group, version) = t
                .api_version
                .split_once('/')
                .unwrap_or(("", &t.api_version));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, &t.kind);
            let (resource, _) = bounded(
                &format!("discovering {}", t.kind),
                pinned_kind(&client, &gvk),
            )
            .await?;
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            bounded(
                &format!("reading {} {}", t.kind, t.name),
                api.get_opt(&t.name),
            )
            .await?
            .map(|o| -> Result<Value> {
                let mut v = serde_json::to_value(&o)?;
                v["apiVersion"] = resource.api_version.clone().into();
                v["kind"] = resource.kind.clone().into();
                Ok(v)
            })
            .transpose()?
        }
    };
    let list = ListParams::default();
    let sets = bounded(
        "listing ReplicaSets",
        Api::<ReplicaSet>::namespaced(client.clone(), &ns).list(&list),
    )
    .await?;
    let replica_sets: Vec<Value> = sets
        .items
        .iter()
        .map(|rs| {
            let mut v = serde_json::to_value(rs)?;
            v["apiVersion"] = "apps/v1".into();
            v["kind"] = "ReplicaSet".into();
            Ok(v)
        })
        .collect::<Result<_>>()?;
    let pods = bounded(
        "listing pods",
        Api::<Pod>::namespaced(client, &ns).list(&list),
    )
    .await?;
    let (kinds, versioned) = (args.rules.kinds()?, args.rules.versioned());
    let view = workload_view(
        &ws,
        workload.as_ref(),
        &replica_sets,
        &pods.items,
        &kinds,
        &versioned,
    )?;
    let v = status_view(&ws, &view.pods, view.replicas, args.next);
    Ok(match args.output.as_str() {
        "json" => serde_json::to_string_pretty(&v)? + "\n",
        _ => table(&printable(v)),
    })
}

/// The view with every name a tenant chose made safe for a terminal (issue #41): control
/// characters (escape sequences that would move the cursor, rewrite the screen or set the
/// window title) shown escaped, as `\u{1b}`. JSON output escapes them itself.
fn printable(mut v: StatusView) -> StatusView {
    let clean = |s: &mut String| {
        if s.chars().any(char::is_control) {
            *s = s
                .chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect();
        }
    };
    clean(&mut v.namespace);
    clean(&mut v.name);
    for s in &mut v.subsets {
        clean(&mut s.name);
        clean(&mut s.schedule);
    }
    for p in &mut v.next_removed {
        clean(&mut p.name);
        if let Some(s) = p.subset.as_mut() {
            clean(s);
        }
    }
    v.over_maximum.iter_mut().for_each(clean);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloadspread_core::controller::view::{NextPod, SubsetView};

    #[test]
    fn names_with_terminal_escapes_are_printed_escaped() {
        let evil = "a\u{1b}]0;owned\u{7}\u{1b}[2J".to_string();
        let v = StatusView {
            namespace: "ns".into(),
            name: evil.clone(),
            replicas: 1,
            subsets: vec![SubsetView {
                name: evil.clone(),
                max: Some(1),
                planned: 1,
                pods: 2,
                creating: 0,
                deleting: 0,
                schedule: evil.clone(),
            }],
            outside: 0,
            planned_outside: 0,
            next_removed: vec![NextPod {
                name: evil.clone(),
                subset: Some(evil.clone()),
                deletion_cost: 1,
            }],
            on_plan: false,
            over_maximum: vec![evil.clone()],
        };
        let text = table(&printable(v));
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("a\\u{1b}]0;owned\\u{7}"), "{text}");
    }
}

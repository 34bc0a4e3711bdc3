//! Reviews a caller forged (issue #58): nothing in a request body decides what is
//! counted. The chart's defaults let any pod reach the webhook (no client certificate).

use super::ordinary::*;
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use workloadspread_testkit::stack::Stack;

/// Protocol review F1: a forged DELETE review for a running zone-a pod whose `oldObject`
/// says it is counted in zone-b, then the pod's real deletion and a scale to 11, with the
/// controller stopped (as in an upgrade: nothing recounts). The host reads the stored pod
/// and records nothing for the forgery; the real deletion is recorded in zone-a, so its
/// replacement returns there. (Before: the intent went to zone-b, the real deletion found
/// it recorded and wrote nothing for zone-a, and its departure freed a slot in zone-b:
/// zone-b 6 of 5, zone-a 2.)
#[tokio::test]
async fn a_forged_delete_naming_another_subset_frees_no_slot_there() -> Result<()> {
    let Some(mut s) = Stack::start("forged-subset", &[]).await? else {
        return Ok(());
    };
    let (_api, monitor) = spread_ten(&s, false).await?;
    s.controller.kill();
    let held = a_pod(&s.ns).await?;
    let name = held.metadata.name.clone().context("the pod's name")?;
    let mut forged = held.clone();
    let annotation = workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION;
    forged
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotation.into(), r#"{"name":"web","subset":"b"}"#.into());
    for _ in 0..3 {
        let (code, body) = s
            .host
            .post("/mutate", &forged_review(&forged, false)?)
            .await?;
        ensure!(code == 200, "the host answered {code}: {body}");
    }
    let contradicted = s
        .host
        .metric("workloadspread_host_counter_contradicted_releases_total")
        .await?;
    s.ns.api::<Pod>()
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await?;
    scale_through(&s.ns, &[10, 11]).await?;
    let report = verdict(&s.ns, monitor, "a forged DELETE naming zone-b").await?;
    eprintln!("  {contradicted} releases contradicted by the stored pod");
    ensure!(contradicted >= 1.0, "no release refused of 3 forged");
    let b = report.max_pods.get("b").copied().unwrap_or(0);
    ensure!(b <= 5, "zone-b held {b} of 5");
    s.finish().await
}

//! The policy's audit annotations in the API server's audit log.

use crate::support::FleetSetup;
use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::time::Duration;
use workloadspread_testkit::{cluster, wait_for};

/// Issue #17 (7): the policy's audit annotations reach the API server's audit log under
/// the webhook's name (`mutate.workloadspread.test/mode`, `/subset`). Keys that carry a
/// prefix of their own (`workloadspread/mode`) were dropped by the API server with
/// "annotation key has invalid format".
#[tokio::test]
async fn audit_annotations_reach_the_audit_log() -> Result<()> {
    let Some(s) = FleetSetup::start("ws-audit", cluster()?.kubeconfig()).await? else {
        return Ok(());
    };
    let log = cluster()?.audit_log();
    if !log.exists() {
        // Only cluster.sh's control plane is known to audit pods there (CI always is).
        eprintln!(
            "SKIP: no audit log at {} (WS_TEST_KUBECONFIG is another cluster)",
            log.display()
        );
        return s.finish().await;
    }
    ensure!(s.create_pod("fleet-0").await?.as_deref() == Some("a"));
    let ns = s.ns.name().to_string();
    let annotations = wait_for("the pod's audit event", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("reading {} (cluster.sh writes it)", log.display()))?;
        let event = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["verb"] == "create"
                    && e["stage"] == "ResponseComplete"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && e["objectRef"]["name"] == "fleet-0"
            });
        Ok(event.map(|e| e["annotations"].clone()))
    })
    .await?;
    let key = |k: &str| format!("mutate.workloadspread.test/{k}");
    ensure!(
        annotations[key("mode")] == "exact" && annotations[key("subset")] == "spread/a",
        "audit annotations {annotations}"
    );
    s.finish().await
}

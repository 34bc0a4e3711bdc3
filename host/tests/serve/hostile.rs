//! Hostile and malformed admission reviews sent straight to `serve`.

use crate::support::{host_bin, ws_crd};
use anyhow::{ensure, Result};
use serde_json::{json, Value};
use workloadspread_testkit::cluster;
use workloadspread_testkit::webhook::{policy_wasm, HostProcess};

fn review(kind: &str, namespace: &str, object: Value) -> Vec<u8> {
    let version = if kind == "Pod" || kind == "ConfigMap" {
        "v1"
    } else {
        "v1beta1"
    };
    let group = if kind == "WorkloadSpread" {
        "apps.kruise.io"
    } else {
        ""
    };
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "namespace": namespace, "name": object["metadata"]["name"], "operation": "CREATE",
            "userInfo": {"username": "test"}, "object": object}}))
    .expect("static review")
}

/// Hostile input to `serve`: malformed bodies and reviews get 400 with the reason, a
/// body over `--max-request-bytes` gets 413 saying so, an unknown kind is allowed
/// untouched, a large pod (900 KB of annotations) is evaluated, and an invalid
/// WorkloadSpread is refused with its field path.
#[tokio::test]
async fn hostile_reviews_get_clear_answers() -> Result<()> {
    let Some(policy) = policy_wasm()? else {
        return Ok(());
    };
    let cluster = cluster()?;
    let ns = cluster.namespace("hostile").await?;
    ws_crd(&ns.client()).await?;
    let args = [
        "--policy".to_string(),
        policy.display().to_string(),
        "--max-request-bytes".into(),
        (1 << 20).to_string(),
    ];
    let host = HostProcess::start(host_bin(), cluster.kubeconfig(), &args).await?;

    let (code, body) = host.post("/mutate", b"{not json").await?;
    ensure!(
        code == 400 && body.contains("not an AdmissionReview"),
        "{code} {body}"
    );
    let (code, body) = host.post("/mutate", br#"{"kind":"Pod"}"#).await?;
    ensure!(
        code == 400 && body.contains("expected an AdmissionReview"),
        "{code} {body}"
    );

    let oversized = review(
        "Pod",
        ns.name(),
        json!({"metadata": {"name": "big",
        "annotations": {"x": "y".repeat(2 << 20)}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    );
    let (code, body) = host.post("/mutate", &oversized).await?;
    ensure!(
        code == 413 && body.contains("larger than 1048576 bytes"),
        "{code} {body}"
    );

    let answer = |body: &str| -> Result<Value> {
        Ok(serde_json::from_str::<Value>(body)?["response"].clone())
    };
    let (code, body) = host
        .post(
            "/mutate",
            &review(
                "ConfigMap",
                ns.name(),
                json!({"metadata": {"name": "cm"}, "data": {}}),
            ),
        )
        .await?;
    ensure!(
        code == 200 && answer(&body)?["allowed"] == true,
        "{code} {body}"
    );

    let large = review(
        "Pod",
        ns.name(),
        json!({"metadata": {"name": "large",
        "annotations": {"x": "y".repeat(900 << 10)}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    );
    let (code, body) = host.post("/mutate", &large).await?;
    ensure!(
        code == 200 && answer(&body)?["allowed"] == true,
        "{code} {}",
        &body[..body.len().min(300)]
    );

    let invalid = review(
        "WorkloadSpread",
        ns.name(),
        json!({"apiVersion": "apps.kruise.io/v1beta1",
        "kind": "WorkloadSpread", "metadata": {"name": "bad", "namespace": ns.name()},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": -1}]}}),
    );
    let (code, body) = host.post("/validate", &invalid).await?;
    let response = answer(&body)?;
    ensure!(
        code == 200
            && response["allowed"] == false
            && response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("spec.subsets[0].maxReplicas"),
        "{code} {body}"
    );
    Ok(())
}

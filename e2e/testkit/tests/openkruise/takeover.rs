//! The take-over from a running OpenKruise and the way back (`docs/operations.md`,
//! "Coming from OpenKruise"), with OpenKruise v1.9.0's own manager:
//!
//! 1. OpenKruise spreads a Deployment 0 → 10 → 12 under a v1alpha1 WorkloadSpread (3 / 4 /
//!    20 over three zones).
//!    Host + controller started too early (its validation handed over, its gate still on)
//!    find OpenKruise writing the spread's status and stand back: the next pod is not
//!    spread by ours.
//! 2. Its `WorkloadSpread` feature gate goes off (the manager restarts with it; the rest of
//!    OpenKruise — its CRDs, its conversion webhook — keeps running); host + controller
//!    start with the CRD as it is. Every pod keeps its uid and its subset, the status counts
//!    the pods exactly, and neither of ours finds a rival writer.
//! 3. The next steps (→ 4 → 20) land on `core`'s planner; no subset is ever above its
//!    maximum at a settled step; no pod create is refused.
//! 4. Back: ours stop (their webhook configurations removed), OpenKruise's gate goes on
//!    again; → 7 → 15 are spread by OpenKruise (every new pod injected, its status counting
//!    them), again without a refused create or a restarted pod.

use crate::common::*;
use anyhow::{ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::rules::Rules;
use workloadspread_testkit::kruise::{KruiseBuild, KruiseManager, KruiseOptions};
use workloadspread_testkit::pods::subset_of;
use workloadspread_testkit::specs::alpha_spec;
use workloadspread_testkit::stack::{Binaries, Stack};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

/// The annotation our host puts on every pod it admits into a subset.
const ADMISSION_TOKEN: &str = "workloadspread.io/admission-token";

/// The spread: zone-a at most 3, zone-b at most 4, zone-c at most 20 (the rest, at the
/// sizes used). A maximum on every subset: OpenKruise's pod webhook records a pod in the
/// status only in a subset with one, and that write is what tells ours it is active.
fn spec() -> Value {
    json!({"targetRef": target("Deployment"), "subsets": [
        zone("a", "zone-a", json!(3)), zone("b", "zone-b", json!(4)), zone("c", "zone-c", json!(20))]})
}

const MAXIMA: [(&str, usize); 2] = [("a", 3), ("b", 4)];

/// Pod uid → subset.
fn placement(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| {
            (
                p.metadata.uid.clone().unwrap_or_default(),
                subset_of(p).unwrap_or_default(),
            )
        })
        .collect()
}

fn within_maxima(pods: &[Pod]) -> Result<()> {
    let got = counts(pods);
    for (subset, max) in MAXIMA {
        let n = got.get(subset).copied().unwrap_or(0);
        ensure!(
            n <= max,
            "subset {subset} holds {n} pods, above its maximum {max}: {got:?}"
        );
    }
    Ok(())
}

/// Scales to `replicas` and waits until the pods run with costs and the status (read as
/// `version`) counts them exactly; checks the maxima.
async fn step(ns: &TestNamespace, spreads: &Api<DynamicObject>, replicas: i32) -> Result<Vec<Pod>> {
    scale(&ns.api::<Deployment>(), replicas).await?;
    let pods = settled(ns, replicas as usize)
        .await
        .with_context(|| format!("scaling to {replicas}"))?;
    status_matches(spreads, &counts(&pods))
        .await
        .with_context(|| format!("the status at {replicas}"))?;
    within_maxima(&pods)?;
    eprintln!("[takeover] at {replicas}: {:?}", counts(&pods));
    Ok(pods)
}

async fn start_kruise(build: &KruiseBuild, gate_on: bool) -> Result<KruiseManager> {
    let options = KruiseOptions {
        workloadspread_off: !gate_on,
        ..Default::default()
    };
    KruiseManager::start(build, cluster()?, &options).await
}

/// Stops host + controller, their webhook configurations first; the namespace stays.
async fn stop(stack: Stack) -> Result<TestNamespace> {
    let Stack {
        ns,
        mut host,
        mut controller,
        configs,
    } = stack;
    configs.delete().await?;
    host.kill();
    controller.kill();
    Ok(ns)
}

/// `workloadspread-host openkruise STEP` against the test cluster.
async fn openkruise(bins: &Binaries, step: &str) -> Result<()> {
    let out = tokio::process::Command::new(&bins.host)
        .args(["openkruise", step, "--kubeconfig"])
        .arg(cluster()?.kubeconfig())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "openkruise {step}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Pods per subset of a planned step.
fn planned_counts(step: &workloadspread_core::plan::PlanStep) -> BTreeMap<String, usize> {
    step.subsets
        .iter()
        .filter(|s| s.pods > 0)
        .map(|s| (s.name.clone(), s.pods))
        .collect()
}

#[tokio::test]
#[ignore = "needs OpenKruise v1.9.0's manager (e2e/kruise/kruise.sh): make takeover"]
async fn openkruise_hands_over_without_a_restart_and_takes_back() -> Result<()> {
    let build = KruiseBuild::from_env()?
        .context("set WS_KRUISE_MANAGER and WS_KRUISE_MANIFESTS (make takeover does)")?;
    let bins = Binaries::find()?.context("host, controller and policy must be built")?;

    // 1. OpenKruise spreads.
    let kruise = start_kruise(&build, true).await?;
    let ns = cluster()?.namespace("takeover").await?;
    let alpha = kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1alpha1",
        "WorkloadSpread",
    ));
    let alpha_api: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &alpha);
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
        "metadata": {"name": "web"}, "spec": alpha_spec(&spec())}))?;
    alpha_api.create(&PostParams::default(), &ws).await?;
    // Its pod webhook reads the spread from its cache: wait until its controller wrote
    // the status (it has seen the spread).
    wait_for("OpenKruise to see the spread", SETTLE, || async {
        Ok(alpha_api.get("web").await?.data["status"]["subsetStatuses"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
            .then_some(()))
    })
    .await?;
    create_web_deployment(&ns, 0).await?;
    let spreads: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ws_resource());
    step(&ns, &spreads, 10).await?;
    let twelve = step(&ns, &spreads, 12).await?;
    ensure!(
        twelve.iter().all(|p| subset_of(p).is_some()),
        "OpenKruise placed every pod: {:?}",
        counts(&twelve)
    );

    // 1b. Ours installed too early — its validation handed over, but its gate still on: at
    // the first status write OpenKruise makes (its webhook records the next pod), ours stand
    // back and say so.
    openkruise(&bins, "hand-over").await?;
    let ns_name = ns.name().to_string();
    let early = Stack::start_in(ns, &bins, cluster()?.kubeconfig(), &[], &[]).await?;
    early
        .host
        .wait_sees_workloadspread(&ns_name, "web", &target("Deployment"))
        .await?;
    scale(&early.ns.api::<Deployment>(), 13).await?;
    let reason = wait_for("ours to find OpenKruise writing", SETTLE, || async {
        let (ready, body) = early.controller.readiness().await?;
        let host = early
            .host
            .metric("workloadspread_host_contested_workloadspreads")
            .await?;
        Ok((!ready && host == 1.0).then_some(body))
    })
    .await?;
    eprintln!("[takeover] installed too early: the controller says {reason:?}");
    // Its webhook records a pod before the pod is stored: wait for the 13th to run.
    let before = settled(&early.ns, 13).await?;
    scale(&early.ns.api::<Deployment>(), 14).await?;
    let pods = settled(&early.ns, 14).await?;
    let added: Vec<&Pod> = pods
        .iter()
        .filter(|p| !before.iter().any(|b| b.metadata.uid == p.metadata.uid))
        .collect();
    // Ours did not spread it (OpenKruise's webhook did, or — when it failed, its pod
    // webhook failing open — nobody).
    ensure!(
        added.len() == 1
            && workloadspread_testkit::pods::annotation(added[0], ADMISSION_TOKEN).is_none(),
        "the 14th pod not spread by ours: {:?}",
        added
            .iter()
            .map(|p| (&p.metadata.name, &p.metadata.annotations))
            .collect::<Vec<_>>()
    );
    let ns = stop(early).await?;
    openkruise(&bins, "hand-back").await?;
    let by_kruise = step(&ns, &spreads, 12).await?;

    // 2. The take-over: OpenKruise's WorkloadSpread off, its WorkloadSpread validation
    // handed over (it refuses every write of a spread with the gate off), ours on, the CRD
    // as it is.
    kruise.stop().await?;
    let kruise = start_kruise(&build, false).await?;
    openkruise(&bins, "hand-over").await?;
    let stack = Stack::start_in(ns, &bins, cluster()?.kubeconfig(), &[], &[]).await?;
    stack
        .host
        .wait_sees_workloadspread(&ns_name, "web", &target("Deployment"))
        .await?;
    wait_for("the controller ready", SETTLE, || async {
        let (ready, body) = stack.controller.readiness().await?;
        ensure!(
            !body.contains("also written by"),
            "the controller found a rival: {body}"
        );
        Ok(ready.then_some(()))
    })
    .await?;
    let taken = live_pods(&stack.ns).await?;
    ensure!(
        placement(&taken) == placement(&by_kruise),
        "no pod restarted or moved at the take-over: before {:?}, after {:?}",
        placement(&by_kruise),
        placement(&taken)
    );
    status_matches(&spreads, &counts(&taken)).await?;
    eprintln!(
        "[takeover] taken over: {} pods, the same uids and subsets, the status counting them",
        taken.len()
    );

    // 3. Our steps, against the planner over the whole history.
    let typed: WorkloadSpread =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec()}))?;
    let history = [10, 12, 4, 20];
    let planned = workloadspread_core::plan::plan_with(&typed, &history, None, Rules::Planned);
    for (i, replicas) in [(2, 4), (3, 20)] {
        let before = live_pods(&stack.ns).await?;
        let pods = step(&stack.ns, &spreads, replicas).await?;
        ensure!(
            counts(&pods) == planned_counts(&planned[i]),
            "at {replicas}: {:?}, planned {:?}",
            counts(&pods),
            planned_counts(&planned[i])
        );
        // Scale-in removes pods, scale-out adds: the ones kept are the same pods.
        let kept: BTreeSet<_> = placement(&pods).into_iter().collect();
        let had: BTreeSet<_> = placement(&before).into_iter().collect();
        ensure!(
            kept.is_subset(&had) || had.is_subset(&kept),
            "a pod was replaced at {replicas}"
        );
    }
    // Users keep editing their spreads: OpenKruise's validation is out of the way.
    let edit = json!({"metadata": {"annotations": {"edited": "after the take-over"}}});
    spreads
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&edit),
        )
        .await
        .context("editing the spread after the take-over")?;
    let (ready, body) = stack.controller.readiness().await?;
    ensure!(ready, "the controller stayed ready: {body}");
    ensure!(
        stack
            .host
            .metric("workloadspread_host_contested_workloadspreads")
            .await?
            == 0.0,
        "the host found no rival"
    );
    let ours = live_pods(&stack.ns).await?;

    // 4. Back to OpenKruise: ours go (webhook configurations first), its gate comes on.
    let ns = stop(stack).await?;
    openkruise(&bins, "hand-back").await?;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    let back = validating
        .get("kruise-validating-webhook-configuration")
        .await?;
    ensure!(
        back.webhooks
            .unwrap_or_default()
            .iter()
            .any(|w| w.name == "vworkloadspread.kb.io"),
        "hand-back put OpenKruise's WorkloadSpread validation back"
    );
    kruise.stop().await?;
    let kruise = start_kruise(&build, true).await?;
    let before = placement(&ours);
    for replicas in [7, 15] {
        let pods = step(&ns, &spreads, replicas).await?;
        ensure!(
            pods.iter().all(|p| subset_of(p).is_some()),
            "OpenKruise placed every new pod at {replicas}: {:?}",
            counts(&pods)
        );
        let kept = placement(&pods)
            .into_iter()
            .filter(|(uid, _)| before.contains_key(uid))
            .count();
        ensure!(
            kept >= replicas.min(7) as usize,
            "pods kept at {replicas}: {kept}"
        );
    }
    ensure!(failed_creates(&ns).await? == 0, "no create refused");
    kruise.stop().await
}

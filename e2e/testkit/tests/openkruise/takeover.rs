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
    openkruise_with(bins, step, &[])
        .await?
        .map_err(|e| anyhow::anyhow!("openkruise {step}: {e}"))
}

/// As [`openkruise`] with `extra` arguments; `Ok(Err(stderr))` when the command failed.
async fn openkruise_with(
    bins: &Binaries,
    step: &str,
    extra: &[&str],
) -> Result<std::result::Result<(), String>> {
    let out = tokio::process::Command::new(&bins.host)
        .args(["openkruise", step, "--kubeconfig"])
        .arg(cluster()?.kubeconfig())
        .args(extra)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(match out.status.success() {
        true => Ok(()),
        false => Err(stderr),
    })
}

/// Whether our host admitted `pod` into a subset.
fn spread_by_ours(pod: &Pod) -> bool {
    workloadspread_testkit::pods::annotation(pod, ADMISSION_TOKEN).is_some()
}

/// Waits until host and controller stand back from the spread, the controller's
/// `/readyz` saying `why`; returns what it says.
async fn stands_back(stack: &Stack, why: &str) -> Result<String> {
    wait_for(&format!("ours to stand back ({why})"), SETTLE, || async {
        let (ready, body) = stack.controller.readiness().await?;
        let host = host_contests(stack).await?;
        match !ready && body.contains(why) && host == 1.0 {
            true => Ok(Some(body)),
            false => anyhow::bail!("controller ready {ready} ({body}), host contests {host}"),
        }
    })
    .await
}

/// The spreads the host stands back from.
async fn host_contests(stack: &Stack) -> Result<f64> {
    stack
        .host
        .metric("workloadspread_host_contested_workloadspreads")
        .await
}

/// Scales to `replicas` (one more than run now) and returns the pod added, once it runs.
async fn added_pod(ns: &TestNamespace, replicas: i32) -> Result<Pod> {
    let before = live_pods(ns).await?;
    scale(&ns.api::<Deployment>(), replicas).await?;
    let pods = settled(ns, replicas as usize).await?;
    let mut added = pods
        .into_iter()
        .filter(|p| !before.iter().any(|b| b.metadata.uid == p.metadata.uid));
    match (added.next(), added.next()) {
        (Some(pod), None) => Ok(pod),
        _ => anyhow::bail!("not one pod added at {replicas}"),
    }
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

    // 1b. Ours installed while OpenKruise owns WorkloadSpreads (its gate on, its validation
    // registered): they stand back from the start and say so; the next pod is spread by
    // OpenKruise alone.
    let ns_name = ns.name().to_string();
    let stack = Stack::start_in(ns, &bins, cluster()?.kubeconfig(), &[], &[]).await?;
    stack
        .host
        .wait_sees_workloadspread(&ns_name, "web", &target("Deployment"))
        .await?;
    let reason = stands_back(&stack, "openkruise hand-over").await?;
    eprintln!("[takeover] installed beside OpenKruise: the controller says {reason:?}");
    let thirteenth = added_pod(&stack.ns, 13).await?;
    ensure!(
        subset_of(&thirteenth).is_some() && !spread_by_ours(&thirteenth),
        "the 13th pod spread by OpenKruise alone: {:?}",
        thirteenth.metadata.annotations
    );

    // 1c. `hand-over` refuses while its gate is on (its validation admits a dry-run
    // spread). Forced (a wrong order): the next pod is spread by OpenKruise alone, and ours
    // stand back again from its status write on.
    let refused = openkruise_with(&bins, "hand-over", &[]).await?;
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("gate is still on")),
        "hand-over refused while OpenKruise's gate is on: {refused:?}"
    );
    openkruise_with(&bins, "hand-over", &["--force"])
        .await?
        .map_err(|e| anyhow::anyhow!("hand-over --force: {e}"))?;
    // managedFields times have one-second resolution: a write in the second ours last saw
    // before the hand-over is not told apart from it (`core::contest`). Start in the next.
    let handed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    wait_for("the next second", SETTLE, || async {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        Ok((now.as_secs() > handed.as_secs()).then_some(()))
    })
    .await?;
    // OpenKruise's webhook records the pod in the status before the pod reaches ours: the
    // host reads the spread live, finds that write and stands back — from this very pod.
    let fourteenth = added_pod(&stack.ns, 14).await?;
    ensure!(
        subset_of(&fourteenth).is_some() && !spread_by_ours(&fourteenth),
        "the 14th pod spread by OpenKruise alone: {:?}",
        fourteenth.metadata.annotations
    );
    let reason = match stands_back(&stack, "also written by").await {
        Ok(reason) => reason,
        Err(e) => {
            for p in live_pods(&stack.ns).await? {
                eprintln!(
                    "[takeover] {:?}: {:?}",
                    p.metadata.name, p.metadata.annotations
                );
            }
            let ws = spreads.get("web").await?;
            eprintln!("[takeover] {:?}", ws.metadata.managed_fields);
            return Err(e);
        }
    };
    eprintln!("[takeover] handed over with the gate on: the controller says {reason:?}");
    openkruise(&bins, "hand-back").await?;
    stands_back(&stack, "openkruise hand-over").await?;
    let by_kruise = step(&stack.ns, &spreads, 12).await?;

    // 2. The take-over, ours running all along: OpenKruise's WorkloadSpread off, its
    // WorkloadSpread validation handed over (it refuses every write of a spread with the
    // gate off), the CRD as it is. Ours take over at the hand-over, without a restart.
    kruise.stop().await?;
    let kruise = start_kruise(&build, false).await?;
    openkruise(&bins, "hand-over").await?;
    wait_for("the controller ready", SETTLE, || async {
        let (ready, _) = stack.controller.readiness().await?;
        Ok(ready.then_some(()))
    })
    .await?;
    ensure!(
        host_contests(&stack).await? == 0.0,
        "the host stands back from nothing after the hand-over"
    );
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
        host_contests(&stack).await? == 0.0,
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

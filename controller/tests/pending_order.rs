//! Issue #26 (2) on the local control plane: the best-effort count does not depend on
//! the order in which an admission's two caches (WorkloadSpreads, pending pods) see the
//! controller's updates, and only pods the written status counted lose their label.
//!
//! The test rebuilds a guest's view from two watches of its own — the pod watch applied
//! at once, the WorkloadSpread watch 1.5 s late (a lagging cache) — and, at every moment
//! either changes, counts as a best-effort admission does (`core::admission::
//! {pending_pods, count_pending}`: the status as read plus the pending pods it does not
//! cover). No pod may be counted nowhere.

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Api;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workloadspread_core::admission::{count_pending, pending_pods, Scale};
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::api::{COUNTED_ANNOTATION, PENDING_LABEL, PENDING_VALUE};
use workloadspread_core::rules::Rules;
use workloadspread_core::version::VersionedKinds;
use workloadspread_testkit::webhook::{apply_crd, ControllerProcess};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

/// How late the view applies WorkloadSpread events.
const WS_LAG: Duration = Duration::from_millis(1500);

fn controller_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_workloadspread-controller"))
}

fn ws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "WorkloadSpread",
    ))
}

/// A best-effort admission's view: the WorkloadSpread as its (lagging) cache has it and
/// the pods as its pod cache has them; every moment judged.
#[derive(Default)]
struct View {
    ws: Option<WorkloadSpread>,
    pods: BTreeMap<String, Pod>,
    /// The pod of another ReplicaSet that names the WorkloadSpread.
    stray: String,
    /// Armed once every marked pod is in the view.
    armed: bool,
    moments: u64,
    /// Moments where the count fell below the pods it must count.
    breaches: Vec<String>,
}

impl View {
    fn labelled(p: &Pod) -> bool {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(PENDING_LABEL))
    }

    /// Occupancy over every subset and version, as a best-effort admission counts it.
    fn count(&self) -> i64 {
        let Some(ws) = &self.ws else { return 0 };
        let pods: Vec<Pod> = self.pods.values().cloned().collect();
        let pending = pending_pods(&pods, "web", &VersionedKinds::default());
        let mut status = ws.status.clone().unwrap_or_default();
        let now = "2030-01-01T00:00:00Z"
            .parse()
            .unwrap_or(workloadspread_core::Timestamp::UNIX_EPOCH);
        count_pending(
            &mut status,
            ws,
            &pending,
            Scale::new(3, Rules::Planned),
            now,
        );
        status
            .versioned_subset_statuses
            .values()
            .flatten()
            .map(|s| {
                i64::from(s.replicas) + s.creating_pods.len() as i64 - s.deleting_pods.len() as i64
            })
            .sum()
    }

    fn observe(&mut self) {
        if !self.armed {
            return;
        }
        self.moments += 1;
        // The workload's three pods, plus the stray pod while it is labelled: the
        // status never counts it, its label is all that does.
        let stray = i64::from(self.pods.get(&self.stray).is_some_and(Self::labelled));
        let must = 3 + stray;
        let got = self.count();
        if got < must {
            let labels: Vec<(&String, bool)> = self
                .pods
                .iter()
                .map(|(n, p)| (n, Self::labelled(p)))
                .collect();
            self.breaches.push(format!(
                "moment {}: counted {got} of {must} (ws rv {:?}, pods labelled {labels:?})",
                self.moments,
                self.ws
                    .as_ref()
                    .and_then(|w| w.metadata.resource_version.clone())
            ));
        }
    }
}

fn decode(object: &DynamicObject) -> Option<WorkloadSpread> {
    let mut v = serde_json::to_value(object).ok()?;
    v["apiVersion"] = "apps.kruise.io/v1beta1".into();
    v["kind"] = "WorkloadSpread".into();
    serde_json::from_value(v).ok()
}

/// Feeds `view` from a pod watch (at once) and a WorkloadSpread watch (`WS_LAG` late).
fn follow(ns: &TestNamespace, view: Arc<Mutex<View>>) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = ns.api();
    let spreads: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ws_resource());
    tokio::spawn(async move {
        let mut pod_events = watcher(pods, watcher::Config::default()).boxed();
        let mut ws_events = watcher(spreads, watcher::Config::default()).boxed();
        let mut late: VecDeque<(tokio::time::Instant, DynamicObject)> = VecDeque::new();
        loop {
            let due = late.front().map(|(t, _)| *t);
            tokio::select! {
                Some(e) = pod_events.next() => {
                    let mut v = view.lock().unwrap_or_else(|p| p.into_inner());
                    match e {
                        Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                            v.pods.insert(p.metadata.name.clone().unwrap_or_default(), p);
                        }
                        Ok(watcher::Event::Delete(p)) => {
                            v.pods.remove(p.metadata.name.as_deref().unwrap_or_default());
                        }
                        _ => continue,
                    }
                    v.observe();
                }
                Some(e) = ws_events.next() => {
                    if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = e {
                        late.push_back((tokio::time::Instant::now() + WS_LAG, o));
                    }
                }
                _ = async {
                    match due {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let Some((_, o)) = late.pop_front() {
                        let mut v = view.lock().unwrap_or_else(|p| p.into_inner());
                        v.ws = decode(&o);
                        v.observe();
                    }
                }
            }
        }
    })
}

/// Marks a pod as a best-effort admission leaves it: matched into `web`, labelled pending.
fn mark(subset: &str) -> Value {
    json!({"metadata": {"labels": {PENDING_LABEL: PENDING_VALUE}, "annotations": {
        "apps.kruise.io/matched-workloadspread": format!(r#"{{"name":"web","subset":"{subset}"}}"#)}}})
}

#[tokio::test]
async fn best_effort_count_does_not_depend_on_the_order_of_the_two_watches() -> Result<()> {
    let ns = cluster()?.namespace("ctl-pending-order").await?;
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&ns.client(), &serde_json::to_value(&crd)?).await?;
    let spreads: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &ws_resource());
    let ws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "subsets": [{"name": "a", "maxReplicas": 10}, {"name": "b"}]}}))?;
    spreads.create(&PostParams::default(), &ws).await?;
    let template = |app: &str| {
        json!({"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}], "terminationGracePeriodSeconds": 0}})
    };
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    // A pod of another ReplicaSet naming the WorkloadSpread: the status never counts it.
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "stray"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "stray"}}, "template": template("stray")}}))?;
    ns.api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    let pods: Api<Pod> = ns.api();
    let listed = wait_for("4 pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok((list.len() == 4).then_some(list))
    })
    .await?;
    let view = Arc::new(Mutex::new(View::default()));
    let follower = follow(&ns, view.clone());
    let mut stray = String::new();
    for (i, p) in listed.iter().enumerate() {
        let name = p.metadata.name.clone().unwrap_or_default();
        let is_stray = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str)
            == Some("stray");
        if is_stray {
            stray = name.clone();
        }
        let subset = if i % 2 == 0 { "a" } else { "b" };
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(mark(subset)),
        )
        .await?;
    }
    ensure!(!stray.is_empty(), "no stray pod");
    wait_for(
        "the view holding the marked pods and the WorkloadSpread",
        Duration::from_secs(30),
        || async {
            let mut v = view.lock().unwrap_or_else(|p| p.into_inner());
            v.stray = stray.clone();
            let marked = v.pods.values().filter(|p| View::labelled(p)).count();
            let ready = marked == 4 && v.ws.is_some();
            if ready {
                v.armed = true;
                v.observe();
            }
            Ok(ready.then_some(()))
        },
    )
    .await?;
    let started = Instant::now();
    let args = ["--namespace", ns.name()].map(str::to_string);
    let controller =
        ControllerProcess::start(controller_bin(), cluster()?.kubeconfig(), &args).await?;
    let labelled = |p: &Pod| View::labelled(p);
    let stamped = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(COUNTED_ANNOTATION))
    };
    let unlabelled = wait_for(
        "the workload's pods unlabelled, and the view caught up",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let done = list
                .iter()
                .filter(|p| p.metadata.name.as_deref() != Some(stray.as_str()))
                .all(|p| !labelled(p) && !stamped(p));
            let current = spreads.get("web").await?.metadata.resource_version;
            let v = view.lock().unwrap_or_else(|p| p.into_inner());
            let caught_up =
                v.ws.as_ref()
                    .and_then(|w| w.metadata.resource_version.clone())
                    == current;
            Ok((done && caught_up).then_some(list))
        },
    )
    .await
    .with_context(|| controller.log_text())?;
    let took = started.elapsed();
    follower.abort();
    let stray_pod = unlabelled
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(stray.as_str()))
        .context("the stray pod")?;
    let v = view.lock().unwrap_or_else(|p| p.into_inner());
    ensure!(
        v.breaches.is_empty(),
        "a pod was counted nowhere ({} of {} moments): {:?}",
        v.breaches.len(),
        v.moments,
        v.breaches
    );
    ensure!(
        labelled(stray_pod) && !stamped(stray_pod),
        "the pod the status does not count lost its label or was stamped: {:?}",
        stray_pod.metadata
    );
    eprintln!(
        "pending order: {} moments judged with the WorkloadSpread cache {WS_LAG:?} behind, none \
         counting a pod nowhere; labels gone {:.1} s after the controller started; the stray \
         pod keeps its label",
        v.moments,
        took.as_secs_f64()
    );
    Ok(())
}

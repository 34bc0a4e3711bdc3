//! The reference's reconcile cases (§5.5 `TestWorkloadSpreadReconcile`, plus the
//! deletion-cost cases that need pod states) built from real objects on the local
//! control plane: a CloneSet CRD (no controller acts on it, like the reference's fake
//! client), pods in the wanted phases (unscheduled pods use a scheduler that does not
//! exist; terminating ones hold a finalizer), seeded `creatingPods`/`deletingPods`, and
//! one controller for the namespace; KWOK leaves these pods alone (they carry its frozen
//! label). Each case's status and costs must converge. The
//! creating/deleting windows are scaled to 300 s (ages scaled alike) so seeded ages keep
//! their meaning however long the setup takes. Where the reference's fixtures are
//! identical pods ordered by list position, real pods are told apart by readiness (the
//! ranking every workload controller uses) instead of creation time, which has 1 s
//! resolution.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::Api;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use workloadspread_testkit::webhook::{apply_crd, ControllerProcess};
use workloadspread_testkit::{cluster, wait_for, TestNamespace};

const COST: &str = "controller.kubernetes.io/pod-deletion-cost";
const FINALIZER: &str = "workloadspread.test/hold";

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Running and Ready.
    Ready,
    Running,
    Pending,
    Unscheduled,
    Failed,
    Succeeded,
    Terminating,
}

/// (pod suffix, age in seconds) entries of creatingPods / deletingPods.
type Entries = Vec<(usize, i64)>;
/// (subset, replicas, missingReplicas, creating suffixes, deleting suffixes)
type SubsetState<S> = (S, i64, i64, Vec<usize>, Vec<usize>);
/// Subset states and per-pod costs.
type Observed = (Vec<SubsetState<String>>, Vec<(usize, Option<i64>)>);

struct Case {
    name: &'static str,
    subsets: Value,
    replicas: i64,
    /// (pod suffix, subset, state)
    pods: Vec<(usize, &'static str, State)>,
    /// Seeded status: subset → (creating pod suffixes with age in s, deleting ditto).
    seed: Vec<(&'static str, Entries, Entries)>,
    /// subset → (replicas, missing, creating suffixes, deleting suffixes)
    want: Vec<SubsetState<&'static str>>,
    /// pod suffix → cost (None: no annotation)
    costs: Vec<(usize, Option<i64>)>,
}

fn subset(name: &str, max: Value) -> Value {
    if max.is_null() {
        json!({"name": name})
    } else {
        json!({"name": name, "maxReplicas": max})
    }
}

fn cases() -> Vec<Case> {
    use State::*;
    let a5 = || json!([subset("subset-a", json!(5))]);
    let ab5 = || json!([subset("subset-a", json!(5)), subset("subset-b", json!(5))]);
    let five_running = || (0..5).map(|i| (i, "subset-a", Running)).collect::<Vec<_>>();
    vec![
        Case {
            name: "r2-two-subsets-no-pods",
            subsets: ab5(),
            replicas: 10,
            pods: vec![],
            seed: vec![],
            want: vec![
                ("subset-a", 0, 5, vec![], vec![]),
                ("subset-b", 0, 5, vec![], vec![]),
            ],
            costs: vec![],
        },
        Case {
            name: "r3-one-pod-each",
            subsets: ab5(),
            replicas: 10,
            pods: vec![(0, "subset-a", Running), (1, "subset-b", Running)],
            seed: vec![],
            want: vec![
                ("subset-a", 1, 4, vec![], vec![]),
                ("subset-b", 1, 4, vec![], vec![]),
            ],
            costs: vec![(0, Some(200)), (1, Some(100))],
        },
        Case {
            name: "r5-max-100-percent",
            subsets: json!([subset("subset-a", json!("100%"))]),
            replicas: 5,
            pods: vec![(0, "subset-a", Running)],
            seed: vec![],
            want: vec![("subset-a", 1, 4, vec![], vec![])],
            costs: vec![(0, Some(100))],
        },
        Case {
            name: "r6-max-80-percent",
            subsets: json!([subset("subset-a", json!("80%"))]),
            replicas: 5,
            pods: vec![(0, "subset-a", Running)],
            seed: vec![],
            want: vec![("subset-a", 1, 3, vec![], vec![])],
            costs: vec![(0, Some(100))],
        },
        Case {
            name: "r7-creating-kept-within-window",
            subsets: a5(),
            replicas: 10,
            pods: vec![(0, "subset-a", Running)],
            seed: vec![("subset-a", vec![(0, 2), (1, 2)], vec![])],
            want: vec![("subset-a", 1, 3, vec![1], vec![])],
            costs: vec![(0, Some(100))],
        },
        Case {
            name: "r8-creating-dropped-after-window",
            subsets: a5(),
            replicas: 10,
            pods: vec![(0, "subset-a", Running)],
            seed: vec![("subset-a", vec![(0, 600), (1, 600)], vec![])],
            want: vec![("subset-a", 1, 4, vec![], vec![])],
            costs: vec![(0, Some(100))],
        },
        Case {
            name: "r10-failed-and-succeeded-not-counted",
            subsets: a5(),
            replicas: 10,
            pods: vec![
                (0, "subset-a", Running),
                (1, "subset-a", Running),
                (2, "subset-a", Failed),
                (3, "subset-a", Failed),
                (4, "subset-a", Succeeded),
            ],
            seed: vec![("subset-a", vec![(0, 3), (1, 3)], vec![])],
            want: vec![("subset-a", 2, 3, vec![], vec![])],
            costs: vec![
                (0, Some(100)),
                (1, Some(100)),
                (2, None),
                (3, None),
                (4, None),
            ],
        },
        Case {
            name: "r12-terminating-dropped",
            subsets: a5(),
            replicas: 10,
            pods: (0..4)
                .map(|i| (i, "subset-a", Running))
                .chain([(4, "subset-a", Terminating)])
                .collect(),
            seed: vec![("subset-a", vec![(3, 5), (4, 5)], vec![(4, 1)])],
            want: vec![("subset-a", 4, 1, vec![], vec![])],
            costs: vec![
                (0, Some(100)),
                (1, Some(100)),
                (2, Some(100)),
                (3, Some(100)),
                (4, None),
            ],
        },
        Case {
            // The reference frees the running pod's slot (missing 1); here its deletion
            // stays an intent until the pod departs (docs/semantics.md A11).
            name: "r13-deleting-kept-for-active-pod",
            subsets: a5(),
            replicas: 10,
            pods: five_running(),
            seed: vec![("subset-a", vec![], vec![(4, 1)])],
            want: vec![("subset-a", 5, 0, vec![], vec![4])],
            costs: (0..5).map(|i| (i, Some(100))).collect(),
        },
        Case {
            name: "r14-deleting-expired",
            subsets: a5(),
            replicas: 10,
            pods: five_running(),
            seed: vec![("subset-a", vec![(3, 900), (4, 900)], vec![(4, 960)])],
            want: vec![("subset-a", 5, 0, vec![], vec![])],
            costs: (0..5).map(|i| (i, Some(100))).collect(),
        },
        Case {
            name: "r16-over-max",
            subsets: json!([subset("subset-a", json!(3))]),
            replicas: 10,
            // The reference's 0,1 → −100 comes from list order; here 0,1 are the not-ready ones.
            pods: (0..5)
                .map(|i| (i, "subset-a", if i < 2 { Running } else { Ready }))
                .collect(),
            seed: vec![],
            want: vec![("subset-a", 5, 0, vec![], vec![])],
            costs: vec![
                (0, Some(-100)),
                (1, Some(-100)),
                (2, Some(100)),
                (3, Some(100)),
                (4, Some(100)),
            ],
        },
        // Deletion cost §5.5 (10)/(12): unscheduled, Pending and terminating pods go first.
        Case {
            name: "c10-unscheduled-and-pending-first",
            subsets: json!([subset("subset-a", json!(2))]),
            replicas: 5,
            pods: vec![
                (0, "subset-a", Unscheduled),
                (1, "subset-a", Running),
                (2, "subset-a", Running),
                (3, "subset-a", Pending),
                (4, "subset-a", Pending),
            ],
            seed: vec![],
            want: vec![("subset-a", 5, 0, vec![], vec![])],
            costs: vec![
                (0, Some(-100)),
                (1, Some(100)),
                (2, Some(100)),
                (3, Some(-100)),
                (4, Some(-100)),
            ],
        },
        Case {
            name: "c12-terminating-untouched",
            subsets: json!([subset("subset-a", json!(2))]),
            replicas: 5,
            pods: vec![
                (0, "subset-a", Running),
                (1, "subset-a", Running),
                (2, "subset-a", Unscheduled),
                (3, "subset-a", Pending),
                (4, "subset-a", Terminating),
            ],
            seed: vec![],
            want: vec![("subset-a", 4, 0, vec![], vec![])],
            costs: vec![
                (0, Some(100)),
                (1, Some(100)),
                (2, Some(-100)),
                (3, Some(-100)),
                (4, None),
            ],
        },
    ]
}

fn cloneset_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clonesets.apps.kruise.io"},
        "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
            "names": {"plural": "clonesets", "singular": "cloneset", "kind": "CloneSet", "listKind": "CloneSetList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind))
}

fn ago(secs: i64) -> String {
    (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(secs))
        .to_string()
}

async fn build(ns: &TestNamespace, c: &Case) -> Result<()> {
    let client = ns.client();
    let clonesets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns.name(),
        &resource("apps.kruise.io", "v1alpha1", "CloneSet"),
    );
    let cs: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet", "metadata": {"name": c.name}, "spec": {"replicas": c.replicas},
        "status": {"updateRevision": "versionIgnored"}}))?;
    let cs = clonesets.create(&PostParams::default(), &cs).await?;
    let uid = cs.metadata.uid.context("CloneSet uid")?;
    let pods: Api<Pod> = ns.api();
    for &(i, subset, state) in &c.pods {
        create_pod(&pods, c.name, i, subset, state, &uid).await?;
    }
    let wss: Api<DynamicObject> = Api::namespaced_with(
        client,
        ns.name(),
        &resource("apps.kruise.io", "v1beta1", "WorkloadSpread"),
    );
    let ws: DynamicObject = serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1beta1",
        "kind": "WorkloadSpread", "metadata": {"name": c.name},
        "spec": {"targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": c.name},
            "subsets": c.subsets}}))?;
    wss.create(&PostParams::default(), &ws).await?;
    if !c.seed.is_empty() {
        seed_status(&wss, c).await?;
    }
    Ok(())
}

async fn create_pod(
    pods: &Api<Pod>,
    ws: &str,
    i: usize,
    subset: &str,
    state: State,
    uid: &str,
) -> Result<()> {
    let name = format!("{ws}-pod-{i}");
    let matched = json!({"name": ws, "subset": subset}).to_string();
    // KWOK's stages skip pods with this label: a case's pod stays in its state (Pending on a
    // node, Running but not Ready) instead of being made Ready as a kubelet would.
    let mut pod = json!({"metadata": {"name": name,
            "labels": {"app": ws, workloadspread_testkit::KWOK_FROZEN_LABEL: "true"},
            "annotations": {"apps.kruise.io/matched-workloadspread": matched},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": ws,
                "uid": uid, "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "nodeName": "node-a-1"}});
    if state == State::Unscheduled {
        pod["spec"]["nodeName"] = Value::Null;
        pod["spec"]["schedulerName"] = json!("no-such-scheduler");
    }
    if state == State::Terminating {
        pod["metadata"]["finalizers"] = json!([FINALIZER]);
    }
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    let phase = match state {
        State::Ready | State::Running | State::Terminating => Some("Running"),
        State::Failed => Some("Failed"),
        State::Succeeded => Some("Succeeded"),
        State::Pending | State::Unscheduled => None,
    };
    if let Some(phase) = phase {
        let mut status = json!({"status": {"phase": phase}});
        if state == State::Ready {
            status["status"]["conditions"] =
                json!([{"type": "Ready", "status": "True", "lastTransitionTime": ago(30)}]);
        }
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    if state == State::Terminating {
        pods.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(())
}

async fn seed_status(wss: &Api<DynamicObject>, c: &Case) -> Result<()> {
    let statuses: Vec<Value> = c
        .seed
        .iter()
        .map(|(subset, creating, deleting)| {
            let map = |entries: &Vec<(usize, i64)>| -> serde_json::Map<String, Value> {
                entries
                    .iter()
                    .map(|(i, age)| (format!("{}-pod-{i}", c.name), json!(ago(*age))))
                    .collect()
            };
            json!({"name": subset, "replicas": 0, "missingReplicas": 0,
                "creatingPods": map(creating), "deletingPods": map(deleting)})
        })
        .collect();
    let status = json!({"status": {"observedGeneration": 1, "subsetStatuses": statuses}});
    wss.patch_status(c.name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// What the case looks like now, in the shape of `want`/`costs`.
async fn observed(ns: &TestNamespace, c: &Case) -> Result<Observed> {
    let wss: Api<DynamicObject> = Api::namespaced_with(
        ns.client(),
        ns.name(),
        &resource("apps.kruise.io", "v1beta1", "WorkloadSpread"),
    );
    let status = wss.get(c.name).await?.data["status"].clone();
    let suffixes = |m: &Value| -> Vec<usize> {
        let mut v: Vec<usize> = m.as_object().map_or(vec![], |o| {
            o.keys()
                .filter_map(|k| k.rsplit('-').next()?.parse().ok())
                .collect()
        });
        v.sort_unstable();
        v
    };
    let subsets = status["subsetStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                s["replicas"].as_i64().unwrap_or(-99),
                s["missingReplicas"].as_i64().unwrap_or(-99),
                suffixes(&s["creatingPods"]),
                suffixes(&s["deletingPods"]),
            )
        })
        .collect();
    let pods: Api<Pod> = ns.api();
    let mut costs = vec![];
    for &(i, _) in &c.costs {
        let p = pods.get(&format!("{}-pod-{i}", c.name)).await?;
        let cost = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(COST))
            .and_then(|v| v.parse().ok());
        costs.push((i, cost));
    }
    Ok((subsets, costs))
}

#[tokio::test]
async fn reference_reconcile_cases_converge_on_real_objects() -> Result<()> {
    let ns = cluster()?.namespace("ctl-cases").await?;
    let client = ns.client();
    let crd = workloadspread_core::crd::workloadspread_crd().map_err(anyhow::Error::msg)?;
    apply_crd(&client, &serde_json::to_value(&crd)?).await?;
    apply_crd(&client, &cloneset_crd()).await?;
    let cases = cases();
    for c in &cases {
        build(&ns, c).await.with_context(|| c.name)?;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_workloadspread-controller"));
    // Both windows at 300 s (reference: 30 s / 15 s) so a seeded age means the same thing
    // however long the setup took; the ages above are scaled accordingly. The cases'
    // costs are the reference's values.
    let args = [
        "--namespace",
        ns.name(),
        "--creating-window-seconds",
        "300",
        "--deleting-window-seconds",
        "300",
        "--rules",
        "reference",
        // The reference keeps an entry for the whole window (no early drop, #30).
        "--creating-drop-seconds",
        "0",
    ]
    .map(str::to_string);
    let controller = ControllerProcess::start(bin, cluster()?.kubeconfig(), &args).await?;
    let mut failures = vec![];
    for c in &cases {
        let want: Vec<SubsetState<String>> = c
            .want
            .iter()
            .map(|(s, r, m, cr, de)| (s.to_string(), *r, *m, cr.clone(), de.clone()))
            .collect();
        let result = wait_for(c.name, Duration::from_secs(30), || async {
            let got = observed(&ns, c).await?;
            Ok((got.0 == want && got.1 == c.costs).then_some(()))
        })
        .await;
        if result.is_err() {
            let got = observed(&ns, c).await?;
            failures.push(format!(
                "{}: got {:?} / costs {:?}; want {want:?} / costs {:?}",
                c.name, got.0, got.1, c.costs
            ));
        }
    }
    // Let the namespace go: release the finalizers and remove the pods outright (KWOK
    // leaves frozen pods alone, so nothing else would finish their deletion).
    let pods: Api<Pod> = ns.api();
    for p in pods.list(&ListParams::default()).await?.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.metadata.finalizers.is_some() {
            let _ = pods
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
        let _ = pods
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
    }
    anyhow::ensure!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}\ncontroller log:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n"),
        controller
            .log_text()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

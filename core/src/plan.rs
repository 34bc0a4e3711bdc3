//! Planner: simulate a workload scaling through a sequence of replica counts with the
//! same admission and controller rules, and report per-subset counts, deletion costs
//! and the scale-in order. Executable documentation, used by the CLI and playground.
//!
//! The simulated workload controller behaves like a ReplicaSet: it creates pods one by
//! one (each admitted by `admission`), and on scale-in deletes the pods with the lowest
//! deletion cost first (newest first among equals). StatefulSets create and delete by
//! ordinal. Every pod is assumed to schedule and become ready.

use crate::admission::{decide_create, decide_release, PodKey};
use crate::annotation::MatchedWorkloadSpread;
use crate::api::v1beta1::WorkloadSpread;
use crate::api::{FAKE_SUBSET_NAME, POD_DELETION_COST_ANNOTATION, VERSION_IGNORED};
use crate::controller::{reconcile, ReconcileInput, ReconcileOptions};
use crate::inject::inject;
use crate::percent::scaled_value;
use crate::version::VersionedKinds;
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One pod of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    pub name: String,
    /// Subset it was admitted into; `None` when no subset had room (admitted unchanged).
    pub subset: Option<String>,
    pub deletion_cost: Option<i64>,
}

/// Per-subset summary after a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetPlan {
    pub name: String,
    pub pods: usize,
    /// Scaled maxReplicas (`None` = unlimited).
    pub max_replicas: Option<i32>,
    pub min_replicas: Option<i32>,
    pub missing_replicas: i32,
}

/// State after reaching one replica count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub replicas: i32,
    pub subsets: Vec<SubsetPlan>,
    /// Pods admitted without a subset.
    pub unplaced: usize,
    pub pods: Vec<PlannedPod>,
    /// Pods removed to reach this step, in deletion order.
    pub deleted: Vec<String>,
    /// The order in which the next scale-in would remove the current pods.
    pub scale_in_order: Vec<String>,
}

/// Simulates `steps` (replica counts) from zero.
pub fn plan(ws: &WorkloadSpread, steps: &[i32]) -> Vec<PlanStep> {
    let mut sim = Simulation::new(ws);
    steps.iter().map(|&r| sim.step(r.max(0))).collect()
}

struct Simulation {
    ws: WorkloadSpread,
    pods: Vec<Value>,
    next_id: usize,
    now: Timestamp,
    kinds: VersionedKinds,
    options: ReconcileOptions,
}

impl Simulation {
    fn new(ws: &WorkloadSpread) -> Self {
        let mut ws = ws.clone();
        ws.status = None;
        if ws.metadata.name.is_none() {
            ws.metadata.name = Some("workloadspread".into());
        }
        Simulation {
            ws,
            pods: vec![],
            next_id: 0,
            now: Timestamp::UNIX_EPOCH + SignedDuration::from_hours(24 * 365 * 30),
            kinds: VersionedKinds::default(),
            options: ReconcileOptions::default(),
        }
    }

    fn is_statefulset(&self) -> bool {
        self.ws
            .spec
            .target_ref
            .as_ref()
            .is_some_and(|t| t.kind == "StatefulSet")
    }

    fn step(&mut self, replicas: i32) -> PlanStep {
        self.tick();
        self.reconcile(replicas);
        let current = self.pods.len() as i32;
        let mut deleted = vec![];
        if replicas > current {
            for _ in current..replicas {
                self.create_pod(replicas);
            }
        } else if replicas < current {
            deleted = self.scale_in((current - replicas) as usize, replicas);
        }
        self.tick();
        self.reconcile(replicas);
        self.summary(replicas, deleted)
    }

    fn tick(&mut self) {
        self.now += SignedDuration::from_secs(60);
    }

    fn typed_pods(&self) -> Vec<Pod> {
        self.pods
            .iter()
            .filter_map(|p| serde_json::from_value(p.clone()).ok())
            .collect()
    }

    fn reconcile(&mut self, replicas: i32) {
        let pods = if replicas == 0 {
            vec![]
        } else {
            self.typed_pods()
        };
        let nodes = BTreeMap::new();
        let out = reconcile(&ReconcileInput {
            ws: &self.ws,
            pods: &pods,
            workload_replicas: replicas,
            latest_version: VERSION_IGNORED,
            nodes: &nodes,
            versioned_kinds: &self.kinds,
            now: self.now,
            options: &self.options,
        });
        for c in out.deletion_costs {
            if let Some(p) = self
                .pods
                .iter_mut()
                .find(|p| p["metadata"]["name"] == c.pod.as_str())
            {
                p["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] =
                    json!(c.cost.to_string());
            }
        }
        self.ws.status = Some(out.status);
    }

    fn create_pod(&mut self, replicas: i32) {
        let name = match self.is_statefulset() {
            true => format!("{}-{}", self.target_name(), self.pods.len()),
            false => format!("{}-{:05}", self.target_name(), self.next_id),
        };
        self.next_id += 1;
        self.now += SignedDuration::from_secs(1);
        let mut pod = json!({
            "metadata": {"name": name, "annotations": {}, "creationTimestamp": self.now.to_string()},
            "spec": {"nodeName": "node", "containers": [{"name": "main", "image": "app"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": self.now.to_string()}]}
        });
        let uid = format!("planned-{}", self.next_id);
        let d = decide_create(
            &self.ws,
            PodKey {
                name: &name,
                version: VERSION_IGNORED,
            },
            replicas,
            self.now,
            &uid,
        );
        if let Some(status) = d.new_status {
            self.ws.status = Some(status);
        }
        if let Some(subset) = &d.subset {
            // Injection only fails on an invalid patch; the planner then shows the pod unplaced.
            if inject(&mut pod, &self.ws, subset, d.generated_uid.as_deref()).is_err() {
                pod["metadata"]["annotations"] = json!({});
            }
        }
        self.pods.push(pod);
    }

    fn target_name(&self) -> String {
        self.ws
            .spec
            .target_ref
            .as_ref()
            .map_or_else(|| "pod".to_string(), |t| t.name.clone())
    }

    fn scale_in(&mut self, count: usize, replicas: i32) -> Vec<String> {
        let order = self.scale_in_order();
        let victims: Vec<String> = order.into_iter().take(count).collect();
        for name in &victims {
            let Some(i) = self
                .pods
                .iter()
                .position(|p| p["metadata"]["name"] == name.as_str())
            else {
                continue;
            };
            let pod = self.pods.remove(i);
            if let Some(m) = matched_of(&pod) {
                let key = PodKey {
                    name,
                    version: VERSION_IGNORED,
                };
                if let Some(status) = decide_release(&self.ws, key, &m.subset, replicas, self.now) {
                    self.ws.status = Some(status);
                }
            }
        }
        victims
    }

    /// Lowest deletion cost first, newest first among equal costs; StatefulSets by ordinal.
    fn scale_in_order(&self) -> Vec<String> {
        let mut pods: Vec<(i64, usize, String)> = self
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| (cost_of(p).unwrap_or(0), i, name_of(p)))
            .collect();
        if self.is_statefulset() {
            pods.sort_by_key(|p| std::cmp::Reverse(p.1));
        } else {
            pods.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        }
        pods.into_iter().map(|(_, _, n)| n).collect()
    }

    fn summary(&self, replicas: i32, deleted: Vec<String>) -> PlanStep {
        let pods: Vec<PlannedPod> = self
            .pods
            .iter()
            .map(|p| PlannedPod {
                name: name_of(p),
                subset: matched_of(p)
                    .map(|m| m.subset)
                    .filter(|s| self.ws.subset(s).is_some()),
                deletion_cost: cost_of(p),
            })
            .collect();
        let status = self.ws.status.as_ref();
        let subsets = self
            .ws
            .spec
            .subsets
            .iter()
            .map(|s| SubsetPlan {
                name: s.name.clone(),
                pods: pods
                    .iter()
                    .filter(|p| p.subset.as_deref() == Some(s.name.as_str()))
                    .count(),
                max_replicas: s
                    .max_replicas
                    .as_ref()
                    .and_then(|m| scaled_value(m, replicas).ok()),
                min_replicas: s
                    .min_replicas
                    .as_ref()
                    .and_then(|m| scaled_value(m, replicas).ok()),
                missing_replicas: status
                    .and_then(|st| st.subset_statuses.iter().find(|x| x.name == s.name))
                    .map_or(0, |x| x.missing_replicas),
            })
            .collect();
        PlanStep {
            replicas,
            subsets,
            unplaced: pods.iter().filter(|p| p.subset.is_none()).count(),
            pods,
            deleted,
            scale_in_order: self.scale_in_order(),
        }
    }
}

fn name_of(p: &Value) -> String {
    p["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn cost_of(p: &Value) -> Option<i64> {
    p["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION]
        .as_str()?
        .parse()
        .ok()
}

fn matched_of(p: &Value) -> Option<MatchedWorkloadSpread> {
    let v = p["metadata"]["annotations"][crate::api::MATCHED_WORKLOADSPREAD_ANNOTATION].as_str()?;
    MatchedWorkloadSpread::parse(v).ok()
}

/// Name of the pseudo-subset for pods outside every subset (for displays).
pub const UNPLACED: &str = FAKE_SUBSET_NAME;

#[cfg(test)]
mod tests;

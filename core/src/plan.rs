//! Planner: simulate a workload scaling through a sequence of replica counts with the
//! same admission and controller rules, and report per-subset counts, deletion costs
//! and the scale-in order. Executable documentation, used by the CLI and playground.
//!
//! The simulated workload controller behaves like a ReplicaSet: it creates pods one by
//! one (each admitted by `admission`), and on scale-in deletes the pods with the lowest
//! deletion cost first (newest first among equals), before the controller has reconciled
//! for the new replica count, as on a cluster. Under `Rules::Reference` that reproduces
//! the reference's spills and stale-cost scale-ins; under the default rules every step
//! lands on the planned spread. StatefulSets create and delete by
//! ordinal. Without nodes every pod is assumed to schedule and become ready; with
//! nodes ([`plan_on_nodes`]) each pod is bound by [`schedule::pick_node`] or stays
//! Pending/Unschedulable, and an `Adaptive` strategy reschedules it after
//! `rescheduleCriticalSeconds` the way the controller does.

use crate::admission::{decide_create, decide_release, PodKey, Scale};
use crate::annotation::MatchedWorkloadSpread;
use crate::api::v1beta1::WorkloadSpread;
use crate::api::{
    CONDITION_SCHEDULABLE, FAKE_SUBSET_NAME, POD_DELETION_COST_ANNOTATION, VERSION_IGNORED,
};
use crate::controller::{reconcile, ReconcileInput, ReconcileOptions};
use crate::inject::inject;
use crate::percent::scaled_value;
use crate::rules::Rules;
use crate::selector::NodeInfo;
use crate::version::VersionedKinds;
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::SignedDuration;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One pod of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    pub name: String,
    /// Subset it was admitted into; `None` when no subset had room (admitted unchanged).
    pub subset: Option<String>,
    pub deletion_cost: Option<i64>,
    /// Node it is bound to (`None` without simulated nodes, or while Pending).
    pub node: Option<String>,
    /// No simulated node can hold it (Pending, Unschedulable).
    pub pending: bool,
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
    /// The controller marked the subset unschedulable (Adaptive strategy).
    pub unschedulable: bool,
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
    /// Pods the controller deleted because they stayed unschedulable (recreated by the
    /// workload, usually in a later subset).
    pub rescheduled: Vec<String>,
    /// The order in which the next scale-in would remove the current pods.
    pub scale_in_order: Vec<String>,
}

/// Simulates `steps` (replica counts) from zero.
pub fn plan(ws: &WorkloadSpread, steps: &[i32]) -> Vec<PlanStep> {
    plan_with(ws, steps, None, Rules::default())
}

/// Like [`plan`], but pods are scheduled onto `nodes` (see the module doc).
pub fn plan_on_nodes(ws: &WorkloadSpread, steps: &[i32], nodes: &[NodeInfo]) -> Vec<PlanStep> {
    plan_with(ws, steps, Some(nodes), Rules::default())
}

/// [`plan`] or [`plan_on_nodes`] under the given admission and deletion-cost rules.
pub fn plan_with(
    ws: &WorkloadSpread,
    steps: &[i32],
    nodes: Option<&[NodeInfo]>,
    rules: Rules,
) -> Vec<PlanStep> {
    let mut sim = Simulation::new(ws, nodes.map(<[NodeInfo]>::to_vec), rules);
    steps.iter().map(|&r| sim.step(r.max(0))).collect()
}

struct Simulation {
    ws: WorkloadSpread,
    pods: Vec<Value>,
    next_id: usize,
    now: Timestamp,
    kinds: VersionedKinds,
    options: ReconcileOptions,
    nodes: Option<Vec<NodeInfo>>,
    /// Pods removed since the last reconcile: their deletions are facts, so their
    /// `deletingPods` entries free slots (`admission::room`).
    departed: BTreeSet<String>,
}

impl Simulation {
    fn new(ws: &WorkloadSpread, nodes: Option<Vec<NodeInfo>>, rules: Rules) -> Self {
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
            options: ReconcileOptions {
                rules,
                ..Default::default()
            },
            nodes,
            departed: BTreeSet::new(),
        }
    }

    fn scale(&self, replicas: i32) -> Scale<'_> {
        Scale::new(replicas, self.options.rules).with_departed(&self.departed)
    }

    fn is_statefulset(&self) -> bool {
        self.ws
            .spec
            .target_ref
            .as_ref()
            .is_some_and(|t| t.kind == "StatefulSet")
    }

    /// The workload acts first, on the status and costs the controller wrote for the
    /// previous replica count (as on a cluster: the ReplicaSet creates or deletes at once);
    /// the controller then reconciles for the new count.
    fn step(&mut self, replicas: i32) -> PlanStep {
        self.tick();
        let current = self.pods.len() as i32;
        let mut deleted = vec![];
        if replicas > current {
            for _ in current..replicas {
                self.create_pod(replicas);
            }
        } else if replicas < current {
            deleted = self.scale_in((current - replicas) as usize, replicas);
        }
        let rescheduled = self.reschedule(replicas);
        self.tick();
        self.reconcile(replicas);
        self.summary(replicas, deleted, rescheduled)
    }

    /// Lets the controller delete pods stuck past `rescheduleCriticalSeconds` and the
    /// workload recreate them, until nothing is stuck (bounded by the subset count:
    /// each round marks at least one more subset unschedulable).
    fn reschedule(&mut self, replicas: i32) -> Vec<String> {
        let mut rescheduled = vec![];
        let Some(secs) = self.ws.spec.schedule_strategy.reschedule_seconds() else {
            return rescheduled;
        };
        if self.nodes.is_none() {
            return rescheduled;
        }
        for _ in 0..=self.ws.spec.subsets.len() {
            self.now += SignedDuration::from_secs(secs + 1);
            let stuck = self.reconcile(replicas);
            if stuck.is_empty() {
                break;
            }
            self.remove_pods(&stuck, replicas);
            for _ in 0..stuck.len() {
                self.create_pod(replicas);
            }
            rescheduled.extend(stuck);
        }
        rescheduled
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

    /// Applies the controller's status and deletion costs; returns the pods it would
    /// delete as unschedulable.
    fn reconcile(&mut self, replicas: i32) -> Vec<String> {
        let pods = if replicas == 0 {
            vec![]
        } else {
            self.typed_pods()
        };
        let nodes = BTreeMap::new();
        let stamped = crate::controller::StampedPlaceholders::of(&self.ws);
        let out = reconcile(&ReconcileInput {
            ws: &self.ws,
            pods: &pods,
            workload_replicas: replicas,
            latest_version: VERSION_IGNORED,
            nodes: &nodes,
            versioned_kinds: &self.kinds,
            now: self.now,
            options: &self.options,
            placeholders: stamped.view(self.now),
            capacity: &crate::controller::capacity::Capacity::NONE,
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
        // The recount no longer counts the removed pods, nor records their deletions.
        self.departed.clear();
        out.pods_to_delete
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
            self.scale(replicas),
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
        self.bind(&mut pod);
        self.pods.push(pod);
    }

    /// With simulated nodes: binds the pod, or leaves it Pending and Unschedulable.
    fn bind(&self, pod: &mut Value) {
        let Some(nodes) = &self.nodes else {
            return;
        };
        let mut load = BTreeMap::new();
        for p in &self.pods {
            if let Some(n) = p["spec"]["nodeName"].as_str() {
                *load.entry(n.to_string()).or_insert(0) += 1;
            }
        }
        let spec = serde_json::from_value(pod["spec"].clone()).unwrap_or_default();
        match schedule::pick_node(&spec, nodes, &load) {
            Some(node) => pod["spec"]["nodeName"] = json!(node.name),
            None => {
                pod["spec"]["nodeName"] = Value::Null;
                pod["status"] = json!({"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "lastTransitionTime": self.now.to_string()}]});
            }
        }
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
        self.remove_pods(&victims, replicas);
        victims
    }

    /// Deletes pods and releases their subset slots, as the delete admission does.
    fn remove_pods(&mut self, victims: &[String], replicas: i32) {
        for name in victims {
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
                let scale = self.scale(replicas);
                if let Some(status) = decide_release(&self.ws, key, &m.subset, scale, self.now) {
                    self.ws.status = Some(status);
                }
            }
            // The delete is stored: the pod is gone.
            self.departed.insert(name.clone());
        }
    }

    /// Pending pods first (as the ReplicaSet controller ranks unbound pods), then the
    /// lowest deletion cost, newest first among equals; StatefulSets by ordinal.
    fn scale_in_order(&self) -> Vec<String> {
        let mut pods: Vec<(bool, i64, usize, String)> = self
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let bound = p["status"]["phase"] != "Pending";
                (bound, cost_of(p).unwrap_or(0), i, name_of(p))
            })
            .collect();
        if self.is_statefulset() {
            pods.sort_by_key(|p| std::cmp::Reverse(p.2));
        } else {
            pods.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(b.2.cmp(&a.2)));
        }
        pods.into_iter().map(|(_, _, _, n)| n).collect()
    }

    fn summary(&self, replicas: i32, deleted: Vec<String>, rescheduled: Vec<String>) -> PlanStep {
        let pods: Vec<PlannedPod> = self
            .pods
            .iter()
            .map(|p| PlannedPod {
                name: name_of(p),
                subset: matched_of(p)
                    .map(|m| m.subset)
                    .filter(|s| self.ws.subset(s).is_some()),
                deletion_cost: cost_of(p),
                node: p["spec"]["nodeName"]
                    .as_str()
                    .filter(|_| self.nodes.is_some())
                    .map(str::to_string),
                pending: p["status"]["phase"] == "Pending",
            })
            .collect();
        let status = self.ws.status.as_ref();
        let subset_status = |s: &crate::api::v1beta1::WorkloadSpreadSubset| {
            status.and_then(|st| st.subset_statuses.iter().find(|x| x.name == s.name))
        };
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
                missing_replicas: subset_status(s).map_or(0, |x| x.missing_replicas),
                unschedulable: subset_status(s)
                    .and_then(|x| x.condition(CONDITION_SCHEDULABLE))
                    .is_some_and(|c| c.status == "False"),
            })
            .collect();
        PlanStep {
            replicas,
            subsets,
            unplaced: pods.iter().filter(|p| p.subset.is_none()).count(),
            pods,
            deleted,
            rescheduled,
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

pub mod schedule;
#[cfg(test)]
mod tests;

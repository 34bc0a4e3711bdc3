//! What `workloadspread-controller status` shows of one WorkloadSpread: per subset the
//! maximum for the workload's current replicas, the planned count
//! ([`crate::rules::planned_spread`]), the pods there and the status's creating and
//! deleting entries; the pods outside every subset; the pods a scale-in removes next
//! (lowest deletion cost first, as the ReplicaSet controller picks them among running
//! pods); and whether the spread is on plan. Pure: the command fetches, this decides.

use crate::api::v1beta1::WorkloadSpread;
use crate::api::POD_DELETION_COST_ANNOTATION;
use crate::percent::scaled_value;
use crate::pods::{is_active, matched, name};
use crate::rules::planned_spread;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// One subset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetView {
    pub name: String,
    /// `maxReplicas` for the current replicas; `None`: unlimited.
    pub max: Option<i32>,
    /// The planner's count for the current replicas.
    pub planned: usize,
    /// Active pods injected for this subset.
    pub pods: usize,
    /// `creatingPods` entries (admitted, not counted yet; reserved slots included).
    pub creating: usize,
    /// `deletingPods` entries (deleted, not gone yet).
    pub deleting: usize,
    /// Adaptive scheduling (#42): `held since <time>` (and what a provisioner said) for a
    /// subset marked unschedulable, `waiting for capacity: <reason>` while pods wait for
    /// a provisioner; empty when schedulable without more to say.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schedule: String,
}

/// A pod on the scale-in path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextPod {
    pub name: String,
    /// `None`: outside every subset.
    pub subset: Option<String>,
    pub deletion_cost: i64,
}

/// The whole view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub namespace: String,
    pub name: String,
    pub replicas: i32,
    pub subsets: Vec<SubsetView>,
    /// Active pods of the workload injected for no subset of the spec.
    pub outside: usize,
    /// The planner's count of pods no subset takes.
    pub planned_outside: usize,
    /// The next pods a scale-in removes, first first.
    pub next_removed: Vec<NextPod>,
    /// Every subset holds its planned count, and so does "outside".
    pub on_plan: bool,
    /// A subset holds more pods than its maximum.
    pub over_maximum: Vec<String>,
}

/// The view of `ws` for the workload's `pods` (its own, inactive ones included) and
/// `replicas`; `next` pods on the scale-in path.
pub fn status_view<P: std::borrow::Borrow<Pod>>(
    ws: &WorkloadSpread,
    pods: &[P],
    replicas: i32,
    next: usize,
) -> StatusView {
    let active: Vec<&Pod> = pods
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|p: &&Pod| is_active(p))
        .collect();
    let subset_of = |p: &Pod| {
        matched(p)
            .filter(|m| Some(m.name.as_str()) == ws.metadata.name.as_deref())
            .map(|m| m.subset)
            .filter(|s| ws.subset(s).is_some())
    };
    let plan = planned_spread(ws, usize::try_from(replicas).unwrap_or(0));
    let status = ws.status.clone().unwrap_or_default();
    let entries = |subset: &str, deleting: bool| -> usize {
        status
            .versioned_subset_statuses
            .values()
            .flatten()
            .filter(|s| s.name == subset)
            .map(|s| match deleting {
                true => s.deleting_pods.len(),
                false => s.creating_pods.len(),
            })
            .sum()
    };
    let subsets: Vec<SubsetView> = ws
        .spec
        .subsets
        .iter()
        .zip(&plan.subsets)
        .map(|(s, &planned)| SubsetView {
            name: s.name.clone(),
            max: s
                .max_replicas
                .as_ref()
                .map(|m| scaled_value(m, replicas).unwrap_or(0)),
            planned,
            pods: active
                .iter()
                .filter(|p| subset_of(p).as_deref() == Some(&s.name))
                .count(),
            creating: entries(&s.name, false),
            deleting: entries(&s.name, true),
            schedule: schedule_of(&status, &s.name),
        })
        .collect();
    let outside = active.iter().filter(|p| subset_of(p).is_none()).count();
    let mut path: Vec<NextPod> = active
        .iter()
        .map(|p| NextPod {
            name: name(p).to_string(),
            subset: subset_of(p),
            deletion_cost: cost_of(p),
        })
        .collect();
    path.sort_by(|a, b| (a.deletion_cost, &a.name).cmp(&(b.deletion_cost, &b.name)));
    path.truncate(next);
    let over_maximum = subsets
        .iter()
        .filter(|s| {
            s.max
                .is_some_and(|m| s.pods > usize::try_from(m).unwrap_or(0))
        })
        .map(|s| s.name.clone())
        .collect();
    let on_plan = subsets.iter().all(|s| s.pods == s.planned) && outside == plan.unplaced;
    StatusView {
        namespace: ws.metadata.namespace.clone().unwrap_or_default(),
        name: ws.metadata.name.clone().unwrap_or_default(),
        replicas,
        subsets,
        outside,
        planned_outside: plan.unplaced,
        next_removed: path,
        on_plan,
        over_maximum,
    }
}

/// What the subset's `Schedulable` condition says, for people.
fn schedule_of(status: &crate::api::v1beta1::WorkloadSpreadStatus, subset: &str) -> String {
    let Some(c) = status
        .subset_statuses
        .iter()
        .find(|s| s.name == subset)
        .and_then(|s| s.condition(crate::api::CONDITION_SCHEDULABLE))
    else {
        return String::new();
    };
    let since = c
        .last_transition_time
        .as_ref()
        .map(|t| format!(" since {}", t.0))
        .unwrap_or_default();
    match (c.status.as_str(), c.message.is_empty()) {
        ("False", true) => format!("held{since}"),
        ("False", false) => format!("held{since}: {}", c.message),
        (_, false) => c.message.clone(),
        _ => String::new(),
    }
}

/// A pod's deletion cost (0 when absent or not a number, as the ReplicaSet controller
/// reads it).
fn cost_of(p: &Pod) -> i64 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The view as a table.
pub fn table(v: &StatusView) -> String {
    let mut out = format!(
        "WorkloadSpread {}/{}: {} replicas, {}\n\n",
        v.namespace,
        v.name,
        v.replicas,
        match (v.on_plan, v.over_maximum.is_empty()) {
            (true, _) => "on plan".to_string(),
            (false, true) => "off plan".to_string(),
            (false, false) => format!("off plan, over the maximum: {}", v.over_maximum.join(", ")),
        }
    );
    out.push_str(&format!(
        "{:<20} {:>7} {:>8} {:>6} {:>9} {:>9}\n",
        "SUBSET", "MAX", "PLANNED", "PODS", "CREATING", "DELETING"
    ));
    for s in &v.subsets {
        let max = s.max.map_or("-".to_string(), |m| m.to_string());
        let line = format!(
            "{:<20} {:>7} {:>8} {:>6} {:>9} {:>9}",
            s.name, max, s.planned, s.pods, s.creating, s.deleting
        );
        match s.schedule.as_str() {
            "" => out.push_str(&format!("{line}\n")),
            schedule => out.push_str(&format!("{line}  {schedule}\n")),
        }
    }
    out.push_str(&format!(
        "{:<20} {:>7} {:>8} {:>6}\n",
        "(outside)", "", v.planned_outside, v.outside
    ));
    if !v.next_removed.is_empty() {
        out.push_str("\nnext removed on scale-in:\n");
        for p in &v.next_removed {
            let subset = p.subset.as_deref().unwrap_or("(outside)");
            out.push_str(&format!(
                "  {:<40} {:<20} {}\n",
                p.name, subset, p.deletion_cost
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws() -> WorkloadSpread {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"subsets": [{"name": "a", "maxReplicas": "30%"}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]},
            "status": {"versionedSubsetStatuses": {"v": [
                {"name": "a", "missingReplicas": 0, "creatingPods": {"p9": "2026-01-01T00:00:00Z"}},
                {"name": "b", "missingReplicas": 0, "deletingPods": {"p8": "2026-01-01T00:00:00Z"}}]}}}))
        .unwrap()
    }

    fn pod(name: &str, subset: Option<&str>, cost: i64) -> Pod {
        let mut annotations = json!({POD_DELETION_COST_ANNOTATION: cost.to_string()});
        if let Some(s) = subset {
            annotations["apps.kruise.io/matched-workloadspread"] =
                json!(json!({"name": "web", "subset": s}).to_string());
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "annotations": annotations},
            "status": {"phase": "Running"}}),
        )
        .unwrap()
    }

    #[test]
    fn the_view_compares_the_pods_with_the_plan() {
        // 10 replicas: planned 3 / 5 / 2.
        let on_plan: Vec<Pod> = (0..10)
            .map(|i| {
                let s = match i {
                    0..3 => "a",
                    3..8 => "b",
                    _ => "c",
                };
                pod(&format!("p{i}"), Some(s), 1000 - i)
            })
            .collect();
        let v = status_view(&ws(), &on_plan, 10, 3);
        assert!(v.on_plan && v.over_maximum.is_empty(), "{v:?}");
        let shape: Vec<(usize, usize, Option<i32>)> = v
            .subsets
            .iter()
            .map(|s| (s.pods, s.planned, s.max))
            .collect();
        assert_eq!(shape, [(3, 3, Some(3)), (5, 5, Some(5)), (2, 2, None)]);
        assert_eq!((v.subsets[0].creating, v.subsets[1].deleting), (1, 1));
        let next: Vec<&str> = v.next_removed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(next, ["p9", "p8", "p7"], "lowest cost first");
        // A fourth pod in a, one outside every subset: off plan, a over its maximum.
        let mut off = on_plan.clone();
        off[9] = pod("p9", Some("a"), 1);
        off.push(pod("stray", None, -5));
        let v = status_view(&ws(), &off, 10, 1);
        assert!(!v.on_plan);
        assert_eq!(v.over_maximum, ["a"]);
        assert_eq!((v.outside, v.planned_outside), (1, 0));
        assert_eq!(v.next_removed[0].subset, None);
        let text = table(&v);
        assert!(
            text.contains("off plan, over the maximum: a") && text.contains("stray"),
            "{text}"
        );
    }

    /// Issue #42: the subset's Schedulable condition, for people.
    #[test]
    fn held_and_waiting_subsets_say_so() {
        let mut w = ws();
        let status = w.status.get_or_insert_with(Default::default);
        status.subset_statuses = serde_json::from_value(json!([
            {"name": "a", "missingReplicas": 0, "conditions": [{"type": "Schedulable", "status": "False",
                "reason": "PodUnschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "message": "no capacity: cluster-autoscaler said NotTriggerScaleUp"}]},
            {"name": "b", "missingReplicas": 0, "conditions": [{"type": "Schedulable", "status": "True",
                "reason": "Sufficient", "message": "waiting for capacity: TriggeredScaleUp"}]},
            {"name": "c", "missingReplicas": 0, "conditions": [{"type": "Schedulable", "status": "True",
                "reason": "Sufficient"}]}]))
        .unwrap();
        let v = status_view(&w, &Vec::<Pod>::new(), 10, 0);
        let schedule: Vec<&str> = v.subsets.iter().map(|s| s.schedule.as_str()).collect();
        assert_eq!(
            schedule,
            [
                "held since 2026-01-01T00:00:00Z: no capacity: cluster-autoscaler said NotTriggerScaleUp",
                "waiting for capacity: TriggeredScaleUp",
                ""
            ]
        );
        assert!(table(&v).contains("waiting for capacity: TriggeredScaleUp"));
    }
}

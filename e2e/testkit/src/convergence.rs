//! Watching a workload's spread converge, at every observed moment: a pod watch (one
//! label selector) keeps each pod's subset, activity and health, and after every event
//!
//! * records the step's peak overshoot: pods above their subset's maximum for the
//!   step's replicas, summed over subsets, at moments when the workload holds at most
//!   its replicas (a scale-in's surplus is the workload's, not admission's);
//! * records where the step *landed*: the spread at the first moment the workload holds
//!   its replicas, all healthy (before any rebalancing, which waits for that);
//! * checks a disruption floor: once armed (by hand, or at the landing), the healthy pods
//!   (Running, Ready, not being deleted) never drop below it — a PodDisruptionBudget's
//!   promise, seen from the pods.
//!
//! Rebalancing tests (`tests/rebalance.rs`) read both; nothing here knows the rules.

use crate::TestNamespace;
use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::Api;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MATCHED: &str = "apps.kruise.io/matched-workloadspread";

/// One pod as the watch last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodView {
    /// Subset of the matched annotation ("" = none).
    subset: String,
    /// Not being deleted, not finished.
    active: bool,
    /// Active, Running and Ready.
    healthy: bool,
}

impl PodView {
    fn of(p: &Pod) -> Self {
        let subset = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MATCHED))
            .and_then(|v| serde_json::from_str::<Value>(v).ok())
            .and_then(|v| v["subset"].as_str().map(str::to_string))
            .unwrap_or_default();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default();
        let active =
            p.metadata.deletion_timestamp.is_none() && phase != "Succeeded" && phase != "Failed";
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        PodView {
            subset,
            active,
            healthy: active && phase == "Running" && ready,
        }
    }
}

/// What a step allows: its replicas and the bounded subsets' maxima for them; with
/// `max_unavailable`, the disruption floor `replicas − max_unavailable` is armed at the
/// landing.
#[derive(Clone, Debug, Default)]
pub struct StepLimits {
    pub replicas: usize,
    pub max: BTreeMap<String, usize>,
    pub max_unavailable: Option<usize>,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, PodView>,
    /// Names seen since the current (re)list began.
    listing: Option<BTreeSet<String>>,
    limits: Option<StepLimits>,
    /// Peak overshoot of the step (sum over subsets) and the counts at that moment.
    peak: (usize, BTreeMap<String, usize>),
    landed: Option<BTreeMap<String, usize>>,
    floor: Option<usize>,
    lowest_healthy: Option<usize>,
    breaches: Vec<String>,
    moments: u64,
}

impl State {
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for p in self.pods.values().filter(|p| p.active) {
            *out.entry(p.subset.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Evaluates the invariants at this moment.
    fn observe(&mut self) {
        self.moments += 1;
        let counts = self.counts();
        if let Some(limits) = &self.limits {
            let active: usize = counts.values().sum();
            let healthy = self.pods.values().filter(|p| p.healthy).count();
            if self.landed.is_none() && active == limits.replicas && healthy == active {
                self.landed = Some(counts.clone());
                if let Some(k) = limits.max_unavailable {
                    self.floor = Some(limits.replicas.saturating_sub(k));
                    self.lowest_healthy = None;
                }
            }
            if active <= limits.replicas {
                let over: usize = limits
                    .max
                    .iter()
                    .map(|(s, &m)| counts.get(s).copied().unwrap_or(0).saturating_sub(m))
                    .sum();
                if over > self.peak.0 {
                    self.peak = (over, counts.clone());
                }
            }
        }
        if let Some(floor) = self.floor {
            let healthy = self.pods.values().filter(|p| p.healthy).count();
            self.lowest_healthy = Some(self.lowest_healthy.map_or(healthy, |l| l.min(healthy)));
            if healthy < floor {
                self.breaches.push(format!(
                    "{healthy} healthy pods (floor {floor}) at moment {}: {counts:?}",
                    self.moments
                ));
            }
        }
    }
}

/// A running watch (stopped on drop).
pub struct SpreadWatch {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SpreadWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SpreadWatch {
    /// Watches the pods of `ns` matching `selector`; returns once the first list is in.
    pub async fn start(ns: &TestNamespace, selector: &str) -> Result<Self> {
        let api: Api<Pod> = ns.api();
        let state = Arc::new(Mutex::new(State::default()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let config = watcher::Config::default().labels(selector);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                match event {
                    watcher::Event::Init => s.listing = Some(BTreeSet::new()),
                    watcher::Event::InitApply(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        if let Some(seen) = s.listing.as_mut() {
                            seen.insert(name.clone());
                        }
                        s.pods.insert(name, PodView::of(&p));
                    }
                    watcher::Event::InitDone => {
                        if let Some(seen) = s.listing.take() {
                            s.pods.retain(|n, _| seen.contains(n));
                        }
                        s.observe();
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Apply(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        s.pods.insert(name, PodView::of(&p));
                        s.observe();
                    }
                    watcher::Event::Delete(p) => {
                        s.pods
                            .remove(p.metadata.name.as_deref().unwrap_or_default());
                        s.observe();
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .context("the pod watch's first list")?
            .context("the pod watch ended")?;
        Ok(SpreadWatch { state, task })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Active pods per subset now ("" = outside every subset).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.lock().counts()
    }

    /// Starts a step: the peak overshoot is measured against `limits` from now on.
    pub fn begin_step(&self, limits: StepLimits) {
        let mut s = self.lock();
        s.limits = Some(limits);
        s.peak = (0, BTreeMap::new());
        s.landed = None;
        s.floor = None;
        s.observe();
    }

    /// Where the step landed (module doc), once it has.
    pub fn landed(&self) -> Option<BTreeMap<String, usize>> {
        self.lock().landed.clone()
    }

    /// The step's peak overshoot (pods above their maxima, summed) and the counts then.
    pub fn step_peak(&self) -> (usize, BTreeMap<String, usize>) {
        self.lock().peak.clone()
    }

    /// From now on every moment must hold at least `floor` healthy pods.
    pub fn arm_floor(&self, floor: usize) {
        let mut s = self.lock();
        s.floor = Some(floor);
        s.lowest_healthy = None;
        s.observe();
    }

    /// The fewest healthy pods seen since the floor was armed.
    pub fn lowest_healthy(&self) -> Option<usize> {
        self.lock().lowest_healthy
    }

    /// Moments the floor was breached (empty: never), and how many moments were seen.
    pub fn breaches(&self) -> (Vec<String>, u64) {
        let s = self.lock();
        (s.breaches.clone(), s.moments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(subset: &str, ready: bool, deleting: bool) -> PodView {
        let mut p = json!({"metadata": {"name": "p", "annotations": {
            MATCHED: format!(r#"{{"name":"web","subset":"{subset}"}}"#)}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        PodView::of(&serde_json::from_value(p).unwrap())
    }

    #[test]
    fn peaks_and_floors_are_judged_at_every_moment() {
        let mut s = State {
            limits: Some(StepLimits {
                replicas: 4,
                max: [("a".to_string(), 1)].into(),
                max_unavailable: Some(1),
            }),
            ..Default::default()
        };
        let add = |s: &mut State, name: &str, view: PodView| {
            s.pods.insert(name.to_string(), view);
            s.observe();
        };
        add(&mut s, "1", pod("a", true, false));
        add(&mut s, "2", pod("a", true, false));
        add(&mut s, "3", pod("b", true, false));
        assert_eq!(s.peak.0, 1, "a holds 2 of 1");
        assert_eq!(s.breaches.len(), 0);
        assert_eq!(s.landed, None);
        add(&mut s, "4", pod("a", false, false));
        assert_eq!(s.landed, None, "not healthy yet");
        add(&mut s, "4", pod("a", true, false));
        assert_eq!(s.peak.0, 2);
        let landed: BTreeMap<String, usize> = [("a".to_string(), 3), ("b".to_string(), 1)].into();
        assert_eq!(
            s.landed,
            Some(landed),
            "4 healthy pods of 4: landed, floor 3 armed"
        );
        // More pods than replicas (a scale-in about to remove them): not judged.
        add(&mut s, "5", pod("a", true, false));
        assert_eq!(s.peak.0, 2);
        // Two pods unhealthy at once: below the floor of 3.
        add(&mut s, "1", pod("a", false, false));
        add(&mut s, "2", pod("a", true, true));
        add(&mut s, "3", pod("b", false, false));
        assert_eq!(s.lowest_healthy, Some(2));
        assert_eq!(s.breaches.len(), 1, "{:?}", s.breaches);
    }
}

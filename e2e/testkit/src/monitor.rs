//! The invariant monitor: watches one WorkloadSpread, its workload and the namespace's
//! pods during a scenario and checks, at every observed moment (every watch event),
//! that no subset is over its maximum for the workload's replicas:
//!
//! * in the status — each subset's occupancy as every reader counts it, `replicas +
//!   |creatingPods| − |deletingPods|`, in each version's statuses (placeholders included),
//!   and
//! * in the pods — the active pods of each pod-template version whose matched annotation
//!   names the subset.
//!
//! Per version, as OpenKruise's versioned statuses spread each version of a rolling update
//! on its own (old and new pods of one subset may together exceed its maximum while the
//! rollout surges).
//!
//! A maximum lowered below what a subset holds leaves it over (nothing evicts but
//! rebalancing): from then on the subset may hold what it held, shrinking as pods leave,
//! and no pod may be added while it is at or above its maximum.
//!
//! At the end ([`Monitor::finish`]) it reports the highest occupancy seen per subset.
//! The judgement is the monitor's own (maxima scaled with `intstr`'s round-up, as
//! Kubernetes does), not `workloadspread_core`'s: the rules under test do not judge
//! themselves.

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MATCHED: &str = "apps.kruise.io/matched-workloadspread";

/// A subset's maximum as the spec gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Max {
    Count(i64),
    Percent(i64),
    Unlimited,
}

impl Max {
    /// `maxReplicas` as the spec gives it (absent or null: unlimited).
    pub fn parse(v: &Value) -> Max {
        match v {
            Value::Number(n) => n.as_i64().map_or(Max::Unlimited, Max::Count),
            Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse().ok()) {
                Some(p) => Max::Percent(p),
                None => s.parse().map_or(Max::Unlimited, Max::Count),
            },
            _ => Max::Unlimited,
        }
    }

    /// The maximum for `replicas` (percentages round up, as `intstr` does); `None`:
    /// unlimited.
    pub fn at(&self, replicas: i64) -> Option<i64> {
        match *self {
            Max::Count(n) => Some(n),
            Max::Percent(p) => Some((p * replicas + 99) / 100),
            Max::Unlimited => None,
        }
    }
}

/// One observation over a subset's maximum.
#[derive(Clone, Debug)]
pub struct Violation {
    pub after: Duration,
    pub subset: String,
    /// "status" or "pods".
    pub seen_in: &'static str,
    pub count: i64,
    pub max: i64,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2} s: subset {} holds {} by the {} (maximum {}): {}",
            self.after.as_secs_f64(),
            self.subset,
            self.count,
            self.seen_in,
            self.max,
            self.detail
        )
    }
}

/// What a scenario observed.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Highest status occupancy per subset.
    pub max_occupancy: BTreeMap<String, i64>,
    /// Highest count of active pods per subset.
    pub max_pods: BTreeMap<String, i64>,
    /// Each subset's maximum at the highest replicas seen.
    pub maxima: BTreeMap<String, i64>,
    pub status_events: usize,
    pub pod_events: usize,
    pub violations: Vec<Violation>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subsets: Vec<String> = self
            .max_occupancy
            .keys()
            .chain(self.max_pods.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|s| {
                let get = |m: &BTreeMap<String, i64>| m.get(s).copied().unwrap_or(0);
                let max = self
                    .maxima
                    .get(s)
                    .map_or("unlimited".to_string(), |m| m.to_string());
                format!(
                    "{s}: occupancy ≤ {}, pods ≤ {} (max {max})",
                    get(&self.max_occupancy),
                    get(&self.max_pods)
                )
            })
            .collect();
        write!(
            f,
            "{}; {} status and {} pod events checked, {} violations",
            subsets.join("; "),
            self.status_events,
            self.pod_events,
            self.violations.len()
        )
    }
}

/// What the monitor tracks.
#[derive(Default)]
struct State {
    started: Option<Instant>,
    maxima: Vec<(String, Max)>,
    /// The replicas maxima are scaled with: the workload's, except during a scale-in,
    /// when the larger count holds until the pods are down to the new one (pods on their
    /// way out are not judged by the smaller maximum).
    replicas: i64,
    /// A scale-in's replicas, until the pods are down to it.
    scaling_in: Option<i64>,
    /// The highest replicas seen (the report's maxima are for it).
    peak_replicas: i64,
    /// Active pods by name → (version, subset).
    pods: BTreeMap<String, (String, String)>,
    /// (version, subset) → what it held when its maximum was lowered below that (the
    /// bound until it is down to the maximum; lowered as pods leave).
    held: BTreeMap<(String, String), i64>,
    /// The same by the status: what (version, subset) counted (pods, claims in flight,
    /// placeholders) when its maximum was lowered below that; lowered as it shrinks.
    /// Kept apart from `held`: a placeholder that becomes a pod leaves the status' count
    /// as it was, yet adds a pod.
    held_status: BTreeMap<(String, String), i64>,
    report: Report,
}

impl State {
    fn elapsed(&self) -> Duration {
        self.started.map(|s| s.elapsed()).unwrap_or_default()
    }

    fn max_of(&self, subset: &str) -> Option<i64> {
        let (_, max) = self.maxima.iter().find(|(s, _)| s == subset)?;
        max.at(self.replicas)
    }

    /// What (version, subset) may hold: its maximum, or what it held when the maximum
    /// was lowered below that.
    fn bound_of(&self, key: &(String, String)) -> Option<i64> {
        let max = self.max_of(&key.1)?;
        Some(self.held.get(key).map_or(max, |h| max.max(*h)))
    }

    fn count_of(&self, key: &(String, String)) -> i64 {
        self.pods.values().filter(|k| *k == key).count() as i64
    }

    fn workloadspread(&mut self, ws: &Value) {
        self.report.status_events += 1;
        let mut lowered_now = std::collections::BTreeSet::new();
        if let Some(subsets) = ws["spec"]["subsets"].as_array() {
            let before: BTreeMap<String, Option<i64>> = self
                .maxima
                .iter()
                .map(|(s, _)| (s.clone(), self.max_of(s)))
                .collect();
            self.maxima = subsets
                .iter()
                .filter_map(|s| {
                    Some((
                        s["name"].as_str()?.to_string(),
                        Max::parse(&s["maxReplicas"]),
                    ))
                })
                .collect();
            for (subset, old) in &before {
                let lowered = match (old, self.max_of(subset)) {
                    (Some(o), Some(n)) => n < *o,
                    (None, Some(_)) => true,
                    _ => false,
                };
                if lowered {
                    lowered_now.insert(subset.clone());
                }
            }
            let keys: std::collections::BTreeSet<(String, String)> =
                self.pods.values().cloned().collect();
            for key in keys {
                let new = self.max_of(&key.1);
                let count = self.count_of(&key);
                if lowered_now.contains(&key.1) && new.is_some_and(|n| count > n) {
                    self.held.insert(key.clone(), count);
                }
            }
        }
        let occupied = occupancy(&ws["status"]);
        // What the status held when a maximum was lowered below it may stay, shrinking.
        self.held_status
            .retain(|k, _| occupied.get(k).is_some_and(|o| *o > 0));
        for ((version, subset), occupancy) in occupied {
            let seen = self.report.max_occupancy.entry(subset.clone()).or_default();
            *seen = (*seen).max(occupancy);
            let key = (version, subset.clone());
            let max = self.max_of(&subset);
            if lowered_now.contains(&subset) && max.is_some_and(|m| occupancy > m) {
                self.held_status.insert(key.clone(), occupancy);
            }
            let bound = self
                .bound_of(&key)
                .map(|b| self.held_status.get(&key).map_or(b, |h| b.max(*h)));
            if let Some(held) = self.held_status.get_mut(&key) {
                *held = (*held).min(occupancy);
                if max.is_none_or(|m| *held <= m) {
                    self.held_status.remove(&key);
                }
            }
            if let Some(max) = bound.filter(|m| occupancy > *m) {
                let violation = Violation {
                    after: self.elapsed(),
                    subset,
                    seen_in: "status",
                    count: occupancy,
                    max,
                    detail: ws["status"]["versionedSubsetStatuses"].to_string(),
                };
                self.report.violations.push(violation);
            }
        }
    }

    fn workload_replicas(&mut self, replicas: i64) {
        self.peak_replicas = self.peak_replicas.max(replicas);
        if replicas >= self.replicas {
            self.replicas = replicas;
            self.scaling_in = None;
        } else {
            self.scaling_in = Some(replicas);
            self.scaled_in();
        }
    }

    /// Ends a scale-in once the pods are down to its replicas.
    fn scaled_in(&mut self) {
        if let Some(r) = self.scaling_in.filter(|r| self.pods.len() as i64 <= *r) {
            self.replicas = r;
            self.scaling_in = None;
        }
    }

    fn pod(&mut self, ws_name: &str, pod: &Pod, deleted: bool) {
        self.report.pod_events += 1;
        let name = pod.metadata.name.clone().unwrap_or_default();
        match subset_of(pod, ws_name).filter(|_| !deleted && is_active(pod)) {
            Some(subset) => {
                let key = (version_of(pod), subset.clone());
                let count = 1 + self
                    .pods
                    .iter()
                    .filter(|(n, k)| **k == key && **n != name)
                    .count() as i64;
                self.pods.insert(name.clone(), key.clone());
                let seen = self.report.max_pods.entry(subset.clone()).or_default();
                *seen = (*seen).max(count);
                if let Some(max) = self.bound_of(&key).filter(|m| count > *m) {
                    let violation = Violation {
                        after: self.elapsed(),
                        subset,
                        seen_in: "pods",
                        count,
                        max,
                        detail: format!("{name} was added"),
                    };
                    self.report.violations.push(violation);
                }
            }
            None => {
                if let Some(key) = self.pods.remove(&name) {
                    let count = self.count_of(&key);
                    let max = self.max_of(&key.1);
                    if let Some(held) = self.held.get_mut(&key) {
                        *held = (*held).min(count);
                        if max.is_none_or(|m| *held <= m) {
                            self.held.remove(&key);
                        }
                    }
                }
                self.scaled_in();
            }
        }
    }
}

/// Each (version, subset)'s occupancy in the versioned statuses.
pub fn occupancy(status: &Value) -> BTreeMap<(String, String), i64> {
    let mut out = BTreeMap::new();
    let versions = status["versionedSubsetStatuses"].as_object();
    for (version, subsets) in versions.into_iter().flatten() {
        for s in subsets.as_array().into_iter().flatten() {
            let Some(name) = s["name"].as_str() else {
                continue;
            };
            let len = |k: &str| s[k].as_object().map_or(0, |m| m.len() as i64);
            let n = s["replicas"].as_i64().unwrap_or(0) + len("creatingPods") - len("deletingPods");
            out.insert((version.clone(), name.to_string()), n);
        }
    }
    out
}

/// A pod's template version: its ReplicaSet's or controller revision's hash.
fn version_of(pod: &Pod) -> String {
    let labels = pod.metadata.labels.as_ref();
    ["pod-template-hash", "controller-revision-hash"]
        .iter()
        .find_map(|k| labels?.get(*k).cloned())
        .unwrap_or_default()
}

fn subset_of(pod: &Pod, ws_name: &str) -> Option<String> {
    let text = pod.metadata.annotations.as_ref()?.get(MATCHED)?;
    let v: Value = serde_json::from_str(text).ok()?;
    (v["name"] == ws_name).then(|| v["subset"].as_str().map(str::to_string))?
}

fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// A running monitor; [`Monitor::finish`] stops it and judges.
pub struct Monitor {
    state: Arc<Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Monitor {
    /// Watches WorkloadSpread `ws_name`, the workload (`workload`, `workload_name`: its
    /// `spec.replicas` scales percentages; during a scale-in the larger count holds until
    /// the pods are down to the new one) and the pods of `namespace`. Returns once every
    /// watch has listed.
    pub async fn start(
        client: Client,
        namespace: &str,
        ws_name: &str,
        workload: ApiResource,
        workload_name: &str,
    ) -> Result<Self> {
        let state = Arc::new(Mutex::new(State {
            started: Some(Instant::now()),
            ..Default::default()
        }));
        let ws_resource = ApiResource {
            group: "apps.kruise.io".into(),
            version: "v1beta1".into(),
            api_version: "apps.kruise.io/v1beta1".into(),
            kind: "WorkloadSpread".into(),
            plural: "workloadspreads".into(),
        };
        let mut tasks = vec![];
        let mut ready = vec![];
        let config =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        for (resource, name, is_ws) in [
            (ws_resource, ws_name, true),
            (workload, workload_name, false),
        ] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let stream = watcher::watcher(api, config(name));
            let (tx, rx) = tokio::sync::oneshot::channel();
            ready.push(rx);
            let state = state.clone();
            tasks.push(tokio::spawn(follow(
                stream,
                tx,
                move |o: DynamicObject, _| {
                    let v = serde_json::to_value(&o).unwrap_or(Value::Null);
                    let mut s = lock(&state);
                    if is_ws {
                        s.workloadspread(&v);
                    } else {
                        // A Job's pods at once are its parallelism.
                        let spec = &v["spec"];
                        let replicas = spec["replicas"].as_i64().or(spec["parallelism"].as_i64());
                        s.workload_replicas(replicas.unwrap_or(0));
                    }
                },
            )));
        }
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        let (st, ws) = (state.clone(), ws_name.to_string());
        let stream = watcher::watcher(pods, watcher::Config::default());
        tasks.push(tokio::spawn(follow(stream, tx, move |p: Pod, deleted| {
            lock(&st).pod(&ws, &p, deleted)
        })));
        for rx in ready {
            tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .context("the monitor's watches did not list in 30 s")?
                .context("a monitor watch stopped")?;
        }
        Ok(Monitor { state, tasks })
    }

    /// The report so far.
    pub fn report(&self) -> Report {
        let s = lock(&self.state);
        let mut report = s.report.clone();
        report.maxima = s
            .maxima
            .iter()
            .filter_map(|(n, m)| Some((n.clone(), m.at(s.peak_replicas.max(s.replicas))?)))
            .collect();
        report
    }

    /// Stops watching; fails when any moment was over a maximum. The verdict is also
    /// appended to the file `WS_MONITOR_LOG` names, under the test's name, so a run
    /// shows each scenario's highest occupancy whether it passed or not.
    pub fn finish(self) -> Result<Report> {
        for t in &self.tasks {
            t.abort();
        }
        let report = self.report();
        log_verdict(&report);
        if !report.violations.is_empty() {
            let first: Vec<String> = report
                .violations
                .iter()
                .take(5)
                .map(|v| v.to_string())
                .collect();
            bail!(
                "{} moments over a maximum ({report}); first: {}",
                report.violations.len(),
                first.join(" | ")
            );
        }
        Ok(report)
    }
}

/// One line per finished monitor in `WS_MONITOR_LOG`: the test (the test harness names
/// each test's thread after it) and the report.
fn log_verdict(report: &Report) {
    let Some(path) = std::env::var_os("WS_MONITOR_LOG") else {
        return;
    };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed test)");
    let line = format!("{test}: {report}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = written {
        eprintln!("monitor: cannot append to {}: {e}", path.to_string_lossy());
    }
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Feeds every object event of `stream` to `on` (`true`: deleted); signals `ready` after
/// the initial list.
async fn follow<K, S>(
    stream: S,
    ready: tokio::sync::oneshot::Sender<()>,
    mut on: impl FnMut(K, bool) + Send,
) where
    S: futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    K: Send,
{
    let mut ready = Some(ready);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => on(o, false),
            Ok(Event::Delete(o)) => on(o, true),
            Ok(Event::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            Ok(Event::Init) => {}
            // The watcher retries by itself; a gap is a missed moment, not a violation.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maxima_scale_like_intstr_and_occupancy_is_per_version() {
        assert_eq!(Max::parse(&json!(3)).at(10), Some(3));
        assert_eq!(Max::parse(&json!("30%")).at(10), Some(3));
        assert_eq!(Max::parse(&json!("30%")).at(11), Some(4));
        assert_eq!(Max::parse(&json!("5")).at(1), Some(5));
        assert_eq!(Max::parse(&Value::Null).at(10), None);
        let status = json!({"versionedSubsetStatuses": {
            "v1": [{"name": "a", "replicas": 2, "creatingPods": {"p": "t", "~h.1": "t"}, "deletingPods": {"q": "t"}}],
            "v2": [{"name": "a", "replicas": 1}, {"name": "b", "creatingPods": {"r": "t"}}]}});
        let key = |v: &str, s: &str| (v.to_string(), s.to_string());
        assert_eq!(
            occupancy(&status),
            BTreeMap::from([
                (key("v1", "a"), 3),
                (key("v2", "a"), 1),
                (key("v2", "b"), 1)
            ])
        );
    }

    /// A maximum lowered below what a subset holds: the subset may keep what it holds,
    /// shrinking as pods leave, but nothing may be added until it is below the maximum.
    #[test]
    fn a_lowered_maximum_bounds_additions_not_the_pods_already_there() {
        let mut s = State {
            replicas: 10,
            ..Default::default()
        };
        let ws = |max: i64, replicas: i64| {
            json!({"spec": {"subsets": [{"name": "a", "maxReplicas": max}, {"name": "b"}]},
                "status": {"versionedSubsetStatuses": {"": [{"name": "a", "replicas": replicas}]}}})
        };
        let pod = |name: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
                MATCHED: json!({"name": "web", "subset": "a"}).to_string()}}}))
            .unwrap()
        };
        s.workloadspread(&ws(3, 0));
        for n in ["p1", "p2", "p3"] {
            s.pod("web", &pod(n), false);
        }
        s.workloadspread(&ws(1, 3));
        s.pod("web", &pod("p2"), false);
        assert!(s.report.violations.is_empty(), "{:?}", s.report.violations);
        s.pod("web", &pod("p3"), true);
        s.pod("web", &pod("p4"), false);
        assert_eq!(s.report.violations.len(), 1, "added while at 2 of max 1");
        s.pod("web", &pod("p4"), true);
        s.pod("web", &pod("p2"), true);
        s.pod("web", &pod("p5"), false);
        assert_eq!(s.report.violations.len(), 2, "down to 1: at the maximum");
        s.pod("web", &pod("p5"), true);
        s.workloadspread(&ws(1, 1));
        s.pod("web", &pod("p6"), false);
        assert_eq!(
            s.report.violations.len(),
            3,
            "held is gone once down to the max"
        );
    }

    /// Lowered below what the status counts (2 pods and a placeholder): the status may
    /// keep that count, shrinking; the pods are bounded by what they were (a placeholder
    /// that becomes a pod adds one), and a new claim is over.
    #[test]
    fn a_lowered_maximum_bounds_the_status_by_what_it_counted() {
        let mut s = State {
            replicas: 10,
            ..Default::default()
        };
        let ws = |max: i64, creating: Value| {
            json!({"spec": {"subsets": [{"name": "a", "maxReplicas": max}, {"name": "b"}]},
                "status": {"versionedSubsetStatuses": {"": [{"name": "a", "replicas": 2, "creatingPods": creating}]}}})
        };
        let pod = |name: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
                MATCHED: json!({"name": "web", "subset": "a"}).to_string()}}}))
            .unwrap()
        };
        s.workloadspread(&ws(4, json!({"~h.1": "t"})));
        for n in ["p1", "p2"] {
            s.pod("web", &pod(n), false);
        }
        s.workloadspread(&ws(2, json!({"~h.1": "t"})));
        s.workloadspread(&ws(2, json!({"~h.1": "t"})));
        assert!(s.report.violations.is_empty(), "{:?}", s.report.violations);
        s.pod("web", &pod("p3"), false);
        assert_eq!(
            s.report.violations.len(),
            1,
            "the placeholder handed out: a third pod"
        );
        s.workloadspread(&ws(2, json!({"~h.1": "t", "p4": "t"})));
        assert_eq!(s.report.violations.len(), 2, "a claim written on top");
        s.workloadspread(&ws(2, json!({})));
        s.workloadspread(&ws(2, json!({"p5": "t"})));
        assert_eq!(
            s.report.violations.len(),
            3,
            "down to the maximum: held is gone"
        );
    }

    #[test]
    fn every_moment_over_a_maximum_is_a_violation() {
        let mut s = State {
            replicas: 10,
            ..Default::default()
        };
        let ws = |creating: Value| {
            json!({"spec": {"subsets": [{"name": "a", "maxReplicas": "30%"}, {"name": "b"}]},
                "status": {"versionedSubsetStatuses": {"v": [{"name": "a", "replicas": 2, "creatingPods": creating}, {"name": "b", "replicas": 50}]}}})
        };
        s.workloadspread(&ws(json!({"p": "t"})));
        assert!(s.report.violations.is_empty());
        s.workloadspread(&ws(json!({"p": "t", "~h.1": "t"})));
        assert_eq!(s.report.violations.len(), 1, "3 + 1 placeholder > 3");
        let pod = |name: &str, subset: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
                MATCHED: json!({"name": "web", "subset": subset}).to_string()}}}))
            .unwrap()
        };
        for n in ["p1", "p2", "p3"] {
            s.pod("web", &pod(n, "a"), false);
        }
        assert_eq!(s.report.violations.len(), 1);
        s.pod("web", &pod("p4", "a"), false);
        assert_eq!(s.report.violations.len(), 2, "a fourth pod in a");
        s.pod("web", &pod("p4", "a"), true);
        s.pod("web", &pod("p5", "a"), false);
        assert_eq!(
            s.report.violations.len(),
            3,
            "deleted pods leave, new ones count"
        );
        // A rolling update's new version is spread on its own.
        let mut next = pod("n1", "a");
        next.metadata.labels = Some([("pod-template-hash".to_string(), "v2".to_string())].into());
        s.pod("web", &next, false);
        assert_eq!(s.report.violations.len(), 3, "another version's pod");
        s.pod("web", &next, true);
        assert_eq!(s.report.max_pods["a"], 4);
        assert_eq!(s.report.max_occupancy["a"], 4);
        // Scaled in to 3 (a's maximum 1): judged by 10 until the pods are down to 3.
        s.workload_replicas(3);
        assert_eq!(s.max_of("a"), Some(3));
        s.pod("web", &pod("p5", "a"), true);
        assert_eq!(s.max_of("a"), Some(1), "3 pods left: the scale-in is over");
        s.workload_replicas(12);
        assert_eq!(s.max_of("a"), Some(4));
    }
}

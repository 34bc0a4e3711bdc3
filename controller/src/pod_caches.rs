//! Pod caches per namespace (#19): the controller keeps the pods of the namespaces that
//! have a WorkloadSpread, not of the whole cluster. A namespace's cache starts when a
//! reconcile first asks for it (a new WorkloadSpread: its first list brings the existing
//! pods to adopt) and stops a grace period after the namespace's last WorkloadSpread is
//! gone (a WorkloadSpread recreated meanwhile finds it warm). Pods are kept pruned to what
//! reconciles read (`core::pods::prune_for_cache`), and each change of a pod that names a
//! WorkloadSpread in its matched annotation reconciles that WorkloadSpread.

use crate::metrics::Metrics;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use workloadspread_core::annotation::MatchedWorkloadSpread;
use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION;
use workloadspread_core::pods::prune_for_cache;

/// Pending reconcile triggers; a full queue pauses the pod watches (bounded memory).
const TRIGGER_QUEUE: usize = 1024;

struct NamespaceCache {
    store: Store<Pod>,
    task: AbortHandle,
    /// Since when the namespace has had no WorkloadSpread (`None`: it has one).
    unused_since: Option<Instant>,
}

impl Drop for NamespaceCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pod caches of one controller process.
pub struct PodCaches {
    client: Client,
    resource: ApiResource,
    caches: Mutex<HashMap<String, NamespaceCache>>,
    triggers: mpsc::Sender<ObjectRef<DynamicObject>>,
    metrics: Arc<Metrics>,
}

impl PodCaches {
    /// No cache yet; the returned stream carries the WorkloadSpreads to reconcile on pod
    /// changes (for `Controller::reconcile_on`).
    pub fn new(
        client: Client,
        resource: ApiResource,
        metrics: Arc<Metrics>,
    ) -> (
        Arc<Self>,
        impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static,
    ) {
        let (tx, rx) = mpsc::channel(TRIGGER_QUEUE);
        let me = Arc::new(PodCaches {
            client,
            resource,
            caches: Mutex::new(HashMap::new()),
            triggers: tx,
            metrics,
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        (me, stream)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, NamespaceCache>> {
        self.caches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pod store of `namespace`, its watch started if it was not running (the
    /// caller waits for its first list).
    pub fn store(&self, namespace: &str) -> Store<Pod> {
        let mut caches = self.lock();
        if let Some(c) = caches.get_mut(namespace) {
            c.unused_since = None;
            return c.store.clone();
        }
        let (store, task) = self.spawn(namespace);
        caches.insert(
            namespace.to_string(),
            NamespaceCache {
                store: store.clone(),
                task,
                unused_since: None,
            },
        );
        self.metrics.pod_cache_namespaces.set(caches.len() as i64);
        tracing::info!(namespace, "watching the namespace's pods");
        store
    }

    fn spawn(&self, namespace: &str) -> (Store<Pod>, AbortHandle) {
        let (store, writer) = reflector::store();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|p: &mut Pod| {
                p.managed_fields_mut().clear();
                prune_for_cache(p);
            })
            .reflect(writer)
            .touched_objects();
        let (triggers, resource) = (self.triggers.clone(), self.resource.clone());
        let namespace = namespace.to_string();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(pod) => {
                        if let Some(r) = trigger(&pod, &resource) {
                            if triggers.send(r).await.is_err() {
                                return; // the controller stopped
                            }
                        }
                    }
                    Err(e) => tracing::warn!(namespace, "pod watch: {e}"),
                }
            }
        });
        (store, task.abort_handle())
    }

    /// Stops the caches of namespaces that have had no WorkloadSpread for `grace`;
    /// `with_spreads` are the namespaces that have one now.
    pub fn retain(&self, with_spreads: &BTreeSet<String>, now: Instant, grace: Duration) {
        let mut caches = self.lock();
        let mut unused: HashMap<&str, Option<Instant>> = HashMap::new();
        for (ns, c) in caches.iter() {
            unused.insert(ns.as_str(), c.unused_since);
        }
        let decisions = decide(&unused, with_spreads, now, grace);
        for (ns, d) in decisions {
            match d {
                Keep::Stop => {
                    tracing::info!(namespace = ns, "no WorkloadSpread left: pod watch stopped");
                    caches.remove(&ns);
                }
                Keep::Since(since) => {
                    if let Some(c) = caches.get_mut(&ns) {
                        c.unused_since = since;
                    }
                }
            }
        }
        self.metrics.pod_cache_namespaces.set(caches.len() as i64);
    }
}

/// What happens to one namespace's cache.
#[derive(Debug, PartialEq)]
enum Keep {
    /// Keep it, unused since then (`None`: in use).
    Since(Option<Instant>),
    Stop,
}

/// Per cached namespace: in use while it has a WorkloadSpread; else unused since the
/// first check that found none, and stopped once that is `grace` ago.
fn decide(
    unused: &HashMap<&str, Option<Instant>>,
    with_spreads: &BTreeSet<String>,
    now: Instant,
    grace: Duration,
) -> Vec<(String, Keep)> {
    let mut out: Vec<(String, Keep)> = unused
        .iter()
        .map(|(ns, since)| {
            let keep = match (with_spreads.contains(*ns), since) {
                (true, _) => Keep::Since(None),
                (false, None) => Keep::Since(Some(now)),
                (false, Some(s)) if now.duration_since(*s) >= grace => Keep::Stop,
                (false, Some(s)) => Keep::Since(Some(*s)),
            };
            (ns.to_string(), keep)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A pod change reconciles the WorkloadSpread named in its matched annotation.
pub fn trigger(pod: &Pod, resource: &ApiResource) -> Option<ObjectRef<DynamicObject>> {
    let value = pod.annotations().get(MATCHED_WORKLOADSPREAD_ANNOTATION)?;
    let matched = MatchedWorkloadSpread::parse(value).ok()?;
    let ns = pod.namespace()?;
    Some(ObjectRef::new_with(&matched.name, resource.clone()).within(&ns))
}

/// Every `period`, stops the caches of namespaces left without a WorkloadSpread for
/// `grace` (the WorkloadSpread store says which have one).
pub async fn follow(
    caches: Arc<PodCaches>,
    spreads: Store<DynamicObject>,
    period: Duration,
    grace: Duration,
) {
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let with_spreads: BTreeSet<String> = spreads
            .state()
            .iter()
            .filter_map(|w| w.namespace())
            .collect();
        caches.retain(&with_spreads, Instant::now(), grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_stop_a_grace_period_after_the_last_workloadspread() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(60);
        let spreads: BTreeSet<String> = ["kept".to_string()].into();
        let unused: HashMap<&str, Option<Instant>> = [
            ("kept", Some(t0)),
            ("just-emptied", None),
            ("emptied-a-while-ago", Some(t0)),
            ("emptied-long-ago", Some(t0)),
        ]
        .into();
        let at = |secs| t0 + Duration::from_secs(secs);
        let d = decide(&unused, &spreads, at(30), grace);
        assert_eq!(
            d,
            [
                ("emptied-a-while-ago".to_string(), Keep::Since(Some(t0))),
                ("emptied-long-ago".to_string(), Keep::Since(Some(t0))),
                ("just-emptied".to_string(), Keep::Since(Some(at(30)))),
                // A WorkloadSpread came back: in use again.
                ("kept".to_string(), Keep::Since(None)),
            ]
        );
        let d = decide(&unused, &spreads, at(60), grace);
        assert_eq!(d[0], ("emptied-a-while-ago".to_string(), Keep::Stop));
    }
}

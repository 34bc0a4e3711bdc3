//! One watch per (namespaced kind, namespace holding a WorkloadSpread).

use super::*;

/// How often the namespace watches are matched to the namespaces holding WorkloadSpreads.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Keeps one watch per (namespaced kind, namespace holding a WorkloadSpread); stops a
/// namespace's watches `grace` after its last WorkloadSpread went (a WorkloadSpread
/// deleted and created again keeps them). Ends when the capabilities are dropped.
pub(super) async fn follow_namespaces(caps: Weak<KubeCapabilities>, grace: Duration) {
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        let Some(caps) = caps.upgrade() else {
            return;
        };
        if let Some(wanted) = caps.workloadspread_namespaces() {
            caps.follow(&wanted, grace);
        }
    }
}

impl KubeCapabilities {
    /// Namespaces holding a WorkloadSpread; `None` until its cache is synced.
    fn workloadspread_namespaces(&self) -> Option<BTreeSet<String>> {
        let store = store_for(&self.workloadspreads()?, None)?;
        Some(store.state().iter().filter_map(|o| o.namespace()).collect())
    }

    /// Starts `resource`'s watches in the namespaces holding a WorkloadSpread now, not at
    /// the next [`follow_namespaces`] tick: a kind first read by an admission (a custom
    /// workload) is cached before the next pods arrive.
    pub(super) fn watch_now(&self, resource: &ApiResource, stores: &NamespaceStores) {
        if let Some(wanted) = self.workloadspread_namespaces() {
            let mut stores = stores.stores.write().unwrap_or_else(|p| p.into_inner());
            self.watch_in(resource, &mut stores, &wanted);
        }
    }

    /// A watch of `resource` in each of `wanted` (kept ones marked used again).
    fn watch_in(
        &self,
        resource: &ApiResource,
        stores: &mut HashMap<String, NamespaceStore>,
        wanted: &BTreeSet<String>,
    ) {
        for ns in wanted {
            let entry = stores.entry(ns.clone()).or_insert_with(|| {
                let api = Api::namespaced_with(self.client.clone(), ns, resource);
                let (store, watch) =
                    spawn_reflector(api, resource.clone(), Followers::default(), Duration::ZERO);
                tracing::debug!(kind = %resource.kind, namespace = %ns, "watching");
                NamespaceStore {
                    store,
                    watch,
                    unused_since: None,
                }
            });
            entry.unused_since = None;
        }
    }

    fn follow(&self, wanted: &BTreeSet<String>, grace: Duration) {
        let per_namespace: Vec<(ApiResource, Arc<NamespaceStores>)> = self
            .read_reflected()
            .values()
            .filter_map(|r| match &r.cache {
                Cache::PerNamespace(m) => Some((r.resource.clone(), m.clone())),
                Cache::Cluster(_) | Cache::Live => None,
            })
            .collect();
        for (resource, stores) in per_namespace {
            let mut stores = stores.stores.write().unwrap_or_else(|p| p.into_inner());
            self.watch_in(&resource, &mut stores, wanted);
            let now = std::time::Instant::now();
            stores.retain(|ns, n| {
                if wanted.contains(ns) {
                    return true;
                }
                let since = *n.unused_since.get_or_insert(now);
                let keep = now.duration_since(since) < grace;
                if !keep {
                    tracing::debug!(kind = %resource.kind, namespace = %ns, "no WorkloadSpread left: watch stopped");
                    self.metrics.cached_objects.remove(&CacheLabels {
                        kind: resource.kind.clone(),
                        namespace: ns.clone(),
                    });
                }
                keep
            });
            for (ns, n) in stores.iter() {
                let labels = CacheLabels {
                    kind: resource.kind.clone(),
                    namespace: ns.clone(),
                };
                let objects = i64::try_from(n.store.state().len()).unwrap_or(i64::MAX);
                self.metrics
                    .cached_objects
                    .get_or_create(&labels)
                    .set(objects);
            }
        }
    }
}

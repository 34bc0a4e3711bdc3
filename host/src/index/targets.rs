//! WorkloadSpreads by namespace and target name, kept from the events of their watch: a
//! list selected by `spec.targetRef.name=X` (the policy's `spreadLookup: target-name`) is
//! answered from the few objects it names, not by a scan of every WorkloadSpread the
//! cluster holds.

use kube::api::DynamicObject;
use kube::runtime::watcher;
use kube::ResourceExt as _;
use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;
use workloadspread_core::fields::at_path;
use workloadspread_core::workload::TARGET_NAME_FIELD;

type NamespacedName = (String, String);

/// (namespace, target name) → names, and back.
#[derive(Default)]
struct Map {
    by_target: HashMap<NamespacedName, BTreeSet<String>>,
    target_of: HashMap<NamespacedName, String>,
}

impl Map {
    fn remove(&mut self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        if let Some(target) = self.target_of.remove(&key) {
            let by = (ns.to_string(), target);
            if let Some(names) = self.by_target.get_mut(&by) {
                names.remove(name);
                if names.is_empty() {
                    self.by_target.remove(&by);
                }
            }
        }
    }

    fn upsert(&mut self, o: &DynamicObject) {
        let (ns, name) = (o.namespace().unwrap_or_default(), o.name_any());
        self.remove(&ns, &name);
        if let Some(target) = at_path(&o.data, TARGET_NAME_FIELD) {
            self.target_of
                .insert((ns.clone(), name.clone()), target.to_string());
            self.by_target
                .entry((ns, target.to_string()))
                .or_default()
                .insert(name);
        }
    }
}

/// The index, following a watch's events (a relist replaces it when it is done).
#[derive(Default)]
pub struct TargetIndex {
    live: RwLock<Map>,
    /// The objects of a relist in progress.
    relisting: RwLock<Option<Map>>,
}

impl TargetIndex {
    /// Follows one event of the WorkloadSpread watch (before the cache applies it: the
    /// index never lags the cache, and a name it gives that the cache lacks is skipped).
    pub fn apply(&self, event: &watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Apply(o) => write(&self.live).upsert(o),
            watcher::Event::Delete(o) => {
                write(&self.live).remove(&o.namespace().unwrap_or_default(), &o.name_any())
            }
            watcher::Event::Init => *write(&self.relisting) = Some(Map::default()),
            watcher::Event::InitApply(o) => {
                if let Some(m) = write(&self.relisting).as_mut() {
                    m.upsert(o);
                }
            }
            watcher::Event::InitDone => {
                if let Some(m) = write(&self.relisting).take() {
                    *write(&self.live) = m;
                }
            }
        }
    }

    /// Names of the WorkloadSpreads of `namespace` whose target is named `target`, in
    /// name order.
    pub fn names(&self, namespace: &str, target: &str) -> Vec<String> {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        live.by_target
            .get(&(namespace.to_string(), target.to_string()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws(ns: &str, name: &str, target: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}}}))
        .unwrap()
    }

    /// Applies, retargets and deletes move names; a relist replaces the index only once
    /// it is done (what it no longer lists is gone).
    #[test]
    fn the_index_follows_the_watch() {
        let index = TargetIndex::default();
        let apply = |o| index.apply(&watcher::Event::Apply(o));
        apply(ws("ns", "b", "web"));
        apply(ws("ns", "a", "web"));
        apply(ws("other", "c", "web"));
        assert_eq!(index.names("ns", "web"), ["a", "b"]);
        apply(ws("ns", "b", "api"));
        assert_eq!(index.names("ns", "web"), ["a"]);
        assert_eq!(index.names("ns", "api"), ["b"]);
        index.apply(&watcher::Event::Delete(ws("ns", "a", "web")));
        assert!(index.names("ns", "web").is_empty());
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(ws("ns", "d", "web")));
        assert_eq!(
            index.names("ns", "api"),
            ["b"],
            "the old index serves until done"
        );
        index.apply(&watcher::Event::InitDone);
        assert_eq!(index.names("ns", "web"), ["d"]);
        assert!(index.names("ns", "api").is_empty());
        assert_eq!(index.names("other", "web"), Vec::<String>::new());
    }
}

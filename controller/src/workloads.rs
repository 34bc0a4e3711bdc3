//! Caches of the workloads WorkloadSpreads target: one watch per kind (Deployment,
//! ReplicaSet, StatefulSet, Job; OpenKruise's CloneSet and Advanced StatefulSet once
//! their CRDs are served; the configured custom kinds). Reconciles read the workload
//! and a Deployment's ReplicaSets from them instead of a live GET and list each time,
//! and a change of any watched workload reconciles the WorkloadSpreads targeting it
//! (a CloneSet scaling used to leave percentages stale until something else changed).

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use workloadspread_core::workload::WorkloadKinds;

/// `(group, kind)`; the core group is "".
pub type GroupKind = (String, String);

/// Pending reconcile triggers; a full queue pauses the watches (bounded memory).
const TRIGGER_QUEUE: usize = 1024;
/// Each discovery request is abandoned after this long and retried.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Discovery of a kind that is not served is retried from 2 s, backing off to this.
const MAX_DISCOVERY_BACKOFF: Duration = Duration::from_secs(30);

/// Kinds served by every API server we support.
fn builtin() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<ReplicaSet>(&()),
        ApiResource::erase::<StatefulSet>(&()),
        ApiResource::erase::<Job>(&()),
    ]
}

/// Kinds watched once discovery finds them served.
fn optional(kinds: &WorkloadKinds) -> Vec<GroupKind> {
    let mut out: Vec<GroupKind> = vec![
        ("apps.kruise.io".into(), "CloneSet".into()),
        ("apps.kruise.io".into(), "StatefulSet".into()),
    ];
    for c in &kinds.custom {
        let gk = (c.group.clone(), c.kind.clone());
        if !out.contains(&gk) && !builtin().iter().any(|r| key(r) == gk) {
            out.push(gk);
        }
    }
    out
}

fn key(r: &ApiResource) -> GroupKind {
    (r.group.clone(), r.kind.clone())
}

enum Cache {
    /// Discovery has not answered yet: a reconcile cannot tell "missing" from "unknown".
    Discovering,
    /// The API server does not serve the kind (rediscovered with backoff).
    NotServed,
    Served(ApiResource, Store<DynamicObject>),
}

/// What a cache says about one workload.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    /// The object, with `apiVersion` and `kind` set.
    Found(Value),
    /// Not in the cache, or its kind is not served: the workload does not exist.
    Missing,
    /// The kind is not one we watch: read it from the API server.
    NotWatched,
    /// The kind's cache has not had its first list yet.
    NotSynced,
}

/// The workload caches, shared by the watch tasks and the reconciles.
pub struct Workloads {
    caches: RwLock<HashMap<GroupKind, Cache>>,
}

impl Workloads {
    /// Starts a watch for every workload kind in `namespace` (or all). Each changed
    /// workload is mapped through `spreads` to the WorkloadSpreads targeting it, sent on
    /// the returned stream (for `Controller::reconcile_on`).
    pub fn start(
        client: &Client,
        namespace: Option<&str>,
        kinds: &WorkloadKinds,
        spreads: Store<DynamicObject>,
        resource: ApiResource,
    ) -> (
        Arc<Self>,
        impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static,
    ) {
        let mut caches = HashMap::new();
        for r in builtin() {
            caches.insert(key(&r), Cache::Discovering);
        }
        for gk in optional(kinds) {
            caches.insert(gk, Cache::Discovering);
        }
        let me = Arc::new(Workloads {
            caches: RwLock::new(caches),
        });
        let (tx, rx) = mpsc::channel(TRIGGER_QUEUE);
        let mapper = Arc::new(Mapper { spreads, resource });
        let watch = |gk: GroupKind, known: Option<ApiResource>| WatchTask {
            client: client.clone(),
            namespace: namespace.map(str::to_string),
            gk,
            known,
            workloads: me.clone(),
            mapper: mapper.clone(),
            triggers: tx.clone(),
        };
        for r in builtin() {
            tokio::spawn(watch(key(&r), Some(r)).run());
        }
        for gk in optional(kinds) {
            tokio::spawn(watch(gk, None).run());
        }
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        (me, stream)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<GroupKind, Cache>> {
        self.caches.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, gk: &GroupKind, cache: Cache) {
        self.caches
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(gk.clone(), cache);
    }

    /// The workload `group/kind` `namespace/name` from its cache.
    pub fn get(&self, gk: &GroupKind, namespace: &str, name: &str) -> Lookup {
        match self.read().get(gk) {
            None => Lookup::NotWatched,
            Some(Cache::Discovering) => Lookup::NotSynced,
            Some(Cache::NotServed) => Lookup::Missing,
            Some(Cache::Served(resource, store)) => {
                if !synced(store) {
                    return Lookup::NotSynced;
                }
                let reference = ObjectRef::new_with(name, resource.clone()).within(namespace);
                match store.get(&reference) {
                    Some(o) => Lookup::Found(as_value(&o, resource)),
                    None => Lookup::Missing,
                }
            }
        }
    }

    /// The ReplicaSets of `namespace` that `owner` (a Deployment's uid) controls, for its
    /// pods and version; `None` until their cache has its first list. Only those are
    /// converted: converting every ReplicaSet of a namespace with 1 000 Deployments cost
    /// most of a reconcile's CPU.
    pub fn replica_sets(&self, namespace: &str, owner: &str) -> Option<Vec<Value>> {
        let gk: GroupKind = ("apps".into(), "ReplicaSet".into());
        let caches = self.read();
        let Some(Cache::Served(resource, store)) = caches.get(&gk) else {
            return None;
        };
        if !synced(store) {
            return None;
        }
        Some(
            store
                .state()
                .iter()
                .filter(|rs| rs.namespace().as_deref() == Some(namespace))
                .filter(|rs| {
                    rs.owner_references()
                        .iter()
                        .any(|o| o.controller == Some(true) && o.uid == owner)
                })
                .map(|rs| as_value(rs, resource))
                .collect(),
        )
    }

    /// Whether every built-in kind's cache has its first list (readiness).
    pub fn builtin_synced(&self) -> bool {
        let caches = self.read();
        builtin()
            .iter()
            .all(|r| matches!(caches.get(&key(r)), Some(Cache::Served(_, s)) if synced(s)))
    }
}

/// The kind in the group's preferred version, else in the first version serving it
/// (`ApiGroup::recommended_kind` looks only at the preferred one: OpenKruise's group
/// prefers v1beta1, where WorkloadSpread lives, while CloneSet is only in v1alpha1).
fn served_version(group: &kube::discovery::ApiGroup, kind: &str) -> Option<ApiResource> {
    let preferred = group.preferred_version_or_latest();
    std::iter::once(preferred)
        .chain(group.versions().filter(|v| *v != preferred))
        .find_map(|v| {
            group
                .versioned_resources(v)
                .into_iter()
                .find(|(r, _)| r.kind == kind)
                .map(|(r, _)| r)
        })
}

fn synced(store: &Store<DynamicObject>) -> bool {
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some()
}

fn as_value(object: &DynamicObject, resource: &ApiResource) -> Value {
    let mut v = serde_json::to_value(object).unwrap_or(Value::Null);
    if v.is_object() {
        v["apiVersion"] = resource.api_version.clone().into();
        v["kind"] = resource.kind.clone().into();
    }
    v
}

/// Maps a changed workload to the WorkloadSpreads that target it (or, for a
/// ReplicaSet, its Deployment).
struct Mapper {
    spreads: Store<DynamicObject>,
    resource: ApiResource,
}

impl Mapper {
    fn targets_of(&self, kind: &str, w: &DynamicObject) -> Vec<ObjectRef<DynamicObject>> {
        let ns = w.namespace().unwrap_or_default();
        let mut targets = vec![(kind.to_string(), w.name_any())];
        for o in w
            .owner_references()
            .iter()
            .filter(|o| o.controller == Some(true) && o.kind == "Deployment")
        {
            targets.push(("Deployment".into(), o.name.clone()));
        }
        self.spreads
            .state()
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
            .filter(|s| {
                let t = &s.data["spec"]["targetRef"];
                targets
                    .iter()
                    .any(|(kind, name)| t["kind"] == kind.as_str() && t["name"] == name.as_str())
            })
            .map(|s| ObjectRef::from_obj_with(s.as_ref(), self.resource.clone()))
            .collect()
    }
}

/// One kind: discovered (unless known), then watched into its cache for good.
struct WatchTask {
    client: Client,
    namespace: Option<String>,
    gk: GroupKind,
    known: Option<ApiResource>,
    workloads: Arc<Workloads>,
    mapper: Arc<Mapper>,
    triggers: mpsc::Sender<ObjectRef<DynamicObject>>,
}

impl WatchTask {
    async fn run(self) {
        let resource = match self.known.clone() {
            Some(r) => r,
            None => self.discover().await,
        };
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        self.workloads
            .set(&self.gk, Cache::Served(resource.clone(), store));
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o: &mut DynamicObject| o.managed_fields_mut().clear())
            .reflect(writer)
            .touched_objects();
        futures::pin_mut!(stream);
        let kind = &self.gk.1;
        while let Some(event) = stream.next().await {
            match event {
                Ok(w) => {
                    for r in self.mapper.targets_of(kind, &w) {
                        if self.triggers.send(r).await.is_err() {
                            return; // the controller stopped
                        }
                    }
                }
                Err(e) => tracing::warn!("{kind} watch: {e}"),
            }
        }
    }

    /// Asks the API server for the kind until it is served; reconciles treat it as
    /// missing meanwhile (its CRD not installed), not as unknown.
    async fn discover(&self) -> ApiResource {
        let (group, kind) = &self.gk;
        let mut backoff = Duration::from_secs(2);
        loop {
            let found = tokio::time::timeout(
                DISCOVERY_TIMEOUT,
                kube::discovery::group(&self.client, group),
            )
            .await;
            match found {
                Ok(Ok(g)) => match served_version(&g, kind) {
                    Some(resource) => {
                        tracing::info!(%group, %kind, version = %resource.version, "watching workload kind");
                        return resource;
                    }
                    None => self.not_served(),
                },
                Ok(Err(kube::Error::Discovery(_))) => self.not_served(),
                Ok(Err(e)) => tracing::warn!(%group, %kind, "discovering the workload kind: {e}"),
                Err(_) => {
                    tracing::warn!(%group, %kind, "discovery timed out after {DISCOVERY_TIMEOUT:?}")
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_DISCOVERY_BACKOFF);
        }
    }

    fn not_served(&self) {
        let (group, kind) = &self.gk;
        if !matches!(self.workloads.read().get(&self.gk), Some(Cache::NotServed)) {
            tracing::info!(%group, %kind, "workload kind not served; its WorkloadSpreads see no workload until it is");
        }
        self.workloads.set(&self.gk, Cache::NotServed);
    }
}

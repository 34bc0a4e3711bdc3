//! Host capabilities backed by a cluster: Kubewarden's `kubernetes/*` reads from
//! kube-rs reflectors started at boot (live GET on a cache miss, so a ReplicaSet
//! created a moment ago is still found) and the counter capability through
//! [`Committer`].
//!
//! Memory follows what is spread, not the cluster: WorkloadSpreads (and cluster-scoped
//! kinds) are cached cluster-wide, every other kind — pods, ReplicaSets, Deployments … —
//! only in the namespaces that hold a WorkloadSpread (a watch per such namespace, started
//! when the first WorkloadSpread appears there, stopped a grace period after the last one
//! went). Pods of other namespaces are answered without the policy (`serve::mod`), and a
//! read the caches cannot answer yet is made live.
//!
//! A kind the API server does not serve at start is discovered again in the background
//! (every 2 s, backing off to 30 s). While a kind the policy cannot do without is missing
//! (the WorkloadSpread CRD, any built-in kind) the host is not ready and says why:
//! admitting pods without the WorkloadSpread watch would pass them unspread.

use super::commit::{Answer, Committer, Op};
use super::metrics::{CacheLabels, KindLabels, Metrics};
use crate::capabilities::{denied, AllowList, Capabilities, KubeRead};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{pinned_kind, Scope};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use workloadspread_core::counter::{self, ClaimRequest, ReleaseRequest};
use workloadspread_core::masks::Mask;

/// How long a guest waits for a counter answer before the call fails (below the
/// API server's default 10 s webhook timeout).
const COUNTER_WAIT: Duration = Duration::from_secs(8);
/// How long a live read may take.
const LIVE_READ: Duration = Duration::from_secs(5);
/// First and longest pause between discoveries of kinds the API server does not serve.
const REDISCOVER_FIRST: Duration = Duration::from_secs(2);
const REDISCOVER_MAX: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Discovered {
    resource: ApiResource,
    namespaced: bool,
}

#[derive(Clone)]
struct Reflected {
    resource: ApiResource,
    namespaced: bool,
    cache: Cache,
}

/// Where a kind's objects are cached.
#[derive(Clone)]
enum Cache {
    /// One watch of the whole cluster (WorkloadSpreads, cluster-scoped kinds).
    Cluster(Store<DynamicObject>),
    /// A watch per namespace that holds a WorkloadSpread.
    PerNamespace(Arc<NamespaceStores>),
}

#[derive(Default)]
struct NamespaceStores {
    stores: RwLock<HashMap<String, NamespaceStore>>,
}

/// One namespace's watch of a kind; dropping it stops the watch.
struct NamespaceStore {
    store: Store<DynamicObject>,
    watch: tokio::task::AbortHandle,
    /// Since when the namespace has held no WorkloadSpread.
    unused_since: Option<std::time::Instant>,
}

impl Drop for NamespaceStore {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl NamespaceStores {
    fn store(&self, namespace: &str) -> Option<Store<DynamicObject>> {
        self.stores
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .map(|n| n.store.clone())
    }
}

/// The store that answers reads of `namespace` (`None`: read live).
fn store_for(r: &Reflected, namespace: Option<&str>) -> Option<Store<DynamicObject>> {
    let store = match (&r.cache, namespace) {
        (Cache::Cluster(s), _) => s.clone(),
        (Cache::PerNamespace(m), Some(ns)) => m.store(ns)?,
        (Cache::PerNamespace(_), None) => return None,
    };
    synced(&store).then_some(store)
}

fn synced(store: &Store<DynamicObject>) -> bool {
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

type KindKey = (String, String);

/// Capabilities of `serve`.
pub struct KubeCapabilities {
    client: Client,
    handle: Handle,
    allow: AllowList,
    reflected: RwLock<HashMap<KindKey, Reflected>>,
    /// Allowed kinds the API server did not serve at the last discovery.
    unserved: Mutex<BTreeSet<KindKey>>,
    committer: Option<Arc<Committer>>,
    discovered: Mutex<HashMap<KindKey, Discovered>>,
    metrics: Arc<Metrics>,
}

/// Whether the policy cannot work without `kind`: everything but OpenKruise's workload
/// kinds (CloneSet & co. exist only where OpenKruise is installed).
fn is_required(api_version: &str, kind: &str) -> bool {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    group != "apps.kruise.io" || kind == workloadspread_core::api::KIND
}

impl KubeCapabilities {
    /// Discovers and starts a reflector per allowed (apiVersion, kind); kinds the cluster
    /// does not serve are discovered again in the background (module doc).
    pub async fn start(
        client: Client,
        allow: AllowList,
        committer: Option<Arc<Committer>>,
        metrics: Arc<Metrics>,
        namespace_grace: Duration,
    ) -> anyhow::Result<Arc<Self>> {
        let caps = Arc::new(KubeCapabilities {
            client,
            handle: Handle::current(),
            allow,
            reflected: RwLock::new(HashMap::new()),
            unserved: Mutex::new(BTreeSet::new()),
            committer,
            discovered: Default::default(),
            metrics,
        });
        let wanted = caps.allow.resources.clone().unwrap_or_default();
        for (api_version, kind) in wanted {
            if !caps.reflect(&api_version, &kind).await {
                caps.mark_unserved(api_version, kind, true);
            }
        }
        if !caps.lock_unserved().is_empty() {
            tokio::spawn(rediscover(Arc::downgrade(&caps)));
        }
        tokio::spawn(follow_namespaces(Arc::downgrade(&caps), namespace_grace));
        Ok(caps)
    }

    /// Discovers `kind` and starts its reflector; false when it is not served (yet).
    async fn reflect(&self, api_version: &str, kind: &str) -> bool {
        let gvk = gvk(api_version, kind);
        let (resource, caps) =
            match tokio::time::timeout(LIVE_READ, pinned_kind(&self.client, &gvk)).await {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    let missing = format!("{api_version} {kind} is not served: {e}");
                    match is_required(api_version, kind) {
                        true => {
                            tracing::warn!("{missing}; not ready until it is (install its CRD)")
                        }
                        false => tracing::info!("{missing}; reads of it answer \"not found\""),
                    }
                    return false;
                }
                Err(_) => {
                    tracing::warn!("discovering {api_version} {kind}: no answer in {LIVE_READ:?}");
                    return false;
                }
            };
        let is_workloadspread = api_version == workloadspread_core::api::v1beta1::API_VERSION
            && kind == workloadspread_core::api::KIND;
        let namespaced = caps.scope == Scope::Namespaced;
        let cache = if is_workloadspread || !namespaced {
            let api = Api::all_with(self.client.clone(), &resource);
            let (store, _) = spawn_reflector(api, resource.clone());
            if let (true, Some(c)) = (is_workloadspread, &self.committer) {
                c.use_reflector(store.clone());
            }
            Cache::Cluster(store)
        } else {
            Cache::PerNamespace(Arc::default())
        };
        let reflected = Reflected {
            resource,
            namespaced,
            cache,
        };
        self.write_reflected()
            .insert((api_version.to_string(), kind.to_string()), reflected);
        true
    }

    fn mark_unserved(&self, api_version: String, kind: String, unserved: bool) {
        let labels = KindLabels {
            api_version: api_version.clone(),
            kind: kind.clone(),
        };
        self.metrics
            .kind_not_served
            .get_or_create(&labels)
            .set(i64::from(unserved));
        let mut set = self.lock_unserved();
        match unserved {
            true => set.insert((api_version, kind)),
            false => set.remove(&(api_version, kind)),
        };
    }

    fn lock_unserved(&self) -> std::sync::MutexGuard<'_, BTreeSet<KindKey>> {
        self.unserved.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_reflected(&self) -> std::sync::RwLockReadGuard<'_, HashMap<KindKey, Reflected>> {
        self.reflected.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_reflected(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<KindKey, Reflected>> {
        self.reflected.write().unwrap_or_else(|p| p.into_inner())
    }

    fn reflected(&self, api_version: &str, kind: &str) -> Option<Reflected> {
        self.read_reflected()
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    /// Whether `namespace` holds a WorkloadSpread, by the watch cache; `None` while that
    /// cache has not had its first list.
    pub fn has_workloadspread(&self, namespace: &str) -> Option<bool> {
        use workloadspread_core::api::{v1beta1, KIND};
        let r = self.reflected(v1beta1::API_VERSION, KIND)?;
        let store = store_for(&r, None)?;
        Some(
            store
                .state()
                .iter()
                .any(|o| o.namespace().as_deref() == Some(namespace)),
        )
    }

    /// Why the host cannot decide yet (`None`: ready): a required kind not served, or a
    /// cache without its first list.
    pub fn not_ready_reason(&self) -> Option<String> {
        let missing: Vec<String> = self
            .lock_unserved()
            .iter()
            .filter(|(v, k)| is_required(v, k))
            .map(|(v, k)| format!("{k} ({v})"))
            .collect();
        if !missing.is_empty() {
            return Some(format!(
                "not served by the API server: {} (install the CRD; rediscovered every {}s at most)",
                missing.join(", "),
                REDISCOVER_MAX.as_secs()
            ));
        }
        // Namespace watches are not waited for: their reads are made live meanwhile.
        let syncing: Vec<String> = self
            .read_reflected()
            .iter()
            .filter(|(_, r)| matches!(&r.cache, Cache::Cluster(s) if !synced(s)))
            .map(|((_, k), _)| k.clone())
            .collect();
        (!syncing.is_empty()).then(|| format!("caches are syncing: {}", syncing.join(", ")))
    }

    /// Whether every required kind is served and every reflector has its first list.
    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }

    /// Resolves once [`KubeCapabilities::is_ready`].
    pub async fn wait_until_ready(&self) {
        while !self.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn read(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let read = KubeRead::parse(operation, payload)?;
        let (api_version, kind) = read.resource();
        if !self.allow.permits_resource(api_version, kind) {
            return Err(format!(
                "Policy has not been granted access to Kubernetes resource {api_version} {kind}"
            ));
        }
        let reflected = self.reflected(api_version, kind);
        let mask = read.mask();
        let answer = match (&read, reflected.as_ref()) {
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                Some(r),
            ) => mask.apply(&self.get(r, namespace.as_deref(), name)?),
            (
                KubeRead::List {
                    namespace,
                    label_selector,
                    ..
                },
                Some(r),
            ) => match store_for(r, namespace.as_deref()) {
                Some(store) => list(
                    &store,
                    &r.resource,
                    namespace.as_deref(),
                    label_selector.as_deref(),
                    &mask,
                )?,
                None => masked_list(
                    self.live_list(
                        &Discovered {
                            resource: r.resource.clone(),
                            namespaced: r.namespaced,
                        },
                        namespace.as_deref(),
                        label_selector.as_deref(),
                    )?,
                    &mask,
                ),
            },
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                None,
            ) => match self.discover(api_version, kind)? {
                Some(r) => mask.apply(&self.live_get(&r, namespace.as_deref(), name)?),
                None => return Err(not_found(api_version, kind, namespace.as_deref(), name)),
            },
            (
                KubeRead::List {
                    namespace,
                    label_selector,
                    ..
                },
                None,
            ) => match self.discover(api_version, kind)? {
                Some(r) => masked_list(
                    self.live_list(&r, namespace.as_deref(), label_selector.as_deref())?,
                    &mask,
                ),
                None => {
                    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": []})
                }
            },
        };
        serde_json::to_vec(&answer).map_err(|e| e.to_string())
    }

    fn get(&self, r: &Reflected, namespace: Option<&str>, name: &str) -> Result<Value, String> {
        let mut key = ObjectRef::new_with(name, r.resource.clone());
        if let (true, Some(ns)) = (r.namespaced, namespace) {
            key = key.within(ns);
        }
        if let Some(o) = store_for(r, namespace).and_then(|s| s.get(&key)) {
            return Ok(with_type(&o, &r.resource));
        }
        // The watch may lag behind an object created just now: ask the API server.
        self.live_get(
            &Discovered {
                resource: r.resource.clone(),
                namespaced: r.namespaced,
            },
            namespace,
            name,
        )
    }

    /// The API resource of a kind that is readable but not reflected (custom
    /// workloads), discovered once.
    fn discover(&self, api_version: &str, kind: &str) -> Result<Option<Discovered>, String> {
        let key = (api_version.to_string(), kind.to_string());
        let mut cache = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = cache.get(&key) {
            return Ok(Some(d.clone()));
        }
        let gvk = gvk(api_version, kind);
        let found = self.handle.block_on(tokio::time::timeout(
            LIVE_READ,
            pinned_kind(&self.client, &gvk),
        ));
        match found {
            Ok(Ok((resource, caps))) => {
                let d = Discovered {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                };
                cache.insert(key, d.clone());
                Ok(Some(d))
            }
            Ok(Err(kube::Error::Discovery(_))) => Ok(None),
            Ok(Err(e)) => Err(format!("discovering {api_version} {kind}: {e}")),
            Err(_) => Err(format!("discovering {api_version} {kind}: timed out")),
        }
    }

    /// A list of a kind that is readable but not reflected (custom workloads: few
    /// objects, read when a WorkloadSpread targeting one is validated).
    fn live_list(
        &self,
        r: &Discovered,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Value, String> {
        let api: Api<DynamicObject> = match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.resource),
            _ => Api::all_with(self.client.clone(), &r.resource),
        };
        let params = match selector {
            Some(s) => kube::api::ListParams::default().labels(s),
            None => kube::api::ListParams::default(),
        };
        let (api_version, kind) = (&r.resource.api_version, &r.resource.kind);
        let listed = self
            .handle
            .block_on(tokio::time::timeout(LIVE_READ, api.list(&params)))
            .map_err(|_| format!("listing {api_version} {kind}: timed out after {LIVE_READ:?}"))?
            .map_err(|e| format!("listing {api_version} {kind}: {e}"))?;
        let items: Vec<Value> = listed
            .items
            .iter()
            .map(|o| with_type(o, &r.resource))
            .collect();
        Ok(
            json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items}),
        )
    }

    fn live_get(
        &self,
        r: &Discovered,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, String> {
        let api: Api<DynamicObject> = match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.resource),
            _ => Api::all_with(self.client.clone(), &r.resource),
        };
        let live = self
            .handle
            .block_on(tokio::time::timeout(LIVE_READ, api.get_opt(name)));
        let (api_version, kind) = (&r.resource.api_version, &r.resource.kind);
        match live {
            Ok(Ok(Some(o))) => Ok(with_type(&o, &r.resource)),
            Ok(Ok(None)) => Err(not_found(api_version, kind, namespace, name)),
            Ok(Err(e)) => Err(format!("reading {api_version} {kind} {name}: {e}")),
            Err(_) => Err(format!(
                "reading {api_version} {kind} {name}: timed out after {LIVE_READ:?}"
            )),
        }
    }

    fn counter_call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let Some(committer) = &self.committer else {
            return Err(format!("unknown binding {}", counter::BINDING));
        };
        let op = match operation {
            counter::OP_HELLO => {
                let hello = counter::Hello {
                    protocol: counter::PROTOCOL_VERSION,
                };
                return serde_json::to_vec(&hello).map_err(|e| e.to_string());
            }
            counter::OP_CLAIM => Op::Claim(
                serde_json::from_slice::<ClaimRequest>(payload)
                    .map_err(|e| format!("invalid claim: {e}"))?,
            ),
            counter::OP_RELEASE => Op::Release(
                serde_json::from_slice::<ReleaseRequest>(payload)
                    .map_err(|e| format!("invalid release: {e}"))?,
            ),
            counter::OP_UNCLAIM => Op::Unclaim(
                serde_json::from_slice::<counter::UnclaimRequest>(payload)
                    .map_err(|e| format!("invalid unclaim: {e}"))?,
            ),
            other => return Err(format!("unknown operation workloadspread/counter/{other}")),
        };
        let answer = self
            .handle
            .block_on(tokio::time::timeout(COUNTER_WAIT, committer.submit(op)))
            .map_err(|_| format!("counter did not answer within {COUNTER_WAIT:?}"))??;
        match answer {
            Answer::Claim(c) => serde_json::to_vec(&c),
            Answer::Release(r) => serde_json::to_vec(&r),
        }
        .map_err(|e| e.to_string())
    }
}

impl Capabilities for KubeCapabilities {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        match (binding, namespace) {
            ("kubewarden", "tracing") => {
                tracing::info!(target: "policy", "{}", String::from_utf8_lossy(payload));
                Ok(vec![])
            }
            ("kubewarden", "kubernetes")
                if !self.allow.permits_capability(namespace, operation) =>
            {
                Err(denied(namespace, operation))
            }
            ("kubewarden", "kubernetes") => self.read(operation, payload),
            (counter::BINDING, counter::NAMESPACE) => self.counter_call(operation, payload),
            _ => Err(format!("unknown binding {binding}")),
        }
    }
}

/// Discovers the kinds that were not served, with backoff, until all are (or the
/// capabilities are dropped).
async fn rediscover(caps: Weak<KubeCapabilities>) {
    let mut pause = REDISCOVER_FIRST;
    loop {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(REDISCOVER_MAX);
        let Some(caps) = caps.upgrade() else {
            return;
        };
        let pending: Vec<KindKey> = caps.lock_unserved().iter().cloned().collect();
        if pending.is_empty() {
            return;
        }
        for (api_version, kind) in pending {
            if caps.reflect(&api_version, &kind).await {
                tracing::info!("{api_version} {kind} is served now: watching it");
                caps.mark_unserved(api_version, kind, false);
            }
        }
    }
}

/// How often the namespace watches are matched to the namespaces holding WorkloadSpreads.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Keeps one watch per (namespaced kind, namespace holding a WorkloadSpread); stops a
/// namespace's watches `grace` after its last WorkloadSpread went (a WorkloadSpread
/// deleted and created again keeps them). Ends when the capabilities are dropped.
async fn follow_namespaces(caps: Weak<KubeCapabilities>, grace: Duration) {
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
        use workloadspread_core::api::{v1beta1, KIND};
        let store = store_for(&self.reflected(v1beta1::API_VERSION, KIND)?, None)?;
        Some(store.state().iter().filter_map(|o| o.namespace()).collect())
    }

    fn follow(&self, wanted: &BTreeSet<String>, grace: Duration) {
        let per_namespace: Vec<(ApiResource, Arc<NamespaceStores>)> = self
            .read_reflected()
            .values()
            .filter_map(|r| match &r.cache {
                Cache::PerNamespace(m) => Some((r.resource.clone(), m.clone())),
                Cache::Cluster(_) => None,
            })
            .collect();
        for (resource, stores) in per_namespace {
            let mut stores = stores.stores.write().unwrap_or_else(|p| p.into_inner());
            for ns in wanted {
                let entry = stores.entry(ns.clone()).or_insert_with(|| {
                    let api = Api::namespaced_with(self.client.clone(), ns, &resource);
                    let (store, watch) = spawn_reflector(api, resource.clone());
                    tracing::debug!(kind = %resource.kind, namespace = %ns, "watching");
                    NamespaceStore {
                        store,
                        watch,
                        unused_since: None,
                    }
                });
                entry.unused_since = None;
            }
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

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

fn spawn_reflector(
    api: Api<DynamicObject>,
    resource: ApiResource,
) -> (Store<DynamicObject>, tokio::task::AbortHandle) {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // Nobody reads managedFields; on big clusters they are most of the memory.
        .modify(|o: &mut DynamicObject| o.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    let kind = resource.kind.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!("{kind} watch: {e}");
            }
        }
    });
    (store, task.abort_handle())
}

fn list(
    store: &Store<DynamicObject>,
    resource: &ApiResource,
    namespace: Option<&str>,
    selector: Option<&str>,
    mask: &Mask,
) -> Result<Value, String> {
    let selector = crate::state::parse_selector(selector)?;
    let items: Vec<Value> = store
        .state()
        .iter()
        .filter(|o| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
        .filter(|o| {
            selector.as_ref().is_none_or(|s| {
                let labels = o.labels();
                s.matches(|k| labels.get(k).map(String::as_str))
            })
        })
        .map(|o| masked(o, resource, mask))
        .collect();
    let (api_version, kind) = (&resource.api_version, &resource.kind);
    Ok(
        json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items}),
    )
}

/// `o` with its type, pruned to `mask` without serialising what the mask drops.
fn masked(o: &DynamicObject, resource: &ApiResource, mask: &Mask) -> Value {
    if mask.is_empty() {
        return with_type(o, resource);
    }
    let api_version = Value::String(resource.api_version.clone());
    let kind = Value::String(resource.kind.clone());
    let metadata = serde_json::to_value(&o.metadata).unwrap_or(Value::Null);
    let data = o.data.as_object().into_iter().flatten();
    mask.apply_entries(
        [
            ("apiVersion", &api_version),
            ("kind", &kind),
            ("metadata", &metadata),
        ]
        .into_iter()
        .chain(data.map(|(k, v)| (k.as_str(), v))),
    )
}

/// Every item of a List pruned to `mask`.
fn masked_list(mut list: Value, mask: &Mask) -> Value {
    if let Some(items) = list["items"].as_array_mut() {
        for item in items {
            *item = mask.apply(item);
        }
    }
    list
}

/// Objects from list/watch carry no apiVersion/kind; the policy expects them.
fn with_type(o: &DynamicObject, resource: &ApiResource) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    v["apiVersion"] = resource.api_version.clone().into();
    v["kind"] = resource.kind.clone().into();
    v
}

fn not_found(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let ns = namespace.map(|n| format!("{n}/")).unwrap_or_default();
    format!("{api_version} {kind} {ns}{name} not found")
}

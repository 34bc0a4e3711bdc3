//! Host capabilities backed by a cluster: Kubewarden's `kubernetes/*` reads from
//! kube-rs reflectors started at boot (live GET on a cache miss, so a ReplicaSet
//! created a moment ago is still found) and the counter capability through
//! [`Committer`].
//!
//! Memory follows what is spread, not the cluster: WorkloadSpreads (and cluster-scoped
//! kinds) are cached cluster-wide, every other kind — pods, ReplicaSets, Deployments … —
//! only in the namespaces that hold a WorkloadSpread (a watch per such namespace, started
//! when the first WorkloadSpread appears there, stopped a grace period after the last one
//! went). Pods of other namespaces are answered without the policy (`webhook::admit`), and a
//! read the caches cannot answer yet is made live.
//!
//! A kind the API server does not serve at start is discovered again in the background
//! (every 2 s, backing off to 30 s). While a kind the policy cannot do without is missing
//! (the WorkloadSpread CRD, any built-in kind) the host is not ready and says why:
//! admitting pods without the WorkloadSpread watch would pass them unspread.

use crate::capabilities::{AllowList, Capabilities, HostCallError, KubeRead};
use crate::counter::{Answer, CommitError, Committer, Op};
use crate::metrics::{
    CacheLabels, HostCallErrorLabels, KindLabels, LookupLabels, LookupResult, Metrics,
};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{pinned_kind, Scope};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use namespaces::follow_namespaces;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use workloadspread_core::counter;
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
    /// WorkloadSpreads by target name (`targets`), for lists selected by it.
    targets: Option<Arc<targets::TargetIndex>>,
    /// WorkloadSpreads another manager writes too, left out of reads (`contests`).
    contests: Option<Arc<contests::ContestIndex>>,
}

/// Where a kind's objects are cached.
#[derive(Clone)]
enum Cache {
    /// One watch of the whole cluster (WorkloadSpreads, cluster-scoped kinds).
    Cluster(Store<DynamicObject>),
    /// A watch per namespace that holds a WorkloadSpread.
    PerNamespace(Arc<NamespaceStores>),
    /// No watch: every read is live ([`is_read_live`]).
    Live,
}

/// Whether `kind` is read live instead of watched: pods, when the policy counts through
/// the counter (`counting`: offered, and the settings' mode is not `best-effort`). The
/// policy then reads a pod only for an eviction (`policy::pods::evict`; a create or delete
/// carries its pod, the counter reads what it needs itself), while a watch would have the
/// API server send, and the host decode, every event of every pod of a spread namespace —
/// several per admitted pod (#43). Without the counter the policy lists the namespace's
/// pending pods at each admission: those come from the watch.
fn is_read_live(api_version: &str, kind: &str, counting: bool) -> bool {
    counting && api_version == "v1" && kind == "Pod"
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
        (Cache::PerNamespace(_), None) | (Cache::Live, _) => return None,
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
    /// Whether the policy counts through `committer` ([`is_read_live`]).
    counting: bool,
    discovered: Mutex<HashMap<KindKey, Discovered>>,
    metrics: Arc<Metrics>,
    lookups: lookup::Lookups,
    settings: IndexSettings,
    /// The spreads this host stands back from (`contests`), fed by the WorkloadSpread
    /// watch and by OpenKruise's registration ([`follow_openkruise`]).
    contests: Arc<contests::ContestIndex>,
}

/// How the index keeps its caches.
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexSettings {
    /// How long a namespace's pod cache outlives the namespace's last read.
    pub namespace_grace: Duration,
    /// Fault tests only (`serve --watch-delay-ms MS`): each change the WorkloadSpread
    /// watch delivers reaches this host that late — a slow watch: an edit is stored well
    /// before the host's caches show it (its first list is not delayed).
    pub watch_delay: Duration,
}

/// Whether the policy cannot work without `kind`: everything but OpenKruise's workload
/// kinds (CloneSet & co. exist only where OpenKruise is installed).
fn is_required(api_version: &str, kind: &str) -> bool {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    group != "apps.kruise.io" || kind == workloadspread_core::api::KIND
}

impl KubeCapabilities {
    /// Discovers and starts a reflector per allowed (apiVersion, kind); kinds the cluster
    /// does not serve are discovered again in the background (module doc). `counting`:
    /// the policy's settings count through `committer` (`Settings::counts_with_counter`).
    pub async fn start(
        client: Client,
        allow: AllowList,
        (committer, counting): (Option<Arc<Committer>>, bool),
        metrics: Arc<Metrics>,
        settings: IndexSettings,
    ) -> anyhow::Result<Arc<Self>> {
        let caps = Arc::new(KubeCapabilities {
            client,
            handle: Handle::current(),
            allow,
            reflected: RwLock::new(HashMap::new()),
            unserved: Mutex::new(BTreeSet::new()),
            counting: counting && committer.is_some(),
            committer,
            discovered: Default::default(),
            metrics,
            lookups: Default::default(),
            settings,
            contests: Default::default(),
        });
        tokio::spawn(rivals::follow_openkruise(
            Arc::downgrade(&caps),
            workloadspread_kube::openkruise::registrations(caps.client.clone()),
        ));
        let wanted = caps.allow.resources.clone().unwrap_or_default();
        for (api_version, kind) in wanted {
            if !caps.reflect(&api_version, &kind).await {
                caps.mark_unserved(api_version, kind, true);
            }
        }
        if !caps.lock_unserved().is_empty() {
            tokio::spawn(rediscover(Arc::downgrade(&caps)));
        }
        tokio::spawn(follow_namespaces(
            Arc::downgrade(&caps),
            settings.namespace_grace,
        ));
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
        let targets = is_workloadspread.then(Arc::<targets::TargetIndex>::default);
        let contests = is_workloadspread.then(|| self.contests.clone());
        let cache = if is_workloadspread || !namespaced {
            let api = Api::all_with(self.client.clone(), &resource);
            let followers = Followers {
                targets: targets.clone(),
                contests: contests
                    .clone()
                    .map(|c| (c, self.metrics.contested.clone())),
            };
            let delay = match is_workloadspread {
                true => self.settings.watch_delay,
                false => Duration::ZERO,
            };
            let (store, _) = spawn_reflector(api, resource.clone(), followers, delay);
            if let (true, Some(c)) = (is_workloadspread, &self.committer) {
                c.use_reflector(store.clone());
            }
            Cache::Cluster(store)
        } else if is_read_live(api_version, kind, self.counting) {
            Cache::Live
        } else {
            Cache::PerNamespace(Arc::default())
        };
        let reflected = Reflected {
            resource,
            namespaced,
            cache,
            targets,
            contests,
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

    /// The WorkloadSpread kind's reflection (`None` until discovered).
    fn workloadspreads(&self) -> Option<Reflected> {
        use workloadspread_core::api::{v1beta1, KIND};
        self.reflected(v1beta1::API_VERSION, KIND)
    }

    fn reflected(&self, api_version: &str, kind: &str) -> Option<Reflected> {
        self.read_reflected()
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    /// Whether `namespace` holds a WorkloadSpread, by the watch cache; `None` while that
    /// cache has not had its first list.
    pub fn has_workloadspread(&self, namespace: &str) -> Option<bool> {
        let r = self.workloadspreads()?;
        let store = store_for(&r, None)?;
        Some(
            store
                .find(|o| o.metadata.namespace.as_deref() == Some(namespace))
                .is_some(),
        )
    }

    /// Why the host cannot decide yet (`None`: ready): a required kind not served, or a
    /// cache without its first list.
    pub fn not_ready_reason(&self) -> Option<String> {
        let reason = self.unready();
        self.metrics.ready.set(i64::from(reason.is_none()));
        reason
    }

    fn unready(&self) -> Option<String> {
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
        if let Some(waiting) = self.contests.unknown() {
            return Some(waiting);
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

    fn counter_call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, HostCallError> {
        let Some(committer) = &self.committer else {
            return Err(HostCallError::unknown_binding(counter::BINDING));
        };
        let call = counter::Call::parse(operation, payload)
            .map_err(|e| HostCallError::Invalid(e.to_string()))?;
        let op = match call {
            counter::Call::Hello => {
                let hello = counter::Hello {
                    protocol: counter::PROTOCOL_VERSION,
                };
                return Ok(serde_json::to_vec(&hello)?);
            }
            counter::Call::Claim(c) => Op::Claim(c),
            counter::Call::Release(r) => Op::Release(r),
            counter::Call::Unclaim(u) => Op::Unclaim(u),
        };
        let answer = self
            .handle
            .block_on(tokio::time::timeout(COUNTER_WAIT, committer.submit(op)))
            .unwrap_or(Err(CommitError::NoAnswer(COUNTER_WAIT)))
            .map_err(|e| HostCallError::Counter(Box::new(e)))?;
        Ok(match answer {
            Answer::Claim(c) => serde_json::to_vec(&c),
            Answer::Release(r) => serde_json::to_vec(&r),
        }?)
    }
}

/// Whether reads show the WorkloadSpreads another manager writes too (`contests`): a pod's
/// admission does not see them (their pods pass as the other webhook spreads them), a
/// WorkloadSpread's own validation does (a second spread of the same workload is refused as
/// a conflict, contested or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContestedSpreads {
    Hidden,
    Shown,
}

/// The host's capabilities for the validation of a WorkloadSpread: reads show contested
/// spreads ([`ContestedSpreads::Shown`]).
pub struct ShowingContested(pub Arc<KubeCapabilities>);

impl Capabilities for ShowingContested {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        self.0.call_with(
            ContestedSpreads::Shown,
            binding,
            namespace,
            operation,
            payload,
        )
    }
}

impl Capabilities for KubeCapabilities {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        self.call_with(
            ContestedSpreads::Hidden,
            binding,
            namespace,
            operation,
            payload,
        )
    }
}

impl KubeCapabilities {
    /// [`Capabilities::call`], with contested spreads hidden or shown, counted.
    fn call_with(
        &self,
        contested: ContestedSpreads,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        let answer = self.answer(contested, binding, namespace, operation, payload);
        if let Err(e) = &answer {
            self.metrics
                .host_call_errors
                .get_or_create(&HostCallErrorLabels {
                    kind: e.metric_label(),
                })
                .inc();
        }
        answer
    }

    /// [`Capabilities::call`], uncounted.
    fn answer(
        &self,
        contested: ContestedSpreads,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        match (binding, namespace) {
            ("kubewarden", "tracing") => {
                tracing::info!(target: "policy", "{}", String::from_utf8_lossy(payload));
                Ok(vec![])
            }
            ("kubewarden", "kubernetes")
                if !self.allow.permits_capability(namespace, operation) =>
            {
                Err(HostCallError::capability_denied(namespace, operation))
            }
            ("kubewarden", "kubernetes") => self.read(operation, payload, contested),
            (counter::BINDING, counter::NAMESPACE) => self.counter_call(operation, payload),
            _ => Err(HostCallError::unknown_binding(binding)),
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

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// What follows a watch's events besides its cache (the WorkloadSpread watch's).
#[derive(Default)]
struct Followers {
    targets: Option<Arc<targets::TargetIndex>>,
    /// With the gauge of how many spreads are contested.
    contests: Option<(
        Arc<contests::ContestIndex>,
        prometheus_client::metrics::gauge::Gauge,
    )>,
}

/// A watch of `api` into a cache; `followers` follow its events too.
/// Each change it delivers reaches the cache `delay` late ([`IndexSettings::watch_delay`]).
fn spawn_reflector(
    api: Api<DynamicObject>,
    resource: ApiResource,
    followers: Followers,
    delay: Duration,
) -> (Store<DynamicObject>, tokio::task::AbortHandle) {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // Each change waits `delay` from its own arrival, in order (a serial wait would
        // add up the delays of every change in the cluster).
        .map(move |event| async move {
            let changed = matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))
            );
            if changed && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            event
        })
        .buffered(1024)
        .map(move |event| {
            if let Ok(e) = &event {
                if let Some(t) = &followers.targets {
                    t.apply(e);
                }
                if let Some((c, gauge)) = &followers.contests {
                    gauge.set(i64::try_from(c.apply(e)).unwrap_or(i64::MAX));
                }
            }
            event
        })
        // Nobody else reads managedFields; on big clusters they are most of the memory.
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

mod contests;
mod lookup;
mod namespaces;
mod read;
mod rivals;
mod targets;

//! Host capabilities backed by a cluster: Kubewarden's `kubernetes/*` reads from
//! kube-rs reflectors started at boot (live GET on a cache miss, so a ReplicaSet
//! created a moment ago is still found) and the counter capability through
//! [`Committer`].

use super::commit::{Answer, Committer, Op};
use crate::capabilities::{denied, AllowList, Capabilities, KubeRead};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{pinned_kind, Scope};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use workloadspread_core::counter::{self, ClaimRequest, ReleaseRequest};

/// How long a guest waits for a counter answer before the call fails (below the
/// API server's default 10 s webhook timeout).
const COUNTER_WAIT: Duration = Duration::from_secs(8);
/// How long a live read may take.
const LIVE_READ: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Discovered {
    resource: ApiResource,
    namespaced: bool,
}

struct Reflected {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
}

/// Capabilities of `serve`.
pub struct KubeCapabilities {
    client: Client,
    handle: Handle,
    allow: AllowList,
    reflected: HashMap<(String, String), Reflected>,
    committer: Option<Arc<Committer>>,
    discovered: std::sync::Mutex<HashMap<(String, String), Discovered>>,
}

impl KubeCapabilities {
    /// Discovers and starts a reflector per allowed (apiVersion, kind). Kinds the
    /// cluster does not serve (e.g. CloneSet without OpenKruise) are skipped; reads of
    /// them answer "not found".
    pub async fn start(
        client: Client,
        allow: AllowList,
        committer: Option<Arc<Committer>>,
    ) -> anyhow::Result<Self> {
        let mut reflected = HashMap::new();
        for (api_version, kind) in allow.resources.clone().unwrap_or_default() {
            let gvk = gvk(&api_version, &kind);
            let (resource, caps) = match pinned_kind(&client, &gvk).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::info!("{api_version} {kind} is not served, not reflected: {e}");
                    continue;
                }
            };
            let store = spawn_reflector(client.clone(), resource.clone());
            let namespaced = caps.scope == Scope::Namespaced;
            reflected.insert(
                (api_version, kind),
                Reflected {
                    resource,
                    namespaced,
                    store,
                },
            );
        }
        let ws_key = (
            workloadspread_core::api::v1beta1::API_VERSION.to_string(),
            workloadspread_core::api::KIND.to_string(),
        );
        if let (Some(c), Some(r)) = (&committer, reflected.get(&ws_key)) {
            c.use_reflector(r.store.clone());
        }
        Ok(KubeCapabilities {
            client,
            handle: Handle::current(),
            allow,
            reflected,
            committer,
            discovered: Default::default(),
        })
    }

    /// Resolves once every reflector has listed its resource.
    pub async fn wait_until_ready(&self) {
        for r in self.reflected.values() {
            let _ = r.store.wait_until_ready().await;
        }
    }

    /// Whether every reflector has its initial list.
    pub fn is_ready(&self) -> bool {
        self.reflected.values().all(|r| {
            futures::FutureExt::now_or_never(r.store.wait_until_ready()).is_some_and(|r| r.is_ok())
        })
    }

    fn read(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let read = KubeRead::parse(operation, payload)?;
        let (api_version, kind) = read.resource();
        if !self.allow.permits_resource(api_version, kind) {
            return Err(format!(
                "Policy has not been granted access to Kubernetes resource {api_version} {kind}"
            ));
        }
        let reflected = self
            .reflected
            .get(&(api_version.to_string(), kind.to_string()));
        let answer = match (&read, reflected) {
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                Some(r),
            ) => self.get(r, namespace.as_deref(), name)?,
            (
                KubeRead::List {
                    namespace,
                    label_selector,
                    ..
                },
                Some(r),
            ) => list(r, namespace.as_deref(), label_selector.as_deref())?,
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                None,
            ) => match self.discover(api_version, kind)? {
                Some(r) => self.live_get(&r, namespace.as_deref(), name)?,
                None => return Err(not_found(api_version, kind, namespace.as_deref(), name)),
            },
            (KubeRead::List { .. }, None) => {
                json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": []})
            }
        };
        serde_json::to_vec(&answer).map_err(|e| e.to_string())
    }

    fn get(&self, r: &Reflected, namespace: Option<&str>, name: &str) -> Result<Value, String> {
        let mut key = ObjectRef::new_with(name, r.resource.clone());
        if let (true, Some(ns)) = (r.namespaced, namespace) {
            key = key.within(ns);
        }
        if let Some(o) = r.store.get(&key) {
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

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

fn spawn_reflector(client: Client, resource: ApiResource) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // Nobody reads managedFields; on big clusters they are most of the memory.
        .modify(|o: &mut DynamicObject| o.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    let kind = resource.kind.clone();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!("{kind} watch: {e}");
            }
        }
    });
    store
}

fn list(r: &Reflected, namespace: Option<&str>, selector: Option<&str>) -> Result<Value, String> {
    let selector = crate::state::parse_selector(selector)?;
    let items: Vec<Value> = r
        .store
        .state()
        .iter()
        .filter(|o| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
        .filter(|o| {
            selector.as_ref().is_none_or(|s| {
                let labels = o.labels().clone().into_iter().collect();
                s.matches(&labels)
            })
        })
        .map(|o| with_type(o, &r.resource))
        .collect();
    let (api_version, kind) = (&r.resource.api_version, &r.resource.kind);
    Ok(
        json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items}),
    )
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

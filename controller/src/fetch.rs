//! What a reconcile reads: the WorkloadSpread as decoded, the live check of its
//! creatingPods entries, the workload and its pods from the caches, the nodes, the
//! capacity signals — the inputs of `core`'s reconcile ([`Fetched::input`]).

use crate::calls::bounded;
use crate::contest::stands_back;
use crate::context::{Context, Error};
use crate::converge::Inputs;
use crate::creating::{drop_unseen, Check, Unseen};
use crate::inputs::{node_infos, workload_view};
use crate::workloads::Lookup;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::discovery::pinned_kind;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use workloadspread_core::admission::reserve::stale::Sightings;
use workloadspread_core::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use workloadspread_core::controller::{PlaceholderView, ReconcileInput, ReconcileOutput};
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::Timestamp;

/// How long a reconcile waits for the pod and node caches' first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// Deciding on empty caches would drop every pod from the status: waits (at most
/// [`CACHE_WAIT`]) for the namespace's pod cache and the node cache. The namespace's pod
/// cache starts with its first WorkloadSpread's first reconcile.
pub async fn caches_synced(pods: &Store<Pod>, ctx: &Context) -> Result<(), Error> {
    let synced = async {
        let _ = pods.wait_until_ready().await;
        let _ = ctx.nodes.wait_until_ready().await;
    };
    tokio::time::timeout(CACHE_WAIT, synced)
        .await
        .map_err(|_| Error::CachesNotSynced)
}

/// What a fetch found.
pub enum Fetch {
    /// Nothing to decide now: deleted, contested, without a target, or the pod cache is
    /// behind a live read.
    Stop(Action),
    Go(Box<Fetched>),
}

/// Everything `core` decides from, read once per attempt.
pub struct Fetched {
    pub ws: WorkloadSpread,
    /// The status as stored (before entries confirmed absent were dropped).
    pub written: Option<WorkloadSpreadStatus>,
    /// What the live check of the creatingPods entries found.
    pub unseen: Unseen,
    pub inputs: Inputs,
    nodes: BTreeMap<String, NodeInfo>,
    sightings: Sightings,
    now: Timestamp,
    monotonic: Timestamp,
}

impl Fetched {
    /// The input of `core`'s reconcile.
    pub fn input<'a>(&'a self, ctx: &'a Context) -> ReconcileInput<'a, Arc<Pod>> {
        ReconcileInput {
            ws: &self.ws,
            pods: &self.inputs.view.pods,
            workload_replicas: self.inputs.view.replicas,
            latest_version: &self.inputs.view.latest_version,
            nodes: &self.nodes,
            versioned_kinds: &ctx.versioned,
            now: self.now,
            options: &ctx.options,
            placeholders: PlaceholderView {
                sightings: &self.sightings,
                now: self.monotonic,
            },
            capacity: &self.inputs.capacity,
        }
    }

    /// `output`, looked at again no later than the next creatingPods entry reaches the
    /// early window.
    pub fn recheck(&self, mut output: ReconcileOutput) -> ReconcileOutput {
        if let Some(recheck) = self.unseen.recheck {
            let recheck = Duration::try_from(recheck).unwrap_or_default();
            output.requeue_after = Some(output.requeue_after.map_or(recheck, |r| r.min(recheck)));
        }
        output
    }
}

/// Reads what `core` decides `current` from.
pub async fn fetch(
    current: &DynamicObject,
    pods: &Store<Pod>,
    ctx: &Context,
) -> Result<Fetch, Error> {
    if current.metadata.deletion_timestamp.is_some()
        || stands_back(current, &ctx.standing, &ctx.metrics, &ctx.writer).await
    {
        return Ok(Fetch::Stop(Action::await_change()));
    }
    let mut ws = decode(current)?;
    if ws.spec.target_ref.is_none() {
        return Ok(Fetch::Stop(Action::await_change()));
    }
    let written = ws.status.clone();
    let check = Check {
        client: &ctx.client,
        placeholders: &ctx.placeholders,
        early_drop: ctx.early_drop,
        window: ctx.options.creating_window,
    };
    let unseen = drop_unseen(&mut ws, pods, check).await?;
    if !unseen.behind.is_empty() {
        // Pods the cache has not shown yet carry entries the recount would expire:
        // wait for the cache rather than free slots those pods hold.
        tracing::info!(
            workloadspread = %current.name_any(),
            entries = ?unseen.behind,
            "the pod cache is behind a live read: waiting for it before recounting"
        );
        return Ok(Fetch::Stop(Action::requeue(Duration::from_secs(1))));
    }
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let workload = get_workload(&ws, ctx).await?;
    let is_deployment = ws
        .spec
        .target_ref
        .as_ref()
        .is_some_and(|t| t.kind == "Deployment");
    let owner = workload
        .as_ref()
        .and_then(|w| w["metadata"]["uid"].as_str())
        .filter(|_| is_deployment);
    let replica_sets = match owner {
        Some(uid) => cached(|| ctx.workloads.replica_sets(&ns, uid)).await?,
        None => vec![],
    };
    // The namespace's own cache: no scan of other namespaces' pods, and no copy of any:
    // the workload's (the view) and those in the pending flow (read after the status
    // write) are the cache's `Arc`s. A copy of every pod per reconcile cost 137 ms and
    // hundreds of MB with 1 000 WorkloadSpreads of 10 pods in one namespace; a copy of
    // the workload's pods was 8 % of the controller's CPU during a 3 000-pod burst.
    let cached = pods.state();
    let namespace_pods: Vec<Arc<Pod>> = cached
        .iter()
        .filter(|p| workloadspread_core::controller::pending::in_pending_flow(p))
        .cloned()
        .collect();
    let view = workload_view(
        &ws,
        workload.as_ref(),
        &replica_sets,
        &cached,
        &ctx.kinds,
        &ctx.versioned,
    )?;
    let nodes = node_infos(ctx.nodes.state().iter().map(|n| n.as_ref()));
    let now = (ctx.clock)();
    let sightings = ctx
        .placeholders
        .observe(&ws, workloadspread_kube::clock::monotonic_now());
    let rebalancing =
        workloadspread_core::controller::rebalance::enabled(&ws, ctx.limiter.settings.default);
    let capacity = ctx
        .capacity
        .read(
            &ctx.client,
            &ws,
            &view.pods,
            &ctx.nodes,
            rebalancing,
            &ctx.metrics,
        )
        .await;
    let inputs = Inputs {
        namespace_pods,
        view,
        workload,
        capacity,
    };
    Ok(Fetch::Go(Box::new(Fetched {
        ws,
        written,
        unseen,
        inputs,
        nodes,
        sightings,
        now,
        monotonic: workloadspread_kube::clock::monotonic_now(),
    })))
}

pub(crate) fn decode(object: &DynamicObject) -> Result<WorkloadSpread, Error> {
    workloadspread_kube::resource::decode_workloadspread(object).map_err(|e| Error::Decode {
        what: format!("WorkloadSpread {}", object.name_any()),
        source: e,
    })
}

/// The target from its watch cache; a kind we do not watch is read from the API server.
async fn get_workload(ws: &WorkloadSpread, ctx: &Context) -> Result<Option<Value>, Error> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(None);
    };
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let (group, _) = target
        .api_version
        .split_once('/')
        .unwrap_or(("", &target.api_version));
    let gk = (group.to_string(), target.kind.clone());
    let lookup = cached(|| match ctx.workloads.get(&gk, &ns, &target.name) {
        Lookup::NotSynced => None,
        other => Some(other),
    })
    .await?;
    match lookup {
        Lookup::Found(v) => Ok(Some(v)),
        Lookup::Missing => Ok(None),
        Lookup::NotWatched | Lookup::NotSynced => get_unwatched(ws, ctx).await,
    }
}

/// Polls a cache until it answers (its first list), for at most CACHE_WAIT.
async fn cached<T>(read: impl Fn() -> Option<T>) -> Result<T, Error> {
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    loop {
        if let Some(v) = read() {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::CachesNotSynced);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A live GET, for a target kind that is neither built in, OpenKruise's nor configured.
async fn get_unwatched(ws: &WorkloadSpread, ctx: &Context) -> Result<Option<Value>, Error> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(None);
    };
    let Some(resource) = resource_for(ctx, &target.api_version, &target.kind).await? else {
        return Ok(None);
    };
    let ns = ws.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &resource);
    let Some(object) = bounded(api.get_opt(&target.name)).await?? else {
        return Ok(None);
    };
    let mut v = serde_json::to_value(&object).map_err(|e| Error::Decode {
        what: target.name.clone(),
        source: e,
    })?;
    v["apiVersion"] = resource.api_version.clone().into();
    v["kind"] = resource.kind.clone().into();
    Ok(Some(v))
}

/// The API resource of a kind, discovered once; `None` when the cluster does not serve it.
async fn resource_for(
    ctx: &Context,
    api_version: &str,
    kind: &str,
) -> Result<Option<ApiResource>, Error> {
    let key = (api_version.to_string(), kind.to_string());
    if let Some(r) = ctx
        .resources
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
    {
        return Ok(Some(r.clone()));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    match bounded(pinned_kind(&ctx.client, &gvk)).await? {
        Ok((resource, _)) => {
            ctx.resources
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, resource.clone());
            Ok(Some(resource))
        }
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

//! Pod CREATE, DELETE and `pods/eviction` CREATE.

use crate::host::{Host, HostError};
use crate::lookup::{matching_workloadspread, PodOwner};
use crate::outcome::{Outcome, AUDIT_MODE, AUDIT_SUBSET};
use crate::settings::{Mode, Settings};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use workloadspread_core::admission::reserve::stale::named_by;
use workloadspread_core::admission::reserve::{
    reservation_label_value, RESERVATION_ANNOTATION, RESERVATION_LABEL,
};
use workloadspread_core::admission::{
    self, best_effort, create_path, decide_release, needs_workload_replicas, owned_pending_pods,
    CreatePath, PodKey, Scale, SpreadUse,
};
use workloadspread_core::annotation::MatchedWorkloadSpread;
use workloadspread_core::api::v1beta1::{WorkloadSpread, API_VERSION};
use workloadspread_core::api::{
    KIND, PENDING_LABEL, PENDING_SELECTOR, PENDING_VALUE, POD_DELETION_COST_ANNOTATION,
};
use workloadspread_core::counter::{
    self, ClaimRequest, ClaimResponse, PodRef, ReleaseRequest, ReleaseResponse, WorkloadSpreadKey,
};
use workloadspread_core::inject::inject;
use workloadspread_core::masks::PENDING_POD_FIELDS;
use workloadspread_core::pods::{
    controller_of, controller_uid, is_active, matched, strip_system_metadata,
};
use workloadspread_core::version::pod_version;
use workloadspread_core::workload::{owned_by_target, ObjectRef, OwnerLookupError};
use workloadspread_core::Timestamp;

/// Everything a pod decision needs besides the host.
pub struct Ctx<'a> {
    pub settings: &'a Settings,
    pub host: &'a dyn Host,
    pub now: Timestamp,
    /// Admission request uid: the generated id for unnamed pods (stable across retries).
    pub request_uid: &'a str,
    /// Whether the counter is used ([`use_counter`]), once asked: asked at most once
    /// per evaluation.
    pub counter: std::cell::OnceCell<Result<bool, HostError>>,
}

/// Pod CREATE: drop the metadata only this system may write, then match, choose a
/// subset, inject. A pod that arrived with such metadata is admitted without it.
pub fn create(ctx: &Ctx<'_>, object: &Value, namespace: &str) -> Outcome {
    let mut clean = object.clone();
    if strip_system_metadata(&mut clean).is_empty() {
        return decide_create(ctx, object, namespace);
    }
    match decide_create(ctx, &clean, namespace) {
        Outcome::Accept { audit, .. } => Outcome::Mutate {
            object: clean,
            audit,
        },
        other => other,
    }
}

fn decide_create(ctx: &Ctx<'_>, object: &Value, namespace: &str) -> Outcome {
    let Ok(pod) = Pod::deserialize(object) else {
        return Outcome::accept();
    };
    let Some(controller) = controller_of(&pod).filter(|_| is_active(&pod)) else {
        return Outcome::accept();
    };
    let kinds = ctx.settings.workload_kinds();
    if !kinds.is_owner_kind(&controller) {
        return Outcome::accept();
    }
    let namespace = pod
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(namespace);
    let no_labels = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
    let owner_of = |r: &ObjectRef| controller_ref_of(ctx.host, namespace, r);
    let ws = match matching_workloadspread(
        ctx.host,
        namespace,
        PodOwner {
            controller: &controller,
            labels,
        },
        &kinds,
        ctx.settings.spread_lookup,
        owner_of,
        |target| {
            let target_kind = target.spec.target_ref.as_ref().map_or("", |t| &t.kind);
            spread_fields(ctx, SpreadUse::Create { target_kind })
        },
    ) {
        Ok(Some(ws)) => ws,
        Ok(None) => return Outcome::accept(),
        Err(e) => return Outcome::lookup_failure(ctx.settings, e.context(), &e),
    };
    let ws = &ws;
    let replicas = match workload_replicas(ctx, ws, namespace) {
        Ok(r) => r,
        Err(e) => return Outcome::lookup_failure(ctx.settings, "reading the workload", &e),
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let version = pod_version(
        pod.metadata.labels.as_ref(),
        Some(&controller.kind),
        &ctx.settings.versioned_kinds(),
    );
    let key = PodKey {
        name,
        version: &version,
    };
    let decision = match create_path(ws, name) {
        CreatePath::Stateless(subset) => Ok(Decided {
            subset,
            uid: None,
            mode: None,
            reservation: None,
            deletion_cost: None,
        }),
        CreatePath::Counted => counted_claim(ctx, ws, key, replicas, namespace),
    };
    match decision {
        Ok(d) => {
            let claimed = match (d.mode, &d.subset) {
                (Some(EXACT), Some(subset)) => Some((subset.clone(), d.uid.clone())),
                _ => None,
            };
            let outcome = apply(object, ws, d);
            if let (Outcome::Reject { .. }, Some((subset, uid))) = (&outcome, claimed) {
                unclaim(ctx, ws, key, &subset, uid, replicas);
            }
            outcome
        }
        Err(e) => Outcome::lookup_failure(ctx.settings, "claiming a subset", &e),
    }
}

const EXACT: &str = "exact";
const BEST_EFFORT: &str = "best-effort";

/// The pod is refused after its slot was claimed: give the slot back at once instead of
/// holding it for the controller's creating window. Best effort: a host of protocol < 3
/// answers with an error, and the window still frees it.
fn unclaim(
    ctx: &Ctx<'_>,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    subset: &str,
    uid: Option<String>,
    replicas: i32,
) {
    let request = counter::UnclaimRequest {
        workload_spread: ws_key(ws),
        pod: PodRef {
            name: pod.name.to_string(),
            version: pod.version.to_string(),
        },
        subset: subset.to_string(),
        generated_uid: uid,
        workload_replicas: replicas,
        rules: ctx.settings.rules,
    };
    let _ = ctx.host.counter(counter::OP_UNCLAIM, &json!(request));
}

struct Decided {
    subset: Option<String>,
    uid: Option<String>,
    mode: Option<&'static str>,
    /// The host's placeholder the pod takes (counter protocol 4).
    reservation: Option<String>,
    /// The pod's planned deletion cost, from the host's claim (#28).
    deletion_cost: Option<i64>,
}

fn apply(object: &Value, ws: &WorkloadSpread, d: Decided) -> Outcome {
    let mut audit = Vec::new();
    if let Some(mode) = d.mode {
        audit.push((AUDIT_MODE, mode.to_string()));
    }
    let Some(subset) = d.subset else {
        return Outcome::accept_with(&audit);
    };
    let mut pod = object.clone();
    if let Err(e) = inject(&mut pod, ws, &subset, d.uid.as_deref()) {
        return Outcome::reject(
            format!("WorkloadSpread {}/{}: {e}", ws.namespace(), ws.name()),
            500,
        );
    }
    if let Some(placeholder) = d.reservation {
        // The controller counts the pod in its placeholder's stead (counted once); the
        // label (the same name, `~` dropped) lets whoever finds the placeholder stale list
        // exactly this pod, and must agree with the annotation for either to count.
        if let Some(value) = reservation_label_value(&placeholder) {
            pod["metadata"]["labels"][RESERVATION_LABEL] = Value::String(value.into());
        }
        pod["metadata"]["annotations"][RESERVATION_ANNOTATION] = Value::String(placeholder);
    }
    if let Some(cost) = d.deletion_cost {
        // Its place in the planned scale-in path, decided with the claim: the controller
        // patches the pod only if that place changes (#28).
        pod["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] =
            Value::String(cost.to_string());
    }
    if d.mode == Some(BEST_EFFORT) {
        // Counted by the next admissions until the controller's status counts it.
        pod["metadata"]["labels"][PENDING_LABEL] = Value::String(PENDING_VALUE.into());
    }
    audit.push((AUDIT_SUBSET, format!("{}/{}", ws.name(), subset)));
    if pod == *object {
        return Outcome::accept_with(&audit);
    }
    Outcome::Mutate {
        object: pod,
        audit: crate::outcome::to_map(&audit),
    }
}

/// The controller reference of an owner object (GET through the host).
fn controller_ref_of(
    host: &dyn Host,
    namespace: &str,
    r: &ObjectRef,
) -> Result<Option<ObjectRef>, OwnerLookupError> {
    let obj = host
        .get(&r.api_version, &r.kind, Some(namespace), &r.name)
        .map_err(|e| {
            if e.is_not_found() {
                OwnerLookupError::NotFound(e.to_string())
            } else {
                OwnerLookupError::Other(e.to_string())
            }
        })?;
    let owner = obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == Value::Bool(true))
        .and_then(|o| ObjectRef::deserialize(o).ok());
    Ok(owner)
}

/// The workload's replicas when a subset uses percentages (NotFound counts as 0).
fn workload_replicas(
    ctx: &Ctx<'_>,
    ws: &WorkloadSpread,
    namespace: &str,
) -> Result<i32, HostError> {
    if !needs_workload_replicas(ws) {
        return Ok(0);
    }
    read_replicas(ctx, ws, namespace)
}

/// The workload's replicas, whatever the subsets (NotFound counts as 0).
fn read_replicas(ctx: &Ctx<'_>, ws: &WorkloadSpread, namespace: &str) -> Result<i32, HostError> {
    let Some(target) = ws.spec.target_ref.as_ref() else {
        return Ok(0);
    };
    let workload = match ctx.host.get(
        &target.api_version,
        &target.kind,
        Some(namespace),
        &target.name,
    ) {
        Ok(w) => w,
        Err(e) if e.is_not_found() => return Ok(0),
        Err(e) => return Err(e),
    };
    let kinds = ctx.settings.workload_kinds();
    kinds
        .workload_replicas(target, ws.spec.target_filter.as_ref(), &workload)
        .map_err(|e| HostError {
            what: format!("replicas of {} {}", target.kind, target.name),
            reason: e.to_string(),
        })
}

fn ws_key(ws: &WorkloadSpread) -> WorkloadSpreadKey {
    WorkloadSpreadKey {
        namespace: ws.namespace().to_string(),
        name: ws.name().to_string(),
        uid: ws.metadata.uid.clone(),
    }
}

/// Whether to use the host's counter capability: it must speak the protocol the rules
/// need (a host of protocol 1 would ignore `rules` and apply the reference's).
fn use_counter(ctx: &Ctx<'_>) -> Result<bool, HostError> {
    ctx.counter.get_or_init(|| ask_counter(ctx)).clone()
}

/// The fields of the WorkloadSpread `spread_use` reads (`core::admission::spread_fields`);
/// a counter the settings need but the host does not offer reads it whole, and fails
/// where it is needed.
fn spread_fields(ctx: &Ctx<'_>, spread_use: SpreadUse<'_>) -> &'static [&'static str] {
    admission::spread_fields(spread_use, matches!(use_counter(ctx), Ok(true)))
}

fn ask_counter(ctx: &Ctx<'_>) -> Result<bool, HostError> {
    let needed = counter::protocol_needed(ctx.settings.rules);
    let spoken = || {
        ctx.host
            .counter(counter::OP_HELLO, &json!({}))
            .ok()
            .and_then(|v| serde_json::from_value::<counter::Hello>(v).ok())
            .map(|h| h.protocol)
    };
    match ctx.settings.mode {
        Mode::BestEffort => Ok(false),
        Mode::Auto => Ok(spoken().is_some_and(|p| p >= needed)),
        Mode::Exact => match spoken() {
            Some(p) if p >= needed => Ok(true),
            spoken => Err(HostError {
                what: "the counter capability".into(),
                reason: format!(
                    "mode exact with rules {:?} needs counter protocol {needed}, the host {}: \
                     update the host, or set rules: reference or mode: best-effort",
                    ctx.settings.rules.as_str(),
                    spoken.map_or("does not offer it".into(), |p| format!("speaks {p}"))
                ),
            }),
        },
    }
}

fn counted_claim(
    ctx: &Ctx<'_>,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    replicas: i32,
    ns: &str,
) -> Result<Decided, HostError> {
    if use_counter(ctx)? {
        let request = ClaimRequest {
            workload_spread: ws_key(ws),
            pod: PodRef {
                name: pod.name.to_string(),
                version: pod.version.to_string(),
            },
            candidates: ws.spec.subsets.iter().map(|s| s.name.clone()).collect(),
            workload_replicas: replicas,
            generated_uid: ctx.request_uid.to_string(),
            rules: ctx.settings.rules,
        };
        let answer = ctx.host.counter(counter::OP_CLAIM, &json!(request))?;
        let answer: ClaimResponse = serde_json::from_value(answer).map_err(|e| HostError {
            what: "counter claim".into(),
            reason: format!("invalid answer: {e}"),
        })?;
        return Ok(Decided {
            subset: answer.subset,
            uid: answer.generated_uid,
            mode: Some(EXACT),
            reservation: answer.reservation,
            deletion_cost: answer.deletion_cost,
        });
    }
    best_effort_claim(ctx, ws, pod, replicas, ns)
}

/// Without the counter capability: the controller's last status plus the pods admitted
/// since (those still labelled pending, listed with one fixed selector), then
/// `core::admission::best_effort::decide` on that sum, without writing. The cost follows
/// the pods admitted since the controller's last count, not the workload's size.
/// Concurrent admissions can overshoot a subset (less than with first fit); the
/// controller's rebalancing (opt-in) or deletion costs correct it.
fn best_effort_claim(
    ctx: &Ctx<'_>,
    ws: &WorkloadSpread,
    pod: PodKey<'_>,
    replicas: i32,
    ns: &str,
) -> Result<Decided, HostError> {
    let listed: Vec<Pod> = ctx
        .host
        .list_fields("v1", "Pod", ns, Some(PENDING_SELECTOR), PENDING_POD_FIELDS)?
        .into_iter()
        .filter_map(|p| serde_json::from_value::<Pod>(p).ok())
        .collect();
    // Owner lookups go through the host's caches; a ReplicaSet is read once per call.
    let mut owners: BTreeMap<ObjectRef, Result<Option<ObjectRef>, OwnerLookupError>> =
        BTreeMap::new();
    let pending = owned_pending_pods(
        &listed,
        ws,
        &ctx.settings.workload_kinds(),
        &ctx.settings.versioned_kinds(),
        |r| {
            owners
                .entry(r.clone())
                .or_insert_with(|| controller_ref_of(ctx.host, ns, r))
                .clone()
        },
    );
    // The spread choice aims at the planned spread for the workload's replicas, which
    // integer-only subsets do not read otherwise (their rooms do not depend on it).
    let replicas = match needs_workload_replicas(ws) {
        true => replicas,
        false => read_replicas(ctx, ws, ns)?,
    };
    let scale = Scale::new(replicas, ctx.settings.rules);
    let decision = best_effort::decide(ws, &pending, pod, scale, ctx.now, ctx.request_uid);
    Ok(Decided {
        subset: decision.subset,
        uid: decision.generated_uid,
        mode: Some(BEST_EFFORT),
        reservation: None,
        deletion_cost: None,
    })
}

/// Pod DELETE (the pod is the old object) and eviction (the pod is looked up).
pub fn release(ctx: &Ctx<'_>, pod: &Value) -> Outcome {
    let Ok(pod) = Pod::deserialize(pod) else {
        return Outcome::accept();
    };
    let Some(annotation) = matched(&pod) else {
        return Outcome::accept();
    };
    let Some(controller) = controller_of(&pod).filter(|_| is_active(&pod)) else {
        return Outcome::accept();
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let fields = spread_fields(ctx, SpreadUse::Release);
    let ws: WorkloadSpread = match ctx.host.get_fields(
        API_VERSION,
        KIND,
        Some(&namespace),
        &annotation.name,
        fields,
    ) {
        Ok(v) => match serde_json::from_value(v) {
            Ok(ws) => ws,
            Err(_) => return Outcome::accept(),
        },
        Err(e) if e.is_not_found() => return Outcome::accept(),
        Err(e) => {
            return Outcome::lookup_failure(ctx.settings, "reading the pod's WorkloadSpread", &e)
        }
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if !matches!(create_path(&ws, name), CreatePath::Counted) {
        return Outcome::accept();
    }
    // Only a pod of the spread's workload is counted in its subsets: any other carrying
    // the annotation (set by hand, or a workload's pod adopted elsewhere) never held a
    // slot, and its departure must not look like one freed.
    let kinds = ctx.settings.workload_kinds();
    let owner_of = |r: &ObjectRef| controller_ref_of(ctx.host, &namespace, r);
    match owned_by_target(&ws, &controller, &kinds, owner_of) {
        Ok(true) => {}
        Ok(false) | Err(OwnerLookupError::NotFound(_)) => {
            return Outcome::accept_with(&[(AUDIT_MODE, "not the workload's pod".to_string())])
        }
        Err(OwnerLookupError::Other(e)) => {
            return Outcome::lookup_failure(ctx.settings, "reading the owner of the pod", &e)
        }
    }
    let replicas = match workload_replicas(ctx, &ws, &namespace) {
        Ok(r) => r,
        Err(e) => return Outcome::lookup_failure(ctx.settings, "reading the workload", &e),
    };
    let version = pod_version(
        pod.metadata.labels.as_ref(),
        Some(&controller.kind),
        &ctx.settings.versioned_kinds(),
    );
    match use_counter(ctx) {
        Ok(true) => {
            let reservation = named_by(&pod).map(str::to_string);
            let released = Released {
                name,
                version: &version,
                matched: &annotation,
                replicas,
                reservation,
                controller_uid: controller_uid(&pod).map(str::to_string),
            };
            exact_release(ctx, &ws, released)
        }
        Ok(false) => {
            // Nothing to write without the capability: the controller recounts.
            let would_change = decide_release(
                &ws,
                PodKey {
                    name,
                    version: &version,
                },
                &annotation.subset,
                Scale::new(replicas, ctx.settings.rules),
                ctx.now,
            );
            let note = if would_change.is_some() {
                "best-effort (controller recounts)"
            } else {
                "best-effort"
            };
            Outcome::accept_with(&[(AUDIT_MODE, note.to_string())])
        }
        Err(e) => Outcome::lookup_failure(ctx.settings, "detecting the counter capability", &e),
    }
}

/// A pod being deleted, as its release needs it.
struct Released<'a> {
    name: &'a str,
    version: &'a str,
    matched: &'a MatchedWorkloadSpread,
    replicas: i32,
    /// The placeholder it took (its annotation and label agreeing).
    reservation: Option<String>,
    /// Its controller's uid, which the host compares with the stored pod's.
    controller_uid: Option<String>,
}

fn exact_release(ctx: &Ctx<'_>, ws: &WorkloadSpread, pod: Released<'_>) -> Outcome {
    let request = ReleaseRequest {
        workload_spread: ws_key(ws),
        pod: PodRef {
            name: pod.name.to_string(),
            version: pod.version.to_string(),
        },
        subset: pod.matched.subset.clone(),
        workload_replicas: pod.replicas,
        rules: ctx.settings.rules,
        reservation: pod.reservation,
        generated_uid: pod.matched.uid.clone(),
        controller_uid: pod.controller_uid,
    };
    let answer = ctx
        .host
        .counter(counter::OP_RELEASE, &json!(request))
        .and_then(|v| {
            serde_json::from_value::<ReleaseResponse>(v).map_err(|e| HostError {
                what: "counter release".into(),
                reason: e.to_string(),
            })
        });
    match answer {
        Ok(_) => Outcome::accept_with(&[(AUDIT_MODE, "exact".to_string())]),
        Err(e) => Outcome::lookup_failure(ctx.settings, "releasing the pod's subset slot", &e),
    }
}

/// `pods/eviction` CREATE: the object is an Eviction; look the pod up.
pub fn evict(ctx: &Ctx<'_>, eviction: &Value, namespace: &str, name: &str) -> Outcome {
    let dry_run = eviction["deleteOptions"]["dryRun"]
        .as_array()
        .is_some_and(|d| !d.is_empty());
    if dry_run {
        return Outcome::accept();
    }
    let name = eviction["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    match ctx.host.get("v1", "Pod", Some(namespace), name) {
        Ok(pod) => release(ctx, &pod),
        Err(e) if e.is_not_found() => Outcome::accept(),
        Err(e) => Outcome::lookup_failure(ctx.settings, "reading the pod being evicted", &e),
    }
}

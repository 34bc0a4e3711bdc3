//! The fixtures in `test_data/` evaluated natively against an in-memory cluster, with
//! and without the counter capability.

use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::path::PathBuf;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::api::{PENDING_LABEL, PENDING_VALUE};
use workloadspread_core::counter::{self, ClaimRequest, ReleaseRequest};
use workloadspread_core::workload::parse_group;
use workloadspread_core::Timestamp;
use workloadspread_policy::host::{Host, HostError};
use workloadspread_policy::outcome::{Outcome, AUDIT_LOOKUP_FAILURE, AUDIT_MODE, AUDIT_SUBSET};
use workloadspread_policy::settings::{LookupFailure, Mode, SpreadLookup};
use workloadspread_policy::{evaluate, Settings};

fn test_data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(path)
}

fn now() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

/// An in-memory API: GET/LIST by group (any version), kind, namespace and name, and
/// the counter capability applying core's claim rule to the stored status.
struct FakeCluster {
    objects: RefCell<Vec<Value>>,
    counter: bool,
    /// The counter protocol `v1/hello` answers.
    protocol: u32,
    calls: RefCell<Vec<String>>,
    /// The release requests the guest sent, as the host received them.
    releases: RefCell<Vec<ReleaseRequest>>,
    /// Answer whole objects to masked reads (a host may ignore a mask).
    ignore_masks: bool,
}

impl FakeCluster {
    fn load(counter: bool) -> Self {
        let text = std::fs::read_to_string(test_data("cluster.yaml")).unwrap();
        let objects = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde_json::to_value(serde_yaml::Value::deserialize(d).unwrap()).unwrap())
            .collect();
        FakeCluster {
            objects: RefCell::new(objects),
            counter,
            protocol: counter::PROTOCOL_VERSION,
            calls: RefCell::new(vec![]),
            releases: RefCell::new(vec![]),
            ignore_masks: false,
        }
    }

    fn matches(o: &Value, api_version: &str, kind: &str, ns: Option<&str>) -> bool {
        let group = |v: &str| parse_group(v).unwrap_or_default().to_string();
        group(o["apiVersion"].as_str().unwrap_or_default()) == group(api_version)
            && o["kind"] == kind
            && ns.is_none_or(|n| o["metadata"]["namespace"] == n)
    }

    /// The stored WorkloadSpread (the counter's or the test's read, not the policy's:
    /// not recorded).
    fn workloadspread(&self, ns: &str, name: &str) -> WorkloadSpread {
        let v = self
            .get("apps.kruise.io/v1beta1", "WorkloadSpread", Some(ns), name)
            .unwrap();
        self.calls.borrow_mut().pop();
        serde_json::from_value(v).unwrap()
    }

    fn store(&self, ws: &WorkloadSpread) {
        let mut objects = self.objects.borrow_mut();
        let slot = objects
            .iter_mut()
            .find(|o| o["kind"] == "WorkloadSpread" && o["metadata"]["name"] == ws.name())
            .unwrap();
        slot["status"] = serde_json::to_value(&ws.status).unwrap();
    }
}

use serde::Deserialize;

impl Host for FakeCluster {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, HostError> {
        self.calls.borrow_mut().push(format!("get {kind} {name}"));
        self.objects
            .borrow()
            .iter()
            .find(|o| {
                Self::matches(o, api_version, kind, namespace) && o["metadata"]["name"] == name
            })
            .cloned()
            .ok_or_else(|| HostError {
                what: format!("get {api_version} {kind} {name}"),
                reason: "not found".into(),
            })
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, HostError> {
        self.calls.borrow_mut().push(format!("list {kind}"));
        // Equality selectors (`k=v,…`), which is all the policy sends.
        let selected = |o: &Value| {
            label_selector
                .into_iter()
                .flat_map(|s| s.split(','))
                .all(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    o["metadata"]["labels"][k] == v
                })
        };
        Ok(self
            .objects
            .borrow()
            .iter()
            .filter(|o| Self::matches(o, api_version, kind, Some(namespace)) && selected(o))
            .cloned()
            .collect())
    }

    /// Pruned to `fields`, as policy-server does (unless `ignore_masks`).
    fn get_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        fields: &[&str],
    ) -> Result<Value, HostError> {
        if fields.is_empty() || self.ignore_masks {
            return self.get(api_version, kind, namespace, name);
        }
        self.calls
            .borrow_mut()
            .push(format!("get {kind} {name} {fields:?}"));
        let whole = self.get(api_version, kind, namespace, name);
        self.calls.borrow_mut().pop();
        Ok(workloadspread_core::masks::Mask::new(fields).apply(&whole?))
    }

    /// Pruned to `fields`, as policy-server does.
    fn list_fields(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
        fields: &[&str],
    ) -> Result<Vec<Value>, HostError> {
        let mask = workloadspread_core::masks::Mask::new(fields);
        let items = self.list(api_version, kind, namespace, label_selector)?;
        Ok(items.iter().map(|o| mask.apply(o)).collect())
    }

    fn counter(&self, operation: &str, payload: &Value) -> Result<Value, HostError> {
        self.calls.borrow_mut().push(format!("counter {operation}"));
        if !self.counter {
            return Err(HostError {
                what: operation.into(),
                reason: "unknown binding workloadspread".into(),
            });
        }
        match operation {
            counter::OP_HELLO => Ok(json!({"protocol": self.protocol})),
            counter::OP_CLAIM => {
                let req: ClaimRequest = serde_json::from_value(payload.clone()).unwrap();
                let mut ws =
                    self.workloadspread(&req.workload_spread.namespace, &req.workload_spread.name);
                let (status, answer) = counter::apply_claim(&ws, &req, now(), &Default::default());
                ws.status = Some(status);
                self.store(&ws);
                Ok(json!(answer))
            }
            counter::OP_RELEASE => {
                let req: ReleaseRequest = serde_json::from_value(payload.clone()).unwrap();
                let mut ws =
                    self.workloadspread(&req.workload_spread.namespace, &req.workload_spread.name);
                let (status, answer) = counter::apply_release(&ws, &req, now());
                self.releases.borrow_mut().push(req);
                ws.status = Some(status);
                self.store(&ws);
                Ok(json!(answer))
            }
            counter::OP_UNCLAIM => {
                let req: counter::UnclaimRequest = serde_json::from_value(payload.clone()).unwrap();
                let mut ws =
                    self.workloadspread(&req.workload_spread.namespace, &req.workload_spread.name);
                let (status, answer) = counter::apply_unclaim(&ws, &req);
                ws.status = Some(status);
                self.store(&ws);
                Ok(json!(answer))
            }
            other => Err(HostError {
                what: other.into(),
                reason: "unknown operation".into(),
            }),
        }
    }
}

fn request(file: &str) -> KubernetesAdmissionRequest {
    let text = std::fs::read_to_string(test_data(&format!("requests/{file}"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn run(file: &str, settings: &Settings, cluster: &FakeCluster) -> Outcome {
    evaluate(settings, &request(file), cluster, now())
}

fn zone_b_status(cluster: &FakeCluster) -> Value {
    serde_json::to_value(
        &cluster
            .workloadspread("demo", "web-spread")
            .status
            .unwrap()
            .versioned_subset_statuses["7d4b9c"][1],
    )
    .unwrap()
}

fn mutated(outcome: Outcome) -> (Value, std::collections::BTreeMap<String, String>) {
    match outcome {
        Outcome::Mutate { object, audit } => (object, audit),
        other => panic!("expected a mutation, got {other:?}"),
    }
}

#[test]
fn create_exact_claims_through_the_counter() {
    let cluster = FakeCluster::load(true);
    let (pod, audit) = mutated(run("pod-create.json", &Settings::default(), &cluster));
    // zone-a is full (2/2), zone-b has 5 slots (50% of 10).
    assert_eq!(audit[AUDIT_SUBSET], "web-spread/zone-b");
    assert_eq!(audit[AUDIT_MODE], "exact");
    assert_eq!(
        pod["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        r#"{"name":"web-spread","subset":"zone-b"}"#
    );
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(terms[0]["matchExpressions"][0]["values"], json!(["zone-b"]));
    let b = zone_b_status(&cluster);
    assert_eq!(b["missingReplicas"], 4);
    assert!(b["creatingPods"]["web-7d4b9c-new01"].is_string());
}

#[test]
fn create_best_effort_recounts_pods() {
    let cluster = FakeCluster::load(false);
    let (pod, audit) = mutated(run("pod-create.json", &Settings::default(), &cluster));
    assert_eq!(audit[AUDIT_MODE], "best-effort");
    assert_eq!(
        pod["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        r#"{"name":"web-spread","subset":"zone-b"}"#
    );
    assert_eq!(
        zone_b_status(&cluster)["missingReplicas"],
        5,
        "best effort writes nothing"
    );
    let exact = Settings {
        mode: Mode::Exact,
        ..Settings::default()
    };
    match run("pod-create.json", &exact, &cluster) {
        Outcome::Reject { message, code } => {
            assert_eq!(code, 500);
            assert!(
                message.contains("claiming a subset") && message.contains("does not offer it"),
                "{message}"
            );
        }
        other => panic!("exact mode without the capability must fail: {other:?}"),
    }
}

/// Issue #21 (2): best-effort starts from the controller's status and adds the pods
/// still labelled pending; the pod it places is labelled pending itself.
#[test]
fn best_effort_adds_pending_pods_to_the_status() {
    let cluster = FakeCluster::load(false);
    // The controller has counted one of the two zone-a pods so far.
    let mut ws = cluster.workloadspread("demo", "web-spread");
    for statuses in ws.status.as_mut().into_iter().flat_map(|s| {
        std::iter::once(&mut s.subset_statuses).chain(s.versioned_subset_statuses.values_mut())
    }) {
        statuses[0].replicas = 1;
        statuses[0].missing_replicas = 1;
    }
    cluster.store(&ws);
    let subset_of_next = || {
        let (pod, audit) = mutated(run("pod-create.json", &Settings::default(), &cluster));
        assert_eq!(pod["metadata"]["labels"][PENDING_LABEL], PENDING_VALUE);
        audit[AUDIT_SUBSET].clone()
    };
    assert_eq!(subset_of_next(), "web-spread/zone-a");
    {
        let mut objects = cluster.objects.borrow_mut();
        let uncounted = objects
            .iter_mut()
            .find(|o| o["metadata"]["name"] == "web-7d4b9c-aaaa2")
            .unwrap();
        uncounted["metadata"]["labels"][PENDING_LABEL] = json!(PENDING_VALUE);
    }
    assert_eq!(subset_of_next(), "web-spread/zone-b");
    // A pending pod the status already tracks as creating is not added again: zone-a
    // (max 2) holds 0 replicas + that one, so one slot is left.
    let mut ws = cluster.workloadspread("demo", "web-spread");
    let a = ws
        .status
        .as_mut()
        .and_then(|s| s.versioned_subset_statuses.get_mut("7d4b9c"))
        .map(|v| &mut v[0])
        .unwrap();
    a.replicas = 0;
    a.missing_replicas = 1;
    a.creating_pods.insert(
        "web-7d4b9c-aaaa2".into(),
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
    );
    cluster.store(&ws);
    assert_eq!(subset_of_next(), "web-spread/zone-a");
}

#[test]
fn unnamed_pod_uses_the_request_uid() {
    let cluster = FakeCluster::load(true);
    let (pod, _) = mutated(run(
        "pod-create-generate-name.json",
        &Settings::default(),
        &cluster,
    ));
    let uid = "11111111-0000-0000-0000-000000000002";
    assert_eq!(
        pod["metadata"]["annotations"]["apps.kruise.io/matched-workloadspread"],
        format!(r#"{{"name":"web-spread","subset":"zone-b","uid":"{uid}"}}"#)
    );
    assert!(zone_b_status(&cluster)["creatingPods"][uid].is_string());
}

#[test]
fn dry_run_and_unmatched_pods_are_accepted_unchanged() {
    let cluster = FakeCluster::load(true);
    assert_eq!(
        run("pod-create-dry-run.json", &Settings::default(), &cluster),
        Outcome::accept()
    );
    assert_eq!(
        run("pod-create-no-owner.json", &Settings::default(), &cluster),
        Outcome::accept()
    );
    assert!(
        cluster.calls.borrow().is_empty(),
        "no host calls: {:?}",
        cluster.calls.borrow()
    );
    assert_eq!(zone_b_status(&cluster)["missingReplicas"], 5);
}

#[test]
fn missing_owner_follows_on_lookup_failure() {
    let cluster = FakeCluster::load(true);
    match run(
        "pod-create-owner-missing.json",
        &Settings::default(),
        &cluster,
    ) {
        Outcome::Reject { message, .. } => assert!(
            message.contains("missing-rs") && message.contains("not found"),
            "{message}"
        ),
        other => panic!("expected rejection, got {other:?}"),
    }
    let lenient = Settings {
        on_lookup_failure: LookupFailure::AdmitUnmodified,
        ..Settings::default()
    };
    match run("pod-create-owner-missing.json", &lenient, &cluster) {
        Outcome::Accept { audit, warnings } => {
            assert!(audit[AUDIT_LOOKUP_FAILURE].contains("missing-rs"));
            assert_eq!(warnings.len(), 1);
        }
        other => panic!("expected admission, got {other:?}"),
    }
}

/// A DELETE or eviction records the pod's deletion as an intent: no slot is freed until
/// the pod's departure is a fact (docs/semantics.md A11), so `missingReplicas` stays.
#[test]
fn delete_and_eviction_record_the_deletion_as_an_intent() {
    for file in ["pod-delete.json", "pod-eviction.json"] {
        let cluster = FakeCluster::load(true);
        let before = cluster
            .workloadspread("demo", "web-spread")
            .status
            .unwrap()
            .versioned_subset_statuses["7d4b9c"][0]
            .missing_replicas;
        assert_eq!(
            run(file, &Settings::default(), &cluster),
            Outcome::accept_with(&[(AUDIT_MODE, "exact".into())]),
            "{file}"
        );
        let a = &cluster
            .workloadspread("demo", "web-spread")
            .status
            .unwrap()
            .versioned_subset_statuses["7d4b9c"][0];
        assert_eq!(a.missing_replicas, before, "{file}");
        assert!(a.deleting_pods.contains_key("web-7d4b9c-aaaa1"), "{file}");
        let best_effort = FakeCluster::load(false);
        match run(file, &Settings::default(), &best_effort) {
            Outcome::Accept { audit, .. } => assert!(audit[AUDIT_MODE].starts_with("best-effort")),
            other => panic!("{file}: {other:?}"),
        }
    }
}

/// Issue #43: with the counter, a pod's create, delete and eviction read its
/// WorkloadSpread without the status (the counter reads the stored one itself; the
/// status is most of a busy spread's bytes), and decide as with the whole object; without
/// the counter they read it whole.
#[test]
fn with_the_counter_the_spread_is_read_without_its_status() {
    let spec_only = format!(
        "get WorkloadSpread web-spread {:?}",
        workloadspread_core::masks::WORKLOADSPREAD_SPEC_FIELDS
    );
    for file in ["pod-create.json", "pod-delete.json", "pod-eviction.json"] {
        for counter in [true, false] {
            let cluster = FakeCluster::load(counter);
            let outcome = run(file, &Settings::default(), &cluster);
            let calls = cluster.calls.borrow().clone();
            let reads: Vec<&String> = calls
                .iter()
                .filter(|c| c.starts_with("get WorkloadSpread"))
                .collect();
            let want = match counter {
                true => &spec_only,
                false => "get WorkloadSpread web-spread",
            };
            assert!(
                !reads.is_empty() && reads.iter().all(|c| *c == want),
                "{file}, counter {counter}: {calls:?}"
            );
            let mut whole = FakeCluster::load(counter);
            whole.ignore_masks = true;
            assert_eq!(
                run(file, &Settings::default(), &whole),
                outcome,
                "{file}, counter {counter}: the whole spread decides otherwise"
            );
            assert_eq!(
                whole.workloadspread("demo", "web-spread").status,
                cluster.workloadspread("demo", "web-spread").status,
                "{file}, counter {counter}"
            );
        }
    }
}

/// The release names the owner the guest checked, which the host compares with the
/// stored pod's (protocol review F1: the review's `oldObject` is the caller's word).
#[test]
fn a_release_names_the_controller_the_guest_checked() {
    let cluster = FakeCluster::load(true);
    let outcome = run("pod-delete.json", &Settings::default(), &cluster);
    assert!(matches!(outcome, Outcome::Accept { .. }), "{outcome:?}");
    let sent = cluster.releases.borrow();
    let owners: Vec<Option<&str>> = sent.iter().map(|r| r.controller_uid.as_deref()).collect();
    assert_eq!(owners, [Some("rs-uid")]);
}

/// A pod of another workload carrying the matched annotation (set by hand, or copied)
/// never held a slot: its deletion records nothing.
#[test]
fn the_deletion_of_another_workloads_pod_records_nothing() {
    let cluster = FakeCluster::load(true);
    let mut review = request("pod-delete.json");
    review.old_object["metadata"]["ownerReferences"][0]["name"] = json!("other-7d4b9c");
    let outcome = evaluate(&Settings::default(), &review, &cluster, now());
    match &outcome {
        Outcome::Accept { audit, .. } => {
            assert_eq!(audit[AUDIT_MODE], "not the workload's pod", "{outcome:?}")
        }
        other => panic!("{other:?}"),
    }
    let a = &cluster
        .workloadspread("demo", "web-spread")
        .status
        .unwrap()
        .versioned_subset_statuses["7d4b9c"][0];
    assert!(a.deleting_pods.is_empty(), "{a:?}");
}

/// The same answers whichever way WorkloadSpreads are looked up (a host without field
/// selectors answers the target-name lookup with the whole list; the target workload is
/// read by a GET).
#[test]
fn workloadspread_validation() {
    for lookup in [SpreadLookup::List, SpreadLookup::TargetName] {
        validation_with(Settings {
            spread_lookup: lookup,
            ..Settings::default()
        });
    }
}

fn validation_with(base: Settings) {
    let cluster = FakeCluster::load(true);
    let converting = Settings {
        conversion_webhook: true,
        ..base.clone()
    };
    assert_eq!(
        run("workloadspread-create-valid.json", &converting, &cluster),
        Outcome::accept()
    );
    assert_eq!(
        run("workloadspread-create-valid-v1beta1.json", &base, &cluster),
        Outcome::accept()
    );
    // Issue #17 (11): without a conversion webhook the API server would prune the v1alpha1
    // node selector terms: refused, saying what to do.
    match run("workloadspread-create-valid.json", &base, &cluster) {
        Outcome::Reject { message, code } => {
            assert_eq!(code, 400);
            assert!(
                message.contains("requiredNodeSelectorTerm")
                    && message.contains("write it as apps.kruise.io/v1beta1")
                    && message.contains("subsets a"),
                "{message}"
            );
        }
        other => {
            panic!("a v1alpha1 object with terms and no conversion must be refused: {other:?}")
        }
    }
    match run("workloadspread-create-invalid.json", &base, &cluster) {
        Outcome::Reject { message, code } => {
            assert_eq!(code, 400);
            for want in [
                "spec.subsets[1].name: Invalid value: \"a\": duplicated subset name a",
                "spec.subsets[1].maxReplicas: Invalid value: \"70%\": the sum of all subset's maxReplicas exceeds 100% is no permitted",
                "spec.scheduleStrategy.type: Invalid value: \"Sometimes\": ScheduleStrategy's type is not valid",
                "ws.spec.targetRef is in conflict with other WorkloadSpread web-spread",
            ] {
                assert!(message.contains(want), "missing {want:?} in {message}");
            }
        }
        other => panic!("expected rejection, got {other:?}"),
    }
}

/// `kubectl apply --dry-run=server` of an invalid WorkloadSpread shows the errors (a dry
/// run skips only the pod paths, which would claim or release a slot).
#[test]
fn a_dry_run_workloadspread_is_validated() {
    let cluster = FakeCluster::load(true);
    let mut req = request("workloadspread-create-invalid.json");
    req.dry_run = true;
    match evaluate(&Settings::default(), &req, &cluster, now()) {
        Outcome::Reject { message, code } => {
            assert_eq!(code, 400);
            assert!(message.contains("duplicated subset name a"), "{message}");
        }
        other => panic!("a dry run of an invalid WorkloadSpread must be refused: {other:?}"),
    }
}

/// A host of counter protocol 1 ignores `rules`: under the planned rules `auto` decides
/// best-effort instead and `exact` refuses with what to do; under the reference's rules
/// the old host is used.
#[test]
fn a_protocol_1_host_is_not_used_for_planned_rules() {
    let mut cluster = FakeCluster::load(true);
    cluster.protocol = 1;
    let (_, audit) = mutated(run("pod-create.json", &Settings::default(), &cluster));
    assert_eq!(audit[AUDIT_MODE], "best-effort");
    let exact = Settings {
        mode: Mode::Exact,
        ..Settings::default()
    };
    match run("pod-create.json", &exact, &cluster) {
        Outcome::Reject { message, .. } => assert!(
            message.contains("needs counter protocol 2, the host speaks 1")
                && message.contains("rules: reference"),
            "{message}"
        ),
        other => panic!("exact mode on a protocol-1 host must refuse: {other:?}"),
    }
    let reference = Settings {
        rules: workloadspread_core::rules::Rules::Reference,
        ..Settings::default()
    };
    let (_, audit) = mutated(run("pod-create.json", &reference, &cluster));
    assert_eq!(audit[AUDIT_MODE], "exact");
}

/// Issue #17 (3): the guest claims zone-b, then cannot inject its patch (a directive the
/// strategic merge patch refuses) and refuses the pod; it gives the slot back at once
/// (`v1/unclaim`) instead of leaving it held for the controller's 30 s window.
#[test]
fn a_pod_refused_after_its_claim_gives_the_slot_back() {
    let cluster = FakeCluster::load(true);
    {
        let mut objects = cluster.objects.borrow_mut();
        let ws = objects
            .iter_mut()
            .find(|o| o["kind"] == "WorkloadSpread")
            .unwrap();
        ws["spec"]["subsets"][1]["patch"] =
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}});
    }
    let before = zone_b_status(&cluster);
    match run("pod-create.json", &Settings::default(), &cluster) {
        Outcome::Reject { code, .. } => assert_eq!(code, 500),
        other => panic!("an injection failure must refuse the pod: {other:?}"),
    }
    let calls = cluster.calls.borrow().clone();
    assert!(
        calls.iter().any(|c| c == "counter v1/claim")
            && calls.iter().any(|c| c == "counter v1/unclaim"),
        "{calls:?}"
    );
    assert_eq!(zone_b_status(&cluster), before, "the slot is free again");
}

/// Issue #30 (7), #26 (7): a pod arriving with the metadata only this system writes —
/// a reservation naming someone's placeholder, the pending label — is admitted without
/// it, placed or not (the controller would count it in that placeholder's slot; admissions
/// would count it as placed).
#[test]
fn incoming_reservation_and_pending_label_are_stripped() {
    let forged = |file: &str| {
        let mut req = request(file);
        let meta = &mut req.object["metadata"];
        meta["annotations"]["workloadspread.io/reservation"] = json!("~host-a.3");
        meta["annotations"]["workloadspread.io/counted"] = json!("uid/99");
        meta["labels"][PENDING_LABEL] = json!(PENDING_VALUE);
        meta["labels"]["workloadspread.io/reservation"] = json!("host-a.3");
        req
    };
    for (file, counter, placed) in [
        ("pod-create.json", true, true),
        ("pod-create.json", false, true),
        ("pod-create-no-owner.json", true, false),
    ] {
        let cluster = FakeCluster::load(counter);
        let outcome = evaluate(&Settings::default(), &forged(file), &cluster, now());
        let (pod, audit) = mutated(outcome);
        let who = format!("{file} (counter {counter})");
        for (field, key) in [
            ("annotations", "workloadspread.io/reservation"),
            ("annotations", "workloadspread.io/counted"),
            ("labels", "workloadspread.io/reservation"),
        ] {
            assert!(
                pod["metadata"][field].get(key).is_none(),
                "{who}: {field} {key} kept: {}",
                pod["metadata"]
            );
        }
        let label = pod["metadata"]["labels"].get(PENDING_LABEL);
        // Best effort labels the pod it places itself; nothing else keeps the label.
        let want_label = placed && !counter;
        assert_eq!(label.is_some(), want_label, "{who}: {}", pod["metadata"]);
        assert_eq!(audit.contains_key(AUDIT_SUBSET), placed, "{who}: {audit:?}");
    }
}

/// Issue #30 (7): best effort counts a pending-labelled pod only when the workload owns
/// it: pods labelled by hand (no owner, another workload's ReplicaSet, an owner that is
/// gone) cannot make a subset look full.
#[test]
fn pending_pods_of_other_owners_are_not_counted() {
    let cluster = FakeCluster::load(false);
    let mut ws = cluster.workloadspread("demo", "web-spread");
    for statuses in ws.status.as_mut().into_iter().flat_map(|s| {
        std::iter::once(&mut s.subset_statuses).chain(s.versioned_subset_statuses.values_mut())
    }) {
        statuses[0].replicas = 1;
        statuses[0].missing_replicas = 1;
    }
    cluster.store(&ws);
    let pending_pod = |name: &str, owner: Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "demo",
                "labels": {"app": "web", "pod-template-hash": "7d4b9c", PENDING_LABEL: PENDING_VALUE},
                "annotations": {"apps.kruise.io/matched-workloadspread":
                    r#"{"name":"web-spread","subset":"zone-a"}"#},
                "ownerReferences": owner,
            },
            "status": {"phase": "Running"},
        })
    };
    let rs = |name: &str| {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": "x",
                "controller": true}])
    };
    {
        let mut objects = cluster.objects.borrow_mut();
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "other-5f5f", "namespace": "demo",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "name": "other", "uid": "o", "controller": true}]},
        }));
        objects.push(pending_pod("forged-unowned", json!([])));
        objects.push(pending_pod("forged-other", rs("other-5f5f")));
        objects.push(pending_pod("forged-gone", rs("web-gone")));
    }
    let next = || {
        let (_, audit) = mutated(run("pod-create.json", &Settings::default(), &cluster));
        audit[AUDIT_SUBSET].clone()
    };
    assert_eq!(next(), "web-spread/zone-a", "zone-a has one free slot");
    // The workload's own pending pod does count: zone-a is then full.
    cluster
        .objects
        .borrow_mut()
        .push(pending_pod("web-7d4b9c-own01", rs("web-7d4b9c")));
    assert_eq!(next(), "web-spread/zone-b");
}

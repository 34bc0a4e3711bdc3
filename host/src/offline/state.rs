//! Cluster state from files: an in-memory API that answers the policy's reads and
//! keeps WorkloadSpread counters (the counter capability) for offline `run`.

use crate::capabilities::{parse_selector, AllowList, Capabilities, HostCallError, KubeRead};
use anyhow::Context as _;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;
use workloadspread_core::api::v1beta1::{WorkloadSpread, WorkloadSpreadStatus};
use workloadspread_core::counter;
use workloadspread_core::fields::FieldSelector;
use workloadspread_core::workload::{parse_group, TARGET_NAME_FIELD};
use workloadspread_core::Timestamp;

/// Objects loaded from YAML/JSON files (multi-document, `kind: List` and
/// `kubectl get -o yaml` dumps accepted).
pub struct ClusterState {
    objects: Mutex<Vec<Value>>,
    /// Positions in `objects` by kind and namespace (objects are only ever changed in
    /// place): a read looks at its kind's objects only, as an API server's would, so a
    /// state of 10 000 pods does not make every GET of a ReplicaSet scan them all.
    index: Index,
    allow: AllowList,
    counter: bool,
    now: Timestamp,
    /// Answer reads with whole objects whatever `field_masks` asks (as a Kubewarden host
    /// older than SDK 0.17's masks does).
    ignore_field_masks: bool,
    /// Positions of the objects the counter wrote (see [`ClusterState::undo_writes`]).
    written: Mutex<std::collections::BTreeSet<usize>>,
}

impl ClusterState {
    pub fn new(objects: Vec<Value>, allow: AllowList, counter: bool, now: Timestamp) -> Self {
        ClusterState {
            index: Index::build(&objects),
            objects: Mutex::new(objects),
            allow,
            counter,
            now,
            ignore_field_masks: false,
            written: Mutex::default(),
        }
    }

    /// Puts back every object the counter wrote as it is in `original` (the objects this
    /// state was built from): the next evaluation sees the same state, without the cost
    /// of a new one (the benchmark's repeated claims).
    pub fn undo_writes(&self, original: &[Value]) {
        let written = std::mem::take(&mut *self.written.lock().unwrap_or_else(|p| p.into_inner()));
        let mut objects = self.lock();
        for i in written {
            if let (Some(slot), Some(o)) = (objects.get_mut(i), original.get(i)) {
                slot.clone_from(o);
            }
        }
    }

    /// Reads ignore `field_masks` (a host that predates them): for comparisons.
    pub fn ignoring_field_masks(mut self, ignore: bool) -> Self {
        self.ignore_field_masks = ignore;
        self
    }

    /// Every object in a YAML/JSON file, or in the `.yaml`/`.yml`/`.json` files of a
    /// directory (by name); lists flattened as `workloadspread_core::manifests` does.
    /// WorkloadSpreads are kept as the API server stores them, in v1beta1: a v1alpha1
    /// manifest is converted as the CRD's conversion webhook converts it, so its node
    /// selector terms are served under their v1beta1 names.
    pub fn load_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
        let mut objects = vec![];
        for (file, parsed) in workloadspread_kube::manifests::read(path)? {
            for o in parsed {
                objects.push(stored(o).with_context(|| format!("in {}", file.display()))?);
            }
        }
        Ok(objects)
    }

    /// The WorkloadSpreads as they are now (for `--output-state`).
    pub fn workloadspreads(&self) -> Vec<Value> {
        self.lock()
            .iter()
            .filter(|o| o["kind"] == "WorkloadSpread")
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, HostCallError> {
        let read = KubeRead::parse(operation, payload)?;
        let (api_version, kind) = read.resource();
        if !self.allow.permits_resource(api_version, kind) {
            return Err(HostCallError::resource_denied(api_version, kind));
        }
        let objects = self.lock();
        let mask = if self.ignore_field_masks {
            workloadspread_core::masks::Mask::default()
        } else {
            read.mask()
        };
        let answer = match &read {
            KubeRead::Get {
                api_version,
                kind,
                namespace,
                name,
                ..
            } => self
                .index
                .named(api_version, kind, namespace.as_deref(), name)
                .map(|i| mask.apply(&objects[i]))
                .ok_or_else(|| {
                    HostCallError::not_found(api_version, kind, namespace.as_deref(), name)
                })?,
            KubeRead::List {
                api_version,
                kind,
                namespace,
                label_selector,
                field_selector,
                ..
            } => {
                let selector = parse_selector(label_selector.as_deref())?;
                let fields = FieldSelector::parse(field_selector.as_deref())
                    .map_err(HostCallError::Invalid)?;
                // Written straight from the stored objects: nothing pruned is copied.
                let items: Vec<_> = self
                    .index
                    .selectable(api_version, kind, namespace.as_deref(), &fields)
                    .map(|i| &objects[i])
                    .filter(|o| selector.as_ref().is_none_or(|s| s.matches_value(o)))
                    .filter(|o| fields.matches_object(o))
                    .map(|o| mask.masked(o))
                    .collect();
                let list = json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}});
                return Ok(serde_json::to_vec(&ListAnswer { list, items })?);
            }
        };
        Ok(serde_json::to_vec(&answer)?)
    }

    fn counter_call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, HostCallError> {
        let call = counter::Call::parse(operation, payload)
            .map_err(|e| HostCallError::Invalid(e.to_string()))?;
        let answer = match call {
            counter::Call::Hello => json!(counter::Hello {
                protocol: counter::PROTOCOL_VERSION
            }),
            counter::Call::Claim(req) => {
                let answer = self.with_workloadspread(&req.workload_spread, |ws, now, gone| {
                    counter::apply_claim(ws, &req, now, gone)
                })?;
                json!(answer)
            }
            counter::Call::Release(req) => {
                let answer = self.with_workloadspread(&req.workload_spread, |ws, now, _| {
                    counter::apply_release(ws, &req, now)
                })?;
                json!(answer)
            }
            counter::Call::Unclaim(req) => {
                let answer = self.with_workloadspread(&req.workload_spread, |ws, _, _| {
                    counter::apply_unclaim(ws, &req)
                })?;
                json!(answer)
            }
        };
        Ok(serde_json::to_vec(&answer)?)
    }

    /// Applies `f` to a WorkloadSpread's status and stores the result; `f` also gets the
    /// pods whose deletion the status records and which this state shows departed
    /// (absent, deleted or finished), as the host's consistent reads would.
    fn with_workloadspread<R>(
        &self,
        key: &counter::WorkloadSpreadKey,
        f: impl FnOnce(&WorkloadSpread, Timestamp, &BTreeSet<String>) -> (WorkloadSpreadStatus, R),
    ) -> Result<R, HostCallError> {
        let mut objects = self.lock();
        let position = self.index.named(
            workloadspread_core::api::v1beta1::API_VERSION,
            workloadspread_core::api::KIND,
            Some(&key.namespace),
            &key.name,
        );
        if let Some(i) = position {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(i);
        }
        let (i, stored) = position
            .and_then(|i| Some((i, objects.get(i)?)))
            .ok_or_else(|| HostCallError::NotFound {
                what: format!("WorkloadSpread {}/{}", key.namespace, key.name),
            })?;
        let ws: WorkloadSpread = serde_json::from_value(stored.clone())
            .map_err(|e| HostCallError::Internal(format!("WorkloadSpread {}: {e}", key.name)))?;
        if key
            .uid
            .as_ref()
            .is_some_and(|u| ws.metadata.uid.as_ref() != Some(u))
        {
            return Err(HostCallError::Recreated {
                what: format!("WorkloadSpread {}/{}", key.namespace, key.name),
            });
        }
        let departed = self.departed(&objects, &ws, &key.namespace);
        let (status, result) = f(&ws, self.now, &departed);
        objects[i]["status"] = serde_json::to_value(&status)?;
        Ok(result)
    }
}

impl ClusterState {
    /// The pods whose deletion `ws`'s status records that `objects` shows departed.
    fn departed(
        &self,
        objects: &[Value],
        ws: &WorkloadSpread,
        namespace: &str,
    ) -> BTreeSet<String> {
        let Some(status) = ws.status.as_ref() else {
            return BTreeSet::new();
        };
        let runs = |name: &str| {
            let pod = self
                .index
                .named("v1", "Pod", Some(namespace), name)
                .and_then(|i| objects.get(i));
            pod.is_some_and(|p| {
                let finished =
                    matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
                p["metadata"]["deletionTimestamp"].is_null() && !finished
            })
        };
        status
            .versioned_subset_statuses
            .values()
            .flatten()
            .flat_map(|s| s.deleting_pods.keys())
            .filter(|name| !runs(name))
            .cloned()
            .collect()
    }
}

impl Capabilities for ClusterState {
    fn call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, HostCallError> {
        match (binding, namespace) {
            ("kubewarden", "tracing") => Ok(vec![]),
            ("kubewarden", "kubernetes")
                if !self.allow.permits_capability(namespace, operation) =>
            {
                Err(HostCallError::capability_denied(namespace, operation))
            }
            ("kubewarden", "kubernetes") => self.read(operation, payload),
            (counter::BINDING, counter::NAMESPACE) if self.counter => {
                self.counter_call(operation, payload)
            }
            _ => Err(HostCallError::unknown_binding(binding)),
        }
    }
}

/// A `List` answer: its envelope's fields, then `items`.
#[derive(serde::Serialize)]
struct ListAnswer<'a> {
    #[serde(flatten)]
    list: Value,
    items: Vec<workloadspread_core::masks::Masked<'a>>,
}

/// `object` in the version the API server stores it in.
fn stored(object: Value) -> anyhow::Result<Value> {
    use workloadspread_core::api::{v1beta1, KIND};
    if object["kind"] != KIND || object["apiVersion"] == v1beta1::API_VERSION {
        return Ok(object);
    }
    if object["apiVersion"].as_str().is_none_or(str::is_empty) {
        anyhow::bail!(
            "WorkloadSpread {} has no apiVersion: set apps.kruise.io/v1beta1 or apps.kruise.io/v1alpha1",
            object["metadata"]["name"]
        );
    }
    Ok(workloadspread_core::api::convert::convert(
        &object,
        v1beta1::API_VERSION,
    )?)
}

/// Object positions by (API group, kind), then namespace (`default` for objects without
/// one, which reads of `default` have always matched), in file order and by name (the
/// first of a name): a GET does not scan the namespace's objects of its kind.
struct Index(HashMap<(String, String), BTreeMap<String, Positions>>);

#[derive(Default)]
struct Positions {
    all: Vec<usize>,
    by_name: HashMap<String, usize>,
    /// By `spec.targetRef.name` (a WorkloadSpread's target), in file order: what a
    /// `spec.targetRef.name=X` field selector answers without looking at the others.
    by_target: HashMap<String, Vec<usize>>,
}

fn group_of(api_version: &str) -> &str {
    parse_group(api_version).unwrap_or(api_version)
}

impl Index {
    fn build(objects: &[Value]) -> Self {
        let mut index: HashMap<(String, String), BTreeMap<String, Positions>> = HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            let group = group_of(o["apiVersion"].as_str().unwrap_or_default()).to_string();
            let kind = o["kind"].as_str().unwrap_or_default().to_string();
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or("default");
            let positions = index
                .entry((group, kind))
                .or_default()
                .entry(namespace.to_string())
                .or_default();
            positions.all.push(i);
            if let Some(name) = o["metadata"]["name"].as_str() {
                positions.by_name.entry(name.to_string()).or_insert(i);
            }
            if let Some(target) = workloadspread_core::fields::at_path(o, TARGET_NAME_FIELD) {
                positions
                    .by_target
                    .entry(target.to_string())
                    .or_default()
                    .push(i);
            }
        }
        Index(index)
    }

    /// Positions of the objects a list with `fields` may select: those whose target is
    /// named so when the selector is one equality on it, else every one of the kind.
    fn selectable<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&'a str>,
        fields: &'a FieldSelector,
    ) -> Box<dyn Iterator<Item = usize> + 'a> {
        match fields.equality_on(TARGET_NAME_FIELD) {
            Some(target) => Box::new(
                self.namespaces(api_version, kind, namespace)
                    .flat_map(move |p| p.by_target.get(target).into_iter().flatten().copied()),
            ),
            None => Box::new(self.positions(api_version, kind, namespace)),
        }
    }

    /// The namespaces' positions of a kind (any version of its group), `namespace` or
    /// all of them.
    fn namespaces<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Positions> + 'a {
        let key = (group_of(api_version).to_string(), kind.to_string());
        self.0.get(&key).into_iter().flat_map(move |by_ns| {
            by_ns
                .iter()
                .filter(move |(ns, _)| namespace.is_none_or(|n| n == ns.as_str()))
                .map(|(_, positions)| positions)
        })
    }

    /// Positions of the objects of a kind (any version of its group), in `namespace` or
    /// in all namespaces; in file order within a namespace.
    fn positions<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = usize> + 'a {
        self.namespaces(api_version, kind, namespace)
            .flat_map(|p| p.all.iter().copied())
    }

    /// Position of the first object of a kind named `name`, as [`Index::positions`]
    /// orders them.
    fn named(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<usize> {
        self.namespaces(api_version, kind, namespace)
            .find_map(|p| p.by_name.get(name).copied())
    }
}

#[cfg(test)]
mod loading_tests {
    use super::*;

    #[test]
    fn cluster_state_from_a_directory_of_kubectl_dumps() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        // `kubectl get ws -o json` (a List) and a plain JSON array: both flattened.
        write(
            "2-spreads.json",
            r#"{"kind": "List", "items": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread", "metadata": {"name": "ws"}}]}"#,
        );
        write(
            "1-pods.json",
            r#"[{"kind": "Pod", "metadata": {"name": "a"}}]"#,
        );
        write("README.md", "# not a manifest");
        let kinds: Vec<_> = ClusterState::load_objects(dir.path())
            .unwrap()
            .into_iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(kinds, ["Pod", "WorkloadSpread"]);

        write(
            "4-unversioned.yaml",
            "kind: WorkloadSpread\nmetadata: {name: bare}\n",
        );
        let err = format!("{:#}", ClusterState::load_objects(dir.path()).unwrap_err());
        assert!(
            err.contains("4-unversioned.yaml") && err.contains("set apps.kruise.io/v1beta1"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("4-unversioned.yaml")).unwrap();

        write("3-broken.yaml", "kind: Pod\n---\nmetadata: {name: [\n");
        let err = format!("{:#}", ClusterState::load_objects(dir.path()).unwrap_err());
        assert!(
            err.contains("3-broken.yaml") && err.contains("line"),
            "{err}"
        );
    }

    /// `field_masks` prune the answer (as policy-server does); a state ignoring them
    /// answers whole objects.
    #[test]
    fn lists_honour_field_masks() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n"}});
        let request = br#"{"api_version":"v1","kind":"Pod","namespace":"ns","field_masks":["metadata.name","spec.containers.name"]}"#;
        let answer = |ignore: bool| {
            let state =
                ClusterState::new(vec![pod.clone()], AllowList::default(), false, crate::now())
                    .ignoring_field_masks(ignore);
            let bytes = state.read("list_resources_by_namespace", request).unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap()["items"][0].clone()
        };
        assert_eq!(
            answer(false),
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}})
        );
        assert_eq!(answer(true), pod);
    }

    /// A claim writes the WorkloadSpread's status; undoing puts the object back as given.
    #[test]
    fn counter_writes_are_undone() {
        let ws = serde_json::json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns", "uid": "u1"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a", "maxReplicas": 2}]}});
        let original = vec![ws];
        let state = ClusterState::new(original.clone(), AllowList::default(), true, crate::now());
        let claim = serde_json::json!({"workloadSpread": {"namespace": "ns", "name": "ws"},
            "pod": {"name": "p1", "version": "versionIgnored"}, "candidates": ["a"],
            "workloadReplicas": 2, "generatedUid": ""});
        let answer = state.counter_call(counter::OP_CLAIM, claim.to_string().as_bytes());
        assert!(answer.is_ok(), "{answer:?}");
        assert_ne!(
            state.workloadspreads(),
            original,
            "the claim wrote the status"
        );
        state.undo_writes(&original);
        assert_eq!(state.workloadspreads(), original);
    }

    /// Field selectors select as core's rule does: through the target index for one
    /// equality on `spec.targetRef.name`, by a scan for anything else; in file order.
    #[test]
    fn lists_honour_field_selectors() {
        let ws = |name: &str, ns: &str, target: &str| {
            serde_json::json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}}})
        };
        let objects = vec![
            ws("b", "ns", "web"),
            ws("a", "ns", "api"),
            ws("c", "ns", "web"),
            ws("d", "other", "web"),
        ];
        let state = ClusterState::new(objects, AllowList::default(), false, crate::now());
        let names = |selector: &str| -> Vec<String> {
            let request = serde_json::json!({"api_version": "apps.kruise.io/v1beta1",
                "kind": "WorkloadSpread", "namespace": "ns", "field_selector": selector});
            let bytes = state
                .read(
                    "list_resources_by_namespace",
                    request.to_string().as_bytes(),
                )
                .unwrap();
            let list: Value = serde_json::from_slice(&bytes).unwrap();
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("spec.targetRef.name=web"), ["b", "c"]);
        assert_eq!(names("spec.targetRef.name==api"), ["a"]);
        assert_eq!(names("spec.targetRef.name=nothing"), Vec::<String>::new());
        assert_eq!(names("spec.targetRef.name!=web"), ["a"]);
        assert_eq!(names("spec.targetRef.name=web,metadata.name=c"), ["c"]);
        assert_eq!(names(""), ["b", "a", "c"]);
    }
}

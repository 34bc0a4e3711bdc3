//! Kubewarden's `kubernetes/*` reads: from the watch caches, live on a miss, masked.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use workloadspread_core::fields::FieldSelector;
use workloadspread_core::workload::TARGET_NAME_FIELD;

impl KubeCapabilities {
    pub(super) fn read(
        &self,
        operation: &str,
        payload: &[u8],
        contested: ContestedSpreads,
    ) -> Result<Vec<u8>, HostCallError> {
        let read = KubeRead::parse(operation, payload)?;
        let (api_version, kind) = read.resource();
        if !self.allow.permits_resource(api_version, kind) {
            return Err(HostCallError::resource_denied(api_version, kind));
        }
        let reflected = self.reflected(api_version, kind).map(|r| match contested {
            ContestedSpreads::Hidden => r,
            ContestedSpreads::Shown => Reflected {
                contests: None,
                ..r
            },
        });
        let mask = read.mask();
        let answer = match (&read, reflected.as_ref()) {
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                Some(r),
            ) => self.get(r, namespace.as_deref(), name, &mask)?,
            (
                KubeRead::List {
                    namespace,
                    label_selector,
                    field_selector,
                    ..
                },
                Some(r),
            ) => match store_for(r, namespace.as_deref()) {
                Some(store) => list(
                    &store,
                    r,
                    namespace.as_deref(),
                    (label_selector.as_deref(), field_selector.as_deref()),
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
                    field_selector.as_deref(),
                    &mask,
                )?,
            },
            (
                KubeRead::Get {
                    namespace, name, ..
                },
                None,
            ) => match self.discover(api_version, kind)? {
                Some(r) => mask.apply(&self.live_get(&r, namespace.as_deref(), name)?),
                None => {
                    return Err(HostCallError::not_found(
                        api_version,
                        kind,
                        namespace.as_deref(),
                        name,
                    ))
                }
            },
            (
                KubeRead::List {
                    namespace,
                    label_selector,
                    field_selector,
                    ..
                },
                None,
            ) => match self.discover(api_version, kind)? {
                Some(r) => masked_list(
                    self.live_list(&r, namespace.as_deref(), label_selector.as_deref())?,
                    field_selector.as_deref(),
                    &mask,
                )?,
                None => {
                    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": []})
                }
            },
        };
        Ok(serde_json::to_vec(&answer)?)
    }

    /// One object, pruned to `mask` (a cached one without serialising what it drops).
    fn get(
        &self,
        r: &Reflected,
        namespace: Option<&str>,
        name: &str,
        mask: &Mask,
    ) -> Result<Value, HostCallError> {
        let mut key = ObjectRef::new_with(name, r.resource.clone());
        if let (true, Some(ns)) = (r.namespaced, namespace) {
            key = key.within(ns);
        }
        if let Some(o) = store_for(r, namespace).and_then(|s| s.get(&key)) {
            if r.contests.as_ref().is_some_and(|c| c.is_contested(&o)) {
                return Err(HostCallError::not_found(
                    &r.resource.api_version,
                    &r.resource.kind,
                    namespace,
                    name,
                ));
            }
            return Ok(masked(&o, &r.resource, mask));
        }
        // The watch may lag behind an object created just now: ask the API server.
        let live = self.live_get(
            &Discovered {
                resource: r.resource.clone(),
                namespaced: r.namespaced,
            },
            namespace,
            name,
        )?;
        Ok(mask.apply(&live))
    }

    /// From now on, `kind` (readable but not reflected from the start: a custom workload
    /// kind of the settings, in the version a pod's owner reference names) is watched in
    /// the namespaces holding a WorkloadSpread like the built-in kinds: a pod's
    /// admission reads its workload from the cache, not with a GET each time. Reads stay
    /// live until that namespace's watch has its first list. Bounded: only the kinds the
    /// settings grant get here, once per served version.
    fn watch_per_namespace(&self, api_version: &str, kind: &str, d: &Discovered) {
        if !d.namespaced {
            return;
        }
        let stores = Arc::<NamespaceStores>::default();
        let live = is_read_live(api_version, kind, self.counting);
        let key = (api_version.to_string(), kind.to_string());
        match self.write_reflected().entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => return,
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Reflected {
                resource: d.resource.clone(),
                namespaced: true,
                cache: match live {
                    true => Cache::Live,
                    false => Cache::PerNamespace(stores.clone()),
                },
                targets: None,
                contests: None,
            }),
        };
        if live {
            return;
        }
        self.watch_now(&d.resource, &stores);
    }

    /// Counts a read made live (`workloadspread_host_live_reads_total`).
    pub(super) fn count_live(&self, r: &ApiResource) {
        self.metrics
            .live_reads
            .get_or_create(&KindLabels {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
            })
            .inc();
    }

    /// The API resource of a kind that is readable but not reflected (custom
    /// workloads), discovered once.
    fn discover(&self, api_version: &str, kind: &str) -> Result<Option<Discovered>, HostCallError> {
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
                drop(cache);
                self.watch_per_namespace(api_version, kind, &d);
                Ok(Some(d))
            }
            Ok(Err(kube::Error::Discovery(_))) => Ok(None),
            Ok(Err(e)) => Err(HostCallError::api(
                format!("discovering {api_version} {kind}"),
                e,
            )),
            Err(_) => Err(HostCallError::api(
                format!("discovering {api_version} {kind}"),
                "timed out",
            )),
        }
    }

    /// Whether a stored pod in `namespace` matches `selector`, read consistently (no watch
    /// cache may lag behind a pod stored a moment ago); `None` when the read failed. One
    /// read per re-invocation (`webhook::reinvoke`: a token whose pod is stored is a copy).
    pub fn any_stored_pod(&self, namespace: &str, selector: &str) -> Option<bool> {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        // No limit: a consistent LIST without one is answered from the watch cache once it
        // has caught up (Kubernetes ≥ 1.31), a limited one scans etcd.
        let params = kube::api::ListParams::default().labels(selector);
        let listed = self
            .handle
            .block_on(tokio::time::timeout(LIVE_READ, pods.list_metadata(&params)));
        match listed {
            Ok(Ok(list)) => Some(!list.items.is_empty()),
            Ok(Err(e)) => {
                tracing::warn!(namespace, selector, "listing pods: {e}");
                None
            }
            Err(_) => {
                tracing::warn!(
                    namespace,
                    selector,
                    "listing pods: no answer in {LIVE_READ:?}"
                );
                None
            }
        }
    }

    /// A list of a kind that is readable but not reflected (custom workloads: few
    /// objects, read when a WorkloadSpread targeting one is validated).
    fn live_list(
        &self,
        r: &Discovered,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Value, HostCallError> {
        let api: Api<DynamicObject> = match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.resource),
            _ => Api::all_with(self.client.clone(), &r.resource),
        };
        let params = match selector {
            Some(s) => kube::api::ListParams::default().labels(s),
            None => kube::api::ListParams::default(),
        };
        self.count_live(&r.resource);
        let (api_version, kind) = (&r.resource.api_version, &r.resource.kind);
        let listed = self
            .handle
            .block_on(tokio::time::timeout(LIVE_READ, api.list(&params)))
            .map_err(|_| {
                HostCallError::api(
                    format!("listing {api_version} {kind}"),
                    format!("timed out after {LIVE_READ:?}"),
                )
            })?
            .map_err(|e| HostCallError::api(format!("listing {api_version} {kind}"), e))?;
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
    ) -> Result<Value, HostCallError> {
        let api: Api<DynamicObject> = match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.resource),
            _ => Api::all_with(self.client.clone(), &r.resource),
        };
        self.count_live(&r.resource);
        let live = self
            .handle
            .block_on(tokio::time::timeout(LIVE_READ, api.get_opt(name)));
        let (api_version, kind) = (&r.resource.api_version, &r.resource.kind);
        match live {
            Ok(Ok(Some(o))) => Ok(with_type(&o, &r.resource)),
            Ok(Ok(None)) => Err(HostCallError::not_found(api_version, kind, namespace, name)),
            Ok(Err(e)) => Err(HostCallError::api(
                format!("reading {api_version} {kind} {name}"),
                e,
            )),
            Err(_) => Err(HostCallError::api(
                format!("reading {api_version} {kind} {name}"),
                format!("timed out after {LIVE_READ:?}"),
            )),
        }
    }
}

/// The cached objects `(label selector, field selector)` select, masked. The field
/// selector is applied here, from the cache, for any field (the API server would need the
/// CRD to declare it selectable): one scan of the namespace's objects, no copy of what
/// it drops.
fn list(
    store: &Store<DynamicObject>,
    r: &Reflected,
    namespace: Option<&str>,
    (labels, fields): (Option<&str>, Option<&str>),
    mask: &Mask,
) -> Result<Value, HostCallError> {
    let resource = &r.resource;
    let selector = crate::capabilities::parse_selector(labels)?;
    let fields = FieldSelector::parse(fields).map_err(HostCallError::Invalid)?;
    // One equality on a WorkloadSpread's target name: the few objects the index names.
    let indexed = match (&r.targets, namespace, fields.equality_on(TARGET_NAME_FIELD)) {
        (Some(index), Some(ns), Some(target)) => Some(
            index
                .names(ns, target)
                .into_iter()
                .filter_map(|name| {
                    store.get(&ObjectRef::new_with(&name, resource.clone()).within(ns))
                })
                .collect::<Vec<_>>(),
        ),
        _ => None,
    };
    let candidates = indexed.unwrap_or_else(|| store.state());
    let items: Vec<Value> = candidates
        .iter()
        .filter(|o| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
        .filter(|o| !r.contests.as_ref().is_some_and(|c| c.is_contested(o)))
        .filter(|o| {
            selector.as_ref().is_none_or(|s| {
                let labels = o.labels();
                s.matches(|k| labels.get(k).map(String::as_str))
            })
        })
        .filter(|o| fields.is_empty() || fields.matches(|path| field_of(o, path)))
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
    let metadata = match mask.child("metadata") {
        Some(keep) => masked_metadata(&o.metadata, keep),
        None => Value::Null,
    };
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

/// The metadata entries `keep` names, each serialised alone: a WorkloadSpread's
/// annotations may hold its whole last-applied manifest, never copied unless asked for.
fn masked_metadata(meta: &ObjectMeta, keep: &Mask) -> Value {
    if keep.is_empty() {
        return serde_json::to_value(meta).unwrap_or(Value::Null);
    }
    fn entry<T: serde::Serialize>(v: &Option<T>) -> Option<Value> {
        v.as_ref().and_then(|v| serde_json::to_value(v).ok())
    }
    let mut out = serde_json::Map::new();
    for name in keep.names() {
        let value = match name {
            "annotations" => entry(&meta.annotations),
            "creationTimestamp" => entry(&meta.creation_timestamp),
            "deletionGracePeriodSeconds" => entry(&meta.deletion_grace_period_seconds),
            "deletionTimestamp" => entry(&meta.deletion_timestamp),
            "finalizers" => entry(&meta.finalizers),
            "generateName" => entry(&meta.generate_name),
            "generation" => entry(&meta.generation),
            "labels" => entry(&meta.labels),
            "managedFields" => entry(&meta.managed_fields),
            "name" => entry(&meta.name),
            "namespace" => entry(&meta.namespace),
            "ownerReferences" => entry(&meta.owner_references),
            "resourceVersion" => entry(&meta.resource_version),
            "selfLink" => entry(&meta.self_link),
            "uid" => entry(&meta.uid),
            _ => None,
        };
        if let Some(v) = value {
            out.insert(name.to_string(), v);
        }
    }
    keep.apply(&Value::Object(out))
}

/// Every item of a List pruned to `mask`.
/// A live list's items `fields` selects, masked.
fn masked_list(mut list: Value, fields: Option<&str>, mask: &Mask) -> Result<Value, HostCallError> {
    let fields = FieldSelector::parse(fields).map_err(HostCallError::Invalid)?;
    if let Some(items) = list["items"].as_array_mut() {
        items.retain(|item| fields.matches_object(item));
        for item in items {
            *item = mask.apply(item);
        }
    }
    Ok(list)
}

/// The string at a dotted path of a cached object (its metadata's name and namespace,
/// or a path into its data).
fn field_of<'a>(o: &'a DynamicObject, path: &str) -> Option<&'a str> {
    match path {
        "metadata.name" => o.metadata.name.as_deref(),
        "metadata.namespace" => o.metadata.namespace.as_deref(),
        _ => workloadspread_core::fields::at_path(&o.data, path),
    }
}

/// Objects from list/watch carry no apiVersion/kind; the policy expects them.
fn with_type(o: &DynamicObject, resource: &ApiResource) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    v["apiVersion"] = resource.api_version.clone().into();
    v["kind"] = resource.kind.clone().into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloadspread_core::masks::{
        PENDING_POD_FIELDS, WORKLOADSPREAD_SPEC_FIELDS, WORKLOADSPREAD_TARGET_FIELDS,
    };

    /// Masking a cached object entry by entry gives what masking it whole gives, for
    /// the masks the policy sends and a few others.
    #[test]
    fn masked_objects_equal_whole_objects_masked() {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apps.kruise.io",
            "v1beta1",
            "WorkloadSpread",
        ));
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "demo", "uid": "u1", "generation": 2,
                "resourceVersion": "7", "creationTimestamp": "2026-11-24T09:00:00Z",
                "deletionTimestamp": "2026-11-24T10:00:00Z", "finalizers": ["f"],
                "labels": {"a": "1", "b": "2"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "ux"}]},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "subsets": [{"name": "a"}]},
            "status": {"observedGeneration": 2}}))
        .unwrap();
        let whole = with_type(&o, &resource);
        let masks: [&[&str]; 7] = [
            WORKLOADSPREAD_TARGET_FIELDS,
            WORKLOADSPREAD_SPEC_FIELDS,
            PENDING_POD_FIELDS,
            &["metadata"],
            &["metadata.labels.a", "spec.subsets.name"],
            &["status", "metadata.selfLink"],
            &[],
        ];
        for paths in masks {
            let mask = Mask::new(paths);
            assert_eq!(
                masked(&o, &resource, &mask),
                mask.apply(&whole),
                "{paths:?}"
            );
        }
    }
}

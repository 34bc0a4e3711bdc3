//! The WorkloadSpread watch can lag the API server (a busy host, a far API server): a
//! WorkloadSpread created just before its workload would be missing from the cache when
//! the first pods arrive, and they would be admitted unspread. Before a pod creation is
//! decided in a namespace where the cache holds no WorkloadSpread, the namespace's
//! WorkloadSpreads are listed live and the cache must hold every one of them (waiting a
//! moment for it to catch up, refusing with "retry" if it does not, or if the list fails).
//!
//! Namespaces where the cache holds one are decided from the cache as before: their
//! admissions cost nothing more, and a host cut off from the API server keeps admitting
//! into its reserved slots there. What is left to the watch's freshness there is a
//! second WorkloadSpread created just before its workload.
//!
//! Kubernetes' own admission plugins close the same gap the same way (LimitRanger and
//! ResourceQuota: a live lookup per namespace, coalesced, remembered for 30 s in a
//! bounded cache), so the cost is one metadata LIST per namespace creating pods per
//! [`REMEMBER`], not one per pod. A WorkloadSpread created within that window after a
//! lookup is still only as fresh as the watch; a WorkloadSpread validated by this host
//! forgets its namespace's lookup at once (`docs/semantics.md`).

use super::*;
use kube::api::ListParams;
use thiserror::Error;

/// How long a namespace's live list is trusted.
const REMEMBER: Duration = Duration::from_secs(30);
/// Namespaces remembered at most (least used forgotten first).
const CAPACITY: u64 = 10_000;
/// How long a pod waits for the watch to deliver WorkloadSpreads the live list showed.
const CATCH_UP: Duration = Duration::from_secs(3);
/// How often the cache is checked while waiting.
const CATCH_UP_POLL: Duration = Duration::from_millis(10);

/// WorkloadSpreads of a namespace by a live list: (name, uid).
type Listed = Arc<Vec<(String, String)>>;

/// Why a pod creation cannot be decided from the cache.
#[derive(Debug, Error, Clone)]
pub enum CatchUpError {
    #[error(
        "namespace {namespace} holds WorkloadSpread(s) {missing:?} the host's watch has not \
         delivered within {CATCH_UP:?} (the watch lags the API server); the pod is refused \
         rather than admitted unspread: retry"
    )]
    Behind {
        namespace: String,
        missing: Vec<String>,
    },
    #[error(
        "listing the WorkloadSpreads of namespace {namespace} failed ({reason}); the pod is \
         refused rather than admitted without them: retry"
    )]
    Lookup { namespace: String, reason: String },
}

/// Remembered live lists, one per namespace; concurrent misses share one request.
pub(super) struct Lookups {
    listed: moka::future::Cache<String, Listed>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            listed: moka::future::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(REMEMBER)
                .build(),
        }
    }
}

impl KubeCapabilities {
    /// Returns at once when the WorkloadSpread cache holds one in `namespace`, else once
    /// it holds every WorkloadSpread a live list of `namespace` shows (module doc).
    pub async fn catch_up(&self, namespace: &str) -> Result<(), CatchUpError> {
        if self.has_workloadspread(namespace) != Some(false) {
            return Ok(());
        }
        let (mut listed, fresh) = self.listed(namespace).await?;
        if self.missing(namespace, &listed).is_empty() {
            return Ok(());
        }
        if !fresh {
            // A remembered list may be older than the cache (a WorkloadSpread deleted or
            // replaced since): ask again before waiting on it.
            self.lookups.listed.invalidate(namespace).await;
            listed = self.listed(namespace).await?.0;
        }
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            let missing = self.missing(namespace, &listed);
            if missing.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                self.count_lookup(LookupResult::Behind);
                // The next pod lists again instead of waiting on this list.
                self.lookups.listed.invalidate(namespace).await;
                return Err(CatchUpError::Behind {
                    namespace: namespace.to_string(),
                    missing,
                });
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
    }

    /// Forgets `namespace`'s remembered list: a WorkloadSpread is being created there.
    pub async fn forget_lookup(&self, namespace: &str) {
        self.lookups.listed.invalidate(namespace).await;
    }

    /// The remembered list of `namespace`, listed now if there is none (concurrent
    /// callers share one request); whether it was listed for this call.
    async fn listed(&self, namespace: &str) -> Result<(Listed, bool), CatchUpError> {
        let entry = self
            .lookups
            .listed
            .entry_by_ref(namespace)
            .or_try_insert_with(self.list_live(namespace))
            .await
            .map_err(|e: Arc<CatchUpError>| (*e).clone())?;
        let fresh = entry.is_fresh();
        Ok((entry.into_value(), fresh))
    }

    async fn list_live(&self, namespace: &str) -> Result<Listed, CatchUpError> {
        use workloadspread_core::api::{v1beta1, KIND};
        let failed = |reason: String| CatchUpError::Lookup {
            namespace: namespace.to_string(),
            reason,
        };
        let resource = self
            .reflected(v1beta1::API_VERSION, KIND)
            .map(|r| r.resource)
            .ok_or_else(|| failed("the WorkloadSpread kind is not served".into()))?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let cached_before = self.cached_in(namespace);
        let list = tokio::time::timeout(LIVE_READ, api.list_metadata(&ListParams::default()))
            .await
            .map_err(|_| failed(format!("no answer in {LIVE_READ:?}")))
            .and_then(|r| r.map_err(|e| failed(e.to_string())));
        let list = match list {
            Ok(list) => list,
            Err(e) => {
                self.count_lookup(LookupResult::Failed);
                return Err(e);
            }
        };
        self.count_lookup(LookupResult::Listed);
        let listed: Vec<(String, String)> = list
            .items
            .into_iter()
            .map(|o| (o.name_any(), o.metadata.uid.unwrap_or_default()))
            .collect();
        let unseen: Vec<&str> = listed
            .iter()
            .filter(|l| !cached_before.contains(*l))
            .map(|(name, _)| name.as_str())
            .collect();
        if !unseen.is_empty() {
            self.count_lookup(LookupResult::Missed);
            tracing::info!(
                namespace,
                ?unseen,
                "the WorkloadSpread watch had not delivered these when a pod came; the pod waits for it"
            );
        }
        Ok(Arc::new(listed))
    }

    /// The WorkloadSpreads of `namespace` in the cache: (name, uid).
    fn cached_in(&self, namespace: &str) -> BTreeSet<(String, String)> {
        use workloadspread_core::api::{v1beta1, KIND};
        let Some(store) = self
            .reflected(v1beta1::API_VERSION, KIND)
            .and_then(|r| store_for(&r, None))
        else {
            return BTreeSet::new();
        };
        store
            .state()
            .iter()
            .filter(|o| o.namespace().as_deref() == Some(namespace))
            .map(|o| (o.name_any(), o.metadata.uid.clone().unwrap_or_default()))
            .collect()
    }

    /// Names in `listed` the WorkloadSpread cache lacks (or holds with another uid).
    fn missing(&self, namespace: &str, listed: &[(String, String)]) -> Vec<String> {
        use workloadspread_core::api::{v1beta1, KIND};
        let reflected = self.reflected(v1beta1::API_VERSION, KIND);
        let store = reflected.as_ref().and_then(|r| store_for(r, None));
        listed
            .iter()
            .filter(|(name, uid)| {
                let cached = reflected.as_ref().zip(store.as_ref()).and_then(|(r, s)| {
                    s.get(&ObjectRef::new_with(name, r.resource.clone()).within(namespace))
                });
                cached.is_none_or(|o| o.metadata.uid.as_deref().unwrap_or_default() != uid)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn count_lookup(&self, result: LookupResult) {
        self.metrics
            .lookups
            .get_or_create(&LookupLabels { result })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_what_to_do() {
        let behind = CatchUpError::Behind {
            namespace: "shop".into(),
            missing: vec!["web".into()],
        };
        let text = behind.to_string();
        assert!(text.contains("shop") && text.contains("\"web\"") && text.ends_with("retry"));
        let failed = CatchUpError::Lookup {
            namespace: "shop".into(),
            reason: "timed out".into(),
        };
        assert!(failed.to_string().ends_with("retry"));
    }
}

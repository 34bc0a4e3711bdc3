//! The WorkloadSpread watch can lag the API server (a busy host, a far API server): a
//! WorkloadSpread created just before its workload would be missing from the cache when
//! the first pods arrive, and they would be admitted unspread. Before a pod creation is
//! decided in a namespace where the cache holds no WorkloadSpread, the namespace's
//! WorkloadSpreads are listed live and the cache must hold every one of them (waiting a
//! moment for it to catch up, refusing with "retry" if it does not). A list that fails or
//! does not come within the budget leaves the pod to the cache, as before this check,
//! with a warning: an API server that cannot answer a list would not store the pod
//! either, and the host's evaluation slots must not wait on it.
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
//! lookup is still only as fresh as the watch, unless its CREATE was admitted by this
//! host's webhook: that drops the namespace's list and, for [`UNSETTLED`], lists there
//! serve only the pod they were made for (the CREATE is seen before it is stored)
//! (`docs/semantics.md`, A10).

use super::*;
use kube::api::ListParams;
use thiserror::Error;

/// How long a namespace's live list is trusted.
const REMEMBER: Duration = Duration::from_secs(30);
/// Namespaces remembered at most (least used forgotten first).
const CAPACITY: u64 = 10_000;
/// The most a pod creation waits here in all: the live list and the watch catching up
/// (the policy then has the rest of the API server's 10 s webhook timeout).
const BUDGET: Duration = Duration::from_secs(2);
/// How often the cache is checked while waiting.
const CATCH_UP_POLL: Duration = Duration::from_millis(10);
/// After a WorkloadSpread CREATE in a namespace is admitted by this host (before it is
/// stored; dry runs and refused CREATEs are never stored and do not count),
/// lists of that namespace are trusted only by the pod they were made for, this long.
const UNSETTLED: Duration = Duration::from_secs(5);

/// WorkloadSpreads of a namespace by a live list.
#[derive(Debug)]
struct Listing {
    /// When the list was sent.
    sent: tokio::time::Instant,
    /// (name, uid) of each.
    items: Vec<(String, String)>,
}

/// Why a pod creation cannot be decided from the cache.
#[derive(Debug, Error, Clone)]
pub enum CatchUpError {
    #[error(
        "namespace {namespace} holds WorkloadSpread(s) {missing:?} the host's watch has not \
         delivered within {BUDGET:?} (the watch lags the API server: a busy host or API \
         server; see workloadspread_host_workloadspread_lookups_total); the pod is refused \
         rather than admitted unspread: retry"
    )]
    Behind {
        namespace: String,
        missing: Vec<String>,
    },
    #[error("listing the WorkloadSpreads of namespace {namespace} failed: {reason}")]
    Lookup { namespace: String, reason: String },
}

/// Remembered live lists, one per namespace; concurrent misses share one request.
pub(super) struct Lookups {
    listed: moka::future::Cache<String, Arc<Listing>>,
    /// Namespaces where this host admitted a WorkloadSpread CREATE in the last [`UNSETTLED`].
    unsettled: moka::future::Cache<String, ()>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            listed: moka::future::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(REMEMBER)
                .build(),
            unsettled: moka::future::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(UNSETTLED)
                .build(),
        }
    }
}

impl KubeCapabilities {
    /// Returns at once when the WorkloadSpread cache holds one in `namespace` (or has no
    /// first list: then the policy reads live), else once it holds every WorkloadSpread a
    /// live list of `namespace` shows (module doc). Should the list fail within the
    /// budget, the pod is decided from the cache as before this check, with a warning.
    pub async fn catch_up(&self, namespace: &str) -> Result<(), CatchUpError> {
        if self.has_workloadspread(namespace) != Some(false) {
            return Ok(());
        }
        let called = tokio::time::Instant::now();
        let deadline = called + BUDGET;
        let Some(mut listing) = self.listed(namespace, deadline).await else {
            return Ok(());
        };
        let unsettled = self.lookups.unsettled.contains_key(namespace);
        let suspect = unsettled || !self.missing(namespace, &listing).is_empty();
        if suspect && listing.sent < called {
            // A remembered list may be older than the cache (a WorkloadSpread deleted or
            // replaced since) or than a WorkloadSpread being created: list again.
            self.lookups.listed.invalidate(namespace).await;
            let Some(again) = self.listed(namespace, deadline).await else {
                return Ok(());
            };
            listing = again;
        }
        loop {
            let missing = self.missing(namespace, &listing);
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

    /// A WorkloadSpread is being created in `namespace`: its remembered list is dropped
    /// and lists made there in the next [`UNSETTLED`] serve only their own pod.
    pub async fn forget_lookup(&self, namespace: &str) {
        self.lookups
            .unsettled
            .insert(namespace.to_string(), ())
            .await;
        self.lookups.listed.invalidate(namespace).await;
    }

    /// The remembered list of `namespace`, listed now if there is none (concurrent
    /// callers share one request); `None` (decide from the cache) when the list failed
    /// or did not come by `deadline` — counted and logged.
    async fn listed(
        &self,
        namespace: &str,
        deadline: tokio::time::Instant,
    ) -> Option<Arc<Listing>> {
        let lookup = self
            .lookups
            .listed
            .entry_by_ref(namespace)
            .or_try_insert_with(self.list_live(namespace));
        let failure = match tokio::time::timeout_at(deadline, lookup).await {
            Ok(Ok(entry)) => return Some(entry.into_value()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {BUDGET:?}"),
        };
        self.count_lookup(LookupResult::Failed);
        tracing::warn!(
            namespace,
            "{failure}; the pod is decided from the cache (a WorkloadSpread created a moment \
             ago may be missed): check the host's reach to the API server and its RBAC \
             (list workloadspreads)"
        );
        None
    }

    async fn list_live(&self, namespace: &str) -> Result<Arc<Listing>, CatchUpError> {
        let failed = |reason: String| CatchUpError::Lookup {
            namespace: namespace.to_string(),
            reason,
        };
        let resource = self
            .workloadspreads()
            .map(|r| r.resource)
            .ok_or_else(|| failed("the WorkloadSpread kind is not served".into()))?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let cached_before = self.cached_in(namespace);
        let sent = tokio::time::Instant::now();
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.count_lookup(LookupResult::Listed);
        let items: Vec<(String, String)> = list
            .items
            .into_iter()
            .map(|o| (o.name_any(), o.metadata.uid.unwrap_or_default()))
            .collect();
        let unseen: Vec<&str> = items
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
        Ok(Arc::new(Listing { sent, items }))
    }

    /// The WorkloadSpreads of `namespace` in the cache: (name, uid).
    fn cached_in(&self, namespace: &str) -> BTreeSet<(String, String)> {
        let Some(store) = self.workloadspreads().and_then(|r| store_for(&r, None)) else {
            return BTreeSet::new();
        };
        store
            .state()
            .iter()
            .filter(|o| o.namespace().as_deref() == Some(namespace))
            .map(|o| (o.name_any(), o.metadata.uid.clone().unwrap_or_default()))
            .collect()
    }

    /// Names in `listing` the WorkloadSpread cache lacks (or holds with another uid).
    fn missing(&self, namespace: &str, listing: &Listing) -> Vec<String> {
        let reflected = self.workloadspreads();
        let store = reflected.as_ref().and_then(|r| store_for(r, None));
        listing
            .items
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
    fn a_refusal_says_why_and_what_to_do() {
        let behind = CatchUpError::Behind {
            namespace: "shop".into(),
            missing: vec!["web".into()],
        };
        let text = behind.to_string();
        assert!(text.contains("shop") && text.contains("\"web\"") && text.ends_with("retry"));
        assert!(text.contains("workloadspread_host_workloadspread_lookups_total"));
    }
}

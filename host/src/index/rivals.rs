//! The host's side of standing back from another WorkloadSpread writer (`contests`):
//! following OpenKruise's registration, and reading a spread live when a pod arrives with
//! another webhook's placement (`webhook::admit`).

use super::{KubeCapabilities, LIVE_READ};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::Api;

impl KubeCapabilities {
    /// Reads WorkloadSpread `namespace/name` live (its managedFields: a status write the
    /// watch has not brought yet) and follows it into the contests; whether the host stands
    /// back from it now. A read that fails says no (and is logged).
    pub async fn contested_now(&self, namespace: &str, name: &str) -> bool {
        let Some(r) = self.workloadspreads() else {
            return false;
        };
        self.count_live(&r.resource);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &r.resource);
        match tokio::time::timeout(LIVE_READ, api.get_opt(name)).await {
            Ok(Ok(Some(o))) => {
                let contested = self.contests.observe_live(&o);
                self.metrics
                    .contested
                    .set(i64::try_from(self.contests.len()).unwrap_or(i64::MAX));
                contested
            }
            Ok(Ok(None)) => false,
            Ok(Err(e)) => {
                tracing::warn!("reading WorkloadSpread {namespace}/{name} for its writers: {e}");
                false
            }
            Err(_) => {
                tracing::warn!(
                    "reading WorkloadSpread {namespace}/{name} for its writers: no answer in \
                     {LIVE_READ:?}"
                );
                false
            }
        }
    }

    /// Whether the host stands back from WorkloadSpread `namespace/name` (`contests`).
    pub fn stands_back_from(&self, namespace: &str, name: &str) -> bool {
        self.contests.stands_back_from(namespace, name)
    }
}

/// Feeds `registrations` (whether OpenKruise's WorkloadSpread validation is registered)
/// into the host's contests, until the host is dropped.
pub(super) async fn follow_openkruise(
    caps: std::sync::Weak<KubeCapabilities>,
    mut registrations: futures::stream::BoxStream<'static, Result<bool, String>>,
) {
    while let Some(registered) = registrations.next().await {
        let Some(caps) = caps.upgrade() else { return };
        let registered = match registered {
            Ok(registered) => registered,
            Err(e) => {
                caps.contests.registration_failed(e);
                continue;
            }
        };
        let contested = caps.contests.set_registered(registered);
        caps.metrics
            .contested
            .set(i64::try_from(contested).unwrap_or(i64::MAX));
    }
}

//! The one way the controller writes (#44): every status, pod patch, deletion, eviction
//! and event of a reconcile goes through the [`Writer`], which
//!
//! * is fenced by the Lease: a replica whose renewal is overdue sends nothing (it may be
//!   paused or cut off while another replica has taken over; `leader::Leadership`);
//! * bounds every call ([`API_TIMEOUT`]; an event [`EVENT_TIMEOUT`]);
//! * tells what an answer means for that write (a pod gone since the cache listed it is
//!   no failure of a cost patch, a 429 to an eviction is a PodDisruptionBudget's "not
//!   now") and counts each failure by what it wrote and how it failed
//!   (`workloadspread_controller_write_failures_total{write, kind}`).

use crate::calls::{within, API_TIMEOUT};
use crate::leader::Leadership;
use crate::metrics::{Metrics, WriteFailure, WriteTarget};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{DeleteParams, DynamicObject, EvictParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Api, Client};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use workloadspread_core::controller::Event;
use workloadspread_kube::status::{StatusError, StatusWrite, StatusWriter};

/// Bound of one event write (best effort: a stalled events API must not hold a reconcile).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("not the leader (the Lease was not renewed in time): nothing written")]
    NotLeader,
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    /// Refused by the API server, or it could not be reached; `target` names what was
    /// written (a pod, a WorkloadSpread).
    #[error("{write:?} {target}: {source}")]
    Api {
        write: WriteTarget,
        target: String,
        source: Box<kube::Error>,
    },
}

impl WriteError {
    /// The `kind` label the failure is counted under.
    pub fn kind(&self) -> WriteFailure {
        match self {
            WriteError::NotLeader => WriteFailure::NotLeader,
            WriteError::Timeout(_) => WriteFailure::Timeout,
            WriteError::Api { .. } => WriteFailure::Api,
        }
    }
}

/// How a pod patch came out.
#[derive(Debug, PartialEq, Eq)]
pub enum Patched {
    Done,
    /// 404: gone since the cache listed it.
    Gone,
}

/// How the deletion of a stuck pod came out.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    Done,
    /// 404 or 409: gone, or replaced under its name (the uid precondition).
    Gone,
}

/// How an eviction came out.
#[derive(Debug, PartialEq, Eq)]
pub enum Evicted {
    Done,
    /// 429: a PodDisruptionBudget allows no disruption now.
    Refused(String),
    /// 404.
    Gone,
}

/// Every write of the reconciler.
pub struct Writer {
    client: Client,
    /// Evictions go through a client that does not retry 429 (`rebalance`).
    evictions: Client,
    status: StatusWriter,
    recorder: Recorder,
    leadership: Arc<Leadership>,
    metrics: Arc<Metrics>,
}

impl Writer {
    pub fn new(
        client: Client,
        recorder: Recorder,
        leadership: Arc<Leadership>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Writer {
            evictions: client.clone(),
            status: StatusWriter::new(client.clone(), API_TIMEOUT),
            client,
            recorder,
            leadership,
            metrics,
        }
    }

    /// Evicting through `evictions`.
    pub fn with_evictions(mut self, evictions: Client) -> Self {
        self.evictions = evictions;
        self
    }

    /// Counts a failure of `write`.
    fn failed(&self, write: WriteTarget, e: WriteError) -> WriteError {
        self.metrics.write_failed(write, e.kind());
        e
    }

    fn api_error(&self, write: WriteTarget, target: &str, e: kube::Error) -> WriteError {
        let source = Box::new(e);
        let target = target.to_string();
        self.failed(
            write,
            WriteError::Api {
                write,
                target,
                source,
            },
        )
    }

    /// `call` if this replica leads, within `limit`: the API server's answer, or why
    /// there is none (counted).
    async fn send<T>(
        &self,
        write: WriteTarget,
        limit: Duration,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, WriteError> {
        if !self.leadership.holds() {
            return Err(self.failed(write, WriteError::NotLeader));
        }
        within(limit, call)
            .await
            .map_err(|_| self.failed(write, WriteError::Timeout(limit)))
    }

    /// Replaces the status of `current` by `status`, guarded by its `resourceVersion`.
    pub async fn status(
        &self,
        current: &DynamicObject,
        status: Value,
    ) -> Result<StatusWrite, WriteError> {
        let write = WriteTarget::Status;
        if !self.leadership.holds() {
            return Err(self.failed(write, WriteError::NotLeader));
        }
        match self.status.replace(current, status).await {
            Ok(outcome) => Ok(outcome),
            Err(StatusError::Timeout(d)) => Err(self.failed(write, WriteError::Timeout(d))),
            Err(StatusError::Api(e)) => {
                let name = current.metadata.name.clone().unwrap_or_default();
                Err(self.api_error(write, &name, *e))
            }
        }
    }

    /// A strategic-merge patch of pod `ns/name`, sent as `write`.
    async fn patch_pod(
        &self,
        write: WriteTarget,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Result<Pod, kube::Error>, WriteError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let (params, patch) = (PatchParams::default(), Patch::Strategic(patch));
        self.send(write, API_TIMEOUT, pods.patch(name, &params, &patch))
            .await
    }

    /// A strategic-merge patch adopting pod `ns/name` into a subset.
    pub async fn adopt(&self, ns: &str, name: &str, patch: &Value) -> Result<(), WriteError> {
        let write = WriteTarget::Adoption;
        match self.patch_pod(write, ns, name, patch).await? {
            Ok(_) => Ok(()),
            Err(e) => Err(self.api_error(write, name, e)),
        }
    }

    /// A deletion-cost or pending-label patch of pod `ns/name`.
    pub async fn pod_metadata(
        &self,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Patched, WriteError> {
        let write = WriteTarget::PodMetadata;
        match self.patch_pod(write, ns, name, patch).await? {
            Ok(_) => Ok(Patched::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Patched::Gone),
            Err(e) => Err(self.api_error(write, name, e)),
        }
    }

    /// Deletes pod `ns/name` (only the one of `uid`, if given: a successor of the same
    /// name is not the pod judged stuck).
    pub async fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        uid: Option<String>,
    ) -> Result<Deleted, WriteError> {
        let write = WriteTarget::Deletion;
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        match self
            .send(write, API_TIMEOUT, pods.delete(name, &params))
            .await?
        {
            Ok(_) => Ok(Deleted::Done),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Deleted::Gone),
            Err(e) => Err(self.api_error(write, name, e)),
        }
    }

    /// Evicts pod `ns/name` through `policy/v1` Eviction (PodDisruptionBudgets hold).
    pub async fn evict(&self, ns: &str, name: &str) -> Result<Evicted, WriteError> {
        let write = WriteTarget::Eviction;
        let pods: Api<Pod> = Api::namespaced(self.evictions.clone(), ns);
        let params = EvictParams::default();
        match self
            .send(write, API_TIMEOUT, pods.evict(name, &params))
            .await?
        {
            Ok(_) => Ok(Evicted::Done),
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(Evicted::Refused(s.message)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Evicted::Gone),
            Err(e) => Err(self.api_error(write, name, e)),
        }
    }

    /// Records `e` on `reference`: best effort, a lost event is logged (and counted).
    /// Whether it was recorded (a caller that must say something once retries on false).
    pub async fn event(&self, reference: &ObjectReference, e: &Event) -> bool {
        let event = KubeEvent {
            type_: if e.type_ == "Warning" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: e.reason.to_string(),
            note: Some(e.message.clone()),
            action: e.reason.to_string(),
            secondary: None,
        };
        let call = self.recorder.publish(&event, reference);
        match self.send(WriteTarget::Event, EVENT_TIMEOUT, call).await {
            Ok(Ok(())) => true,
            Ok(Err(err)) => {
                tracing::warn!("recording event {}: {err}", e.reason);
                self.metrics
                    .write_failed(WriteTarget::Event, WriteFailure::Api);
                false
            }
            Err(failure) => {
                tracing::warn!("recording event {}: {failure}", e.reason);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(leadership: Leadership) -> (Writer, Arc<Metrics>) {
        // Nothing listens: a call that were sent would fail, not time out.
        let url: axum::http::Uri = "http://127.0.0.1:9".parse().unwrap();
        let client = Client::try_from(kube::Config::new(url)).unwrap();
        let recorder = Recorder::new(client.clone(), "test".into());
        let metrics = Arc::new(Metrics::new());
        let w = Writer::new(client, recorder, Arc::new(leadership), metrics.clone());
        (w, metrics)
    }

    fn count(metrics: &Metrics, write: &str, kind: &str) -> String {
        let text = metrics.encode();
        let series = format!(r#"write_failures_total{{write="{write}",kind="{kind}"}} "#);
        text.lines()
            .find_map(|l| {
                l.strip_prefix("workloadspread_controller_")?
                    .strip_prefix(&series)
            })
            .unwrap_or("absent")
            .to_string()
    }

    /// A replica whose Lease renewal is overdue sends nothing, and says so by kind.
    #[tokio::test]
    async fn a_replica_that_does_not_lead_writes_nothing() {
        let (w, metrics) = writer(Leadership::elected(Duration::ZERO));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let patch = serde_json::json!({});
        let refused = w.pod_metadata("ns", "p", &patch).await;
        assert!(matches!(refused, Err(WriteError::NotLeader)), "{refused:?}");
        assert!(matches!(
            w.evict("ns", "p").await,
            Err(WriteError::NotLeader)
        ));
        assert!(matches!(
            w.delete_pod("ns", "p", None).await,
            Err(WriteError::NotLeader)
        ));
        assert!(matches!(
            w.adopt("ns", "p", &patch).await,
            Err(WriteError::NotLeader)
        ));
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "ns"}}))
        .unwrap();
        let status = w.status(&object, serde_json::json!({})).await;
        assert!(matches!(status, Err(WriteError::NotLeader)), "{status:?}");
        w.event(&ObjectReference::default(), &Event::normal("R", "m".into()))
            .await;
        for write in [
            "PodMetadata",
            "Eviction",
            "Deletion",
            "Adoption",
            "Status",
            "Event",
        ] {
            assert_eq!(count(&metrics, write, "NotLeader"), "1", "{write}");
            assert_eq!(count(&metrics, write, "Api"), "0", "{write}");
        }
    }

    /// A leader's call the API server cannot take is an `Api` failure of that write.
    #[tokio::test]
    async fn a_failed_call_is_counted_by_what_it_wrote() {
        let (w, metrics) = writer(Leadership::unelected());
        let failed = w.pod_metadata("ns", "p", &serde_json::json!({})).await;
        assert!(
            matches!(
                &failed,
                Err(WriteError::Api {
                    write: WriteTarget::PodMetadata,
                    ..
                })
            ),
            "{failed:?}"
        );
        assert_eq!(count(&metrics, "PodMetadata", "Api"), "1");
        assert_eq!(count(&metrics, "PodMetadata", "NotLeader"), "0");
        assert_eq!(count(&metrics, "Eviction", "Api"), "0");
    }
}

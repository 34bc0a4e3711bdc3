//! A WorkloadSpread's status, replaced guarded by the `resourceVersion` it was read at,
//! within a timeout, with a typed outcome: written, conflicting, gone, or an error.

use crate::resource::workloadspread_resource;
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use std::time::Duration;

/// How a status write came out.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusWrite {
    /// Stored: the object as the API server stored it (its new `resourceVersion`).
    Written(Box<DynamicObject>),
    /// 409: someone wrote first (read again, decide again).
    Conflict,
    /// 404: the WorkloadSpread is gone.
    Gone,
}

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Api(Box<kube::Error>),
}

/// Writes WorkloadSpread statuses through `client`, each call bounded by `timeout`.
#[derive(Clone)]
pub struct StatusWriter {
    client: Client,
    timeout: Duration,
}

impl StatusWriter {
    pub fn new(client: Client, timeout: Duration) -> Self {
        StatusWriter { client, timeout }
    }

    /// Replaces the status of `current` by `status`, guarded by `current`'s
    /// `resourceVersion`: a status computed from an older read is refused (409).
    pub async fn replace(
        &self,
        current: &DynamicObject,
        status: Value,
    ) -> Result<StatusWrite, StatusError> {
        let mut updated = current.clone();
        if let Some(map) = updated.data.as_object_mut() {
            map.insert("status".into(), status);
        }
        self.replace_within(&updated, self.timeout).await
    }

    /// Writes the status `updated` carries, guarded by its `resourceVersion`, within
    /// `budget` (a caller with a deadline of its own gives what is left of it).
    pub async fn replace_within(
        &self,
        updated: &DynamicObject,
        budget: Duration,
    ) -> Result<StatusWrite, StatusError> {
        let ns = updated.namespace().unwrap_or_default();
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &ns, &workloadspread_resource());
        let (name, params) = (updated.name_any(), PostParams::default());
        let call = api.replace_status(&name, &params, updated);
        match tokio::time::timeout(budget, call).await {
            Ok(answer) => outcome(answer),
            Err(_) => Err(StatusError::Timeout(budget)),
        }
    }
}

/// What the API server's answer to a status replace means.
fn outcome(answer: Result<DynamicObject, kube::Error>) -> Result<StatusWrite, StatusError> {
    match answer {
        Ok(written) => Ok(StatusWrite::Written(Box::new(written))),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(StatusWrite::Conflict),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(StatusWrite::Gone),
        Err(e) => Err(StatusError::Api(Box::new(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn refused(code: u16) -> Result<DynamicObject, kube::Error> {
        Err(kube::Error::Api(
            Status::failure("refused", "Reason").with_code(code).boxed(),
        ))
    }

    #[test]
    fn the_answer_is_a_typed_outcome() {
        let mut stored: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "ns"}}))
        .unwrap();
        stored.metadata.resource_version = Some("42".into());
        assert_eq!(
            outcome(Ok(stored.clone())).unwrap(),
            StatusWrite::Written(Box::new(stored))
        );
        assert_eq!(outcome(refused(409)).unwrap(), StatusWrite::Conflict);
        assert_eq!(outcome(refused(404)).unwrap(), StatusWrite::Gone);
        for code in [403, 422, 500] {
            match outcome(refused(code)) {
                Err(StatusError::Api(e)) => assert!(e.to_string().contains("refused"), "{e}"),
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    /// An API server that never answers costs the timeout, not the reconcile.
    #[tokio::test]
    async fn a_silent_api_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let client = Client::try_from(kube::Config::new(url)).unwrap();
        let writer = StatusWriter::new(client, Duration::from_millis(200));
        let current: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "1"}}))
        .unwrap();
        let answer = writer.replace(&current, serde_json::json!({})).await;
        assert!(
            matches!(answer, Err(StatusError::Timeout(d)) if d == Duration::from_millis(200)),
            "{answer:?}"
        );
        drop(listener);
    }
}

//! The bound of every API call the controller makes, and how a bounded read fails.

use std::future::Future;
use std::time::Duration;

/// Bound of every API call a reconcile makes.
pub const API_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a bounded call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Kubernetes API: {0}")]
    Api(#[from] Box<kube::Error>),
}

impl From<kube::Error> for CallError {
    fn from(e: kube::Error) -> Self {
        CallError::Api(Box::new(e))
    }
}

/// `call`, abandoned after [`API_TIMEOUT`] (and retried by the reconcile).
pub async fn bounded<T>(call: impl Future<Output = T>) -> Result<T, CallError> {
    within(API_TIMEOUT, call).await
}

/// `call`, abandoned after `limit`.
pub async fn within<T>(limit: Duration, call: impl Future<Output = T>) -> Result<T, CallError> {
    tokio::time::timeout(limit, call)
        .await
        .map_err(|_| CallError::Timeout(limit))
}

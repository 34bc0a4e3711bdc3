//! Why the counter could not commit an operation: decided by kind (what is retried, what
//! drops the queue's own work), counted by kind, and turned into the guest's text only
//! at the capability seam (`capabilities::HostCallError`).

use crate::capabilities::ProviderError;
use std::time::Duration;
use workloadspread_core::hostcall::ErrorCode;

/// A counter operation that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// A read found no such WorkloadSpread.
    #[error("WorkloadSpread {name} not found")]
    NotFound { name: String },
    /// The status write found the WorkloadSpread deleted.
    #[error("WorkloadSpread {name} was deleted")]
    Deleted { name: String },
    /// The operation names a uid the stored object does not have.
    #[error("WorkloadSpread {name} was recreated (uid changed)")]
    Recreated { name: String },
    /// Reading the WorkloadSpread failed or gave no answer in time.
    #[error("reading WorkloadSpread {name}: {reason}")]
    Read { name: String, reason: String },
    /// Writing its status failed (refused, failed or no answer in time).
    #[error("writing WorkloadSpread {name} status: {reason}")]
    Write { name: String, reason: String },
    /// Another writer changed the object first (409): the batch is read and applied again.
    #[error("conflict writing WorkloadSpread {name} status")]
    Conflict { name: String },
    /// The reads before the write used up the batch's time.
    #[error(
        "reading WorkloadSpread {name} and the pods it names left no time to write its status"
    )]
    NoTimeToWrite { name: String },
    /// The stored object or the status could not be decoded or encoded.
    #[error("{0}")]
    Codec(String),
    /// The batch's time ran out before its first attempt.
    #[error("the operation's time ran out before a write was attempted")]
    NotAttempted,
    /// The last failure, past the operation's time.
    #[error("{cause} (gave up after {after:?})")]
    GaveUp {
        cause: Box<CommitError>,
        after: Duration,
    },
    /// The queue stopped (shutdown, or it died) before answering.
    #[error("the counter queue stopped before answering")]
    Stopped,
    /// The operation was not answered within the capability's wait.
    #[error("counter did not answer within {0:?}")]
    NoAnswer(Duration),
    /// A defect: the queue's bookkeeping disagrees with itself.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl CommitError {
    /// The WorkloadSpread is gone (or was recreated): nothing of it is worth retrying,
    /// and the queue's own work for it is dropped.
    pub fn is_gone(&self) -> bool {
        match self {
            CommitError::NotFound { .. }
            | CommitError::Deleted { .. }
            | CommitError::Recreated { .. } => true,
            CommitError::GaveUp { cause, .. } => cause.is_gone(),
            _ => false,
        }
    }

    /// This failure past the operation's time, `after` it arrived.
    pub fn gave_up(self, after: Duration) -> Self {
        CommitError::GaveUp {
            cause: Box::new(self),
            after,
        }
    }
}

impl ProviderError for CommitError {
    fn code(&self) -> Option<ErrorCode> {
        match self {
            CommitError::NotFound { .. } | CommitError::Deleted { .. } => Some(ErrorCode::NotFound),
            CommitError::GaveUp { cause, .. } => cause.code(),
            _ => None,
        }
    }

    /// The kind this failure is counted (and logged) under.
    fn metric_label(&self) -> &'static str {
        match self {
            CommitError::NotFound { .. } | CommitError::Deleted { .. } => "Gone",
            CommitError::Recreated { .. } => "Recreated",
            CommitError::Read { .. } => "Read",
            CommitError::Write { .. } => "Write",
            CommitError::Conflict { .. } => "Conflict",
            CommitError::NoTimeToWrite { .. }
            | CommitError::NotAttempted
            | CommitError::GaveUp { .. } => "Timeout",
            CommitError::Stopped => "Stopped",
            CommitError::NoAnswer(_) => "NoAnswer",
            CommitError::Codec(_) | CommitError::Internal(_) => "Internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::HOST_CALL_ERROR_KINDS;

    /// Every kind a counter failure is counted under is one the host exports at 0.
    #[test]
    fn every_kind_is_exported_from_the_start() {
        let n = || "web".to_string();
        let r = || "down".to_string();
        let all = [
            CommitError::NotFound { name: n() },
            CommitError::Deleted { name: n() },
            CommitError::Recreated { name: n() },
            CommitError::Read {
                name: n(),
                reason: r(),
            },
            CommitError::Write {
                name: n(),
                reason: r(),
            },
            CommitError::Conflict { name: n() },
            CommitError::NoTimeToWrite { name: n() },
            CommitError::Codec(r()),
            CommitError::NotAttempted,
            CommitError::Conflict { name: n() }.gave_up(Duration::from_secs(6)),
            CommitError::Stopped,
            CommitError::NoAnswer(Duration::from_secs(8)),
            CommitError::Internal("lost"),
        ];
        for e in all {
            let kind = e.metric_label();
            assert!(
                HOST_CALL_ERROR_KINDS.contains(&kind),
                "{e}: kind {kind} not exported"
            );
        }
    }

    #[test]
    fn a_failure_keeps_its_kind_and_words_past_its_time() {
        let name = || "web".to_string();
        let conflict = CommitError::Conflict { name: name() };
        let late = conflict.clone().gave_up(Duration::from_secs(7));
        assert_eq!(
            late.to_string(),
            "conflict writing WorkloadSpread web status (gave up after 7s)"
        );
        assert!(!late.is_gone());
        assert_eq!(late.metric_label(), "Timeout");
        let deleted = CommitError::Deleted { name: name() }.gave_up(Duration::from_secs(6));
        assert!(
            deleted.is_gone(),
            "a deleted object stays gone past its time"
        );
        assert_eq!(deleted.code(), Some(ErrorCode::NotFound));
        assert_eq!(conflict.code(), None);
        assert!(CommitError::Recreated { name: name() }.is_gone());
        assert!(!CommitError::Read {
            name: name(),
            reason: "no answer in 2s".into()
        }
        .is_gone());
    }
}

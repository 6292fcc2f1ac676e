//! The tracked-execution error type.

use uuid::Uuid;

use super::snapshot::Execution;
use super::status::ParseStatusError;
use crate::connector::{BoxError, ConnectorOperationError};

/// Everything that can go wrong submitting, reading, claiming or completing an execution.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecutionError {
    /// No execution with this id exists in the client's namespace.
    #[error("execution {0} was not found")]
    NotFound(Uuid),
    /// The execution has no outcome yet (queued, running, retrying or cancel_requested).
    #[error("execution {} is {}", .0.id, .0.status)]
    NotReady(Box<Execution>),
    /// The execution failed; its `error` field holds the detail.
    #[error("execution {} failed", .0.id)]
    Failed(Box<Execution>),
    /// The execution was cancelled.
    #[error("execution {} was cancelled", .0.id)]
    Cancelled(Box<Execution>),
    /// The execution expired before it started.
    #[error("execution {} expired", .0.id)]
    Expired(Box<Execution>),
    /// The idempotency key was already used with a different submission.
    #[error("{0}")]
    Conflict(String),
    /// A payload, metadata or result cannot be encoded, exceeds its limit, or a stored value
    /// cannot be decoded.
    #[error("{0}")]
    Encoding(String),
    /// The worker's lease is no longer valid (expired, taken over, or the execution moved on).
    #[error("{0}")]
    LeaseLost(String),
    /// An argument was invalid; nothing was sent to the backend.
    #[error("{field} {message}")]
    InvalidArgument {
        /// The argument, e.g. `reason` or `limit`.
        field: String,
        /// What was expected and what was given.
        message: String,
    },
    /// The backend's dependency failed (connection dropped, deadlock, misconfiguration).
    #[error(transparent)]
    Connector(#[from] ConnectorOperationError),
    /// The backend failed in a way it could not classify.
    #[error("execution backend error: {0}")]
    Backend(BoxError),
}

impl ExecutionError {
    /// Builds [`ExecutionError::InvalidArgument`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The reference's stale-lease error: "execution lease is no longer valid".
    pub fn lease_lost() -> Self {
        Self::LeaseLost("execution lease is no longer valid".to_string())
    }

    /// Whether this is a [`LeaseLost`](ExecutionError::LeaseLost) error.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Self::LeaseLost(_))
    }

    /// Whether retrying the same call later may succeed (a retryable connector error).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connector(c) if c.is_retryable())
    }

    /// The execution snapshot carried by NotReady, Failed, Cancelled and Expired.
    pub fn execution(&self) -> Option<&Execution> {
        match self {
            Self::NotReady(e) | Self::Failed(e) | Self::Cancelled(e) | Self::Expired(e) => Some(e),
            _ => None,
        }
    }
}

/// `Result` with [`ExecutionError`].
pub type ExecutionResult<T> = Result<T, ExecutionError>;

impl From<ExecutionError> for crate::Error {
    fn from(err: ExecutionError) -> Self {
        match err {
            ExecutionError::Connector(c) => crate::Error::Connector(c),
            ExecutionError::InvalidArgument { field, message } => {
                crate::Error::InvalidArgument { field, message }
            }
            other => crate::Error::Other(Box::new(other)),
        }
    }
}

impl From<ParseStatusError> for ExecutionError {
    fn from(err: ParseStatusError) -> Self {
        Self::invalid(err.field, err.message)
    }
}

//! The runtime's error type.

use crate::connector::{BoxError, ConnectorOperationError};

/// Errors from building and running an app.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A connector failed; see [`ConnectorOperationError::kind`] for whether it is retryable.
    #[error(transparent)]
    Connector(#[from] ConnectorOperationError),
    /// An option or argument was invalid; the message names the field and the expected value.
    #[error("{field} {message}")]
    InvalidArgument {
        /// The field that was wrong, e.g. `tasks[0].concurrency`.
        field: String,
        /// What was expected and what was given.
        message: String,
    },
    /// A task, source or sink was wired wrongly (duplicate name, source for another task, …).
    #[error("{0}")]
    Configuration(String),
    /// A lifecycle hook or resource failed.
    #[error("{context}: {source}")]
    Lifecycle {
        /// What was running, e.g. `startup hook 2` or `opening source orders`.
        context: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Any other failure reported by user code or a connector.
    #[error(transparent)]
    Other(BoxError),
}

impl Error {
    /// Builds [`Error::InvalidArgument`] for `field` with a message saying what was expected.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Wraps any error as [`Error::Other`].
    pub fn other(err: impl Into<BoxError>) -> Self {
        Self::Other(err.into())
    }

    /// The connector error inside, if this is one.
    pub fn as_connector(&self) -> Option<&ConnectorOperationError> {
        match self {
            Self::Connector(e) => Some(e),
            _ => None,
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! Errors raised by connectors (sources, sinks, stores) and how the runtime treats them.
//!
//! A connector reports a failed dependency with a [`ConnectorOperationError`]. Its
//! [`ConnectorErrorKind`] tells the runtime what to do: the retryable kinds
//! ([`Disconnected`](ConnectorErrorKind::Disconnected), [`Transient`](ConnectorErrorKind::Transient),
//! [`Throttled`](ConnectorErrorKind::Throttled)) make a task runner back off and try again, every
//! other kind stops the app with that error.

use std::fmt;
use std::time::Duration;

/// Boxed error used as the cause of connector and task failures.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure a connector saw; decides whether the runtime retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectorErrorKind {
    /// The connection dropped or could not be established; retryable.
    Disconnected,
    /// A passing failure (deadlock, lock timeout, overload); retryable.
    Transient,
    /// The remote side asked us to slow down; retryable after at least one second.
    Throttled,
    /// Credentials, permissions or configuration are wrong; not retryable.
    Misconfigured,
    /// The operation can never succeed as issued (bad SQL, missing table); not retryable.
    Permanent,
    /// The outcome is unknown (the request may or may not have been applied); not retryable.
    Uncertain,
}

impl ConnectorErrorKind {
    /// Whether a runner should back off and retry an operation that failed with this kind.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Disconnected | Self::Transient | Self::Throttled)
    }

    /// The lowercase name used in logs and persisted error details (`"disconnected"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disconnected => "disconnected",
            Self::Transient => "transient",
            Self::Throttled => "throttled",
            Self::Misconfigured => "misconfigured",
            Self::Permanent => "permanent",
            Self::Uncertain => "uncertain",
        }
    }
}

impl fmt::Display for ConnectorErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The connector operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectorOperation {
    /// Opening the resource (connecting, creating tables).
    Open,
    /// Fetching deliveries from a source.
    Fetch,
    /// Renewing a lease.
    Heartbeat,
    /// Sending to a sink.
    Send,
    /// Acknowledging a delivery.
    Ack,
    /// Scheduling a retry of a delivery.
    Retry,
    /// Failing a delivery.
    Fail,
    /// Closing the resource.
    Close,
}

impl ConnectorOperation {
    /// The lowercase name used in logs and persisted error details (`"fetch"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Fetch => "fetch",
            Self::Heartbeat => "heartbeat",
            Self::Send => "send",
            Self::Ack => "ack",
            Self::Retry => "retry",
            Self::Fail => "fail",
            Self::Close => "close",
        }
    }
}

impl fmt::Display for ConnectorOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connector operation failed; `kind` decides whether the runtime retries.
///
/// The message reads `"{backend} {operation} failed ({kind}) for {source_name}"`, followed by
/// the cause. Causes must not carry secrets: connectors redact DSNs before building one.
#[derive(Debug, thiserror::Error)]
#[error("{backend} {operation} failed ({kind}) for {source_name}{}", .cause.as_ref().map(|c| format!(": {c}")).unwrap_or_default())]
pub struct ConnectorOperationError {
    /// The backend that failed, e.g. `"postgres"` or `"memory"`.
    pub backend: String,
    /// The operation that failed.
    pub operation: ConnectorOperation,
    /// The failure class.
    pub kind: ConnectorErrorKind,
    /// The name of the source or sink that saw the failure.
    pub source_name: String,
    /// How long to wait before retrying, when the connector knows better than the runner.
    pub retry_delay: Option<Duration>,
    /// The underlying error.
    #[source]
    pub cause: Option<BoxError>,
}

impl ConnectorOperationError {
    /// Builds an error with no retry hint and no cause.
    pub fn new(
        backend: impl Into<String>,
        operation: ConnectorOperation,
        kind: ConnectorErrorKind,
        source_name: impl Into<String>,
    ) -> Self {
        Self {
            backend: backend.into(),
            operation,
            kind,
            source_name: source_name.into(),
            retry_delay: None,
            cause: None,
        }
    }

    /// Sets how long the runner should wait before retrying.
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = Some(delay);
        self
    }

    /// Attaches the underlying error.
    pub fn with_cause(mut self, cause: impl Into<BoxError>) -> Self {
        self.cause = Some(cause.into());
        self
    }

    /// Whether the runtime should back off and retry.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The back-off a runner applies before retrying after this error: the connector's hint, or
    /// `fallback`; throttling waits at least one second.
    pub fn backoff(&self, fallback: Duration) -> Duration {
        let delay = self.retry_delay.unwrap_or(fallback);
        if self.kind == ConnectorErrorKind::Throttled {
            delay.max(Duration::from_secs(1))
        } else {
            delay
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_disconnected_transient_and_throttled_are_retryable() {
        use ConnectorErrorKind::*;
        let retryable: Vec<_> = [
            Disconnected,
            Transient,
            Throttled,
            Misconfigured,
            Permanent,
            Uncertain,
        ]
        .into_iter()
        .filter(|k| k.is_retryable())
        .collect();
        assert_eq!(retryable, vec![Disconnected, Transient, Throttled]);
    }

    #[test]
    fn message_names_backend_operation_kind_and_source() {
        let err = ConnectorOperationError::new(
            "postgres",
            ConnectorOperation::Fetch,
            ConnectorErrorKind::Disconnected,
            "postgres.execution:billing",
        )
        .with_cause(std::io::Error::other("connection reset"));
        assert_eq!(
            err.to_string(),
            "postgres fetch failed (disconnected) for postgres.execution:billing: connection reset"
        );
    }

    #[test]
    fn throttled_backoff_waits_at_least_one_second() {
        let err = ConnectorOperationError::new(
            "x",
            ConnectorOperation::Fetch,
            ConnectorErrorKind::Throttled,
            "s",
        )
        .with_retry_delay(Duration::from_millis(10));
        assert_eq!(
            err.backoff(Duration::from_millis(5)),
            Duration::from_secs(1)
        );
        let err = ConnectorOperationError::new(
            "x",
            ConnectorOperation::Fetch,
            ConnectorErrorKind::Transient,
            "s",
        );
        assert_eq!(
            err.backoff(Duration::from_millis(5)),
            Duration::from_millis(5)
        );
    }
}

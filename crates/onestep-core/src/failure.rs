//! How a failed attempt is classified and described.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::connector::{BoxError, ConnectorOperationError};

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureKind {
    /// The handler, a hook, a sink or the acknowledgement returned an error.
    Error,
    /// The handler ran past the task's timeout.
    Timeout,
    /// The attempt was cancelled (shutdown, lost lease, or a cancel request).
    Cancelled,
}

impl FailureKind {
    /// The lowercase name (`"error"`, `"timeout"`, `"cancelled"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The stage of the executor that was running when an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Starting the delivery (`start_processing`).
    DeliveryAction,
    /// The task's `before` hook.
    BeforeHook,
    /// The task handler.
    Handler,
    /// The task's `after_success` hook.
    AfterSuccessHook,
    /// Evaluating emit routes.
    Route,
    /// Computing per-sink transforms.
    Transform,
    /// Checking the result can be stored before anything is emitted (tracked execution).
    ResultValidation,
    /// Sending to an emit sink.
    Sink,
    /// Acknowledging or completing the delivery.
    Ack,
}

impl Stage {
    /// The snake_case stage name persisted in error details (`"before_hook"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeliveryAction => "delivery_action",
            Self::BeforeHook => "before_hook",
            Self::Handler => "handler",
            Self::AfterSuccessHook => "after_success_hook",
            Self::Route => "route",
            Self::Transform => "transform",
            Self::ResultValidation => "result_validation",
            Self::Sink => "sink",
            Self::Ack => "ack",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error returned by a handler or hook.
///
/// Any `std::error::Error` converts into it with `?`, keeping its type name as
/// [`exception_type`](TaskError::exception_type) (the last path segment, e.g. `ParseIntError`).
/// It deliberately does not implement `std::error::Error` itself, so that blanket conversion works.
pub struct TaskError(Box<TaskErrorInner>);

struct TaskErrorInner {
    exception_type: String,
    message: String,
    source: Option<BoxError>,
    connector: Option<ConnectorSummary>,
    traceback: Option<String>,
}

/// What the failure record keeps of a [`ConnectorOperationError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorSummary {
    /// The backend name.
    pub backend: String,
    /// The failed operation.
    pub operation: String,
    /// The failure class.
    pub kind: String,
}

impl TaskError {
    /// An error with an explicit type name and message.
    pub fn new(exception_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self(Box::new(TaskErrorInner {
            exception_type: exception_type.into(),
            message: message.into(),
            source: None,
            connector: None,
            traceback: None,
        }))
    }

    /// The same error with a traceback (a Python handler's), which the failure record, the
    /// `on_failure` hooks and the dead letter carry, as the reference's `FailureInfo` does.
    pub fn with_traceback(mut self, traceback: impl Into<String>) -> Self {
        self.0.traceback = Some(traceback.into());
        self
    }

    /// The traceback, when the error has one.
    pub fn traceback(&self) -> Option<&str> {
        self.0.traceback.as_deref()
    }

    /// An error of type `"Error"` with `message`.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::new("Error", message)
    }

    /// The short type name recorded for this error.
    pub fn exception_type(&self) -> &str {
        &self.0.exception_type
    }

    /// The error message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The wrapped error, if any.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.0.source.as_deref()
    }

    /// The connector details when the error came from a connector.
    pub fn connector(&self) -> Option<&ConnectorSummary> {
        self.0.connector.as_ref()
    }
}

/// The last `::` segment of a type name, without generic arguments.
pub(crate) fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(err: E) -> Self {
        let boxed: BoxError = Box::new(err);
        let connector = boxed
            .downcast_ref::<ConnectorOperationError>()
            .map(|c| ConnectorSummary {
                backend: c.backend.clone(),
                operation: c.operation.as_str().to_string(),
                kind: c.kind.as_str().to_string(),
            });
        Self(Box::new(TaskErrorInner {
            exception_type: short_type_name::<E>(),
            message: boxed.to_string(),
            source: Some(boxed),
            connector,
            traceback: None,
        }))
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskError")
            .field("exception_type", &self.0.exception_type)
            .field("message", &self.0.message)
            .finish()
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.exception_type, self.0.message)
    }
}

/// A description of one failed attempt, handed to hooks, retry policies, events and dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureInfo {
    /// Why the attempt failed.
    pub kind: FailureKind,
    /// The short type name of the error (`"ParseIntError"`, `"Elapsed"`, `"Cancelled"`).
    pub exception_type: String,
    /// The error message.
    pub message: String,
    /// The executor stage that failed.
    pub stage: Stage,
    /// Connector details when a connector failed.
    #[serde(skip)]
    pub connector: Option<ConnectorSummary>,
    /// For a failure at stage `sink`: the sinks that received the result before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sinks_succeeded: Vec<String>,
    /// For a failure at stage `sink`: the failed sink and the ones after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sinks_remaining: Vec<String>,
    /// The error's traceback, when it has one (a Python handler's exception).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
}

impl FailureInfo {
    /// Builds a failure record from a task error at `stage`.
    pub fn from_error(kind: FailureKind, stage: Stage, err: &TaskError) -> Self {
        Self {
            kind,
            exception_type: err.0.exception_type.clone(),
            message: err.0.message.clone(),
            stage,
            connector: err.0.connector.clone(),
            sinks_succeeded: Vec::new(),
            sinks_remaining: Vec::new(),
            traceback: err.0.traceback.clone(),
        }
    }

    /// A timeout record for a handler that ran past `timeout`.
    pub fn timeout(timeout: std::time::Duration) -> Self {
        Self {
            kind: FailureKind::Timeout,
            exception_type: "TimeoutError".to_string(),
            message: format!("handler timed out after {:.3}s", timeout.as_secs_f64()),
            stage: Stage::Handler,
            connector: None,
            sinks_succeeded: Vec::new(),
            sinks_remaining: Vec::new(),
            traceback: None,
        }
    }

    /// A cancellation record for an attempt cancelled at `stage`.
    pub fn cancelled(stage: Stage, why: &str) -> Self {
        Self {
            kind: FailureKind::Cancelled,
            exception_type: "CancelledError".to_string(),
            message: why.to_string(),
            stage,
            connector: None,
            sinks_succeeded: Vec::new(),
            sinks_remaining: Vec::new(),
            traceback: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_errors_keep_their_short_type_name() {
        let err: TaskError = "x".parse::<i32>().unwrap_err().into();
        assert_eq!(err.exception_type(), "ParseIntError");
        assert_eq!(err.message(), "invalid digit found in string");
    }

    #[test]
    fn connector_errors_keep_backend_operation_and_kind() {
        use crate::connector::{ConnectorErrorKind, ConnectorOperation};
        let err: TaskError = ConnectorOperationError::new(
            "http",
            ConnectorOperation::Send,
            ConnectorErrorKind::Throttled,
            "hook",
        )
        .into();
        let summary = err.connector().unwrap();
        assert_eq!(
            (summary.backend.as_str(), summary.operation.as_str()),
            ("http", "send")
        );
        assert_eq!(summary.kind, "throttled");
        assert_eq!(err.exception_type(), "ConnectorOperationError");
    }
}

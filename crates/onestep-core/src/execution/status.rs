//! The lifecycle of an execution.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an execution is in its lifecycle.
///
/// ```text
///  submit ─► queued ──claim──► running ──success──► succeeded
///              ▲ │               │ │ └──final failure──► failed
///   retry/     │ │ cancel        │ └──retry / lease lost──► retrying ──claim──► running …
///   release ───┘ ▼               ▼ cancel
///           cancelled ◄── cancel_requested (the worker stops cooperatively, or its lease expires)
///  queued/retrying past expires_at ──► expired
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Waiting for a worker.
    Queued,
    /// A worker holds its lease.
    Running,
    /// Waiting for another attempt (after a failure, a lost lease or a shutdown).
    Retrying,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// A cancel was requested while running; the worker stops cooperatively.
    CancelRequested,
    /// Cancelled.
    Cancelled,
    /// Not started before its `expires_at`.
    Expired,
}

impl ExecutionStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [ExecutionStatus; 8] = [
        Self::Queued,
        Self::Running,
        Self::Retrying,
        Self::Succeeded,
        Self::Failed,
        Self::CancelRequested,
        Self::Cancelled,
        Self::Expired,
    ];

    /// Whether the execution is finished for good (succeeded, failed, cancelled, expired).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Cancelled | Self::Expired
        )
    }

    /// The stored name (`"cancel_requested"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Retrying => "retrying",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::CancelRequested => "cancel_requested",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is none of the stored names; converts into
/// [`ExecutionError::InvalidArgument`](super::ExecutionError::InvalidArgument).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {message}")]
pub struct ParseStatusError {
    /// `status` or `attempt status`.
    pub field: &'static str,
    /// What was expected and what was given.
    pub message: String,
}

impl FromStr for ExecutionStatus {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| ParseStatusError {
                field: "status",
                message: format!(
                    "must be one of {}; got {s:?}",
                    Self::ALL.map(|s| s.as_str()).join(", ")
                ),
            })
    }
}

/// The status of one attempt in the attempts history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The attempt holds the lease.
    Running,
    /// The attempt completed the execution successfully.
    Succeeded,
    /// The attempt failed and the execution was scheduled again.
    Retrying,
    /// The attempt failed the execution.
    Failed,
    /// The attempt ended because the execution was cancelled.
    Cancelled,
    /// The attempt's lease expired or it was released unstarted.
    LeaseLost,
}

impl AttemptStatus {
    /// Every attempt status.
    pub const ALL: [AttemptStatus; 6] = [
        Self::Running,
        Self::Succeeded,
        Self::Retrying,
        Self::Failed,
        Self::Cancelled,
        Self::LeaseLost,
    ];

    /// The stored name (`"lease_lost"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::LeaseLost => "lease_lost",
        }
    }
}

impl FromStr for AttemptStatus {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| ParseStatusError {
                field: "attempt status",
                message: format!("unknown value {s:?}"),
            })
    }
}

impl fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_statuses_are_succeeded_failed_cancelled_expired() {
        let terminal: Vec<_> = ExecutionStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(terminal, ["succeeded", "failed", "cancelled", "expired"]);
    }

    #[test]
    fn statuses_parse_from_their_stored_names_only() {
        for status in ExecutionStatus::ALL {
            assert_eq!(status.as_str().parse::<ExecutionStatus>().unwrap(), status);
        }
        let err = "done".parse::<ExecutionStatus>().unwrap_err().to_string();
        assert!(
            err.starts_with("status must be one of queued, running"),
            "{err}"
        );
    }
}

//! What a backend reports of an execution: [`Execution`], its [`ExecutionErrorDetail`] and
//! pages of them. Plain data; the checks of what enters the API are in
//! [`record`](super::record).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use super::status::ExecutionStatus;
use crate::failure::FailureInfo;

/// The error persisted with a failed (or retrying) execution: public classification only, never
/// messages or tracebacks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecutionErrorDetail {
    /// `error`, `timeout` or `cancelled` from the runtime (at most 64 characters).
    pub kind: String,
    /// The error's type name (at most 255 characters).
    pub exception_type: String,
    /// The executor stage that failed.
    pub stage: Option<String>,
    /// The connector backend, when a connector failed.
    pub backend: Option<String>,
    /// The connector operation, when a connector failed.
    pub operation: Option<String>,
    /// The connector failure class, when a connector failed.
    pub connector_kind: Option<String>,
    /// For a failure at stage `sink`: the sinks that received the result, comma-separated (the
    /// reference 1.15's `sinks_succeeded`; at most 1024 characters).
    #[serde(default)]
    pub sinks_succeeded: Option<String>,
    /// For a failure at stage `sink`: the failed sink and the ones after it, comma-separated.
    #[serde(default)]
    pub sinks_remaining: Option<String>,
}

impl ExecutionErrorDetail {
    /// The detail the runtime records for a failed attempt. Always valid: blank names become
    /// `Error`, long ones are clipped, and U+0000 (which no backend stores) becomes U+FFFD.
    pub fn from_failure(failure: &FailureInfo) -> Self {
        let clip = |s: &str, max: usize| -> String {
            let s = s.trim();
            if s.is_empty() {
                "Error".to_string()
            } else {
                s.chars()
                    .take(max)
                    .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
                    .collect()
            }
        };
        Self {
            kind: failure.kind.as_str().to_string(),
            exception_type: clip(&failure.exception_type, 255),
            stage: Some(failure.stage.as_str().to_string()),
            backend: failure.connector.as_ref().map(|c| clip(&c.backend, 255)),
            operation: failure.connector.as_ref().map(|c| c.operation.clone()),
            connector_kind: failure.connector.as_ref().map(|c| c.kind.clone()),
            sinks_succeeded: join_clipped(&failure.sinks_succeeded),
            sinks_remaining: join_clipped(&failure.sinks_remaining),
        }
    }

    /// The stored JSON: all eight keys of the reference's record, nulls included.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "kind": self.kind,
            "exception_type": self.exception_type,
            "stage": self.stage,
            "backend": self.backend,
            "operation": self.operation,
            "connector_kind": self.connector_kind,
            "sinks_succeeded": self.sinks_succeeded,
            "sinks_remaining": self.sinks_remaining,
        })
    }
}

/// Sink names comma-joined, clipped to 1024 characters (U+0000 replaced by U+FFFD); `None` when
/// there are none.
fn join_clipped(names: &[String]) -> Option<String> {
    let joined = names.join(",");
    (!joined.trim().is_empty()).then(|| {
        joined
            .chars()
            .take(1024)
            .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
            .collect()
    })
}

/// An immutable snapshot of one execution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Execution {
    /// The execution id.
    pub id: Uuid,
    /// The namespace it was submitted in.
    pub namespace: String,
    /// The task that runs it.
    pub task_name: String,
    /// Where it is in its lifecycle.
    pub status: ExecutionStatus,
    /// The submitted payload (decoded; tagged values stay tagged).
    pub payload: Value,
    /// The submitted metadata (decoded).
    pub metadata: Map<String, Value>,
    /// The handler's result, once succeeded (`None` also when the handler returned nothing).
    pub result: Option<Value>,
    /// The last error, when failed or retrying after a failure.
    pub error: Option<ExecutionErrorDetail>,
    /// How many attempts started (claims, including ones whose lease was lost or released).
    pub attempts: u32,
    /// When it was submitted.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it may next be claimed.
    #[serde(with = "time::serde::rfc3339")]
    pub available_at: OffsetDateTime,
    /// When its first attempt started.
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    /// When it reached a terminal status.
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// When a cancel was requested.
    #[serde(with = "time::serde::rfc3339::option")]
    pub cancel_requested_at: Option<OffsetDateTime>,
    /// The latest time it may start; queued past it, it expires.
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// Bumped on every state change (claim, completion, cancel, expiry, reclaim, release).
    pub version: i64,
}

impl Execution {
    /// Whether the execution is finished for good.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }
}

/// One page of [`list`](super::ExecutionClient::list), newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionPage {
    /// The executions on this page.
    pub items: Vec<Execution>,
    /// Pass this as `cursor` to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

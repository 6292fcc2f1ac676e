//! The values that cross the execution API: requests, snapshots, pages, completions, leases.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use super::error::{ExecutionError, ExecutionResult};
use super::status::ExecutionStatus;
use super::stored::{check_expires_at, reject_nul};
use crate::failure::FailureInfo;

/// Checks a text field as the reference does: stripped, non-empty, at most `max` characters; and
/// without U+0000, which no backend stores.
pub(crate) fn text(field: &str, value: &str, max: usize) -> ExecutionResult<String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(ExecutionError::invalid(field, "must be a non-empty string"));
    }
    reject_nul(field, trimmed)?;
    let len = trimmed.chars().count();
    if len > max {
        return Err(ExecutionError::invalid(
            field,
            format!("must be at most {max} characters, got {len}"),
        ));
    }
    Ok(trimmed.to_string())
}

/// Checks a name (namespace, task name, idempotency key, worker id) like [`text`], and also
/// refuses control characters: such a name would be printed raw by tools and logs, where an
/// escape sequence rewrites an operator's terminal.
pub(crate) fn name(field: &str, value: &str, max: usize) -> ExecutionResult<String> {
    let checked = text(field, value, max)?;
    reject_control(field, &checked)?;
    Ok(checked)
}

/// Refuses a control character (Unicode category Cc: U+0000–U+001F, U+007F–U+009F) in `text`,
/// naming the first one and where it is.
///
/// ```
/// use onestep_core::execution::record::reject_control;
///
/// assert!(reject_control("task_name", "report").is_ok());
/// assert_eq!(
///     reject_control("task_name", "re\u{1b}[2Jport").unwrap_err().to_string(),
///     "task_name must not contain control characters; found U+001B at character 3"
/// );
/// ```
pub fn reject_control(field: &str, text: &str) -> ExecutionResult<()> {
    match text.chars().enumerate().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(ExecutionError::invalid(
            field,
            format!(
                "must not contain control characters; found U+{:04X} at character {}",
                u32::from(c),
                at + 1
            ),
        )),
        None => Ok(()),
    }
}

/// Checks a delay: finite, >= 0 and at most [`MAX_SECONDS`](crate::clock::MAX_SECONDS).
fn check_delay(delay: Option<f64>) -> ExecutionResult<()> {
    match delay {
        Some(d) if !(d.is_finite() && (0.0..=crate::clock::MAX_SECONDS).contains(&d)) => {
            Err(ExecutionError::invalid(
                "delay_s",
                format!(
                    "must be a finite number >= 0, at most {} (100 years), got {d}",
                    crate::clock::MAX_SECONDS
                ),
            ))
        }
        _ => Ok(()),
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

fn optional_text(
    field: &str,
    value: Option<String>,
    max: usize,
) -> ExecutionResult<Option<String>> {
    value.map(|v| text(field, &v, max)).transpose()
}

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
    /// A validated detail with `kind` and `exception_type` and no optional fields.
    pub fn new(kind: &str, exception_type: &str) -> ExecutionResult<Self> {
        Ok(Self {
            kind: text("kind", kind, 64)?,
            exception_type: text("exception_type", exception_type, 255)?,
            stage: None,
            backend: None,
            operation: None,
            connector_kind: None,
            sinks_succeeded: None,
            sinks_remaining: None,
        })
    }

    /// Returns the detail with every field validated and stripped (as the reference normalizes).
    pub fn validated(self) -> ExecutionResult<Self> {
        Ok(Self {
            kind: text("kind", &self.kind, 64)?,
            exception_type: text("exception_type", &self.exception_type, 255)?,
            stage: optional_text("stage", self.stage, 255)?,
            backend: optional_text("backend", self.backend, 255)?,
            operation: optional_text("operation", self.operation, 255)?,
            connector_kind: optional_text("connector_kind", self.connector_kind, 255)?,
            sinks_succeeded: optional_text(
                "sinks_succeeded",
                self.sinks_succeeded.filter(|s| !s.trim().is_empty()),
                1024,
            )?,
            sinks_remaining: optional_text(
                "sinks_remaining",
                self.sinks_remaining.filter(|s| !s.trim().is_empty()),
                1024,
            )?,
        })
    }

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

/// What to list: a namespace, optional task and status filters, a page size and a cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionQuery {
    /// The namespace.
    pub namespace: String,
    /// Only this task.
    pub task_name: Option<String>,
    /// Only this status.
    pub status: Option<ExecutionStatus>,
    /// Page size, 1..=200 (default 50).
    pub limit: u32,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl ExecutionQuery {
    /// Checks every field as the reference does.
    pub fn validate(&self) -> ExecutionResult<()> {
        name("namespace", &self.namespace, 255)?;
        if let Some(task) = &self.task_name {
            name("task_name", task, 255)?;
        }
        if !(1..=200).contains(&self.limit) {
            return Err(ExecutionError::invalid(
                "limit",
                format!("must be between 1 and 200, got {}", self.limit),
            ));
        }
        if self.cursor.as_deref().is_some_and(str::is_empty) {
            return Err(ExecutionError::invalid(
                "cursor",
                "must be a non-empty string",
            ));
        }
        Ok(())
    }
}

/// Options of one submission.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubmitOptions {
    /// Makes the submission idempotent: the same key with the same submission returns the
    /// existing execution; with a different submission it is a conflict. 1..=255 characters.
    pub idempotency_key: Option<String>,
    /// Metadata stored with the execution and given to the worker (key `onestep.execution` is
    /// reserved).
    pub metadata: Map<String, Value>,
    /// Seconds before the execution may be claimed (finite, >= 0).
    pub delay_s: Option<f64>,
    /// The latest time the execution may start; must carry its offset and lie in years
    /// 1..=9999 once converted to UTC.
    pub expires_at: Option<OffsetDateTime>,
}

impl SubmitOptions {
    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the metadata.
    pub fn metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Delays the first claim by `delay`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_s = Some(delay.as_secs_f64());
        self
    }

    /// Sets the latest start time.
    pub fn expires_at(mut self, at: OffsetDateTime) -> Self {
        self.expires_at = Some(at);
        self
    }
}

/// A validated submission, as a backend receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRequest {
    /// The namespace (1..=255, stripped).
    pub namespace: String,
    /// The task (1..=255, stripped).
    pub task_name: String,
    /// The payload, not yet encoded.
    pub payload: Value,
    /// The idempotency key (1..=255, stripped).
    pub idempotency_key: Option<String>,
    /// The metadata, not yet encoded.
    pub metadata: Map<String, Value>,
    /// The delay in seconds.
    pub delay_s: Option<f64>,
    /// The latest start time, in its original offset (the digest hashes that form).
    pub expires_at: Option<OffsetDateTime>,
}

impl ExecutionRequest {
    /// Validates a submission; errors name the field and happen before any I/O. Payload and
    /// metadata are checked when a backend encodes them (see
    /// [`encode_storable`](super::stored::encode_storable)).
    pub fn new(
        namespace: &str,
        task_name: &str,
        payload: Value,
        options: SubmitOptions,
    ) -> ExecutionResult<Self> {
        let namespace = name("namespace", namespace, 255)?;
        let task_name = name("task_name", task_name, 255)?;
        let idempotency_key = options
            .idempotency_key
            .map(|key| name("idempotency_key", &key, 255))
            .transpose()?;
        let request = Self {
            namespace,
            task_name,
            payload,
            idempotency_key,
            metadata: options.metadata,
            delay_s: options.delay_s,
            expires_at: options.expires_at,
        };
        request.validate()?;
        Ok(request)
    }

    /// Checks the fields as [`new`](ExecutionRequest::new) does, without stripping them: names and
    /// key non-blank, at most 255 characters and free of U+0000; the delay finite, >= 0 and at
    /// most 100 years; `expires_at` in years 1..=9999 in UTC. Backends call it (through
    /// [`encode_submission`](super::stored::encode_submission)), so a request built field by
    /// field is held to the same rules.
    pub fn validate(&self) -> ExecutionResult<()> {
        name("namespace", &self.namespace, 255)?;
        name("task_name", &self.task_name, 255)?;
        if let Some(key) = &self.idempotency_key {
            name("idempotency_key", key, 255)?;
        }
        check_delay(self.delay_s)?;
        if let Some(at) = self.expires_at {
            check_expires_at(at)?;
        }
        Ok(())
    }
}

/// How a worker ends an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecutionCompletion {
    /// The handler succeeded with `result` (`Value::Null` for "no result").
    Succeeded {
        /// The handler's return value.
        result: Value,
    },
    /// The attempt failed and should be retried after `delay_s`.
    Retrying {
        /// The failure, kept on the execution as its last error.
        error: Option<ExecutionErrorDetail>,
        /// Seconds until the retry may be claimed.
        delay_s: Option<f64>,
    },
    /// The attempt failed for good.
    Failed {
        /// The failure.
        error: Option<ExecutionErrorDetail>,
    },
    /// The attempt stopped because the execution was cancelled.
    Cancelled,
}

impl ExecutionCompletion {
    /// The status the completion asks for.
    pub fn status(&self) -> ExecutionStatus {
        match self {
            Self::Succeeded { .. } => ExecutionStatus::Succeeded,
            Self::Retrying { .. } => ExecutionStatus::Retrying,
            Self::Failed { .. } => ExecutionStatus::Failed,
            Self::Cancelled => ExecutionStatus::Cancelled,
        }
    }

    /// Checks the delay (finite, >= 0) and the error's text fields.
    pub fn validate(self) -> ExecutionResult<Self> {
        Ok(match self {
            Self::Retrying { error, delay_s } => {
                check_delay(delay_s)?;
                Self::Retrying {
                    error: error.map(ExecutionErrorDetail::validated).transpose()?,
                    delay_s,
                }
            }
            Self::Failed { error } => Self::Failed {
                error: error.map(ExecutionErrorDetail::validated).transpose()?,
            },
            other => other,
        })
    }

    /// The error carried, if any.
    pub fn error(&self) -> Option<&ExecutionErrorDetail> {
        match self {
            Self::Retrying { error, .. } | Self::Failed { error } => error.as_ref(),
            _ => None,
        }
    }
}

/// A claimed execution: the snapshot plus the lease that fences the worker's writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionLease {
    /// The execution as claimed (status running).
    pub execution: Execution,
    /// The new attempt's id.
    pub attempt_id: Uuid,
    /// The token every heartbeat, completion and release must present.
    pub lease_token: Uuid,
    /// When the lease ends unless renewed.
    pub lease_expires_at: OffsetDateTime,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatResult {
    /// The renewed lease end.
    pub lease_expires_at: OffsetDateTime,
    /// Whether a cancel was requested; the worker should stop.
    pub cancel_requested: bool,
}

/// Size limits on the canonical encoding of payload, metadata and result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionLimits {
    /// Payload limit in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Metadata limit in bytes (default 64 KiB).
    pub max_metadata_bytes: usize,
    /// Result limit in bytes (default 1 MiB).
    pub max_result_bytes: usize,
}

impl Default for ExecutionLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: 1_048_576,
            max_metadata_bytes: 65_536,
            max_result_bytes: 1_048_576,
        }
    }
}

impl ExecutionLimits {
    /// Checks every limit is positive.
    pub fn validate(self) -> ExecutionResult<Self> {
        for (field, value) in [
            ("max_payload_bytes", self.max_payload_bytes),
            ("max_metadata_bytes", self.max_metadata_bytes),
            ("max_result_bytes", self.max_result_bytes),
        ] {
            if value == 0 {
                return Err(ExecutionError::invalid(
                    field,
                    "must be a positive integer, got 0",
                ));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_with_control_characters_are_refused_at_submit() {
        let with = |namespace: &str, task: &str, key: &str| {
            ExecutionRequest::new(
                namespace,
                task,
                Value::Null,
                SubmitOptions::default().idempotency_key(key),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert_eq!(with("ns", "report", "order 123"), Ok(()), "spaces are fine");
        assert_eq!(
            with("ns", "rep\u{1b}[2Jort", "k"),
            Err(
                "task_name must not contain control characters; found U+001B at character 4".into()
            )
        );
        assert_eq!(
            with("n\ns", "report", "k"),
            Err(
                "namespace must not contain control characters; found U+000A at character 2".into()
            )
        );
        assert_eq!(
            with("ns", "report", "k\u{7f}"),
            Err(
                "idempotency_key must not contain control characters; found U+007F at character 2"
                    .into()
            )
        );
    }

    #[test]
    fn error_detail_fields_are_stripped_and_bounded() {
        let detail = ExecutionErrorDetail {
            kind: " error ".into(),
            exception_type: " ValueError ".into(),
            stage: Some(" handler ".into()),
            backend: Some(" postgres ".into()),
            operation: Some(" fetch ".into()),
            connector_kind: Some(" transient ".into()),
            sinks_succeeded: None,
            sinks_remaining: Some(" mail,webhook ".into()),
        }
        .validated()
        .unwrap();
        assert_eq!(detail.kind, "error");
        assert_eq!(detail.stage.as_deref(), Some("handler"));
        assert_eq!(detail.connector_kind.as_deref(), Some("transient"));
        let cases = [
            ("kind", ExecutionErrorDetail::new(" ", "E")),
            ("kind", ExecutionErrorDetail::new(&"k".repeat(65), "E")),
            ("exception_type", ExecutionErrorDetail::new("error", "")),
            (
                "exception_type",
                ExecutionErrorDetail::new("error", &"E".repeat(256)),
            ),
        ];
        for (field, result) in cases {
            assert!(result.unwrap_err().to_string().starts_with(field));
        }
        let blank_stage = ExecutionErrorDetail {
            stage: Some("  ".into()),
            ..ExecutionErrorDetail::new("error", "E").unwrap()
        };
        assert_eq!(
            blank_stage.validated().unwrap_err().to_string(),
            "stage must be a non-empty string"
        );
    }

    #[test]
    fn requests_reject_blank_names_keys_and_bad_delays_before_io() {
        let ok = ExecutionRequest::new(
            " ns ",
            " task ",
            Value::Null,
            SubmitOptions::default().idempotency_key(" k "),
        )
        .unwrap();
        assert_eq!(
            (ok.namespace.as_str(), ok.task_name.as_str()),
            ("ns", "task")
        );
        assert_eq!(ok.idempotency_key.as_deref(), Some("k"));
        let err = |ns: &str, task: &str, opts: SubmitOptions| {
            ExecutionRequest::new(ns, task, Value::Null, opts)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("", "t", SubmitOptions::default()),
            "namespace must be a non-empty string"
        );
        assert_eq!(
            err("n", " ", SubmitOptions::default()),
            "task_name must be a non-empty string"
        );
        assert_eq!(
            err("n", "t", SubmitOptions::default().idempotency_key("  ")),
            "idempotency_key must be a non-empty string"
        );
        assert_eq!(
            err(
                "n",
                "t",
                SubmitOptions {
                    delay_s: Some(-1.0),
                    ..Default::default()
                }
            ),
            "delay_s must be a finite number >= 0, at most 3155760000 (100 years), got -1"
        );
        assert_eq!(
            err(&"n".repeat(256), "t", SubmitOptions::default()),
            "namespace must be at most 255 characters, got 256"
        );
        assert!(
            err(
                "n",
                "t",
                SubmitOptions {
                    delay_s: Some(1e20),
                    ..Default::default()
                }
            )
            .contains("at most 3155760000")
        );
    }

    #[test]
    fn queries_bound_the_page_size() {
        let q = |limit| ExecutionQuery {
            namespace: "n".into(),
            task_name: None,
            status: None,
            limit,
            cursor: None,
        };
        assert!(q(1).validate().is_ok() && q(200).validate().is_ok());
        assert_eq!(
            q(0).validate().unwrap_err().to_string(),
            "limit must be between 1 and 200, got 0"
        );
        assert!(q(201).validate().is_err());
    }
}

//! The values that cross the execution API: requests, snapshots, pages, completions, leases.

use std::time::Duration;

use serde_json::{Map, Value};
use time::{OffsetDateTime, UtcOffset};
use uuid::Uuid;

use super::error::{ExecutionError, ExecutionResult};
use super::status::ExecutionStatus;

pub use super::snapshot::{Execution, ExecutionErrorDetail, ExecutionPage};

/// Rejects text holding U+0000, which PostgreSQL cannot store in `text` or `jsonb`. Every backend
/// rejects it, so all of them accept the same data.
///
/// ```
/// use onestep_core::execution::stored::reject_nul;
///
/// assert!(reject_nul("reason", "fine").is_ok());
/// assert_eq!(
///     reject_nul("reason", "a\0b").unwrap_err().to_string(),
///     "reason must not contain the NUL character (\\u0000)"
/// );
/// ```
pub fn reject_nul(field: &str, text: &str) -> ExecutionResult<()> {
    if text.contains('\0') {
        return Err(ExecutionError::invalid(
            field,
            "must not contain the NUL character (\\u0000)",
        ));
    }
    Ok(())
}

/// Checks an `expires_at`: the instant must lie in years 1..=9999 once converted to UTC (what
/// the stored format and Python's `datetime` cover). Returns it in UTC.
pub fn check_expires_at(at: OffsetDateTime) -> ExecutionResult<OffsetDateTime> {
    match at.checked_to_offset(UtcOffset::UTC) {
        Some(utc) if (1..=9999).contains(&utc.year()) => Ok(utc),
        _ => Err(ExecutionError::invalid(
            "expires_at",
            format!("must be between 0001-01-01 and 9999-12-31 in UTC, got {at}"),
        )),
    }
}

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

fn optional_text(
    field: &str,
    value: Option<String>,
    max: usize,
) -> ExecutionResult<Option<String>> {
    value.map(|v| text(field, &v, max)).transpose()
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
    /// The first page (50 executions, newest first) of every task and status in `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            task_name: None,
            status: None,
            limit: 50,
            cursor: None,
        }
    }

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

/// The waiting executions of one task (`queued` and `retrying`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskBacklog {
    /// The task.
    pub task_name: String,
    /// Every waiting execution, ready or not yet due.
    pub depth: u64,
    /// Those a worker could claim now (`available_at` has passed).
    pub ready: u64,
    /// The earliest `available_at` that has passed: how long the oldest ready one has waited.
    pub oldest_ready_at: Option<OffsetDateTime>,
}

/// Options of one submission; set them with the builder methods.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
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

    /// Delays the first claim by `seconds` as given (the HTTP API's and Python's `delay_s`, which
    /// may be any finite number >= 0; checked on submit).
    pub fn delay_secs(mut self, seconds: f64) -> Self {
        self.delay_s = Some(seconds);
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

    /// Whether [`Self::validate`] has nothing to check in this completion (a success or a
    /// cancel): it then returns it as it is, so a caller may use it without validating a copy.
    pub fn needs_no_validation(&self) -> bool {
        matches!(self, Self::Succeeded { .. } | Self::Cancelled)
    }

    /// Checks the delay (finite, >= 0) and the error's text fields.
    pub fn validate(self) -> ExecutionResult<Self> {
        if self.needs_no_validation() {
            return Ok(self);
        }
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

/// What a worker needs of a claimed execution to run it, answered by
/// [`LeasedExecutionBackend::claim_to_run`](super::LeasedExecutionBackend::claim_to_run): the
/// execution's identity, input and attempt count, and the lease. A backend may read only these
/// columns of each claimed row, which an [`ExecutionLease`]'s full snapshot would have it decode
/// every one of (a worker reads none of the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedExecution {
    /// The execution's id.
    pub id: Uuid,
    /// Its namespace.
    pub namespace: String,
    /// Its task.
    pub task_name: String,
    /// The decoded payload.
    pub payload: Value,
    /// The decoded metadata.
    pub metadata: Map<String, Value>,
    /// Attempts started, this one included.
    pub attempts: u32,
    /// When it became ready to run (for the pickup-delay metric).
    pub available_at: OffsetDateTime,
    /// The new attempt's id.
    pub attempt_id: Uuid,
    /// The token every heartbeat, completion and release must present.
    pub lease_token: Uuid,
    /// When the lease ends unless renewed.
    pub lease_expires_at: OffsetDateTime,
}

impl From<ExecutionLease> for ClaimedExecution {
    fn from(lease: ExecutionLease) -> Self {
        let execution = lease.execution;
        Self {
            id: execution.id,
            namespace: execution.namespace,
            task_name: execution.task_name,
            payload: execution.payload,
            metadata: execution.metadata,
            attempts: execution.attempts,
            available_at: execution.available_at,
            attempt_id: lease.attempt_id,
            lease_token: lease.lease_token,
            lease_expires_at: lease.lease_expires_at,
        }
    }
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

//! How executions are stored: encoding with size limits, the row shape every backend keeps, and
//! decoding rows back into snapshots. Shared by the memory backend and the SQL backends.

use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use super::canonical::canonical_size;
use super::codec::{decode_value, encode_value};
use super::cursor::encode_cursor;
use super::digest::{OriginalIso, submission_digest};
use super::error::{ExecutionError, ExecutionResult};
use super::record::{
    Execution, ExecutionErrorDetail, ExecutionLimits, ExecutionPage, ExecutionRequest,
};
use super::status::{AttemptStatus, ExecutionStatus};

/// The metadata key the runtime adds for workers; submissions may not use it.
pub const RESERVED_METADATA_KEY: &str = "onestep.execution";

/// A submission ready to store: encoded values and the idempotency digest.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedSubmission {
    /// The encoded payload.
    pub payload: Value,
    /// The encoded metadata (an object).
    pub metadata: Value,
    /// The submission digest, present exactly when an idempotency key was given.
    pub digest: Option<String>,
}

/// Encodes a submission in the reference's order: reserved key check, encode payload, encode
/// metadata, payload size, metadata size, then the digest when a key was given.
pub fn encode_submission(
    request: &ExecutionRequest,
    limits: &ExecutionLimits,
) -> ExecutionResult<EncodedSubmission> {
    if request.metadata.contains_key(RESERVED_METADATA_KEY) {
        return Err(ExecutionError::invalid(
            "metadata",
            format!("key '{RESERVED_METADATA_KEY}' is reserved"),
        ));
    }
    let payload = encode_value(&request.payload)
        .map_err(|e| ExecutionError::Encoding(format!("cannot encode execution payload: {e}")))?;
    let metadata = encode_value(&Value::Object(request.metadata.clone()))
        .map_err(|e| ExecutionError::Encoding(format!("cannot encode execution metadata: {e}")))?;
    if canonical_size(&payload) > limits.max_payload_bytes {
        return Err(ExecutionError::Encoding(
            "execution payload exceeds the configured limit".into(),
        ));
    }
    if canonical_size(&metadata) > limits.max_metadata_bytes {
        return Err(ExecutionError::Encoding(
            "execution metadata exceeds the configured limit".into(),
        ));
    }
    let digest = request.idempotency_key.as_ref().map(|_| {
        submission_digest(
            &request.namespace,
            &request.task_name,
            &payload,
            &metadata,
            request.delay_s,
            request.expires_at.map(OriginalIso::new).as_ref(),
        )
    });
    Ok(EncodedSubmission {
        payload,
        metadata,
        digest,
    })
}

/// Encodes a handler result and checks its size ("execution result exceeds the configured limit").
pub fn encode_result(result: &Value, limits: &ExecutionLimits) -> ExecutionResult<Value> {
    let encoded = encode_value(result)
        .map_err(|e| ExecutionError::Encoding(format!("cannot encode execution result: {e}")))?;
    if canonical_size(&encoded) > limits.max_result_bytes {
        return Err(ExecutionError::Encoding(
            "execution result exceeds the configured limit".into(),
        ));
    }
    Ok(encoded)
}

/// One row of the executions table, as every backend stores it (values encoded).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRow {
    /// Primary key.
    pub id: Uuid,
    /// Namespace.
    pub namespace: String,
    /// Task name.
    pub task_name: String,
    /// Status.
    pub status: ExecutionStatus,
    /// Encoded payload.
    pub payload: Value,
    /// Encoded metadata.
    pub metadata: Value,
    /// Encoded result.
    pub result: Option<Value>,
    /// Error detail JSON (plain, six keys).
    pub error: Option<Value>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Submission digest (present with the key).
    pub submission_digest: Option<String>,
    /// Attempts started.
    pub attempts: i32,
    /// Earliest claim time.
    pub available_at: OffsetDateTime,
    /// The current lease's token.
    pub lease_token: Option<Uuid>,
    /// The current lease's end.
    pub lease_expires_at: Option<OffsetDateTime>,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// Why a cancel was requested.
    pub cancel_reason: Option<String>,
    /// When a cancel was requested.
    pub cancel_requested_at: Option<OffsetDateTime>,
    /// Latest start time.
    pub expires_at: Option<OffsetDateTime>,
    /// Submission time.
    pub created_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
    /// First start.
    pub started_at: Option<OffsetDateTime>,
    /// Terminal time.
    pub finished_at: Option<OffsetDateTime>,
    /// Change counter.
    pub version: i64,
}

/// A list page from rows fetched newest first with one row more than `limit`: the first `limit`
/// rows become the items, and the extra row (when present) means there is a next page, whose
/// cursor is the last item's `(created_at, id)`.
pub fn page_of<R: std::borrow::Borrow<ExecutionRow>>(
    rows: Vec<R>,
    limit: usize,
) -> ExecutionResult<ExecutionPage> {
    let more = rows.len() > limit;
    let items = rows
        .iter()
        .take(limit)
        .map(|r| r.borrow().to_execution())
        .collect::<ExecutionResult<Vec<_>>>()?;
    let next_cursor = if more {
        items.last().map(|e| encode_cursor(e.created_at, e.id))
    } else {
        None
    };
    Ok(ExecutionPage { items, next_cursor })
}

impl ExecutionRow {
    /// A new queued row for an encoded submission at `now`.
    pub fn queued(
        request: &ExecutionRequest,
        encoded: EncodedSubmission,
        id: Uuid,
        now: OffsetDateTime,
    ) -> Self {
        let available_at = match request.delay_s {
            Some(delay) if delay > 0.0 => now + std::time::Duration::from_secs_f64(delay),
            _ => now,
        };
        Self {
            id,
            namespace: request.namespace.clone(),
            task_name: request.task_name.clone(),
            status: ExecutionStatus::Queued,
            payload: encoded.payload,
            metadata: encoded.metadata,
            result: None,
            error: None,
            idempotency_key: request.idempotency_key.clone(),
            submission_digest: encoded.digest,
            attempts: 0,
            available_at,
            lease_token: None,
            lease_expires_at: None,
            worker_id: None,
            cancel_reason: None,
            cancel_requested_at: None,
            expires_at: request
                .expires_at
                .map(|t| t.to_offset(time::UtcOffset::UTC)),
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: None,
            version: 0,
        }
    }

    /// Decodes the row into a snapshot; stored values that fail strict decoding give
    /// "cannot decode execution {id}: …".
    pub fn to_execution(&self) -> ExecutionResult<Execution> {
        let fail = |what: String| {
            ExecutionError::Encoding(format!("cannot decode execution {}: {what}", self.id))
        };
        let payload = decode_value(&self.payload).map_err(|e| fail(format!("payload: {e}")))?;
        let metadata =
            match decode_value(&self.metadata).map_err(|e| fail(format!("metadata: {e}")))? {
                Value::Object(map) => map,
                Value::Null => Map::new(),
                other => return Err(fail(format!("metadata must be an object, got {other}"))),
            };
        let result = match &self.result {
            Some(value) => Some(decode_value(value).map_err(|e| fail(format!("result: {e}")))?),
            None => None,
        };
        let error = match &self.error {
            Some(Value::Null) | None => None,
            Some(value) => Some(
                serde_json::from_value::<ExecutionErrorDetail>(value.clone())
                    .map_err(|e| fail(format!("error: {e}")))?,
            ),
        };
        let utc = |t: OffsetDateTime| t.to_offset(time::UtcOffset::UTC);
        Ok(Execution {
            id: self.id,
            namespace: self.namespace.clone(),
            task_name: self.task_name.clone(),
            status: self.status,
            payload,
            metadata,
            result,
            error,
            attempts: u32::try_from(self.attempts.max(0)).unwrap_or(0),
            created_at: utc(self.created_at),
            available_at: utc(self.available_at),
            started_at: self.started_at.map(utc),
            finished_at: self.finished_at.map(utc),
            cancel_requested_at: self.cancel_requested_at.map(utc),
            expires_at: self.expires_at.map(utc),
            version: self.version,
        })
    }
}

/// One row of the attempts table.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// The attempt id.
    pub id: Uuid,
    /// The execution it belongs to.
    pub execution_id: Uuid,
    /// 1 for the first attempt.
    pub attempt_no: i32,
    /// The lease token the attempt held.
    pub lease_token: Uuid,
    /// The worker that ran it.
    pub worker_id: String,
    /// How it ended (running while it holds the lease).
    pub status: AttemptStatus,
    /// The error it recorded.
    pub error: Option<Value>,
    /// When it started.
    pub started_at: OffsetDateTime,
    /// Its last heartbeat.
    pub heartbeat_at: OffsetDateTime,
    /// When it ended.
    pub finished_at: Option<OffsetDateTime>,
}

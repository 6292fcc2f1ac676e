//! How executions are stored: encoding with size limits, the row shape every backend keeps, and
//! decoding rows back into snapshots. Shared by the memory backend and the SQL backends.

use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use super::canonical::canonical_size;
use super::codec::{CodecError, TAG, decode_value_owned, encode_plain_json, encode_value};
use super::cursor::encode_cursor;
use super::digest::{OriginalIso, submission_digest};
use super::error::{ExecutionError, ExecutionResult};
use super::record::{
    ClaimedExecution, Execution, ExecutionErrorDetail, ExecutionLimits, ExecutionPage,
    ExecutionRequest,
};
use super::status::{AttemptStatus, ExecutionStatus};

pub use super::record::{check_expires_at, reject_nul};

/// The metadata key the runtime adds for workers; submissions may not use it.
pub const RESERVED_METADATA_KEY: &str = "onestep.execution";

/// The deepest nesting of arrays and objects a payload, metadata or result may have as stored,
/// that is after tag encoding (an object with a `"$onestep"` key is stored 3 levels deeper).
/// The lowest limit of the supported stores: MariaDB before 12.1 refuses JSON nested 32 levels
/// or more (`JSON_VALID`, checked on every JSON column); MySQL keeps 100; stored values are read
/// back with serde_json, which stops at 128. One limit for all backends keeps data portable and
/// every namespace listable.
pub const MAX_STORED_DEPTH: usize = 31;

/// Beyond this many levels a value is rejected without being encoded to measure its stored depth
/// (the codec recurses once per level).
const MEASURED_DEPTH: usize = 512;

/// Visits every array and object of `value` without recursing, calling `text` with each string
/// and each object key (`true` for keys); returns the nesting depth (a scalar is 0).
fn walk(value: &Value, mut text: impl FnMut(&str, bool)) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::String(s) => text(s, false),
            Value::Array(items) => {
                deepest = deepest.max(depth + 1);
                stack.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth + 1);
                for (key, item) in map {
                    text(key, true);
                    stack.push((item, depth + 1));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    deepest
}

/// The JSON pointer of the first string or key (in document order) holding U+0000; `/` is the
/// root. A key is reported before its value is looked at.
fn nul_pointer(value: &Value) -> Option<String> {
    // `None` marks an object entry whose key holds the NUL.
    let mut stack: Vec<(String, Option<&Value>)> = vec![(String::new(), Some(value))];
    while let Some((path, value)) = stack.pop() {
        match value {
            None => return Some(path),
            Some(Value::String(s)) if s.contains('\0') => {
                return Some(if path.is_empty() { "/".into() } else { path });
            }
            Some(Value::Array(items)) => stack.extend(
                items
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, item)| (format!("{path}/{i}"), Some(item))),
            ),
            Some(Value::Object(map)) => stack.extend(map.iter().rev().map(|(key, item)| {
                let token = key.replace('~', "~0").replace('/', "~1");
                (
                    format!("{path}/{token}"),
                    (!key.contains('\0')).then_some(item),
                )
            })),
            Some(_) => {}
        }
    }
    None
}

fn too_deep(field: &str, depth: &str) -> ExecutionError {
    ExecutionError::invalid(
        field,
        format!(
            "is nested {depth} levels deep as stored, more than {MAX_STORED_DEPTH} \
             (each array or object is a level; a \"$onestep\" key adds 3)"
        ),
    )
}

/// Encodes a payload, metadata or result (`field`) with the tagged codec for storage, after
/// checking the portable data contract every backend keeps:
///
/// - no string or object key holds U+0000 (PostgreSQL cannot store it): `InvalidArgument`
///   naming the JSON pointer, e.g. `payload must not contain the NUL character (\u0000); found
///   at /a/0`;
/// - the encoded value is nested at most [`MAX_STORED_DEPTH`] levels: `InvalidArgument`, e.g.
///   `result is nested 40 levels deep as stored, more than 31 (…)`.
///
/// Size limits are the caller's ([`encode_submission`], [`encode_result`]).
///
/// ```
/// use onestep_core::execution::stored::{MAX_STORED_DEPTH, encode_storable};
/// use serde_json::json;
///
/// assert!(encode_storable("payload", &json!({"a": [1, "two"]})).is_ok());
/// let err = encode_storable("payload", &json!({"a": ["x\u{0}y"]})).unwrap_err();
/// assert_eq!(err.to_string(), "payload must not contain the NUL character (\\u0000); found at /a/0");
/// let mut deep = json!(1);
/// for _ in 0..=MAX_STORED_DEPTH {
///     deep = json!([deep]);
/// }
/// assert!(encode_storable("result", &deep).unwrap_err().to_string().starts_with("result is nested 32 levels"));
/// ```
pub fn encode_storable(field: &str, value: &Value) -> ExecutionResult<Value> {
    storable(field, value, encode_value)
}

/// [`encode_storable`] for plain JSON ([`encode_plain_json`]): every object with a `"$onestep"`
/// key is stored as a `mapping`, as Python stores what `json.loads` gives. For request bodies
/// of HTTP APIs, which the reference's API receives as plain JSON too.
///
/// ```
/// use onestep_core::execution::stored::encode_plain_storable;
/// use serde_json::json;
///
/// let stored = encode_plain_storable("payload", &json!({"$onestep": {"type": "tuple", "values": []}})).unwrap();
/// assert_eq!(stored["$onestep"]["type"], "mapping");
/// ```
pub fn encode_plain_storable(field: &str, value: &Value) -> ExecutionResult<Value> {
    storable(field, value, encode_plain_json)
}

fn storable(
    field: &str,
    value: &Value,
    encode: fn(&Value) -> Result<Value, CodecError>,
) -> ExecutionResult<Value> {
    let (mut nul, mut tagged) = (false, false);
    let depth = walk(value, |text, key| {
        nul |= text.contains('\0');
        tagged |= key && text == TAG;
    });
    if nul && let Some(at) = nul_pointer(value) {
        return Err(ExecutionError::invalid(
            field,
            format!("must not contain the NUL character (\\u0000); found at {at}"),
        ));
    }
    if depth > MEASURED_DEPTH {
        return Err(too_deep(field, &format!("at least {depth}")));
    }
    let encoded = encode(value)
        .map_err(|e| ExecutionError::Encoding(format!("cannot encode execution {field}: {e}")))?;
    // Only a `"$onestep"` key makes the codec add levels.
    let stored = if tagged {
        walk(&encoded, |_, _| {})
    } else {
        depth
    };
    if stored > MAX_STORED_DEPTH {
        return Err(too_deep(field, &stored.to_string()));
    }
    Ok(encoded)
}

/// Whether the dict `metadata` stands for has `key`: one of the map's keys, or of its items when
/// the map is a `mapping` tag (the view of a dict that has a `"$onestep"` key).
fn has_key(metadata: &Map<String, Value>, key: &str) -> bool {
    if metadata.contains_key(key) {
        return true;
    }
    let items = match metadata.get(TAG) {
        Some(Value::Object(payload))
            if metadata.len() == 1 && payload.get("type") == Some(&Value::from("mapping")) =>
        {
            payload.get("items").and_then(Value::as_array)
        }
        _ => None,
    };
    items
        .into_iter()
        .flatten()
        .any(|item| item.get(0).and_then(Value::as_str) == Some(key))
}

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

/// Encodes a submission in the reference's order: the request's own checks
/// ([`ExecutionRequest::validate`], so a request built field by field is checked too), reserved
/// key check, encode payload, encode metadata (each through [`encode_storable`]), payload size,
/// metadata size, then the digest when a key was given.
pub fn encode_submission(
    request: &ExecutionRequest,
    limits: &ExecutionLimits,
) -> ExecutionResult<EncodedSubmission> {
    request.validate()?;
    if has_key(&request.metadata, RESERVED_METADATA_KEY) {
        return Err(ExecutionError::invalid(
            "metadata",
            format!("key '{RESERVED_METADATA_KEY}' is reserved"),
        ));
    }
    let payload = encode_storable("payload", &request.payload)?;
    let metadata = encode_storable("metadata", &Value::Object(request.metadata.clone()))?;
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

/// Encodes a handler result through [`encode_storable`] (no U+0000, at most
/// [`MAX_STORED_DEPTH`] levels) and checks its size ("execution result exceeds the configured
/// limit").
pub fn encode_result(result: &Value, limits: &ExecutionLimits) -> ExecutionResult<Value> {
    let encoded = encode_storable("result", result)?;
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
        // The delay is validated (finite, at most 100 years); past the end of time it saturates.
        let available_at = match request.delay_s {
            Some(delay) if delay > 0.0 => std::time::Duration::try_from_secs_f64(delay)
                .ok()
                .and_then(|d| time::Duration::try_from(d).ok())
                .and_then(|d| now.checked_add(d))
                .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc()),
            _ => now,
        };
        let (now, available_at) = (
            crate::clock::whole_micros(now),
            crate::clock::whole_micros(available_at),
        );
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
                .map(|t| crate::clock::whole_micros(crate::clock::utc(t))),
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: None,
            version: 0,
        }
    }

    /// Decodes the row into a snapshot; stored values that fail strict decoding give
    /// "cannot decode execution {id}: …". [`Self::into_execution`] does the same without copying
    /// the row.
    pub fn to_execution(&self) -> ExecutionResult<Execution> {
        self.clone().into_execution()
    }

    /// [`Self::to_execution`] of a row the caller no longer needs: its payload, metadata, result
    /// and texts move into the snapshot (a claim's rows take this way).
    pub fn into_execution(self) -> ExecutionResult<Execution> {
        let id = self.id;
        let fail = |what: String| undecodable(id, what);
        let (payload, metadata) = decode_input(id, self.payload, self.metadata)?;
        let result = match self.result {
            Some(value) => {
                Some(decode_value_owned(value).map_err(|e| fail(format!("result: {e}")))?)
            }
            None => None,
        };
        let error = match self.error {
            Some(Value::Null) | None => None,
            Some(value) => Some(
                serde_json::from_value::<ExecutionErrorDetail>(value)
                    .map_err(|e| fail(format!("error: {e}")))?,
            ),
        };
        let utc = crate::clock::utc;
        Ok(Execution {
            id,
            namespace: self.namespace,
            task_name: self.task_name,
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

/// The error for a stored execution whose values cannot be decoded.
fn undecodable(id: Uuid, what: String) -> ExecutionError {
    ExecutionError::Encoding(format!("cannot decode execution {id}: {what}"))
}

/// A stored payload and metadata, decoded (the metadata must be an object, or NULL for none).
fn decode_input(
    id: Uuid,
    payload: Value,
    metadata: Value,
) -> ExecutionResult<(Value, Map<String, Value>)> {
    let payload =
        decode_value_owned(payload).map_err(|e| undecodable(id, format!("payload: {e}")))?;
    let metadata = match decode_value_owned(metadata)
        .map_err(|e| undecodable(id, format!("metadata: {e}")))?
    {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(undecodable(
                id,
                format!("metadata must be an object, got {other}"),
            ));
        }
    };
    Ok((payload, metadata))
}

/// The columns of a claimed execution a worker runs it with, as stored (payload and metadata
/// still encoded): what a claim reads back when it answers [`ClaimedExecution`]s, so that the
/// rest of each row is neither sent nor decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRow {
    /// The execution's id.
    pub id: Uuid,
    /// Its namespace.
    pub namespace: String,
    /// Its task.
    pub task_name: String,
    /// The stored payload.
    pub payload: Value,
    /// The stored metadata (NULL for none).
    pub metadata: Value,
    /// Attempts started, the claim's included.
    pub attempts: i32,
    /// When it became ready.
    pub available_at: OffsetDateTime,
    /// When it was submitted (with `available_at` and `id`, its place in claim order).
    pub created_at: OffsetDateTime,
    /// The lease token as the row holds it: the claim's, read back after the claim.
    pub lease_token: Option<Uuid>,
    /// The row's last change: the claim's time, read back after the claim.
    pub updated_at: OffsetDateTime,
}

impl ClaimedRow {
    /// The claimed execution, its payload and metadata decoded, with the claim's attempt and
    /// lease; an [`Encoding`](ExecutionError::Encoding) error for values that do not decode, as
    /// [`ExecutionRow::into_execution`] has for the same values.
    pub fn into_claimed(
        self,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_expires_at: OffsetDateTime,
    ) -> ExecutionResult<ClaimedExecution> {
        let (payload, metadata) = decode_input(self.id, self.payload, self.metadata)?;
        Ok(ClaimedExecution {
            id: self.id,
            namespace: self.namespace,
            task_name: self.task_name,
            payload,
            metadata,
            attempts: u32::try_from(self.attempts.max(0)).unwrap_or(0),
            available_at: crate::clock::utc(self.available_at),
            attempt_id,
            lease_token,
            lease_expires_at,
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

#[cfg(test)]
mod tests;

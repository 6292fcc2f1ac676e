//! Failure capture: the envelope of a failed attempt written to a private directory as the
//! reference's `onestep/envelope-capture` document (version 1), so `onestep task replay` (here
//! or in Python) can run the same delivery again.
//!
//! A capture is one JSON file, `<UTC time>-<uuid>.json`, mode `0600` in a `0700` directory,
//! written atomically (a temporary file, `fsync`, rename, directory `fsync`), with sorted keys
//! and two-space indentation as Python's `json.dumps(..., sort_keys=True, indent=2)` writes it:
//!
//! ```json
//! {
//!   "app": "billing",
//!   "captured_at": "2026-12-03T06:26:14.570127Z",
//!   "envelope": {"attempts": 2, "body": {"invoice": 7}, "meta": {}},
//!   "failure": {"exception_type": "ValueError", "kind": "error", "message": "bad total"},
//!   "redacted_paths": ["/meta/token"],
//!   "schema": "onestep/envelope-capture",
//!   "stage": "handler",
//!   "task": "charge",
//!   "terminal": true,
//!   "version": 1
//! }
//! ```
//!
//! Values are in the tagged codec; keys that look like secrets (`password`, `token`, `dsn`, …,
//! at any depth of body and meta) and the configured JSON Pointers are replaced with
//! `"<redacted>"` and listed in `redacted_paths`.

mod file;
mod redact;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::envelope::Envelope;
use crate::execution::codec::{decode_value, encode_value};
use crate::failure::FailureInfo;

pub use redact::redact_envelope;

/// The document's `schema`.
pub const CAPTURE_SCHEMA: &str = "onestep/envelope-capture";
/// The document's `version`.
pub const CAPTURE_VERSION: u64 = 1;

/// Which failed attempts are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// Only attempts after which the delivery is finished (failed, dead-lettered, or a
    /// tracked execution cancelled on request): the default.
    #[default]
    Terminal,
    /// Every failed attempt, retried ones included.
    All,
}

/// `app.failure_capture`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureCaptureConfig {
    /// Where captures are written (created `0700` when missing; a symbolic link is refused).
    pub directory: PathBuf,
    /// Which attempts are captured.
    pub mode: CaptureMode,
    /// The largest document written, in bytes (default 1 MiB); a larger one is not written
    /// and the failure is logged.
    pub max_bytes: u64,
    /// JSON Pointers into `{"body": …, "meta": …}` replaced with `"<redacted>"`
    /// (`/body/card/number`).
    pub redact_paths: Vec<String>,
}

impl FailureCaptureConfig {
    /// Captures of terminal failures into `directory`, at most 1 MiB each, nothing redacted
    /// beyond the secret-looking keys.
    pub fn new(directory: impl Into<PathBuf>) -> Self {
        Self {
            directory: directory.into(),
            mode: CaptureMode::Terminal,
            max_bytes: 1_048_576,
            redact_paths: Vec::new(),
        }
    }
}

/// Why a capture could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The document is larger than `max_bytes`.
    #[error("capture exceeds max_bytes ({size} > {max})")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: u64,
    },
    /// A value cannot be written in the tagged codec.
    #[error("capture encoding failed: {0}")]
    Encoding(String),
    /// The document is not a valid capture.
    #[error("{0}")]
    Invalid(String),
    /// The file system refused.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One failed attempt to capture.
#[derive(Debug, Clone)]
pub struct CaptureRecord<'a> {
    /// The app's name.
    pub app: &'a str,
    /// The task's name.
    pub task: &'a str,
    /// Whether the delivery is finished.
    pub terminal: bool,
    /// What failed (its stage is the document's `stage`).
    pub failure: &'a FailureInfo,
    /// The delivery's envelope as it came.
    pub envelope: &'a Envelope,
}

/// A capture read back by [`load_capture`].
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedCapture {
    /// `app`.
    pub app: String,
    /// `task`.
    pub task: String,
    /// `stage`.
    pub stage: String,
    /// `terminal`.
    pub terminal: bool,
    /// `failure`: `kind`, `exception_type`, `message`.
    pub failure: Map<String, Value>,
    /// The envelope, decoded into the Rust view.
    pub envelope: Envelope,
    /// `redacted_paths`.
    pub redacted_paths: Vec<String>,
    /// `captured_at`.
    pub captured_at: String,
}

/// The capture document of `record`, redacted, as a JSON value (keys in any order).
pub fn capture_document(
    config: &FailureCaptureConfig,
    record: &CaptureRecord<'_>,
    captured_at: OffsetDateTime,
) -> Result<Value, CaptureError> {
    let (envelope, redacted) =
        redact_envelope(record.envelope, &config.redact_paths).map_err(CaptureError::Invalid)?;
    let encode = |v: &Value| encode_value(v).map_err(|e| CaptureError::Encoding(e.to_string()));
    Ok(json!({
        "schema": CAPTURE_SCHEMA,
        "version": CAPTURE_VERSION,
        "captured_at": file::isoformat_z(captured_at),
        "app": record.app,
        "task": record.task,
        "stage": record.failure.stage.as_str(),
        "terminal": record.terminal,
        "failure": {
            "kind": record.failure.kind.as_str(),
            "exception_type": record.failure.exception_type,
            "message": record.failure.message,
        },
        "envelope": {
            "body": encode(&envelope.body)?,
            "meta": encode(&Value::Object(envelope.meta.clone()))?,
            "attempts": envelope.attempts,
        },
        "redacted_paths": redacted,
    }))
}

/// Writes `record` under `config.directory` and returns the file's path. Blocking: call it
/// from `spawn_blocking`.
pub fn write_capture(
    config: &FailureCaptureConfig,
    record: &CaptureRecord<'_>,
) -> Result<PathBuf, CaptureError> {
    let captured_at = OffsetDateTime::now_utc();
    let document = capture_document(config, record, captured_at)?;
    let data = file::python_json(&document);
    if data.len() as u64 > config.max_bytes {
        return Err(CaptureError::TooLarge {
            size: data.len(),
            max: config.max_bytes,
        });
    }
    file::write_private(&config.directory, captured_at, data.as_bytes())
}

/// Reads and checks a capture as the reference's `load_capture` does; with `expected_app` or
/// `expected_task`, a capture of another app or task is refused.
pub fn load_capture(
    path: &Path,
    expected_app: Option<&str>,
    expected_task: Option<&str>,
) -> Result<LoadedCapture, CaptureError> {
    let invalid = |m: &str| CaptureError::Invalid(m.to_owned());
    let text = std::fs::read_to_string(path)?;
    let raw: Value = serde_json::from_str(&text)
        .map_err(|e| CaptureError::Invalid(format!("capture is not JSON: {e}")))?;
    let raw = raw
        .as_object()
        .ok_or_else(|| invalid("capture document must be an object"))?;
    let mut keys: Vec<&str> = raw.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let expected = [
        "app",
        "captured_at",
        "envelope",
        "failure",
        "redacted_paths",
        "schema",
        "stage",
        "task",
        "terminal",
        "version",
    ];
    if keys != expected {
        return Err(invalid("capture document fields are invalid"));
    }
    if raw["schema"] != CAPTURE_SCHEMA {
        return Err(CaptureError::Invalid(format!(
            "unsupported capture schema {}; expected {CAPTURE_SCHEMA:?}",
            raw["schema"]
        )));
    }
    if raw["version"] != CAPTURE_VERSION {
        return Err(CaptureError::Invalid(format!(
            "unsupported capture version {}; expected {CAPTURE_VERSION}",
            raw["version"]
        )));
    }
    let string = |key: &str| {
        raw[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CaptureError::Invalid(format!("capture field {key:?} has invalid type")))
    };
    let (app, task, stage, captured_at) = (
        string("app")?,
        string("task")?,
        string("stage")?,
        string("captured_at")?,
    );
    if !file::is_isoformat(&captured_at) {
        return Err(invalid("capture field 'captured_at' is invalid"));
    }
    let terminal = raw["terminal"]
        .as_bool()
        .ok_or_else(|| invalid("capture field 'terminal' has invalid type"))?;
    if let Some(expected) = expected_app.filter(|e| *e != app) {
        return Err(CaptureError::Invalid(format!(
            "capture app mismatch: expected {expected:?}, received {app:?}"
        )));
    }
    if let Some(expected) = expected_task.filter(|e| *e != task) {
        return Err(CaptureError::Invalid(format!(
            "capture task mismatch: expected {expected:?}, received {task:?}"
        )));
    }
    let failure = raw["failure"]
        .as_object()
        .filter(|f| {
            f.len() == 3
                && ["kind", "exception_type", "message"]
                    .iter()
                    .all(|k| f.get(*k).is_some_and(Value::is_string))
        })
        .ok_or_else(|| invalid("capture failure fields are invalid"))?
        .clone();
    let envelope = raw["envelope"]
        .as_object()
        .filter(|e| {
            e.len() == 3
                && ["body", "meta", "attempts"]
                    .iter()
                    .all(|k| e.contains_key(*k))
        })
        .ok_or_else(|| invalid("capture envelope fields are invalid"))?;
    let attempts = envelope["attempts"]
        .as_u64()
        .and_then(|a| u32::try_from(a).ok())
        .ok_or_else(|| invalid("capture envelope attempts must be a non-negative integer"))?;
    let decode = |v: &Value, what: &str| {
        decode_value(v).map_err(|e| CaptureError::Invalid(format!("capture envelope {what}: {e}")))
    };
    let Value::Object(meta) = decode(&envelope["meta"], "meta")? else {
        return Err(invalid("capture envelope meta must decode to a mapping"));
    };
    let body = decode(&envelope["body"], "body")?;
    let redacted_paths = raw["redacted_paths"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().filter(|s| s.starts_with('/')).map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| invalid("capture redacted_paths must be JSON Pointer strings"))?;
    Ok(LoadedCapture {
        app,
        task,
        stage,
        terminal,
        failure,
        envelope: Envelope {
            body,
            meta,
            attempts,
        },
        redacted_paths,
        captured_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{FailureKind, Stage, TaskError};

    #[test]
    fn a_capture_reads_back_and_a_large_one_is_not_written() {
        let directory = std::env::temp_dir()
            .join(format!("onestep-capture-{}", uuid::Uuid::new_v4().simple()))
            .join("nested");
        let mut config = FailureCaptureConfig::new(&directory);
        let failure = FailureInfo::from_error(
            FailureKind::Error,
            Stage::Handler,
            &TaskError::new("ValueError", "bad"),
        );
        let tuple = json!({"$onestep": {"type": "tuple", "values": [1, "two"]}});
        let envelope = Envelope::new(json!({"pair": tuple, "password": "p"})).with_attempts(2);
        let record = CaptureRecord {
            app: "a",
            task: "t",
            terminal: true,
            failure: &failure,
            envelope: &envelope,
        };
        let path = write_capture(&config, &record).unwrap();
        let loaded = load_capture(&path, Some("a"), Some("t")).unwrap();
        assert_eq!(
            loaded.envelope.body,
            json!({"pair": tuple, "password": "<redacted>"})
        );
        assert_eq!(loaded.envelope.attempts, 2);
        assert_eq!(loaded.redacted_paths, ["/body/password"]);
        assert_eq!(loaded.stage, "handler");
        let wrong = load_capture(&path, Some("other"), None).unwrap_err();
        assert!(
            wrong.to_string().contains("capture app mismatch"),
            "{wrong}"
        );
        config.max_bytes = 10;
        assert!(matches!(
            write_capture(&config, &record),
            Err(CaptureError::TooLarge { max: 10, .. })
        ));
        let _ = std::fs::remove_dir_all(directory.parent().unwrap());
    }
}

//! The idempotency digest of a submission (`submission_digest` column),
//! byte-compatible with the Python reference.
//!
//! Python hashes `json.dumps({"namespace", "task_name", "payload",
//! "metadata", "delay_s", "expires_at"}, sort_keys=True, separators=(",",
//! ":"), ensure_ascii=True).encode("ascii")` with SHA-256, where payload and
//! metadata are already tag-encoded, `delay_s` is a float (so `5` and `5.0`
//! hash alike, printed `5.0`) or `null`, and `expires_at` is
//! `expires_at.isoformat()` in the offset the caller gave (the same instant
//! with another offset is a different submission) or `null`.

use super::canonical::{canonical_json, python_float_repr, write_string};
use super::pycompat::{PyDateTime, py_isoformat};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

/// Python's `datetime.isoformat()` of an aware datetime, in its own offset:
/// `YYYY-MM-DDTHH:MM:SS[.ffffff]+HH:MM[:SS]`, microseconds only when
/// non-zero, offset seconds only when non-zero.
///
/// Nanoseconds beyond the microsecond are truncated (Python datetimes have
/// microsecond precision). Years outside Python's `1..=9999` have no Python
/// form; callers must reject them first (the output is then not ISO text
/// Python could read).
pub fn python_isoformat(dt: OffsetDateTime) -> String {
    let fields = PyDateTime {
        year: dt.year(),
        month: u8::from(dt.month()),
        day: dt.day(),
        hour: dt.hour(),
        minute: dt.minute(),
        second: dt.second(),
        microsecond: dt.microsecond(),
        offset_us: Some(i64::from(dt.offset().whole_seconds()) * 1_000_000),
    };
    py_isoformat(&fields)
}

/// The `expires_at` of a submission as Python's `isoformat()` text in the
/// caller's original offset (what the digest hashes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OriginalIso(String);

impl OriginalIso {
    /// Captures `dt` in its own offset (see [`python_isoformat`]).
    pub fn new(dt: OffsetDateTime) -> Self {
        Self(python_isoformat(dt))
    }

    /// The isoformat text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<OffsetDateTime> for OriginalIso {
    fn from(dt: OffsetDateTime) -> Self {
        Self::new(dt)
    }
}

/// Lowercase hex SHA-256 of the canonical submission JSON, exactly as the
/// Python reference computes `submission_digest`.
///
/// `encoded_payload` and `encoded_metadata` must already be tag-encoded
/// (see `encode_value`). `delay_s` prints as a Python float (`5.0`); the
/// request validation must have rejected non-finite or negative delays
/// (they would print as Python's `NaN`/`Infinity`, like `json.dumps`).
pub fn submission_digest(
    namespace: &str,
    task_name: &str,
    encoded_payload: &Value,
    encoded_metadata: &Value,
    delay_s: Option<f64>,
    expires_at: Option<&OriginalIso>,
) -> String {
    // Keys in sorted order: delay_s, expires_at, metadata, namespace,
    // payload, task_name.
    let mut text = String::from("{\"delay_s\":");
    match delay_s {
        Some(delay) => text.push_str(&python_float_repr(delay)),
        None => text.push_str("null"),
    }
    text.push_str(",\"expires_at\":");
    match expires_at {
        Some(iso) => write_string(&mut text, iso.as_str()),
        None => text.push_str("null"),
    }
    text.push_str(",\"metadata\":");
    text.push_str(&canonical_json(encoded_metadata));
    text.push_str(",\"namespace\":");
    write_string(&mut text, namespace);
    text.push_str(",\"payload\":");
    text.push_str(&canonical_json(encoded_payload));
    text.push_str(",\"task_name\":");
    write_string(&mut text, task_name);
    text.push('}');
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    #[test]
    fn isoformat_keeps_the_original_offset_and_drops_zero_microseconds() {
        assert_eq!(
            python_isoformat(datetime!(2024-01-02 03:04:05 +08:00)),
            "2024-01-02T03:04:05+08:00"
        );
        assert_eq!(
            python_isoformat(datetime!(2024-01-02 03:04:05.5 -05:30)),
            "2024-01-02T03:04:05.500000-05:30"
        );
        assert_eq!(
            python_isoformat(datetime!(2024-01-02 03:04:05 +01:02:03)),
            "2024-01-02T03:04:05+01:02:03"
        );
        assert_eq!(
            python_isoformat(datetime!(0999-01-02 03:04:05 UTC)),
            "0999-01-02T03:04:05+00:00"
        );
    }

    #[test]
    fn integral_delays_hash_like_floats() {
        let a = submission_digest("ns", "task", &json!({}), &json!({}), Some(5.0), None);
        let text = r#"{"delay_s":5.0,"expires_at":null,"metadata":{},"namespace":"ns","payload":{},"task_name":"task"}"#;
        assert_eq!(a, hex::encode(Sha256::digest(text.as_bytes())));
    }

    #[test]
    fn the_same_instant_in_another_offset_is_a_different_submission() {
        let utc = OriginalIso::new(datetime!(2024-01-01 00:00 UTC));
        let shifted = OriginalIso::new(datetime!(2024-01-01 08:00 +08:00));
        let a = submission_digest("ns", "t", &json!(1), &json!({}), None, Some(&utc));
        let b = submission_digest("ns", "t", &json!(1), &json!({}), None, Some(&shifted));
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}

//! Tag constructors and serde helpers for the scalar tags (`datetime`, `uuid`, `bytes`,
//! `decimal`).

use super::super::pycompat::{PyDateTime, PyDecimal, py_fromisoformat, py_isoformat};
use super::check::{check_bytes, check_datetime, check_decimal, check_uuid, field};
use super::{CodecError, Path, TAG, new_tag};
use serde_json::{Map, Value};

/// Reads the payload of a tag of the expected type from a JSON value.
pub(super) fn expect_tag<'a>(
    value: &'a Value,
    type_name: &str,
) -> Result<&'a Map<String, Value>, String> {
    let payload = match value {
        Value::Object(map) if map.len() == 1 => map.get(TAG).and_then(Value::as_object),
        _ => None,
    };
    match payload {
        Some(payload) if field(payload, "type").as_str() == Some(type_name) => Ok(payload),
        _ => Err(format!("expected a {TAG} {type_name} tag")),
    }
}

fn to_offset_date_time(parsed: &PyDateTime) -> Result<time::OffsetDateTime, String> {
    let Some(offset_us) = parsed.offset_us else {
        return Err("naive datetime (no UTC offset) cannot be read as OffsetDateTime".to_owned());
    };
    if offset_us % 1_000_000 != 0 {
        return Err("UTC offsets with sub-second precision are not supported".to_owned());
    }
    let offset_seconds = i32::try_from(offset_us / 1_000_000).map_err(|e| e.to_string())?;
    let month = time::Month::try_from(parsed.month).map_err(|e| e.to_string())?;
    let date = time::Date::from_calendar_date(parsed.year, month, parsed.day)
        .map_err(|e| e.to_string())?;
    let clock = time::Time::from_hms_micro(
        parsed.hour,
        parsed.minute,
        parsed.second,
        parsed.microsecond,
    )
    .map_err(|e| e.to_string())?;
    let offset = time::UtcOffset::from_whole_seconds(offset_seconds).map_err(|e| e.to_string())?;
    Ok(time::PrimitiveDateTime::new(date, clock).assume_offset(offset))
}

/// The `datetime` tag for an aware datetime: `value` is Python's
/// `isoformat()` (microseconds only when non-zero, offset seconds only when
/// non-zero) and `fold` is 0. Nanoseconds beyond the microsecond are
/// truncated, because Python datetimes cannot hold them.
///
/// Errors when the year is outside Python's `1..=9999` or the UTC offset is
/// not strictly between -24:00 and +24:00 (`time` allows up to ±25:59:59;
/// Python's `timezone` and [`decode_value`](super::decode_value) do not).
pub fn datetime_tag(value: time::OffsetDateTime) -> Result<Value, String> {
    if !(1..=9999).contains(&value.year()) {
        return Err(format!("year {} is out of range", value.year()));
    }
    if value.offset().whole_hours().abs() >= 24 {
        return Err(format!(
            "UTC offset {} is out of range (must be strictly between -24:00 and +24:00)",
            value.offset()
        ));
    }
    Ok(new_tag(
        "datetime",
        vec![
            (
                "value",
                Value::String(super::super::digest::python_isoformat(value)),
            ),
            ("fold", Value::from(0)),
        ],
    ))
}

/// Reads an aware datetime from a `datetime` tag.
///
/// Accepts everything Python 3.11's `datetime.fromisoformat` accepts, with
/// `fold` 0 or 1 (ignored: a fixed offset makes it irrelevant). Rejects
/// naive datetimes (Python can encode them, but an `OffsetDateTime` needs an
/// offset; decode them with [`decode_value`](super::decode_value) and handle the tag yourself)
/// and offsets with fractional seconds.
pub fn datetime_from_tag(value: &Value) -> Result<time::OffsetDateTime, String> {
    let payload = expect_tag(value, "datetime")?;
    let (parsed, _fold) = check_datetime(payload, &Path::Root).map_err(|e| e.to_string())?;
    to_offset_date_time(&parsed)
}

/// Python's `datetime.fromisoformat(text).isoformat()`: the normal form of a
/// `datetime` tag value (naive values stay naive). Errors carry Python's
/// message, e.g. `Invalid isoformat string: '2024-13'` or
/// `day is out of range for month`.
pub fn datetime_value_isoformat(text: &str) -> Result<String, CodecError> {
    py_fromisoformat(text)
        .map(|parsed| py_isoformat(&parsed))
        .map_err(CodecError::Decode)
}

/// The `uuid` tag (`value` is the lowercase hyphenated form).
pub fn uuid_tag(value: ::uuid::Uuid) -> Value {
    new_tag(
        "uuid",
        vec![("value", Value::String(value.hyphenated().to_string()))],
    )
}

/// Reads a UUID from a `uuid` tag, accepting every spelling Python's
/// `uuid.UUID(str)` accepts (braces, `urn:uuid:`, no hyphens, upper case).
pub fn uuid_from_tag(value: &Value) -> Result<::uuid::Uuid, String> {
    let payload = expect_tag(value, "uuid")?;
    check_uuid(payload, &Path::Root)
        .map(::uuid::Uuid::from_u128)
        .map_err(|e| e.to_string())
}

/// The `bytes` tag (`value` is standard, padded base64).
pub fn bytes_tag(value: &[u8]) -> Value {
    use base64::Engine as _;
    new_tag(
        "bytes",
        vec![(
            "value",
            Value::String(base64::engine::general_purpose::STANDARD.encode(value)),
        )],
    )
}

/// Reads bytes from a `bytes` tag with Python's strict base64 rules.
pub fn bytes_from_tag(value: &Value) -> Result<Vec<u8>, String> {
    let payload = expect_tag(value, "bytes")?;
    check_bytes(payload, &Path::Root).map_err(|e| e.to_string())
}

/// The `decimal` tag for a decimal literal. The literal is validated like
/// Python's `Decimal(str)` and normalised to `str(Decimal(literal))`, so
/// `"1_000"` becomes `"1000"` and `"1e3"` becomes `"1E+3"`, exactly the
/// text a Python client would store.
pub fn decimal_tag(literal: &str) -> Result<Value, String> {
    let decimal = PyDecimal::parse(literal)?;
    Ok(new_tag(
        "decimal",
        vec![("value", Value::String(decimal.to_py_string()))],
    ))
}

/// Reads a `decimal` tag as the normalised literal `str(Decimal(value))`.
pub fn decimal_from_tag(value: &Value) -> Result<String, String> {
    let payload = expect_tag(value, "decimal")?;
    check_decimal(payload, &Path::Root)
        .map(|decimal| decimal.to_py_string())
        .map_err(|e| e.to_string())
}

macro_rules! serde_helper {
    ($(#[$meta:meta])* $module:ident, $owned:ty, $borrowed:ty, |$ser_in:ident| $to_tag:expr, |$de_in:ident| $from_tag:expr) => {
        $(#[$meta])*
        pub mod $module {
            use serde::{Deserialize as _, Deserializer, Serialize as _, Serializer};
            use serde_json::Value;

            fn to_tag($ser_in: $borrowed) -> Result<Value, String> {
                $to_tag
            }

            fn from_tag($de_in: &Value) -> Result<$owned, String> {
                $from_tag
            }

            /// Serializes the value as its `$onestep` tag.
            pub fn serialize<S: Serializer>(value: $borrowed, serializer: S) -> Result<S::Ok, S::Error> {
                to_tag(value).map_err(serde::ser::Error::custom)?.serialize(serializer)
            }

            /// Deserializes the value from its `$onestep` tag.
            pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<$owned, D::Error> {
                let value = Value::deserialize(deserializer)?;
                from_tag(&value).map_err(serde::de::Error::custom)
            }

            /// The same helper for `Option<_>` fields (`None` ↔ `null`).
            pub mod option {
                use serde::{Deserialize as _, Deserializer, Serialize as _, Serializer};
                use serde_json::Value;

                /// Serializes `Some` as its `$onestep` tag and `None` as `null`.
                pub fn serialize<S: Serializer>(value: &Option<$owned>, serializer: S) -> Result<S::Ok, S::Error> {
                    match value {
                        Some(inner) => super::to_tag(inner).map_err(serde::ser::Error::custom)?.serialize(serializer),
                        None => serializer.serialize_none(),
                    }
                }

                /// Deserializes `null` as `None` and a `$onestep` tag as `Some`.
                pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<$owned>, D::Error> {
                    let value = Value::deserialize(deserializer)?;
                    if value.is_null() {
                        return Ok(None);
                    }
                    super::from_tag(&value).map(Some).map_err(serde::de::Error::custom)
                }
            }
        }
    };
}

serde_helper!(
    /// `#[serde(with = "...::datetime")]` for `time::OffsetDateTime` fields
    /// (see `datetime_tag` and `datetime_from_tag` in the parent module for
    /// the rules).
    datetime, time::OffsetDateTime, &time::OffsetDateTime,
    |value| super::datetime_tag(*value),
    |value| super::datetime_from_tag(value)
);

serde_helper!(
    /// `#[serde(with = "...::uuid")]` for `uuid::Uuid` fields.
    uuid, ::uuid::Uuid, &::uuid::Uuid,
    |value| Ok(super::uuid_tag(*value)),
    |value| super::uuid_from_tag(value)
);

serde_helper!(
    /// `#[serde(with = "...::bytes")]` for `Vec<u8>` fields.
    bytes, Vec<u8>, &[u8],
    |value| Ok(super::bytes_tag(value)),
    |value| super::bytes_from_tag(value)
);

serde_helper!(
    /// `#[serde(with = "...::decimal")]` for `String` fields holding a
    /// decimal literal (normalised like Python's `str(Decimal(...))`).
    decimal, String, &str,
    |value| super::decimal_tag(value),
    |value| super::decimal_from_tag(value)
);

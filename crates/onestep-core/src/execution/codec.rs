//! The tagged JSON codec of the Python reference (`onestep.capture.codec`),
//! over `serde_json::Value`.
//!
//! Python values that JSON cannot express are stored as single-key objects
//! `{"$onestep": {"type": T, ...}}` with `T` one of `datetime`, `uuid`,
//! `bytes`, `decimal`, `tuple`, `set`, `frozenset`, `namedtuple`, `enum` or
//! `mapping` (a dict that itself has a `"$onestep"` key).
//!
//! # The Rust view
//!
//! Rust has no Python objects, so [`decode_value`] returns a JSON value (the
//! "Rust view") after validating it exactly like Python's `decode_value`:
//!
//! * scalar tags (`datetime`, `uuid`, `bytes`, `decimal`) and the class
//!   tags (`enum`, `namedtuple`) stay as their tag objects, verbatim, so the
//!   serde helpers in this module ([`datetime`], [`uuid`], [`bytes`],
//!   [`decimal`]) can read them;
//! * `tuple`, `set` and `frozenset` become plain arrays of decoded values;
//! * `mapping` becomes a plain object (which has a `"$onestep"` key).
//!
//! [`encode_value`] maps the Rust view back. Re-encoding a decoded value gives
//! the same canonical bytes, except that tuples/sets/frozensets come back as
//! lists, and a decoded `mapping` comes back either as a tag (when its only
//! key is `"$onestep"` and that value is a valid tag) or as a `mapping` tag
//! whose item order is the map's iteration order (sorted by key unless
//! serde_json's `preserve_order` is enabled; Python keeps insertion order).
//!
//! # What Rust cannot check
//!
//! Python resolves `enum`/`namedtuple` classes from loaded modules and
//! compares member names, values and field lists with the live class. Rust
//! validates their structure only (field sets, string types, `<locals>`),
//! so a tag naming a class the Python worker does not have is accepted here.

use super::canonical::canonical_json;
use super::pycompat::{
    PyDateTime, PyDecimal, py_b64decode_strict, py_fromisoformat, py_isoformat, py_repr_str,
    py_uuid_from_str,
};
use serde_json::{Map, Value};

/// The key that marks an extension tag.
pub const TAG: &str = "$onestep";

/// Errors of the tagged codec; messages mirror the Python reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Python's `CaptureEncodingError(path=..., type_name=..., reason=...)`.
    ///
    /// [`encode_value`] cannot currently produce it: a `serde_json::Value`
    /// holds no non-finite floats and no non-string keys, and anything that
    /// is not a valid tag is escaped as a `mapping`. It is kept for callers
    /// that encode other sources (and for parity with Python's messages).
    #[error("cannot encode {type_name} at {path}: {reason}")]
    Encode {
        /// JSON pointer of the offending value (`/` for the root).
        path: String,
        /// Python-style qualified type name, e.g. `builtins.float`.
        type_name: String,
        /// Why the value cannot be encoded, e.g. `non-finite float`.
        reason: String,
    },
    /// A stored value failed validation; the text is Python's `str(exc)`,
    /// e.g. `invalid datetime tag at /a` or `badly formed hexadecimal UUID string`.
    #[error("{0}")]
    Decode(String),
}

/// Appends one JSON-pointer token (escaping `~` and `/`) to `path`.
fn pointer(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// Python prints the empty (root) path as `/`.
fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn decode_error(message: impl Into<String>) -> CodecError {
    CodecError::Decode(message.into())
}

fn wrap_tag(payload: Map<String, Value>) -> Value {
    let mut outer = Map::new();
    outer.insert(TAG.to_owned(), Value::Object(payload));
    Value::Object(outer)
}

fn new_tag(type_name: &str, fields: Vec<(&str, Value)>) -> Value {
    let mut payload = Map::new();
    payload.insert("type".to_owned(), Value::String(type_name.to_owned()));
    for (key, value) in fields {
        payload.insert(key.to_owned(), value);
    }
    wrap_tag(payload)
}

// ---------------------------------------------------------------------------
// Shared validation (the checks of Python's `decode_value`, in its order)
// ---------------------------------------------------------------------------

fn require_fields(
    payload: &Map<String, Value>,
    type_name: &str,
    fields: &[&str],
    path: &str,
) -> Result<(), CodecError> {
    let matches = payload.len() == fields.len() + 1
        && payload.contains_key("type")
        && fields.iter().all(|field| payload.contains_key(*field));
    if matches {
        Ok(())
    } else {
        Err(decode_error(format!(
            "invalid {type_name} tag fields at {}",
            shown(path)
        )))
    }
}

fn field<'a>(payload: &'a Map<String, Value>, name: &str) -> &'a Value {
    payload.get(name).unwrap_or(&Value::Null)
}

fn string_value<'a>(
    payload: &'a Map<String, Value>,
    type_name: &str,
    path: &str,
) -> Result<&'a str, CodecError> {
    field(payload, "value")
        .as_str()
        .ok_or_else(|| decode_error(format!("invalid {type_name} tag at {}", shown(path))))
}

/// Validates a `datetime` tag payload; returns the parsed value and fold.
fn check_datetime(
    payload: &Map<String, Value>,
    path: &str,
) -> Result<(PyDateTime, u8), CodecError> {
    require_fields(payload, "datetime", &["value", "fold"], path)?;
    let invalid = || decode_error(format!("invalid datetime tag at {}", shown(path)));
    let text = field(payload, "value").as_str().ok_or_else(invalid)?;
    // Python tests `fold not in {0, 1}`: bools and 0.0/1.0 pass that test,
    // lists and dicts are unhashable (TypeError).
    let mut float_fold = false;
    let fold = match field(payload, "fold") {
        Value::Bool(flag) => u8::from(*flag),
        Value::Number(number) => match (number.as_u64(), number.as_f64()) {
            (Some(0), _) => 0,
            (Some(1), _) => 1,
            (None, Some(float)) if number.is_f64() && (float == 0.0 || float == 1.0) => {
                float_fold = true;
                0
            }
            _ => return Err(invalid()),
        },
        Value::Array(_) => return Err(decode_error("unhashable type: 'list'")),
        Value::Object(_) => return Err(decode_error("unhashable type: 'dict'")),
        Value::Null | Value::String(_) => return Err(invalid()),
    };
    let parsed = py_fromisoformat(text).map_err(CodecError::Decode)?;
    if float_fold {
        return Err(decode_error(
            "'float' object cannot be interpreted as an integer",
        ));
    }
    Ok((parsed, fold))
}

fn check_uuid(payload: &Map<String, Value>, path: &str) -> Result<u128, CodecError> {
    require_fields(payload, "uuid", &["value"], path)?;
    py_uuid_from_str(string_value(payload, "uuid", path)?).map_err(CodecError::Decode)
}

fn check_bytes(payload: &Map<String, Value>, path: &str) -> Result<Vec<u8>, CodecError> {
    require_fields(payload, "bytes", &["value"], path)?;
    let text = string_value(payload, "bytes", path)?;
    py_b64decode_strict(text, false)
        .map_err(|_| decode_error(format!("invalid bytes tag at {}", shown(path))))
}

fn check_decimal(payload: &Map<String, Value>, path: &str) -> Result<PyDecimal, CodecError> {
    require_fields(payload, "decimal", &["value"], path)?;
    PyDecimal::parse(string_value(payload, "decimal", path)?).map_err(CodecError::Decode)
}

/// `_resolve_loaded_type` as far as Rust can follow it (no class lookup).
fn check_recorded_type(payload: &Map<String, Value>, path: &str) -> Result<(), CodecError> {
    let (Some(_module), Some(qualname)) = (
        field(payload, "module").as_str(),
        field(payload, "qualname").as_str(),
    ) else {
        return Err(decode_error(format!(
            "invalid recorded type at {}",
            shown(path)
        )));
    };
    if qualname.split('.').any(|part| part == "<locals>") {
        return Err(decode_error(format!(
            "local recorded type is not replayable at {}",
            shown(path)
        )));
    }
    Ok(())
}

fn check_enum(payload: &Map<String, Value>, path: &str) -> Result<(), CodecError> {
    require_fields(
        payload,
        "enum",
        &["module", "qualname", "name", "value"],
        path,
    )?;
    check_recorded_type(payload, path)?;
    if !field(payload, "name").is_string() {
        return Err(decode_error(format!(
            "recorded type is not an enum at {}",
            shown(path)
        )));
    }
    Ok(())
}

/// Validates a `namedtuple` payload's shape; returns its fields and values.
fn check_namedtuple<'a>(
    payload: &'a Map<String, Value>,
    path: &str,
) -> Result<(Vec<&'a str>, &'a [Value]), CodecError> {
    require_fields(
        payload,
        "namedtuple",
        &["module", "qualname", "fields", "values"],
        path,
    )?;
    check_recorded_type(payload, path)?;
    let changed = || decode_error(format!("namedtuple definition changed at {}", shown(path)));
    let fields = field(payload, "fields").as_array().ok_or_else(changed)?;
    let names = fields
        .iter()
        .map(Value::as_str)
        .collect::<Option<Vec<&str>>>()
        .ok_or_else(changed)?;
    let values = field(payload, "values").as_array().ok_or_else(changed)?;
    if names.len() != values.len() {
        return Err(changed());
    }
    Ok((names, values))
}

fn check_sequence<'a>(
    payload: &'a Map<String, Value>,
    type_name: &str,
    path: &str,
) -> Result<&'a [Value], CodecError> {
    require_fields(payload, type_name, &["values"], path)?;
    field(payload, "values")
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| decode_error(format!("invalid {type_name} tag at {}", shown(path))))
}

/// Validates a `mapping` payload's items; returns `(key, value)` pairs.
fn check_mapping<'a>(
    payload: &'a Map<String, Value>,
    path: &str,
) -> Result<Vec<(&'a str, &'a Value)>, CodecError> {
    require_fields(payload, "mapping", &["items"], path)?;
    let items = field(payload, "items")
        .as_array()
        .ok_or_else(|| decode_error(format!("invalid mapping tag at {}", shown(path))))?;
    let mut pairs: Vec<(&str, &Value)> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let pair = match item.as_array().map(Vec::as_slice) {
            Some([Value::String(key), value]) if !pairs.iter().any(|(seen, _)| seen == key) => {
                (key.as_str(), value)
            }
            _ => {
                return Err(decode_error(format!(
                    "invalid mapping item at {}",
                    pointer(path, &index.to_string())
                )));
            }
        };
        pairs.push(pair);
    }
    Ok(pairs)
}

/// Whether Python could hash the object an *encoded* value decodes to
/// (needed for `set`/`frozenset` members).
fn encoded_is_hashable(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => true,
        Value::Array(_) => false,
        Value::Object(map) => {
            let Some(Value::Object(payload)) = map.get(TAG) else {
                return false;
            };
            match field(payload, "type").as_str() {
                Some("tuple") => field(payload, "values")
                    .as_array()
                    .is_some_and(|items| items.iter().all(encoded_is_hashable)),
                Some("namedtuple") => field(payload, "values")
                    .as_array()
                    .is_some_and(|items| items.iter().all(encoded_is_hashable)),
                Some("decimal") => field(payload, "value")
                    .as_str()
                    .and_then(|text| PyDecimal::parse(text).ok())
                    .is_none_or(|decimal| !decimal.is_signaling()),
                Some("set" | "mapping") => false,
                _ => true,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// decode
// ---------------------------------------------------------------------------

/// Validates an encoded value exactly like Python's `decode_value` and
/// returns its Rust view (see the module documentation).
pub fn decode_value(value: &Value) -> Result<Value, CodecError> {
    decode_at(value, "")
}

fn decode_at(value: &Value, path: &str) -> Result<Value, CodecError> {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(value.clone()),
        Value::Array(items) => decode_items(items, path).map(Value::Array),
        Value::Object(map) => {
            if !map.contains_key(TAG) {
                let mut out = Map::new();
                for (key, item) in map {
                    out.insert(key.clone(), decode_at(item, &pointer(path, key))?);
                }
                return Ok(Value::Object(out));
            }
            match map.get(TAG) {
                Some(Value::Object(payload)) if map.len() == 1 => decode_tag(value, payload, path),
                _ => Err(decode_error(format!(
                    "invalid extension tag at {}",
                    shown(path)
                ))),
            }
        }
    }
}

fn decode_items(items: &[Value], path: &str) -> Result<Vec<Value>, CodecError> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| decode_at(item, &pointer(path, &index.to_string())))
        .collect()
}

fn decode_tag(tag: &Value, payload: &Map<String, Value>, path: &str) -> Result<Value, CodecError> {
    let Some(type_name) = field(payload, "type").as_str() else {
        return Err(decode_error(format!(
            "extension type must be a string at {}",
            shown(path)
        )));
    };
    match type_name {
        "datetime" => check_datetime(payload, path).map(|_| tag.clone()),
        "uuid" => check_uuid(payload, path).map(|_| tag.clone()),
        "bytes" => check_bytes(payload, path).map(|_| tag.clone()),
        "decimal" => check_decimal(payload, path).map(|_| tag.clone()),
        "tuple" | "set" | "frozenset" => {
            let items = check_sequence(payload, type_name, path)?;
            let decoded = decode_items(items, path)?;
            if type_name != "tuple" && !items.iter().all(encoded_is_hashable) {
                return Err(decode_error(format!(
                    "unhashable {type_name} member at {}",
                    shown(path)
                )));
            }
            Ok(Value::Array(decoded))
        }
        "mapping" => {
            let pairs = check_mapping_lazily(payload, path)?;
            Ok(Value::Object(pairs))
        }
        "enum" => {
            check_enum(payload, path)?;
            decode_at(field(payload, "value"), &pointer(path, "value"))?;
            Ok(tag.clone())
        }
        "namedtuple" => {
            let (names, values) = check_namedtuple(payload, path)?;
            for (name, item) in names.iter().zip(values) {
                decode_at(item, &pointer(path, name))?;
            }
            Ok(tag.clone())
        }
        other => Err(decode_error(format!(
            "unknown extension type {} at {}",
            py_repr_str(other),
            shown(path)
        ))),
    }
}

/// Decodes mapping items one by one, so that an invalid later item is
/// reported only after earlier values decoded (Python's order).
fn check_mapping_lazily(
    payload: &Map<String, Value>,
    path: &str,
) -> Result<Map<String, Value>, CodecError> {
    require_fields(payload, "mapping", &["items"], path)?;
    let items = field(payload, "items")
        .as_array()
        .ok_or_else(|| decode_error(format!("invalid mapping tag at {}", shown(path))))?;
    let mut out = Map::new();
    for (index, item) in items.iter().enumerate() {
        match item.as_array().map(Vec::as_slice) {
            Some([Value::String(key), value]) if !out.contains_key(key) => {
                let decoded = decode_at(value, &pointer(path, key))?;
                out.insert(key.clone(), decoded);
            }
            _ => {
                return Err(decode_error(format!(
                    "invalid mapping item at {}",
                    pointer(path, &index.to_string())
                )));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// encode
// ---------------------------------------------------------------------------

/// Encodes a Rust-view JSON value the way Python's `encode_value` encodes
/// the corresponding Python value.
///
/// * An object whose only key is `"$onestep"` and whose value is a valid tag
///   of a known type passes through; its nested values are encoded in turn
///   and `set`/`frozenset` members are re-sorted by canonical JSON, as
///   Python does. Validity is exactly what [`decode_value`] accepts.
/// * Any other object containing the key `"$onestep"` (including a
///   malformed tag) is escaped as `{"$onestep": {"type": "mapping", "items":
///   [[key, encoded value], ...]}}`, items in the map's iteration order.
/// * Everything else is returned unchanged (recursively encoded).
///
/// Non-finite floats, which Python rejects with `non-finite float`, cannot
/// occur in a `serde_json::Value`.
pub fn encode_value(value: &Value) -> Result<Value, CodecError> {
    encode_at(value, "")
}

fn encode_at(value: &Value, path: &str) -> Result<Value, CodecError> {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(value.clone()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| encode_at(item, &pointer(path, &index.to_string())))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if let (1, Some(Value::Object(payload))) = (map.len(), map.get(TAG))
                && let Some(tag) = encode_tag(payload, path)?
            {
                return Ok(tag);
            }
            if map.contains_key(TAG) {
                let mut items = Vec::with_capacity(map.len());
                for (key, item) in map {
                    items.push(Value::Array(vec![
                        Value::String(key.clone()),
                        encode_at(item, &pointer(path, key))?,
                    ]));
                }
                return Ok(new_tag("mapping", vec![("items", Value::Array(items))]));
            }
            let mut out = Map::new();
            for (key, item) in map {
                out.insert(key.clone(), encode_at(item, &pointer(path, key))?);
            }
            Ok(Value::Object(out))
        }
    }
}

/// Encodes a candidate tag; `Ok(None)` when it is not a valid tag.
fn encode_tag(payload: &Map<String, Value>, path: &str) -> Result<Option<Value>, CodecError> {
    let Some(type_name) = field(payload, "type").as_str() else {
        return Ok(None);
    };
    let mut out = payload.clone();
    match type_name {
        // Scalar tags are re-emitted in the form Python writes for the value it decodes, so a
        // valid but non-canonical spelling (`6F1C…`, `1e2`, a space separator) stores and
        // hashes exactly as the reference would.
        "datetime" => {
            return Ok(check_datetime(payload, path).ok().map(|(dt, fold)| {
                new_tag(
                    "datetime",
                    vec![
                        ("value", Value::String(py_isoformat(&dt))),
                        ("fold", Value::from(fold)),
                    ],
                )
            }));
        }
        "uuid" => {
            return Ok(check_uuid(payload, path)
                .ok()
                .map(|u| uuid_tag(::uuid::Uuid::from_u128(u))));
        }
        "bytes" => return Ok(check_bytes(payload, path).ok().map(|b| bytes_tag(&b))),
        "decimal" => {
            return Ok(check_decimal(payload, path)
                .ok()
                .map(|d| new_tag("decimal", vec![("value", Value::String(d.to_py_string()))])));
        }
        "tuple" | "set" | "frozenset" => {
            let Ok(items) = check_sequence(payload, type_name, path) else {
                return Ok(None);
            };
            let mut encoded = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let token = if type_name == "tuple" {
                    index.to_string()
                } else {
                    "set".to_owned()
                };
                encoded.push(encode_at(item, &pointer(path, &token))?);
            }
            if type_name != "tuple" {
                if !encoded.iter().all(encoded_is_hashable) {
                    return Ok(None);
                }
                let mut keyed: Vec<(String, Value)> = encoded
                    .into_iter()
                    .map(|item| (canonical_json(&item), item))
                    .collect();
                keyed.sort_by(|a, b| a.0.cmp(&b.0));
                encoded = keyed.into_iter().map(|(_, item)| item).collect();
            }
            out.insert("values".to_owned(), Value::Array(encoded));
        }
        "mapping" => {
            let Ok(pairs) = check_mapping(payload, path) else {
                return Ok(None);
            };
            let mut items = Vec::with_capacity(pairs.len());
            for (key, item) in pairs {
                items.push(Value::Array(vec![
                    Value::String(key.to_owned()),
                    encode_at(item, &pointer(path, key))?,
                ]));
            }
            out.insert("items".to_owned(), Value::Array(items));
        }
        "enum" => {
            if check_enum(payload, path).is_err() {
                return Ok(None);
            }
            let encoded = encode_at(field(payload, "value"), &pointer(path, "value"))?;
            out.insert("value".to_owned(), encoded);
        }
        "namedtuple" => {
            let Ok((names, values)) = check_namedtuple(payload, path) else {
                return Ok(None);
            };
            let mut encoded = Vec::with_capacity(values.len());
            for (name, item) in names.iter().zip(values) {
                encoded.push(encode_at(item, &pointer(path, name))?);
            }
            out.insert("values".to_owned(), Value::Array(encoded));
        }
        _ => return Ok(None),
    }
    Ok(Some(wrap_tag(out)))
}

// ---------------------------------------------------------------------------
// serde helpers
// ---------------------------------------------------------------------------

/// Reads the payload of a tag of the expected type from a JSON value.
fn expect_tag<'a>(value: &'a Value, type_name: &str) -> Result<&'a Map<String, Value>, String> {
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
/// Python's `timezone` and [`decode_value`] do not).
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
                Value::String(super::digest::python_isoformat(value)),
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
/// offset; decode them with [`decode_value`] and handle the tag yourself)
/// and offsets with fractional seconds.
pub fn datetime_from_tag(value: &Value) -> Result<time::OffsetDateTime, String> {
    let payload = expect_tag(value, "datetime")?;
    let (parsed, _fold) = check_datetime(payload, "").map_err(|e| e.to_string())?;
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
    check_uuid(payload, "")
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
    check_bytes(payload, "").map_err(|e| e.to_string())
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
    check_decimal(payload, "")
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    fn tag(payload: Value) -> Value {
        json!({ TAG: payload })
    }

    #[test]
    fn maps_with_the_tag_key_are_escaped_as_mapping_items() {
        let encoded = encode_value(&json!({"$onestep": 1, "a": {"b": 2}})).expect("encodes");
        assert_eq!(
            encoded,
            tag(json!({"type": "mapping", "items": [["$onestep", 1], ["a", {"b": 2}]]}))
        );
        assert_eq!(
            decode_value(&encoded).expect("decodes"),
            json!({"$onestep": 1, "a": {"b": 2}})
        );
    }

    #[test]
    fn valid_scalar_tags_pass_through_and_malformed_ones_are_escaped() {
        let valid = tag(json!({"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}));
        assert_eq!(encode_value(&valid).expect("encodes"), valid);
        let malformed = tag(json!({"type": "uuid", "value": "nope"}));
        let escaped = encode_value(&malformed).expect("encodes");
        assert_eq!(
            escaped,
            tag(
                json!({"type": "mapping", "items": [["$onestep", {"type": "uuid", "value": "nope"}]]})
            )
        );
    }

    #[test]
    fn set_members_are_sorted_by_canonical_json_when_encoding() {
        let set = tag(json!({"type": "set", "values": ["b", 2, "a", 10]}));
        let encoded = encode_value(&set).expect("encodes");
        assert_eq!(
            encoded,
            tag(json!({"type": "set", "values": ["a", "b", 10, 2]}))
        );
    }

    #[test]
    fn decoding_turns_tuples_and_sets_into_arrays_and_keeps_scalar_tags() {
        let dt = tag(json!({"type": "datetime", "value": "2024-01-01T00:00:00+00:00", "fold": 0}));
        let encoded = tag(json!({"type": "tuple", "values": [1, dt.clone()]}));
        assert_eq!(decode_value(&encoded).expect("decodes"), json!([1, dt]));
    }

    #[test]
    fn decoding_reports_python_messages_with_json_pointer_paths() {
        let bad = json!({"a/b": [tag(json!({"type": "datetime", "value": 1, "fold": 0}))]});
        assert_eq!(
            decode_value(&bad).err().map(|e| e.to_string()).as_deref(),
            Some("invalid datetime tag at /a~1b/0")
        );
        let unknown = tag(json!({"type": "date", "value": "x"}));
        assert_eq!(
            decode_value(&unknown)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("unknown extension type 'date' at /")
        );
        let fold_list = tag(json!({"type": "datetime", "value": "2024-01-01", "fold": []}));
        assert_eq!(
            decode_value(&fold_list)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("unhashable type: 'list'")
        );
    }

    #[test]
    fn unhashable_set_members_are_rejected() {
        let bad = tag(json!({"type": "frozenset", "values": [[1]]}));
        assert_eq!(
            decode_value(&bad).err().map(|e| e.to_string()).as_deref(),
            Some("unhashable frozenset member at /")
        );
        let snan = tag(
            json!({"type": "set", "values": [tag(json!({"type": "decimal", "value": "sNaN"}))]}),
        );
        assert!(decode_value(&snan).is_err());
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        #[serde(with = "datetime")]
        at: time::OffsetDateTime,
        #[serde(with = "datetime::option")]
        maybe_at: Option<time::OffsetDateTime>,
        #[serde(with = "uuid")]
        id: ::uuid::Uuid,
        #[serde(with = "bytes")]
        raw: Vec<u8>,
        #[serde(with = "decimal")]
        amount: String,
    }

    #[test]
    fn serde_helpers_round_trip_through_tags() {
        let sample = Sample {
            at: time::macros::datetime!(2024-05-06 07:08:09.000123 +08:00),
            maybe_at: None,
            id: ::uuid::Uuid::from_u128(0x1234_5678_1234_5678_1234_5678_1234_5678),
            raw: vec![0, 255, 16],
            amount: "1.50".to_owned(),
        };
        let value = serde_json::to_value(&sample).expect("serializes");
        assert_eq!(
            value["at"],
            tag(
                json!({"type": "datetime", "value": "2024-05-06T07:08:09.000123+08:00", "fold": 0})
            )
        );
        assert_eq!(value["raw"], tag(json!({"type": "bytes", "value": "AP8Q"})));
        assert_eq!(value["maybe_at"], Value::Null);
        assert_eq!(decode_value(&value).expect("valid"), value);
        let back: Sample = serde_json::from_value(value).expect("deserializes");
        assert_eq!(back, sample);
    }

    #[test]
    fn datetime_helper_rejects_naive_datetimes_and_truncates_nanoseconds() {
        let naive = tag(json!({"type": "datetime", "value": "2024-01-01T00:00:00", "fold": 0}));
        assert!(datetime_from_tag(&naive).is_err());
        let precise = time::macros::datetime!(2024-01-01 00:00:00.123456789 UTC);
        let encoded = datetime_tag(precise).expect("in range");
        assert_eq!(
            encoded[TAG]["value"],
            json!("2024-01-01T00:00:00.123456+00:00")
        );
    }

    #[test]
    fn datetime_helper_rejects_offsets_python_cannot_hold() {
        let at = time::macros::datetime!(1970-01-01 00:00:00 UTC)
            .to_offset(time::macros::offset!(+24:00));
        assert_eq!(
            datetime_tag(at),
            Err(
                "UTC offset +24:00:00 is out of range (must be strictly between -24:00 and +24:00)"
                    .to_owned()
            )
        );
        let edge = time::macros::datetime!(1970-01-01 00:00:00 UTC)
            .to_offset(time::macros::offset!(-23:59:59));
        let tag = datetime_tag(edge).expect("in range");
        assert_eq!(decode_value(&tag), Ok(tag.clone()));
    }

    #[test]
    fn decimal_helper_normalises_like_python_str() {
        assert_eq!(
            decimal_tag("1_000").expect("valid")[TAG]["value"],
            json!("1000")
        );
        assert!(decimal_tag("abc").is_err());
    }
}

//! The checks of Python's `decode_value`, in its order, shared by decoding and encoding.

use super::super::pycompat::{
    PyDateTime, PyDecimal, py_b64decode_strict, py_fromisoformat, py_uuid_from_str,
};
use super::{CodecError, Path, TAG, decode_error};
use serde_json::{Map, Value};

pub(super) fn require_fields(
    payload: &Map<String, Value>,
    type_name: &str,
    fields: &[&str],
    path: &Path<'_>,
) -> Result<(), CodecError> {
    let matches = payload.len() == fields.len() + 1
        && payload.contains_key("type")
        && fields.iter().all(|field| payload.contains_key(*field));
    if matches {
        Ok(())
    } else {
        Err(decode_error(format!(
            "invalid {type_name} tag fields at {}",
            path
        )))
    }
}

pub(super) fn field<'a>(payload: &'a Map<String, Value>, name: &str) -> &'a Value {
    payload.get(name).unwrap_or(&Value::Null)
}

pub(super) fn string_value<'a>(
    payload: &'a Map<String, Value>,
    type_name: &str,
    path: &Path<'_>,
) -> Result<&'a str, CodecError> {
    field(payload, "value")
        .as_str()
        .ok_or_else(|| decode_error(format!("invalid {type_name} tag at {}", path)))
}

/// Validates a `datetime` tag payload; returns the parsed value and fold.
pub(super) fn check_datetime(
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<(PyDateTime, u8), CodecError> {
    require_fields(payload, "datetime", &["value", "fold"], path)?;
    let invalid = || decode_error(format!("invalid datetime tag at {}", path));
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

pub(super) fn check_uuid(
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<u128, CodecError> {
    require_fields(payload, "uuid", &["value"], path)?;
    py_uuid_from_str(string_value(payload, "uuid", path)?).map_err(CodecError::Decode)
}

pub(super) fn check_bytes(
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<Vec<u8>, CodecError> {
    require_fields(payload, "bytes", &["value"], path)?;
    let text = string_value(payload, "bytes", path)?;
    py_b64decode_strict(text, false)
        .map_err(|_| decode_error(format!("invalid bytes tag at {}", path)))
}

pub(super) fn check_decimal(
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<PyDecimal, CodecError> {
    require_fields(payload, "decimal", &["value"], path)?;
    PyDecimal::parse(string_value(payload, "decimal", path)?).map_err(CodecError::Decode)
}

/// `_resolve_loaded_type` as far as Rust can follow it (no class lookup).
pub(super) fn check_recorded_type(
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<(), CodecError> {
    let (Some(_module), Some(qualname)) = (
        field(payload, "module").as_str(),
        field(payload, "qualname").as_str(),
    ) else {
        return Err(decode_error(format!("invalid recorded type at {}", path)));
    };
    if qualname.split('.').any(|part| part == "<locals>") {
        return Err(decode_error(format!(
            "local recorded type is not replayable at {}",
            path
        )));
    }
    Ok(())
}

pub(super) fn check_enum(payload: &Map<String, Value>, path: &Path<'_>) -> Result<(), CodecError> {
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
            path
        )));
    }
    Ok(())
}

/// Validates a `namedtuple` payload's shape; returns its fields and values.
pub(super) fn check_namedtuple<'a>(
    payload: &'a Map<String, Value>,
    path: &Path<'_>,
) -> Result<(Vec<&'a str>, &'a [Value]), CodecError> {
    require_fields(
        payload,
        "namedtuple",
        &["module", "qualname", "fields", "values"],
        path,
    )?;
    check_recorded_type(payload, path)?;
    let changed = || decode_error(format!("namedtuple definition changed at {}", path));
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

pub(super) fn check_sequence<'a>(
    payload: &'a Map<String, Value>,
    type_name: &str,
    path: &Path<'_>,
) -> Result<&'a [Value], CodecError> {
    require_fields(payload, type_name, &["values"], path)?;
    field(payload, "values")
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| decode_error(format!("invalid {type_name} tag at {}", path)))
}

/// Validates a `mapping` payload's items; returns `(key, value)` pairs.
pub(super) fn check_mapping<'a>(
    payload: &'a Map<String, Value>,
    path: &Path<'_>,
) -> Result<Vec<(&'a str, &'a Value)>, CodecError> {
    require_fields(payload, "mapping", &["items"], path)?;
    let items = field(payload, "items")
        .as_array()
        .ok_or_else(|| decode_error(format!("invalid mapping tag at {}", path)))?;
    let mut pairs: Vec<(&str, &Value)> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let pair = match item.as_array().map(Vec::as_slice) {
            Some([Value::String(key), value]) if !pairs.iter().any(|(seen, _)| seen == key) => {
                (key.as_str(), value)
            }
            _ => {
                return Err(decode_error(format!(
                    "invalid mapping item at {}",
                    path.index(index)
                )));
            }
        };
        pairs.push(pair);
    }
    Ok(pairs)
}

/// Whether Python could hash the object an *encoded* value decodes to
/// (needed for `set`/`frozenset` members).
pub(super) fn encoded_is_hashable(value: &Value) -> bool {
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

/// The members of a `tuple`, `set` or `frozenset` tag (or a plain array).
pub(super) fn members(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(items) => Some(items),
        Value::Object(map) if map.len() == 1 => {
            let payload = map.get(TAG)?.as_object()?;
            match field(payload, "type").as_str()? {
                "tuple" | "set" | "frozenset" => {
                    field(payload, "values").as_array().map(Vec::as_slice)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

//! Stored form → Rust view: Python's `decode_value` checks, without losing anything.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::super::canonical::{PyNumber, classify};
use super::super::pycompat::py_repr_str;
use super::check::{
    check_bytes, check_datetime, check_decimal, check_enum, check_namedtuple, check_sequence,
    check_uuid, encoded_is_hashable, field, require_fields,
};
use super::number;
use super::{CodecError, Path, TAG, decode_error, new_tag, with_field};

/// Validates an encoded value exactly like Python's `decode_value` and returns its Rust view:
/// the same value, tags included, with floats spelled as `serde_json` prints an `f64` (see the
/// [module documentation](super)).
///
/// ```
/// use onestep_core::execution::codec::{decode_value, encode_value};
/// use serde_json::json;
///
/// let stored = json!({"pair": {"$onestep": {"type": "tuple", "values": [1, "two"]}}, "n": 100000000000000000000u128});
/// let view = decode_value(&stored).unwrap();
/// assert_eq!(view, stored);
/// assert_eq!(encode_value(&view).unwrap(), stored);
/// let bad = json!({"$onestep": {"type": "uuid", "value": "nope"}});
/// assert_eq!(decode_value(&bad).unwrap_err().to_string(), "badly formed hexadecimal UUID string");
/// ```
pub fn decode_value(value: &Value) -> Result<Value, CodecError> {
    decode_at(value, &Path::Root)
}

/// [`decode_value`] of a value the caller owns: the same checks in the same order, with the
/// same result and errors, but the value is changed where it stands (numbers respelled, tagged
/// containers rebuilt) instead of copied whole. Reading a claimed row's payload this way saves a
/// copy of every key and value per execution.
///
/// ```
/// use onestep_core::execution::codec::{decode_value, decode_value_owned};
/// use serde_json::json;
///
/// let stored = json!({"n": 1.0e16, "pair": {"$onestep": {"type": "tuple", "values": [1, 2.5]}}});
/// assert_eq!(decode_value_owned(stored.clone()), decode_value(&stored));
/// ```
pub fn decode_value_owned(mut value: Value) -> Result<Value, CodecError> {
    decode_in_place(&mut value, &Path::Root)?;
    Ok(value)
}

/// Validates `value` as Python's `decode_value` does and turns it into its Rust view where it
/// stands: plain objects, arrays and scalars are walked in place (numbers respelled); a tagged
/// object (rare) is decoded by [`decode_tag`] and replaced.
fn decode_in_place(value: &mut Value, path: &Path<'_>) -> Result<(), CodecError> {
    if let Value::Object(map) = &*value
        && map.contains_key(TAG)
    {
        let decoded = match map.get(TAG) {
            Some(Value::Object(payload)) if map.len() == 1 => decode_tag(value, payload, path)?,
            _ => return Err(decode_error(format!("invalid extension tag at {}", path))),
        };
        *value = decoded;
        return Ok(());
    }
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
        Value::Number(n) => {
            if let PyNumber::Float(float) = classify(n)
                && !float.is_finite()
            {
                return Err(decode_error(format!("non-finite float at {}", path)));
            }
            if let std::borrow::Cow::Owned(view) = number::rust_view(n) {
                *n = view;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                decode_in_place(item, &path.index(index))?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                decode_in_place(item, &path.key(key))?;
            }
            Ok(())
        }
    }
}

/// [`decode_in_place`] of a copy of `value`: one walk serves borrowed and owned values alike.
pub(super) fn decode_at(value: &Value, path: &Path<'_>) -> Result<Value, CodecError> {
    let mut value = value.clone();
    decode_in_place(&mut value, path)?;
    Ok(value)
}

fn decode_items(items: &[Value], path: &Path<'_>) -> Result<Vec<Value>, CodecError> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| decode_at(item, &path.index(index)))
        .collect()
}

fn decode_tag(
    tag: &Value,
    payload: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<Value, CodecError> {
    let Some(type_name) = field(payload, "type").as_str() else {
        return Err(decode_error(format!(
            "extension type must be a string at {}",
            path
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
                    path
                )));
            }
            Ok(with_field(payload, "values", Value::Array(decoded)))
        }
        "mapping" => decode_mapping(payload, path),
        "enum" => {
            check_enum(payload, path)?;
            let decoded = decode_at(field(payload, "value"), &path.key("value"))?;
            Ok(with_field(payload, "value", decoded))
        }
        "namedtuple" => {
            let (names, values) = check_namedtuple(payload, path)?;
            let decoded = names
                .iter()
                .zip(values)
                .map(|(name, item)| decode_at(item, &path.key(name)))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(with_field(payload, "values", Value::Array(decoded)))
        }
        other => Err(decode_error(format!(
            "unknown extension type {} at {}",
            py_repr_str(other),
            path
        ))),
    }
}

/// Decodes mapping items one by one, in their order, so that an invalid later item is reported
/// only after earlier values decoded (Python's order). The items keep their order.
fn decode_mapping(payload: &Map<String, Value>, path: &Path<'_>) -> Result<Value, CodecError> {
    require_fields(payload, "mapping", &["items"], path)?;
    let items = field(payload, "items")
        .as_array()
        .ok_or_else(|| decode_error(format!("invalid mapping tag at {}", path)))?;
    let mut seen = HashSet::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item.as_array().map(Vec::as_slice) {
            Some([Value::String(key), value]) if seen.insert(key.as_str()) => {
                let decoded = decode_at(value, &path.key(key))?;
                out.push(Value::Array(vec![Value::String(key.clone()), decoded]));
            }
            _ => {
                return Err(decode_error(format!(
                    "invalid mapping item at {}",
                    path.index(index)
                )));
            }
        }
    }
    Ok(new_tag("mapping", vec![("items", Value::Array(out))]))
}

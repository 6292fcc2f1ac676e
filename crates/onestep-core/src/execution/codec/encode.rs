//! Rust view (or plain JSON) → stored form, as Python's `encode_value` writes it.

use serde_json::{Map, Value};

use super::super::canonical::canonical_json;
use super::super::pycompat::py_isoformat;
use super::check::{
    check_bytes, check_datetime, check_decimal, check_enum, check_mapping, check_namedtuple,
    check_sequence, check_uuid, encoded_is_hashable, field,
};
use super::number::{self, MAX_INT_DIGITS, Unstorable};
use super::scalar::{bytes_tag, uuid_tag};
use super::{CodecError, Path, TAG, new_tag, with_field};

/// What an object with a `"$onestep"` key means to the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// The Rust view: a valid tag stands for the Python value it encodes.
    RustView,
    /// Plain JSON, as Python's `json.loads` gives it: every such object is a dict.
    Plain,
}

/// Encodes a Rust-view JSON value the way Python's `encode_value` encodes the corresponding
/// Python value.
///
/// * An object whose only key is `"$onestep"` and whose value is a valid tag of a known type
///   passes through; its nested values are encoded in turn and `set`/`frozenset` members are
///   re-sorted by canonical JSON, as Python does. Validity is exactly what
///   [`decode_value`](super::decode_value) accepts. Scalar tags are re-spelled the way Python
///   writes the value they decode to (`6F1C…` → `6f1c…`).
/// * Any other object containing the key `"$onestep"` (including a malformed tag) is escaped as
///   `{"$onestep": {"type": "mapping", "items": [[key, encoded value], ...]}}`, items in the
///   map's order (insertion order: the workspace builds `serde_json` with `preserve_order`).
/// * Numbers are written as Python writes what it reads from them (integers of any size as
///   their digits, `-0` as `0`, floats as their `repr`, `1E2` as `100.0`); a float literal
///   beyond the `f64` range fails with Python's `non-finite float`, and an integer of more than
///   [`MAX_INT_DIGITS`] digits fails as Python's `json` would.
/// * Everything else is returned unchanged (recursively encoded).
///
/// So `encode_value(&decode_value(stored)?)` is `stored` again.
///
/// ```
/// use onestep_core::execution::codec::encode_value;
/// use serde_json::json;
///
/// let view = json!({"$onestep": 1, "n": 1E2});
/// assert_eq!(
///     encode_value(&view).unwrap(),
///     json!({"$onestep": {"type": "mapping", "items": [["$onestep", 1], ["n", 100.0]]}})
/// );
/// ```
pub fn encode_value(value: &Value) -> Result<Value, CodecError> {
    encode_at(value, &Path::Root, Input::RustView)
}

/// Encodes plain JSON the way Python encodes what `json.loads` gives for it: like
/// [`encode_value`], except that no object is taken for a tag, so every object with a
/// `"$onestep"` key becomes a `mapping`. This is what the reference's HTTP API stores for a
/// request body, and what `onestep serve` stores.
///
/// ```
/// use onestep_core::execution::codec::encode_plain_json;
/// use serde_json::json;
///
/// let body = json!({"$onestep": {"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}});
/// let stored = encode_plain_json(&body).unwrap();
/// assert_eq!(stored["$onestep"]["type"], "mapping");
/// ```
pub fn encode_plain_json(value: &Value) -> Result<Value, CodecError> {
    encode_at(value, &Path::Root, Input::Plain)
}

fn encode_number(value: &serde_json::Number, path: &Path<'_>) -> Result<Value, CodecError> {
    match number::stored(value) {
        Ok(stored) => Ok(Value::Number(stored.into_owned())),
        Err(Unstorable::NonFinite) => Err(CodecError::Encode {
            path: path.to_string(),
            type_name: "builtins.float".to_owned(),
            reason: "non-finite float".to_owned(),
        }),
        Err(Unstorable::TooManyDigits(digits)) => Err(CodecError::Encode {
            path: path.to_string(),
            type_name: "builtins.int".to_owned(),
            reason: format!(
                "{digits} digits exceed the limit ({MAX_INT_DIGITS} digits) for integer string \
                 conversion"
            ),
        }),
    }
}

fn encode_at(value: &Value, path: &Path<'_>, input: Input) -> Result<Value, CodecError> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(value.clone()),
        Value::Number(n) => encode_number(n, path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| encode_at(item, &path.index(index), input))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if input == Input::RustView
                && let (1, Some(Value::Object(payload))) = (map.len(), map.get(TAG))
                && let Some(tag) = encode_tag(payload, path)?
            {
                return Ok(tag);
            }
            if map.contains_key(TAG) {
                let mut items = Vec::with_capacity(map.len());
                for (key, item) in map {
                    items.push(Value::Array(vec![
                        Value::String(key.clone()),
                        encode_at(item, &path.key(key), input)?,
                    ]));
                }
                return Ok(new_tag("mapping", vec![("items", Value::Array(items))]));
            }
            let mut out = Map::with_capacity(map.len());
            for (key, item) in map {
                out.insert(key.clone(), encode_at(item, &path.key(key), input)?);
            }
            Ok(Value::Object(out))
        }
    }
}

/// Encodes a candidate tag of the Rust view; `Ok(None)` when it is not a valid tag.
fn encode_tag(payload: &Map<String, Value>, path: &Path<'_>) -> Result<Option<Value>, CodecError> {
    let Some(type_name) = field(payload, "type").as_str() else {
        return Ok(None);
    };
    let nested = |item: &Value, token: &str| encode_at(item, &path.key(token), Input::RustView);
    let (name, encoded) = match type_name {
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
                // Python names a tuple member by its index and any set member `set`.
                let at = if type_name == "tuple" {
                    path.index(index)
                } else {
                    path.key("set")
                };
                encoded.push(encode_at(item, &at, Input::RustView)?);
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
            ("values", Value::Array(encoded))
        }
        "mapping" => {
            let Ok(pairs) = check_mapping(payload, path) else {
                return Ok(None);
            };
            let mut items = Vec::with_capacity(pairs.len());
            for (key, item) in pairs {
                items.push(Value::Array(vec![
                    Value::String(key.to_owned()),
                    nested(item, key)?,
                ]));
            }
            ("items", Value::Array(items))
        }
        "enum" => {
            if check_enum(payload, path).is_err() {
                return Ok(None);
            }
            ("value", nested(field(payload, "value"), "value")?)
        }
        "namedtuple" => {
            let Ok((names, values)) = check_namedtuple(payload, path) else {
                return Ok(None);
            };
            let mut encoded = Vec::with_capacity(values.len());
            for (name, item) in names.iter().zip(values) {
                encoded.push(nested(item, name)?);
            }
            ("values", Value::Array(encoded))
        }
        _ => return Ok(None),
    };
    Ok(Some(with_field(payload, name, encoded)))
}

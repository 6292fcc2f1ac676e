//! The tagged JSON codec of the Python reference (`onestep.capture.codec`), over
//! `serde_json::Value`.
//!
//! Python values that JSON cannot express are stored as single-key objects
//! `{"$onestep": {"type": T, ...}}` with `T` one of `datetime`, `uuid`, `bytes`, `decimal`,
//! `tuple`, `set`, `frozenset`, `namedtuple`, `enum` or `mapping` (a dict that itself has a
//! `"$onestep"` key).
//!
//! # The Rust view
//!
//! Rust has no Python objects, so payloads, metadata and results are JSON values in a "Rust
//! view" that loses nothing: [`decode_value`] validates a stored value exactly like Python's
//! `decode_value` and returns it with every tag in place, and [`encode_value`] writes it back
//! as Python would. A value a Python process stored therefore comes back to Python unchanged
//! after any Rust process read it, returned it or submitted it again, and digests the same:
//!
//! * every tag stays a tag object: a tuple stays a tuple, a set a set, a `mapping` keeps its
//!   items in their order;
//! * integers keep every digit, whatever their size (the workspace builds `serde_json` with
//!   `arbitrary_precision`); floats hold the same `f64` (spelled as `serde_json` prints it,
//!   written back as Python's `repr`), see [`number`](self#numbers);
//! * objects keep their key order (`serde_json`'s `preserve_order`), as Python dicts do.
//!
//! Typed code reads the view with [`from_value`], which gives a tuple, set or frozenset to a
//! `Vec`, a Rust tuple or a `HashSet`, a `mapping` to a map or struct, a `namedtuple` to a
//! struct, an `enum` to a Rust enum, and the string of a `uuid`, `datetime` or `decimal` to a
//! type that reads a string; [`Task::handler`](crate::Task::handler) and
//! [`ExecutionClient::result`](super::ExecutionClient::result) use it. The serde helpers write
//! tags from typed fields: [`datetime`], [`uuid`], [`bytes`], [`decimal`], [`tuple`](mod@tuple), [`set`]
//! and [`frozenset`].
//!
//! ```
//! use onestep_core::execution::codec;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Serialize, Deserialize, PartialEq, Debug)]
//! struct Point {
//!     #[serde(with = "codec::tuple")]
//!     pair: (i64, String),
//!     #[serde(with = "codec::set")]
//!     tags: std::collections::BTreeSet<String>,
//!     big: u128,
//! }
//!
//! // What a Python client stores for {"pair": (1, "two"), "tags": {"b", "a"}, "big": 10**20}:
//! let stored = json!({
//!     "pair": {"$onestep": {"type": "tuple", "values": [1, "two"]}},
//!     "tags": {"$onestep": {"type": "set", "values": ["a", "b"]}},
//!     "big": 100000000000000000000u128,
//! });
//! let point: Point = codec::from_value(&codec::decode_value(&stored).unwrap()).unwrap();
//! assert_eq!(point.big, 10u128.pow(20));
//! let back = codec::encode_value(&serde_json::to_value(&point).unwrap()).unwrap();
//! assert_eq!(back, stored);
//! ```
//!
//! # Numbers
//!
//! Python's `json` reads a literal with `.`, `e` or `E` as a float and any other as an integer
//! of any size. The stored form spells them as Python's `json.dumps` does (digits; `repr`), and
//! sizes and digests are computed on that spelling, so `1E2` from an HTTP client stores and
//! hashes as Python's `100.0`. A float literal beyond the `f64` range (`1e400`) is refused as
//! Python refuses infinity ("non-finite float"), and an integer of more than
//! [`MAX_INT_DIGITS`] digits as Python's `json` refuses it.
//!
//! # What Rust cannot check
//!
//! Python resolves `enum`/`namedtuple` classes from loaded modules and compares member names,
//! values and field lists with the live class. Rust validates their structure only (field
//! sets, string types, `<locals>`), so a tag naming a class the Python worker does not have is
//! accepted here.

mod check;
mod decode;
mod encode;
pub(crate) mod number;
mod scalar;
mod sequence;
mod view;

pub use decode::{decode_value, decode_value_owned};
pub use encode::{encode_plain_json, encode_value};
pub use number::MAX_INT_DIGITS;
pub use scalar::{
    bytes, bytes_from_tag, bytes_tag, datetime, datetime_from_tag, datetime_tag,
    datetime_value_isoformat, decimal, decimal_from_tag, decimal_tag, uuid, uuid_from_tag,
    uuid_tag,
};
pub use sequence::{frozenset, set, tuple};
pub use view::{ViewDeserializer, from_value};

use serde_json::{Map, Value};

/// The key that marks an extension tag.
pub const TAG: &str = "$onestep";

/// Errors of the tagged codec; messages mirror the Python reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Python's `CaptureEncodingError(path=..., type_name=..., reason=...)`: a number Python
    /// cannot store (`non-finite float`, an integer with too many digits).
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

/// Where a value sits in the document: the JSON pointer Python's messages name, built only when
/// an error needs it (building it for every value took a quarter of the codec's time).
#[derive(Debug, Clone, Copy)]
enum Path<'a> {
    /// The document itself (Python prints `/`).
    Root,
    /// An object key, a mapping key, a field name or a fixed token such as `set`.
    Key(&'a Path<'a>, &'a str),
    /// An array element.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }

    /// Writes the pointer (nothing for the root).
    fn write_pointer(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write_pointer(out);
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Path::Index(parent, index) => {
                parent.write_pointer(out);
                out.push('/');
                out.push_str(&index.to_string());
            }
        }
    }
}

/// As Python prints a path: the pointer, `/` for the root.
impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        self.write_pointer(&mut out);
        f.write_str(if out.is_empty() { "/" } else { &out })
    }
}

fn decode_error(message: impl Into<String>) -> CodecError {
    CodecError::Decode(message.into())
}

fn wrap_tag(payload: Map<String, Value>) -> Value {
    let mut outer = Map::new();
    outer.insert(TAG.to_owned(), Value::Object(payload));
    Value::Object(outer)
}

/// The tag `payload` with its field `name` replaced by `value` (the other fields copied, in their
/// order; the replaced one is not copied first).
fn with_field(payload: &Map<String, Value>, name: &str, value: Value) -> Value {
    let mut value = Some(value);
    let mut out = Map::with_capacity(payload.len());
    for (key, item) in payload {
        let item = match value.take_if(|_| key == name) {
            Some(replaced) => replaced,
            None => item.clone(),
        };
        out.insert(key.clone(), item);
    }
    if let Some(value) = value {
        out.insert(name.to_owned(), value);
    }
    wrap_tag(out)
}

fn new_tag(type_name: &str, fields: Vec<(&str, Value)>) -> Value {
    let mut payload = Map::new();
    payload.insert("type".to_owned(), Value::String(type_name.to_owned()));
    for (key, value) in fields {
        payload.insert(key.to_owned(), value);
    }
    wrap_tag(payload)
}

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
        assert_eq!(decode_value(&encoded).expect("decodes"), encoded);
    }

    #[test]
    fn plain_json_never_holds_tags() {
        let valid = tag(json!({"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}));
        assert_eq!(
            encode_plain_json(&json!([valid.clone()])).expect("encodes"),
            json!([tag(
                json!({"type": "mapping", "items": [["$onestep", valid[TAG].clone()]]})
            )])
        );
        assert_eq!(encode_value(&valid).expect("encodes"), valid);
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
    fn decoding_keeps_every_tag_and_the_order_of_items_and_keys() {
        let dt = tag(json!({"type": "datetime", "value": "2024-01-01T00:00:00+00:00", "fold": 0}));
        let stored = json!({
            "z": tag(json!({"type": "tuple", "values": [1, dt]})),
            "a": tag(json!({"type": "frozenset", "values": [1, 2]})),
            "m": tag(json!({"type": "mapping", "items": [["z", 1], ["$onestep", 2], ["a", 3]]})),
        });
        let view = decode_value(&stored).expect("decodes");
        assert_eq!(view, stored);
        let keys: Vec<&String> = view.as_object().expect("an object").keys().collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(
            serde_json::to_string(&encode_value(&view).expect("encodes")).ok(),
            serde_json::to_string(&stored).ok()
        );
    }

    #[test]
    fn integers_of_any_size_survive_and_floats_store_as_python_writes_them() {
        let text = r#"{"big":100000000000000000000,"neg":-123456789012345678901234567890,"zero":-0,"f":1E2,"g":1e16}"#;
        let read: Value = serde_json::from_str(text).expect("JSON");
        let stored = encode_value(&read).expect("encodes");
        assert_eq!(
            serde_json::to_string(&stored).expect("prints"),
            r#"{"big":100000000000000000000,"neg":-123456789012345678901234567890,"zero":0,"f":100.0,"g":1e+16}"#
        );
        let view = decode_value(&stored).expect("decodes");
        assert_eq!(view["big"].as_u64(), None);
        assert_eq!(view["big"].to_string(), "100000000000000000000");
        assert_eq!(encode_value(&view), Ok(stored));
    }

    #[test]
    fn numbers_python_cannot_store_are_refused_with_pythons_reasons() {
        let huge: Value = serde_json::from_str(r#"{"x":[1e400]}"#).expect("JSON");
        assert_eq!(
            encode_value(&huge).map_err(|e| e.to_string()),
            Err("cannot encode builtins.float at /x/0: non-finite float".to_owned())
        );
        assert_eq!(
            decode_value(&huge).map_err(|e| e.to_string()),
            Err("non-finite float at /x/0".to_owned())
        );
        let long: Value = serde_json::from_str(&"7".repeat(MAX_INT_DIGITS + 1)).expect("JSON");
        assert_eq!(
            encode_value(&long).map_err(|e| e.to_string()),
            Err("cannot encode builtins.int at /: 4301 digits exceed the limit (4300 digits) for integer string conversion".to_owned())
        );
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

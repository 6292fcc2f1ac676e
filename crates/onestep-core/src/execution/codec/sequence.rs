//! Serde helpers that write typed fields as `tuple`, `set` and `frozenset` tags.
//!
//! Each reads any of the three tags, or a plain JSON array (what an HTTP client sends), into
//! whatever the field's type reads from a sequence; each writes its own tag. Set members are
//! sorted by their canonical JSON when the value is stored, as Python sorts them, so a
//! `HashSet` stores and hashes the same whatever its iteration order.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::check::members;
use super::{TAG, new_tag};

fn to_tag<T: Serialize + ?Sized>(type_name: &str, value: &T) -> Result<Value, String> {
    match serde_json::to_value(value).map_err(|e| e.to_string())? {
        Value::Array(items) => Ok(new_tag(type_name, vec![("values", Value::Array(items))])),
        other => Err(format!(
            "codec::{type_name} needs a value that serializes to a JSON array, got {}",
            kind(&other)
        )),
    }
}

fn from_tag<T: DeserializeOwned>(type_name: &str, value: &Value) -> Result<T, String> {
    let Some(items) = members(value) else {
        return Err(format!(
            "expected a {TAG} tuple, set or frozenset tag or an array for codec::{type_name}, \
             got {}",
            kind(value)
        ));
    };
    super::view::from_slice(items).map_err(|e| e.to_string())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

macro_rules! sequence_helper {
    ($(#[$meta:meta])* $module:ident) => {
        $(#[$meta])*
        pub mod $module {
            use serde::de::DeserializeOwned;
            use serde::{Deserialize as _, Deserializer, Serialize, Serializer};
            use serde_json::Value;

            /// Serializes the value as a tag of this helper's type.
            pub fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
            where
                T: Serialize + ?Sized,
                S: Serializer,
            {
                super::to_tag(stringify!($module), value)
                    .map_err(serde::ser::Error::custom)?
                    .serialize(serializer)
            }

            /// Deserializes the value from a `tuple`, `set` or `frozenset` tag or a plain array.
            pub fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
            where
                T: DeserializeOwned,
                D: Deserializer<'de>,
            {
                let value = Value::deserialize(deserializer)?;
                super::from_tag(stringify!($module), &value).map_err(serde::de::Error::custom)
            }

            /// The same helper for `Option<_>` fields (`None` ↔ `null`).
            pub mod option {
                use serde::de::DeserializeOwned;
                use serde::{Deserialize as _, Deserializer, Serialize, Serializer};
                use serde_json::Value;

                /// Serializes `Some` as the tag and `None` as `null`.
                pub fn serialize<T, S>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error>
                where
                    T: Serialize,
                    S: Serializer,
                {
                    match value {
                        Some(inner) => super::serialize(inner, serializer),
                        None => serializer.serialize_none(),
                    }
                }

                /// Deserializes `null` as `None`, and the tag or an array as `Some`.
                pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
                where
                    T: DeserializeOwned,
                    D: Deserializer<'de>,
                {
                    let value = Value::deserialize(deserializer)?;
                    if value.is_null() {
                        return Ok(None);
                    }
                    super::super::from_tag(stringify!($module), &value)
                        .map(Some)
                        .map_err(serde::de::Error::custom)
                }
            }
        }
    };
}

sequence_helper!(
    /// `#[serde(with = "...::tuple")]`: the field is a Python `tuple` (a Rust tuple, array or
    /// `Vec`).
    ///
    /// ```
    /// use onestep_core::execution::codec;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Pair {
    ///     #[serde(with = "codec::tuple")]
    ///     pair: (i64, String),
    /// }
    /// let value = serde_json::to_value(Pair { pair: (1, "two".into()) }).unwrap();
    /// assert_eq!(value, json!({"pair": {"$onestep": {"type": "tuple", "values": [1, "two"]}}}));
    /// let plain: Pair = serde_json::from_value(json!({"pair": [2, "three"]})).unwrap();
    /// assert_eq!(plain.pair, (2, "three".to_owned()));
    /// ```
    tuple
);

sequence_helper!(
    /// `#[serde(with = "...::set")]`: the field is a Python `set` (a `HashSet`, `BTreeSet` or
    /// `Vec` of distinct members).
    set
);

sequence_helper!(
    /// `#[serde(with = "...::frozenset")]`: the field is a Python `frozenset`.
    frozenset
);

#[cfg(test)]
mod tests {
    use super::super::{decode_value, encode_value};
    use serde::{Deserialize, Serialize};
    use serde_json::json;
    use std::collections::{BTreeSet, HashSet};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Shapes {
        #[serde(with = "super::tuple")]
        pair: (i64, String),
        #[serde(with = "super::set")]
        names: HashSet<String>,
        #[serde(with = "super::frozenset")]
        frozen: BTreeSet<i64>,
        #[serde(with = "super::tuple::option", default)]
        maybe: Option<Vec<u8>>,
    }

    #[test]
    fn typed_fields_store_as_python_would_and_read_back() {
        let shapes = Shapes {
            pair: (1, "two".to_owned()),
            names: ["b", "a", "c"].iter().map(|s| (*s).to_owned()).collect(),
            frozen: [10, 2].into_iter().collect(),
            maybe: None,
        };
        let stored =
            encode_value(&serde_json::to_value(&shapes).expect("serializes")).expect("encodes");
        assert_eq!(
            stored,
            json!({
                "pair": {"$onestep": {"type": "tuple", "values": [1, "two"]}},
                "names": {"$onestep": {"type": "set", "values": ["a", "b", "c"]}},
                "frozen": {"$onestep": {"type": "frozenset", "values": [10, 2]}},
                "maybe": null,
            })
        );
        let view = decode_value(&stored).expect("decodes");
        let back: Shapes = super::super::from_value(&view).expect("reads");
        assert_eq!(back, shapes);
    }

    #[test]
    fn helpers_name_what_they_got_when_it_is_not_a_sequence() {
        let err = serde_json::from_value::<Shapes>(json!({"pair": "x", "names": [], "frozen": []}))
            .expect_err("a string is no tuple");
        assert!(
            err.to_string()
                .contains("tuple, set or frozenset tag or an array for codec::tuple, got a string"),
            "{err}"
        );
    }
}

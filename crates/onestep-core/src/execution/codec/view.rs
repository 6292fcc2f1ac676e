//! Typed reads of the Rust view: Python containers where Rust types expect sequences and maps.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, Error as _, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};
use serde_json::{Map, Value};

use super::super::canonical::{PyNumber, classify};
use super::check::{field, members};
use super::{TAG, scalar};

type Error = serde_json::Error;

/// Deserializes `T` from a Rust-view value, reading Python containers into the Rust types that
/// ask for them (see [`ViewDeserializer`]).
///
/// ```
/// use onestep_core::execution::codec::from_value;
/// use serde_json::json;
///
/// let tuple = json!({"$onestep": {"type": "tuple", "values": [1, "two"]}});
/// let pair: (i64, String) = from_value(&tuple).unwrap();
/// assert_eq!(pair, (1, "two".to_owned()));
/// let same: serde_json::Value = from_value(&tuple).unwrap();
/// assert_eq!(same, tuple);
/// ```
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    T::deserialize(ViewDeserializer::new(value))
}

/// [`from_value`] of a sequence's members.
pub(super) fn from_slice<T: DeserializeOwned>(items: &[Value]) -> Result<T, serde_json::Error> {
    struct Slice<'a>(&'a [Value]);
    impl<'de> de::Deserializer<'de> for Slice<'de> {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visit_seq(self.0, visitor)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
            identifier ignored_any
        }
    }
    T::deserialize(Slice(items))
}

/// A `serde` deserializer over a borrowed Rust-view value; see [`from_value`].
///
/// It is a `serde` deserializer over a borrowed [`Value`] that behaves like
/// `serde_json`'s own, except where a tag meets a type that asks for something else:
///
/// | the type asks for (`serde` hint) | and the value is | it reads |
/// |---|---|---|
/// | a sequence or tuple (`Vec`, `(A, B)`, `HashSet`) | a `tuple`, `set`, `frozenset` or `namedtuple` tag | the members |
/// | a map (`HashMap`, `BTreeMap`) | a `mapping` tag | the items, in order |
/// | a struct | a `mapping` or `namedtuple` tag | the items, or the named fields |
/// | an enum | an `enum` tag | the unit variant of the member's name |
/// | a string (`String`, `uuid::Uuid`) | a `uuid`, `datetime` or `decimal` tag | its `value` text |
/// | bytes (`serde_bytes`) | a `bytes` tag | the decoded bytes |
///
/// A type that takes anything (`serde_json::Value`, untagged enums, `flatten`) gets the tag
/// objects as they are, so a `Value` read this way is still the lossless view.
#[derive(Debug, Clone, Copy)]
pub struct ViewDeserializer<'a>(&'a Value);

impl<'a> ViewDeserializer<'a> {
    /// A deserializer reading `value`.
    pub fn new(value: &'a Value) -> Self {
        Self(value)
    }
}

/// The payload of a tag, with its type.
fn tag(value: &Value) -> Option<(&str, &Map<String, Value>)> {
    let Value::Object(map) = value else {
        return None;
    };
    if map.len() != 1 {
        return None;
    }
    let payload = map.get(TAG)?.as_object()?;
    Some((field(payload, "type").as_str()?, payload))
}

fn visit_seq<'de, V: Visitor<'de>>(items: &'de [Value], visitor: V) -> Result<V::Value, Error> {
    let mut seq = Seq(items.iter());
    let value = visitor.visit_seq(&mut seq)?;
    match seq.0.len() {
        0 => Ok(value),
        _ => Err(Error::invalid_length(
            items.len(),
            &"fewer elements in array",
        )),
    }
}

struct Seq<'a>(std::slice::Iter<'a, Value>);

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|item| seed.deserialize(ViewDeserializer(item)))
            .transpose()
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// Map entries: `(key, value)` pairs of an object, a `mapping`'s items or a `namedtuple`'s
/// fields and values.
struct Entries<'a, I: Iterator<Item = (&'a str, &'a Value)>> {
    entries: I,
    value: Option<&'a Value>,
}

impl<'de, I: Iterator<Item = (&'de str, &'de Value)>> MapAccess<'de> for Entries<'de, I> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| Error::custom("a map value was asked for before its key"))?;
        seed.deserialize(ViewDeserializer(value))
    }
}

fn visit_entries<'de, V, I>(entries: I, visitor: V) -> Result<V::Value, Error>
where
    V: Visitor<'de>,
    I: Iterator<Item = (&'de str, &'de Value)>,
{
    visitor.visit_map(Entries {
        entries,
        value: None,
    })
}

/// The `(key, value)` items of a `mapping` tag; a malformed item is skipped (the view passed
/// [`decode_value`](super::decode_value), which rejects them).
fn mapping_items(payload: &Map<String, Value>) -> impl Iterator<Item = (&str, &Value)> {
    field(payload, "items")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| match item.as_array().map(Vec::as_slice) {
            Some([Value::String(key), value]) => Some((key.as_str(), value)),
            _ => None,
        })
}

/// The `(field, value)` pairs of a `namedtuple` tag.
fn namedtuple_fields(payload: &Map<String, Value>) -> impl Iterator<Item = (&str, &Value)> {
    let names = field(payload, "fields").as_array().into_iter().flatten();
    let values = field(payload, "values").as_array().into_iter().flatten();
    names
        .zip(values)
        .filter_map(|(name, value)| Some((name.as_str()?, value)))
}

impl<'de> ViewDeserializer<'de> {
    fn sequence<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let namedtuple = match tag(self.0) {
            Some(("namedtuple", payload)) => field(payload, "values").as_array(),
            _ => None,
        };
        match namedtuple.map(Vec::as_slice).or_else(|| members(self.0)) {
            Some(items) => visit_seq(items, visitor),
            None => de::Deserializer::deserialize_any(self, visitor),
        }
    }
}

macro_rules! scalar_hints {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                self.0.$method(visitor)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for ViewDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Number(number) => visit_number(number, visitor),
            Value::Array(items) => visit_seq(items, visitor),
            Value::Object(map) => visit_entries(
                map.iter().map(|(key, value)| (key.as_str(), value)),
                visitor,
            ),
            scalar => scalar.deserialize_any(visitor),
        }
    }

    scalar_hints! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_unit
        deserialize_identifier
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match tag(self.0) {
            Some(("uuid" | "datetime" | "decimal", payload)) => match field(payload, "value") {
                Value::String(text) => visitor.visit_borrowed_str(text),
                _ => self.deserialize_any(visitor),
            },
            _ => self.0.deserialize_str(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match tag(self.0) {
            Some(("bytes", _)) => {
                let bytes = scalar::bytes_from_tag(self.0).map_err(Error::custom)?;
                visitor.visit_byte_buf(bytes)
            }
            _ => self.0.deserialize_bytes(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.sequence(visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.sequence(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.sequence(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match tag(self.0) {
            Some(("mapping", payload)) => visit_entries(mapping_items(payload), visitor),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match tag(self.0) {
            Some(("mapping", payload)) => visit_entries(mapping_items(payload), visitor),
            Some(("namedtuple", payload)) => visit_entries(namedtuple_fields(payload), visitor),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let member = match tag(self.0) {
            Some(("enum", payload)) => field(payload, "name").as_str(),
            _ => self.0.as_str(),
        };
        match (member, self.0) {
            (Some(name), _) => {
                visitor.visit_enum(IntoDeserializer::<Error>::into_deserializer(name))
            }
            (None, Value::Object(map)) if map.len() == 1 => match map.iter().next() {
                Some((variant, value)) => visitor.visit_enum(Variant { variant, value }),
                None => Err(Error::custom("an enum needs one key")),
            },
            (None, other) => Err(Error::invalid_type(unexpected(other), &"an enum")),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

/// The key under which `serde_json` (with `arbitrary_precision`) passes a number that no
/// primitive holds: a map of one entry, this key and the literal. `serde_json::Value` and
/// `Number` read it back as the same number (`number_beyond_128_bits_stays_an_integer` checks).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Visits a number as what it is: an integer as the smallest primitive that holds it (or as
/// its literal when none does), a float as an `f64`.
///
/// `serde_json`'s own `Value` deserializer visits an integer such as `10**60` as the float
/// `1e60` when the float prints with the same digits, which would turn Python's integer into a
/// float; this one never does.
fn visit_number<'de, V: Visitor<'de>>(
    number: &'de serde_json::Number,
    visitor: V,
) -> Result<V::Value, Error> {
    match classify(number) {
        PyNumber::Int(_) => {
            if let Some(unsigned) = number.as_u64() {
                visitor.visit_u64(unsigned)
            } else if let Some(signed) = number.as_i64() {
                visitor.visit_i64(signed)
            } else if let Some(unsigned) = number.as_u128() {
                visitor.visit_u128(unsigned)
            } else if let Some(signed) = number.as_i128() {
                visitor.visit_i128(signed)
            } else {
                visitor.visit_map(Literal(Some(number.as_str())))
            }
        }
        PyNumber::Float(float) if Some(number) == serde_json::Number::from_f64(float).as_ref() => {
            visitor.visit_f64(float)
        }
        PyNumber::Float(_) => visitor.visit_map(Literal(Some(number.as_str()))),
    }
}

/// The one-entry map `{NUMBER_TOKEN: literal}`.
struct Literal<'a>(Option<&'a str>);

impl<'de> MapAccess<'de> for Literal<'de> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.0 {
            Some(_) => seed
                .deserialize(BorrowedStrDeserializer::new(NUMBER_TOKEN))
                .map(Some),
            None => Ok(None),
        }
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let literal = self
            .0
            .take()
            .ok_or_else(|| Error::custom("a number was read twice"))?;
        seed.deserialize(BorrowedStrDeserializer::new(literal))
    }
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(flag) => de::Unexpected::Bool(*flag),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(text) => de::Unexpected::Str(text),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// An externally tagged enum value `{"Variant": content}`.
struct Variant<'a> {
    variant: &'a str,
    value: &'a Value,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let variant = seed.deserialize(BorrowedStrDeserializer::<Error>::new(self.variant))?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de> {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(Error::invalid_type(unexpected(other), &"a unit variant")),
        }
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(ViewDeserializer(self.value))
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(ViewDeserializer(self.value), visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_struct(ViewDeserializer(self.value), "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::{BTreeMap, HashSet};

    fn tagged(payload: Value) -> Value {
        json!({ TAG: payload })
    }

    #[derive(Debug, PartialEq, Deserialize)]
    enum Colour {
        #[serde(rename = "RED")]
        Red,
        #[serde(rename = "GREEN")]
        Green,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Point {
        x: i64,
        y: i64,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Order {
        items: Vec<(String, u32)>,
        labels: HashSet<String>,
        extra: BTreeMap<String, i64>,
        colour: Colour,
        at: Point,
        id: String,
        raw: Value,
        big: u128,
    }

    #[test]
    fn python_containers_read_into_the_rust_types_that_ask_for_them() {
        let raw = tagged(json!({"type": "tuple", "values": [1]}));
        let view = json!({
            "items": tagged(json!({"type": "tuple", "values": [
                tagged(json!({"type": "tuple", "values": ["a", 1]})),
                ["b", 2],
            ]})),
            "labels": tagged(json!({"type": "frozenset", "values": ["x", "y"]})),
            "extra": tagged(json!({"type": "mapping", "items": [["$onestep", 1], ["b", 2]]})),
            "colour": tagged(json!({"type": "enum", "module": "m", "qualname": "Colour", "name": "GREEN", "value": 2})),
            "at": tagged(json!({"type": "namedtuple", "module": "m", "qualname": "Point", "fields": ["x", "y"], "values": [3, 4]})),
            "id": tagged(json!({"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"})),
            "raw": raw.clone(),
            "big": 100000000000000000000u128,
        });
        let order: Order = from_value(&view).expect("reads");
        assert_eq!(order.items, vec![("a".to_owned(), 1), ("b".to_owned(), 2)]);
        assert_eq!(
            order.labels,
            ["x", "y"].iter().map(|s| (*s).to_owned()).collect()
        );
        assert_eq!(
            order.extra,
            BTreeMap::from([("$onestep".to_owned(), 1), ("b".to_owned(), 2)])
        );
        assert_eq!(order.colour, Colour::Green);
        assert_eq!(order.at, Point { x: 3, y: 4 });
        assert_eq!(order.id, "12345678-1234-5678-1234-567812345678");
        assert_eq!(order.raw, raw, "a Value field keeps the tag");
        assert_eq!(order.big, 10u128.pow(20));
        let _: Colour = from_value(&json!("RED")).expect("a plain unit variant");
    }

    #[test]
    fn number_beyond_128_bits_stays_an_integer() {
        let big: Value = serde_json::from_str(
            "[-1000000000000000000000000000000000000000000000000000000000000, 1e+60, 1.5, 340282366920938463463374607431768211456]",
        )
        .expect("JSON");
        let view = crate::execution::codec::decode_value(&big).expect("decodes");
        let read: Value = from_value(&view).expect("reads");
        assert_eq!(read, view);
        assert_eq!(
            read.to_string(),
            "[-1000000000000000000000000000000000000000000000000000000000000,1e+60,1.5,340282366920938463463374607431768211456]"
        );
        #[derive(Deserialize)]
        struct Wrapped {
            inner: Vec<Value>,
        }
        let wrapped: Wrapped = from_value(&json!({"inner": view})).expect("reads");
        assert_eq!(Value::Array(wrapped.inner), read);
        let small: (u8, i128, f64) = from_value(&json!([
            1,
            -170141183460469231731687303715884105728i128,
            2.5
        ]))
        .expect("reads");
        assert_eq!(small, (1, i128::MIN, 2.5));
    }

    #[test]
    fn mismatches_are_reported_like_serde_json() {
        let err = from_value::<Vec<i64>>(&json!({"a": 1})).expect_err("an object is no sequence");
        assert_eq!(err.to_string(), "invalid type: map, expected a sequence");
        let err = from_value::<(i64, i64)>(&json!([1, 2, 3])).expect_err("too long");
        assert!(err.to_string().contains("invalid length 3"), "{err}");
        let err = from_value::<Point>(&json!({"x": 1})).expect_err("missing field");
        assert_eq!(err.to_string(), "missing field `y`");
    }
}

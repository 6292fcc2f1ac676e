//! Property-based fuzzing of the decoders that read stored or user-supplied data: the tagged JSON
//! codec (`execution::codec`: `decode_value`, `encode_value` and the scalar tag readers) and the
//! list cursor (`execution::cursor`). Hostile input must give an error, never a panic, and what
//! the decoders accept must round-trip.
//!
//! The default run is short (proptest's 256 cases per property). For a longer run:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p onestep-core --release --test fuzz
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)] // reason: a test fails loudly on bad fixtures

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use onestep_core::execution::canonical::canonical_json;
use onestep_core::execution::codec::{
    CodecError, TAG, bytes_from_tag, bytes_tag, datetime_from_tag, datetime_tag,
    datetime_value_isoformat, decimal_from_tag, decimal_tag, decode_value, decode_value_owned,
    encode_value, uuid_from_tag, uuid_tag,
};
use onestep_core::execution::cursor::{CursorError, decode_cursor, encode_cursor};
use onestep_core::execution::digest::python_isoformat;
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};
use time::{OffsetDateTime, UtcOffset};
use uuid::Uuid;

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// Numbers at and beyond the edges: extreme integers, subnormals, negative zero, ordinary values.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(i64::MIN)),
        (-3i64..4).prop_map(Value::from),
        prop_oneof![
            any::<f64>(),
            Just(-0.0),
            Just(0.0),
            Just(1.0),
            Just(f64::MIN_POSITIVE),
            Just(5e-324),
            Just(f64::MAX),
        ]
        .prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        // Integers beyond 64 bits and literals Python spells otherwise (`-0`, `1E2`, `1.50`).
        "-?[1-9][0-9]{19,60}|-0|[1-9]E[0-9]|[0-9]\\.[0-9]{1,3}0|[1-9][0-9]{0,3}e-[0-9]{1,2}"
            .prop_map(|text| Value::Number(text.parse().expect("a JSON number"))),
    ]
    .boxed()
}

/// `datetime.fromisoformat` candidates: well-formed, week dates, odd separators, edge offsets.
fn datetime_text() -> BoxedStrategy<String> {
    prop_oneof![
        "[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2}([.,][0-9]{1,9})?)?)?)?(Z|[+-][0-9]{2}(:?[0-9]{2}(:?[0-9]{2}([.][0-9]{1,7})?)?)?)?",
        "(0001|9999|0000|2024|2020)-(01|02|12|13|00)-(01|28|29|30|31|32)T(00|23|24):(00|59|60):(00|59|60)(\\.999999)?([+-](00|01|23|24):(00|59)(:59(\\.999999)?)?|Z)?",
        // Local times at the ends of Python's range, with offsets that cross them in UTC.
        "0001-01-01T0[0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{6})?\\+[01][0-9]:[0-5][0-9]",
        "9999-12-31T(1[0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{6})?-[01][0-9]:[0-5][0-9]",
        "[0-9]{4}-?W[0-9]{2}(-?[0-9])?([T ][0-9]{2}(:?[0-9]{2})?)?",
        "[0-9]{4}[0-9]{2}[0-9]{2}T?[0-9]{0,6}([.,][0-9]{0,8})?[+Z-]?[0-9]{0,6}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}.[0-9:.+Z-]{0,16}",
        "[0-9W:T.+Z -]{0,30}",
        ".{0,12}",
    ]
    .boxed()
}

/// `uuid.UUID(str)` candidates: canonical, braced, `urn:uuid:`, upper case, int quirks.
fn uuid_text() -> BoxedStrategy<String> {
    prop_oneof![
        any::<u128>().prop_map(|u| Uuid::from_u128(u).hyphenated().to_string()),
        any::<u128>().prop_map(|u| format!("{{{}}}", Uuid::from_u128(u).simple()).to_uppercase()),
        any::<u128>().prop_map(|u| Uuid::from_u128(u).urn().to_string()),
        "(urn:)?(uuid:)?\\{?[0-9a-fA-F_xX+ -]{28,40}\\}?",
        "[0-9a-f\u{660}-\u{669}\u{a0}\u{3000}_+-]{30,36}",
        ".{0,40}",
    ]
    .boxed()
}

/// `base64.b64decode(validate=True)` candidates.
fn base64_text() -> BoxedStrategy<String> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..24).prop_map(|b| STANDARD.encode(b)),
        "[A-Za-z0-9+/=_-]{0,24}",
        "=?[A-Za-z0-9+/]{0,9}={0,4}[A-Za-z0-9+/]{0,3}",
        ".{0,12}",
    ]
    .boxed()
}

/// `decimal.Decimal(str)` candidates, including exponents far outside the context limits.
fn decimal_text() -> BoxedStrategy<String> {
    prop_oneof![
        "[ \t]?[+-]?[0-9_]{0,8}(\\.[0-9_]{0,8})?([eE][+-]?[0-9]{0,25})?[ \t]?",
        "[+-]?(s?[nN][aA][nN][0-9]{0,4}|[iI][nN][fF]([iI][nN][iI][tT][yY])?)",
        "[+-]?[0-9\u{660}-\u{669}\u{ff10}-\u{ff19}]{1,6}(e-?[0-9]{1,20})?",
        "1e-?(999999999999999999|1000000000000000000|1999999999999999997|1999999999999999998)",
        "0\\.0{0,10}[0-9]{1,4}(E[+-][0-9]{1,3})?",
        ".{0,12}",
    ]
    .boxed()
}

/// Strings a decoder may trip on: control characters, astral and combining characters, the
/// tag key itself, and the text formats of the scalar tags.
fn odd_string() -> BoxedStrategy<String> {
    prop_oneof![
        4 => ".{0,16}",
        1 => Just(TAG.to_owned()),
        1 => "[\u{0}-\u{1f}\u{7f}\u{d7ff}\u{e000}\u{fffd}\u{10ffff}\u{301}~/]{0,8}",
        1 => datetime_text(),
        1 => uuid_text(),
        1 => base64_text(),
        1 => decimal_text(),
    ]
    .boxed()
}

/// Object keys: the tag key and its near misses, payload field names, anything.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            TAG, "$Onestep", "$onestep ", "onestep", "__onestep_type__", "type", "value", "fold",
            "values", "items", "fields", "module", "qualname", "name", "", "/", "~", "~1",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,6}",
    ]
    .boxed()
}

/// Tag type names: the ten known ones and near misses.
fn type_name() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "datetime", "uuid", "bytes", "decimal", "tuple", "set", "frozenset", "namedtuple",
            "enum", "mapping",
        ])
        .prop_map(Value::from),
        1 => prop::sample::select(vec!["Datetime", "uuid ", "", "date", "list", "dict", "None"])
            .prop_map(Value::from),
        1 => number(),
        1 => Just(Value::Null),
        1 => ".{0,8}".prop_map(Value::from),
    ]
    .boxed()
}

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        odd_string().prop_map(Value::String),
    ]
    .boxed()
}

/// Field values that fit one of the tag payload fields, or fit it almost.
fn field_value(inner: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![
        datetime_text().prop_map(Value::from),
        uuid_text().prop_map(Value::from),
        base64_text().prop_map(Value::from),
        decimal_text().prop_map(Value::from),
        prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(0.0),
            json!(1.0),
            json!(true),
            json!(2),
            json!([]),
            json!({})
        ]),
        prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
        // Mapping items: [key, value] pairs, sometimes malformed or with duplicate keys.
        prop::collection::vec((key(), inner.clone()), 0..4).prop_map(|pairs| {
            Value::Array(pairs.into_iter().map(|(k, v)| json!([k, v])).collect())
        }),
        prop::collection::vec(key(), 0..4).prop_map(|names| json!(names)),
        "[a-z_.]{0,6}(<locals>)?[a-z_.]{0,6}".prop_map(Value::from),
        inner,
    ]
    .boxed()
}

/// A `{"$onestep": {...}}` tag whose payload has the right fields for its type most of the
/// time, with a field missing, an extra field, or a sibling key next to `"$onestep"` otherwise.
fn tag_like(inner: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    const FIELDS: [&str; 9] = [
        "value", "fold", "values", "items", "fields", "module", "qualname", "name", "type",
    ];
    (
        type_name(),
        prop::collection::vec(field_value(inner.clone()), 9),
        0u8..8,
        prop::sample::select(FIELDS.to_vec()),
        prop::option::weighted(0.1, (key(), inner)),
    )
        .prop_map(|(type_name, values, damage, odd_field, sibling)| {
            let wanted: &[&str] = match type_name.as_str() {
                Some("datetime") => &["value", "fold"],
                Some("uuid" | "bytes" | "decimal") => &["value"],
                Some("tuple" | "set" | "frozenset") => &["values"],
                Some("mapping") => &["items"],
                Some("enum") => &["module", "qualname", "name", "value"],
                Some("namedtuple") => &["module", "qualname", "fields", "values"],
                _ => &["value"],
            };
            let mut payload = Map::new();
            payload.insert("type".to_owned(), type_name);
            for (name, value) in wanted.iter().zip(&values) {
                payload.insert((*name).to_owned(), value.clone());
            }
            match damage {
                0 => {
                    payload.remove(odd_field);
                }
                1 => {
                    payload.insert(odd_field.to_owned(), values[8].clone());
                }
                _ => {}
            }
            let mut outer = Map::new();
            outer.insert(TAG.to_owned(), Value::Object(payload));
            if let Some((name, value)) = sibling {
                outer.insert(name, value);
            }
            Value::Object(outer)
        })
        .boxed()
}

/// Arbitrary JSON with tag-like objects mixed in, nested a few levels deep.
fn hostile_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 96, 6, |inner| {
        let inner = inner.boxed();
        prop_oneof![
            1 => prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            1 => prop::collection::btree_map(key(), inner.clone(), 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
            3 => tag_like(inner),
        ]
    })
}

/// A UTC instant in Python's year range, at microsecond precision or finer.
fn instant() -> impl Strategy<Value = OffsetDateTime> {
    let first = OffsetDateTime::parse(
        "0001-01-01T00:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .expect("valid")
    .unix_timestamp_nanos();
    let last = OffsetDateTime::parse(
        "9999-12-31T23:59:59.999999999Z",
        &time::format_description::well_known::Rfc3339,
    )
    .expect("valid")
    .unix_timestamp_nanos();
    prop_oneof![
        first..=last,
        Just(first),
        Just(last),
        (first..first + 86_400_000_000_000),
        (last - 86_400_000_000_000..=last),
    ]
    .prop_map(|nanos| OffsetDateTime::from_unix_timestamp_nanos(nanos).expect("in range"))
}

/// Any offset `time` can represent (±25:59:59).
fn offset() -> impl Strategy<Value = UtcOffset> {
    prop_oneof![
        Just(UtcOffset::UTC),
        (-93_599i32..=93_599).prop_map(|s| UtcOffset::from_whole_seconds(s).expect("in range")),
        (-23i8..=23).prop_map(|h| UtcOffset::from_hms(h, 0, 0).expect("in range")),
    ]
}

/// The same instant viewed in another offset, when `time` can represent the local date-time.
fn shifted(instant: OffsetDateTime, offset: UtcOffset) -> OffsetDateTime {
    instant.checked_to_offset(offset).unwrap_or(instant)
}

fn truncate_to_micros(dt: OffsetDateTime) -> OffsetDateTime {
    dt.replace_nanosecond(dt.microsecond() * 1_000)
        .expect("valid nanosecond")
}

// ---------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------

/// `decode ∘ encode`, asserting both succeed (`encode_value` is documented never to fail, and
/// what it produces must decode).
fn cycle(value: &Value) -> Result<Value, TestCaseError> {
    let encoded = encode_value(value)
        .map_err(|e| TestCaseError::fail(format!("encode_value failed on {value}: {e}")))?;
    decode_value(&encoded).map_err(|e| {
        TestCaseError::fail(format!("encode_value produced undecodable {encoded}: {e}"))
    })
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Repeats [`cycle`] until the value stops changing, which must happen within `depth + 2`
/// rounds. A round can change a value: scalar tags get their canonical spelling, numbers
/// Python's, and an object with a `"$onestep"` key becomes a `mapping`. It must not oscillate.
fn settle(value: &Value) -> Result<Value, TestCaseError> {
    let mut current = cycle(value)?;
    for _ in 0..=depth(value) + 1 {
        let next = cycle(&current)?;
        if next == current {
            return Ok(current);
        }
        current = next;
    }
    Err(TestCaseError::fail(format!(
        "decode(encode(..)) of {value} did not settle; last {current}"
    )))
}

proptest! {
    #[test]
    fn decode_value_fails_only_with_decode_errors_and_its_output_re_encodes(value in hostile_value()) {
        match decode_value(&value) {
            Err(CodecError::Decode(message)) => prop_assert!(!message.is_empty()),
            Err(other) => prop_assert!(false, "decode_value returned {other:?}"),
            Ok(view) => {
                settle(&view)?;
            }
        }
    }

    #[test]
    fn decoding_an_owned_value_gives_what_decoding_a_borrowed_one_gives(value in hostile_value()) {
        // The claim decodes its rows in place; any difference (a check skipped, an error
        // reported at another path) would show here.
        let (owned, borrowed) = (decode_value_owned(value.clone()), decode_value(&value));
        // Key order too (maps compare equal in any order).
        prop_assert_eq!(
            owned.as_ref().map(Value::to_string),
            borrowed.as_ref().map(Value::to_string)
        );
        prop_assert_eq!(owned, borrowed);
    }

    #[test]
    fn encode_value_accepts_anything_and_decode_encode_cycles_settle(value in hostile_value()) {
        let settled = settle(&value)?;
        let encoded = encode_value(&settled).expect("encodes");
        prop_assert_eq!(decode_value(&encoded), Ok(settled));
        prop_assert_eq!(encode_value(&decode_value(&encoded).expect("decodes")), Ok(encoded));
    }

    #[test]
    fn escaped_values_decode_to_what_was_stored_and_store_again_unchanged(value in escaped_view()) {
        let stored = encode_value(&value).expect("encodes");
        let view = cycle(&value)?;
        prop_assert_eq!(canonical_json(&view), canonical_json(&stored));
        let again = encode_value(&view).expect("encodes");
        prop_assert_eq!(serde_json::to_string(&again).ok(), serde_json::to_string(&stored).ok());
    }

    #[test]
    fn plain_json_round_trips_exactly(value in plain_json()) {
        prop_assert!(!has_tag_key(&value));
        prop_assert_eq!(cycle(&value)?, value);
    }

    #[test]
    fn scalar_tag_readers_never_panic_and_agree_with_decode_value(
        value in hostile_value(),
        payload in field_value(leaf()),
    ) {
        for candidate in [
            value,
            json!({TAG: {"type": "datetime", "value": payload.clone(), "fold": 0}}),
            json!({TAG: {"type": "uuid", "value": payload.clone()}}),
            json!({TAG: {"type": "bytes", "value": payload.clone()}}),
            json!({TAG: {"type": "decimal", "value": payload}}),
        ] {
            let valid = decode_value(&candidate).is_ok();
            let kind = candidate.get(TAG).and_then(|p| p.get("type")).and_then(Value::as_str);
            let datetime = datetime_from_tag(&candidate);
            let uuid = uuid_from_tag(&candidate);
            let bytes = bytes_from_tag(&candidate);
            let decimal = decimal_from_tag(&candidate);
            for (name, ok) in [
                ("datetime", datetime.is_ok()),
                ("uuid", uuid.is_ok()),
                ("bytes", bytes.is_ok()),
                ("decimal", decimal.is_ok()),
            ] {
                if ok {
                    prop_assert_eq!(kind, Some(name), "{} accepted {}", name, candidate);
                    prop_assert!(valid, "{} accepted {} but decode_value refused it", name, candidate);
                }
            }
            if valid {
                // Only naive datetimes and sub-second offsets are refused by the reader.
                match kind {
                    Some("uuid") => prop_assert!(uuid.is_ok(), "{}", candidate),
                    Some("bytes") => prop_assert!(bytes.is_ok(), "{}", candidate),
                    Some("decimal") => {
                        let text = decimal.expect("valid decimal tag");
                        let again = decimal_tag(&text).expect("normal form parses");
                        prop_assert_eq!(decimal_from_tag(&again), Ok(text));
                    }
                    _ => {}
                }
            }
            if let Ok(dt) = datetime {
                let text = candidate[TAG]["value"].as_str().expect("string value");
                let normal = datetime_value_isoformat(text).expect("reader accepted it");
                prop_assert_eq!(datetime_value_isoformat(&normal), Ok(normal.clone()));
                let normal_tag = json!({TAG: {"type": "datetime", "value": normal, "fold": 1}});
                prop_assert_eq!(datetime_from_tag(&normal_tag), Ok(dt));
            }
        }
    }

    #[test]
    fn datetime_value_isoformat_is_a_normal_form(text in datetime_text()) {
        if let Ok(normal) = datetime_value_isoformat(&text) {
            prop_assert_eq!(datetime_value_isoformat(&normal), Ok(normal.clone()));
        }
    }

    #[test]
    fn scalar_tags_round_trip(
        instant in instant(),
        offset in offset(),
        id in any::<u128>(),
        raw in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let local = shifted(instant, offset);
        if (1..=9999).contains(&local.year()) && local.offset().whole_hours().abs() < 24 {
            let tag = datetime_tag(local).expect("year in range");
            prop_assert_eq!(decode_value(&tag), Ok(tag.clone()));
            prop_assert_eq!(datetime_from_tag(&tag), Ok(truncate_to_micros(local)));
        } else {
            prop_assert!(datetime_tag(local).is_err());
        }
        let id = Uuid::from_u128(id);
        prop_assert_eq!(uuid_from_tag(&uuid_tag(id)), Ok(id));
        let spellings = [
            id.simple().to_string().to_uppercase(),
            id.urn().to_string(),
            format!("{{{}}}", id.hyphenated()),
        ];
        for spelling in spellings {
            let tag = json!({TAG: {"type": "uuid", "value": spelling}});
            prop_assert_eq!(uuid_from_tag(&tag), Ok(id));
        }
        prop_assert_eq!(bytes_from_tag(&bytes_tag(&raw)), Ok(raw));
    }
}

fn has_tag_key(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(has_tag_key),
        Value::Object(map) => map.contains_key(TAG) || map.values().any(has_tag_key),
        _ => false,
    }
}

/// JSON without any `"$onestep"` key, numbers spelled as the Rust view spells them.
fn plain_json() -> impl Strategy<Value = Value> {
    leaf()
        .prop_map(|leaf| decode_value(&leaf).unwrap_or(Value::Null))
        .prop_recursive(5, 64, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key().prop_filter("no tag key", |k| k != TAG), inner), 0..5)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
}

/// Rust views that contain no valid tag: plain JSON, canonical scalar tags (which decode to
/// themselves) and objects that hold a `"$onestep"` key next to others (escaped as `mapping`).
fn escaped_view() -> impl Strategy<Value = Value> {
    let canonical_tag = prop_oneof![
        any::<u128>().prop_map(|u| uuid_tag(Uuid::from_u128(u))),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|b| bytes_tag(&b)),
        (instant(), offset()).prop_filter_map("year out of range", |(i, o)| {
            datetime_tag(shifted(i, o)).ok()
        }),
        decimal_text().prop_filter_map("not a decimal", |d| decimal_tag(&d).ok()),
    ];
    prop_oneof![4 => leaf(), 1 => canonical_tag].prop_recursive(5, 64, 5, |inner| {
        let inner = inner.boxed();
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                key().prop_filter("no tag key", |k| k != TAG),
                inner.clone(),
                0..5
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
            (
                inner.clone(),
                prop::collection::btree_map(key(), inner, 1..4)
            )
                .prop_map(|(tag_value, mut map)| {
                    map.remove(TAG);
                    if map.is_empty() {
                        map.insert("x".to_owned(), Value::Null);
                    }
                    map.insert(TAG.to_owned(), tag_value);
                    Value::Object(map.into_iter().collect())
                }),
        ]
    })
}

// ---------------------------------------------------------------------------
// Cursor
// ---------------------------------------------------------------------------

/// Asserts the documented contract of an accepted cursor: it is exactly what `encode_cursor`
/// produces for the decoded values, in UTC at microsecond precision.
fn check_cursor(cursor: &str) -> Result<(), TestCaseError> {
    match decode_cursor(cursor) {
        Ok((created_at, id)) => {
            prop_assert_eq!(created_at.offset(), UtcOffset::UTC);
            prop_assert_eq!(created_at.nanosecond() % 1_000, 0);
            prop_assert_eq!(encode_cursor(created_at, id), cursor);
        }
        Err(CursorError::Invalid | CursorError::UnknownVersion) => {}
    }
    Ok(())
}

/// The JSON body of a cursor with each field drawn from valid, edge and hostile values.
fn cursor_json() -> impl Strategy<Value = String> {
    let version = prop_oneof![
        Just("1".to_owned()),
        prop::sample::select(vec![
            "2",
            "0",
            "-0",
            "1.0",
            "1e0",
            "true",
            "null",
            "NaN",
            "-Infinity",
            "\"1\"",
            "99999999999999999999999999"
        ])
        .prop_map(str::to_owned),
        "-?[0-9]{1,30}",
    ];
    fn text(s: String) -> String {
        serde_json::to_string(&s).expect("string")
    }
    let created_at = prop_oneof![
        3 => datetime_text().prop_map(text),
        1 => (instant(), offset()).prop_map(|(i, o)| {
            text(python_isoformat(shifted(i, o)))
        }),
        1 => Just("5".to_owned()),
        1 => Just("\"\\ud800\"".to_owned()),
    ];
    let id = prop_oneof![3 => uuid_text().prop_map(text), 1 => Just("null".to_owned())];
    (version, created_at, id, 0u8..4).prop_map(|(v, created_at, id, layout)| match layout {
        0 => format!("{{\"v\":{v},\"created_at\":{created_at},\"id\":{id}}}"),
        1 => format!("{{\"id\":{id},\"v\":{v},\"created_at\":{created_at}}}"),
        2 => format!("{{\"v\":{v},\"created_at\":{created_at},\"id\":{id},\"v\":1}}"),
        _ => format!(" {{ \"v\" : {v} , \"created_at\" : {created_at} , \"id\" : {id} }} "),
    })
}

/// Byte encodings `json.loads(bytes)` detects: UTF-8 (with or without BOM), UTF-16, UTF-32.
fn encode_text(text: &str, encoding: u8) -> Vec<u8> {
    match encoding {
        0 => text.as_bytes().to_vec(),
        1 => [&[0xEF, 0xBB, 0xBF][..], text.as_bytes()].concat(),
        2 => text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        3 => text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        4 => [0xFF, 0xFE]
            .into_iter()
            .chain(text.encode_utf16().flat_map(u16::to_le_bytes))
            .collect(),
        5 => text
            .chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect(),
        _ => text
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect(),
    }
}

/// One edit of a cursor: replace, insert or delete a character, truncate, or swap two.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, char),
    Insert(usize, char),
    Delete(usize),
    Truncate(usize),
    Swap(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = prop_oneof![
        4 => prop::sample::select("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=".chars().collect::<Vec<_>>()),
        1 => any::<char>(),
    ];
    prop_oneof![
        (any::<usize>(), c.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
        (any::<usize>(), c).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Edit::Swap(i, j)),
    ]
}

fn apply(cursor: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = cursor.chars().collect();
    for edit in edits {
        let len = chars.len().max(1);
        match *edit {
            Edit::Replace(i, c) if !chars.is_empty() => chars[i % len] = c,
            Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
            Edit::Delete(i) if !chars.is_empty() => {
                chars.remove(i % len);
            }
            Edit::Truncate(i) => chars.truncate(i % (chars.len() + 1)),
            Edit::Swap(i, j) if !chars.is_empty() => chars.swap(i % len, j % len),
            _ => {}
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #[test]
    fn decode_cursor_never_panics_on_arbitrary_strings(
        cursor in prop_oneof![".{0,40}", "[A-Za-z0-9_=+/-]{0,200}", ".{1020,1030}"],
    ) {
        check_cursor(&cursor)?;
    }

    #[test]
    fn decode_cursor_never_panics_on_base64_of_arbitrary_bytes(
        raw in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        check_cursor(&URL_SAFE_NO_PAD.encode(&raw))?;
    }

    #[test]
    fn decode_cursor_never_panics_on_cursor_shaped_json(json in cursor_json(), encoding in 0u8..7) {
        check_cursor(&URL_SAFE_NO_PAD.encode(encode_text(&json, encoding)))?;
    }

    #[test]
    fn decode_cursor_refuses_or_reproduces_mutated_cursors(
        instant in instant(),
        id in any::<u128>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let cursor = encode_cursor(instant, Uuid::from_u128(id));
        check_cursor(&apply(&cursor, &edits))?;
    }

    #[test]
    fn cursors_round_trip_in_utc_at_microsecond_precision(
        instant in instant(),
        offset in offset(),
        id in any::<u128>(),
    ) {
        let id = Uuid::from_u128(id);
        let cursor = encode_cursor(shifted(instant, offset), id);
        prop_assert_eq!(decode_cursor(&cursor), Ok((truncate_to_micros(instant), id)));
    }
}

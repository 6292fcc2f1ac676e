#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Checks the Rust codec against vectors produced by the installed Python
//! reference (`gen_vectors.py`: onestep 1.15.0, onestep-sql 0.7.1, CPython 3.11).

use onestep_core::execution::canonical::{canonical_json, canonical_size, python_float_repr};
use onestep_core::execution::codec::{
    bytes_from_tag, datetime_from_tag, datetime_value_isoformat, decimal_from_tag, decode_value,
    encode_value, uuid_from_tag,
};
use onestep_core::execution::cursor::{decode_cursor, encode_cursor};
use onestep_core::execution::digest::{OriginalIso, python_isoformat, submission_digest};
use serde_json::{Value, json};
use time::{OffsetDateTime, UtcOffset};
use uuid::Uuid;

/// The vectors file; the only line to change when the file moves.
const VECTORS_JSON: &str = include_str!("data/python_codec_vectors.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS_JSON).expect("vectors.json is valid JSON")
}

fn section(name: &str) -> Vec<Value> {
    vectors()[name]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("missing section {name}"))
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, got {value}"))
}

/// Rebuilds an aware datetime from the generator's `unix_us` + `offset_s`.
fn datetime_from(fields: &Value) -> OffsetDateTime {
    let unix_us = i128::from(fields["unix_us"].as_i64().expect("unix_us"));
    let offset =
        i32::try_from(fields["offset_s"].as_i64().expect("offset_s")).expect("offset fits");
    OffsetDateTime::from_unix_timestamp_nanos(unix_us * 1000)
        .expect("in range")
        .to_offset(UtcOffset::from_whole_seconds(offset).expect("valid offset"))
}

/// Collects mismatches so one run reports all of them.
struct Report {
    name: &'static str,
    checked: usize,
    failures: Vec<String>,
}

impl Report {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            checked: 0,
            failures: Vec::new(),
        }
    }

    fn check(&mut self, ok: bool, describe: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failures.push(describe());
        }
    }

    fn finish(self) {
        println!(
            "{}: {} checks, {} failures",
            self.name,
            self.checked,
            self.failures.len()
        );
        assert!(self.checked > 0, "{}: no vectors checked", self.name);
        assert!(
            self.failures.is_empty(),
            "{}: {} of {} checks failed:\n{}",
            self.name,
            self.failures.len(),
            self.checked,
            self.failures
                .iter()
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

fn outcome(
    result: Result<Value, onestep_core::execution::codec::CodecError>,
) -> Result<Value, String> {
    result.map_err(|e| e.to_string())
}

#[test]
fn canonical_json_and_size_match_python_for_every_encoded_value() {
    let mut report = Report::new("canonical");
    for case in section("encode") {
        let got = canonical_json(&case["encoded"]);
        report.check(got == text(&case["canonical"]), || {
            format!("{}: {got} != {}", case["python"], case["canonical"])
        });
        let size = canonical_size(&case["encoded"]);
        report.check(Some(size as u64) == case["size"].as_u64(), || {
            format!("{}: size {size}", case["python"])
        });
    }
    report.finish();
}

#[test]
fn encode_value_reproduces_python_encoding_from_the_rust_view() {
    let mut report = Report::new("encode");
    for case in section("encode") {
        let got = outcome(encode_value(&case["rust_input"]));
        let expected = case["encoded"].clone();
        report.check(got.as_ref() == Ok(&expected), || {
            format!("{}: got {got:?}, expected {expected}", case["python"])
        });
        if let Ok(encoded) = got {
            let canonical = canonical_json(&encoded);
            report.check(canonical == text(&case["canonical"]), || {
                format!("{}: canonical {canonical}", case["python"])
            });
        }
    }
    report.finish();
}

#[test]
fn decode_value_accepts_every_python_encoding_and_loses_nothing() {
    let mut report = Report::new("decode");
    for case in section("encode") {
        let got = outcome(decode_value(&case["encoded"]));
        let canonical = got.as_ref().map(canonical_json);
        report.check(canonical.as_deref() == Ok(text(&case["canonical"])), || {
            format!(
                "{}: got {got:?}, expected {}",
                case["python"], case["canonical"]
            )
        });
    }
    report.finish();
}

/// A float case is `"<IEEE-754 bits in hex> <Python repr>"`.
fn float_case(case: &Value) -> (u64, String) {
    let (bits, repr) = text(case).split_once(' ').expect("bits and repr");
    (
        u64::from_str_radix(bits, 16).expect("hex bits"),
        repr.to_owned(),
    )
}

#[test]
fn float_repr_matches_python_for_thousands_of_doubles() {
    let mut report = Report::new("floats");
    for case in section("floats") {
        let (bits, expected) = float_case(&case);
        let value = f64::from_bits(bits);
        let repr = python_float_repr(value);
        report.check(repr == expected, || {
            format!("{bits:016x}: {repr} != {expected}")
        });
        let json = canonical_json(&Value::from(value));
        report.check(json == expected, || {
            format!("{bits:016x}: json {json} != {expected}")
        });
    }
    report.finish();
}

#[test]
fn decode_value_rejects_malformed_tags_with_python_messages() {
    let mut report = Report::new("decode_rejections");
    for case in section("decode_rejections") {
        let got = outcome(decode_value(&case["value"]));
        let expected = text(&case["error"]).to_owned();
        report.check(got.as_ref().err() == Some(&expected), || {
            format!("{}: got {got:?}, expected {expected:?}", case["value"])
        });
    }
    report.finish();
}

#[test]
fn scalar_tag_validation_matches_python_datetime_uuid_decimal_and_bytes() {
    let mut report = Report::new("scalars");
    for case in section("scalars") {
        let kind = text(&case["kind"]);
        let input = text(&case["text"]);
        let tag = match kind {
            "datetime" => json!({"$onestep": {"type": "datetime", "value": input, "fold": 0}}),
            _ => json!({"$onestep": {"type": kind, "value": input}}),
        };
        let got = outcome(decode_value(&tag));
        if case["ok"] == Value::Bool(true) {
            report.check(got.as_ref() == Ok(&tag), || {
                format!("{kind} {input:?}: rejected {got:?}")
            });
            match kind {
                "datetime" => {
                    let iso = datetime_value_isoformat(input).map_err(|e| e.to_string());
                    let expected = text(&case["isoformat"]).to_owned();
                    report.check(iso.as_ref() == Ok(&expected), || {
                        format!("{input:?}: {iso:?} != {expected}")
                    });
                    let typed = datetime_from_tag(&tag).map(python_isoformat);
                    if case["whole_second_offset"] == Value::Bool(true) {
                        report.check(typed.as_ref() == Ok(&expected), || {
                            format!("{input:?}: typed {typed:?}")
                        });
                    } else {
                        report.check(typed.is_err(), || {
                            format!("{input:?}: naive/sub-second offset accepted as {typed:?}")
                        });
                    }
                }
                "uuid" => {
                    let got = uuid_from_tag(&tag).map(|id| id.hyphenated().to_string());
                    let expected = text(&case["normalized"]).to_owned();
                    report.check(got.as_ref() == Ok(&expected), || {
                        format!("uuid {input:?}: {got:?} != {expected}")
                    });
                }
                "decimal" => {
                    let got = decimal_from_tag(&tag);
                    let expected = text(&case["normalized"]).to_owned();
                    report.check(got.as_ref() == Ok(&expected), || {
                        format!("decimal {input:?}: {got:?} != {expected}")
                    });
                }
                _ => {
                    let got = bytes_from_tag(&tag).map(hex::encode);
                    let expected = text(&case["hex"]).to_owned();
                    report.check(got.as_ref() == Ok(&expected), || {
                        format!("bytes {input:?}: {got:?} != {expected}")
                    });
                }
            }
        } else {
            let expected = text(&case["error"]).to_owned();
            report.check(got.as_ref().err() == Some(&expected), || {
                format!("{kind} {input:?}: got {got:?}, expected {expected:?}")
            });
        }
    }
    report.finish();
}

#[test]
fn submission_digest_matches_python() {
    let mut report = Report::new("digest");
    for case in section("digest") {
        let expires = (!case["expires_at"].is_null())
            .then(|| OriginalIso::new(datetime_from(&case["expires_at"])));
        if let Some(iso) = &expires {
            let expected = text(&case["expires_at"]["iso"]);
            report.check(iso.as_str() == expected, || {
                format!("isoformat {} != {expected}", iso.as_str())
            });
        }
        let digest = submission_digest(
            text(&case["namespace"]),
            text(&case["task_name"]),
            &case["payload"],
            &case["metadata"],
            case["delay_s"].as_f64(),
            expires.as_ref(),
        );
        report.check(digest == text(&case["digest"]), || {
            format!("{case}: digest {digest}")
        });
    }
    report.finish();
}

#[test]
fn cursor_encoding_matches_python_and_round_trips() {
    let mut report = Report::new("cursor_encode");
    for case in section("cursor_encode") {
        let created_at = datetime_from(&case["created_at"]);
        let id = Uuid::parse_str(text(&case["id"])).expect("uuid");
        let cursor = encode_cursor(created_at, id);
        report.check(cursor == text(&case["cursor"]), || {
            format!("{case}: cursor {cursor}")
        });
        let decoded = decode_cursor(text(&case["cursor"]));
        report.check(decoded == Ok((created_at, id)), || {
            format!("{case}: decoded {decoded:?}")
        });
    }
    report.finish();
}

#[test]
fn cursor_decoding_accepts_and_rejects_exactly_like_python() {
    let mut report = Report::new("cursor_decode");
    for case in section("cursor_decode") {
        let cursor = text(&case["cursor"]);
        let got = decode_cursor(cursor);
        if case["ok"] == Value::Bool(true) {
            let expected = (
                datetime_from(&case["created_at"]),
                Uuid::parse_str(text(&case["id"])).expect("uuid"),
            );
            report.check(got == Ok(expected), || format!("{cursor:?}: got {got:?}"));
        } else {
            let message = got.as_ref().err().map(ToString::to_string);
            let expected = text(&case["error"]).to_owned();
            report.check(message.as_ref() == Some(&expected), || {
                format!("{cursor:?}: got {got:?}, expected {expected}")
            });
        }
    }
    report.finish();
}

#[test]
fn decoding_then_encoding_gives_pythons_encoding_for_every_value() {
    let mut report = Report::new("re-encode");
    for case in section("encode") {
        let again = decode_value(&case["encoded"])
            .and_then(|view| encode_value(&view))
            .map_err(|e| e.to_string());
        report.check(again.as_ref() == Ok(&case["encoded"]), || {
            format!("{}: {again:?}", case["python"])
        });
    }
    report.finish();
}

//! Unit tests of the CPython emulation.

use super::*;

#[test]
fn repr_prefers_single_quotes_and_escapes_controls() {
    assert_eq!(py_repr_str("a'b"), "\"a'b\"");
    assert_eq!(py_repr_str("a'\"b"), "'a\\'\"b'");
    assert_eq!(
        py_repr_str("\x00\x7f\u{a0}é\u{2028}😀"),
        "'\\x00\\x7f\\xa0é\\u2028😀'"
    );
}

#[test]
fn strict_base64_accepts_nonzero_trailing_bits_and_rejects_bad_padding() {
    assert_eq!(py_b64decode_strict("QR==", false), Ok(b"A".to_vec()));
    assert_eq!(py_b64decode_strict("QUJD====", false), Ok(b"ABC".to_vec()));
    assert!(py_b64decode_strict("QQ=", false).is_err());
    assert!(py_b64decode_strict("=QQ==", false).is_err());
    assert!(py_b64decode_strict("QU=J", false).is_err());
    assert_eq!(py_b64decode_strict("-_8=", true), Ok(vec![0xfb, 0xff]));
}

#[test]
fn fromisoformat_parses_python_output_and_extended_forms() {
    let dt = py_fromisoformat("2024-02-29T12:34:56.000123+08:00").expect("valid");
    assert_eq!(py_isoformat(&dt), "2024-02-29T12:34:56.000123+08:00");
    let week = py_fromisoformat("2020-W53-7").expect("valid");
    assert_eq!(py_isoformat(&week), "2021-01-03T00:00:00");
    let zulu = py_fromisoformat("20240101T1200Z").expect("valid");
    assert_eq!(py_isoformat(&zulu), "2024-01-01T12:00:00+00:00");
}

#[test]
fn fromisoformat_reports_range_errors_like_python() {
    assert_eq!(
        py_fromisoformat("2023-02-29T00:00:00").err().as_deref(),
        Some("day is out of range for month")
    );
    assert_eq!(
        py_fromisoformat("2024-01-01T00:00:00+24:00")
            .err()
            .as_deref(),
        Some(
            "offset must be a timedelta strictly between -timedelta(hours=24) and timedelta(hours=24), not datetime.timedelta(days=1)."
        )
    );
    assert_eq!(
        py_fromisoformat("2024").err().as_deref(),
        Some("Invalid isoformat string: '2024'")
    );
}

#[test]
fn uuid_parsing_accepts_python_int_quirks() {
    assert_eq!(py_uuid_from_str("+0000000000000000000000000000001"), Ok(1));
    assert_eq!(py_uuid_from_str("0x_00000000000000000000000000001"), Ok(1));
    assert!(py_uuid_from_str("1234567812345678123456781234567G").is_err());
}

#[test]
fn decimal_strings_normalise_like_python_str() {
    let cases = [
        ("1_000", "1000"),
        ("0.0000001", "1E-7"),
        ("1e3", "1E+3"),
        ("-nan", "-NaN"),
        ("NaN0012", "NaN12"),
        ("+.5", "0.5"),
    ];
    for (input, expected) in cases {
        assert_eq!(
            PyDecimal::parse(input).map(|d| d.to_py_string()).as_deref(),
            Ok(expected)
        );
    }
    assert_eq!(
        PyDecimal::parse("1e").err().as_deref(),
        Some(DECIMAL_SYNTAX_ERROR)
    );
    assert_eq!(
        PyDecimal::parse("1e99999999999999999999").err().as_deref(),
        Some(DECIMAL_RANGE_ERROR)
    );
}

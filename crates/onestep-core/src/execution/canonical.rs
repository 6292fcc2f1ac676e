//! Canonical JSON text, byte-identical to the Python reference's
//! `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`.
//!
//! The text is used for size limits, set-member ordering and the idempotency
//! digest, so every byte matters:
//!
//! * object keys are sorted by Unicode code point (Python `str` ordering);
//! * every character outside `0x20..=0x7E` is escaped; `\b \f \n \r \t`
//!   use their short forms, everything else (including DEL, `0x7F`) becomes
//!   lowercase `\uXXXX`, astral characters as a surrogate pair;
//! * numbers print as Python's `json.dumps` prints what `json.loads` read from
//!   them: an integer literal of any size as its digits (`-0` as `0`), a
//!   literal with `.`, `e` or `E` like Python's `float.__repr__` (shortest
//!   round-trip digits, `1e+16` / `1e-05` scientific form outside
//!   `1e-4 <= |x| < 1e16`, `.0` for integral values, `-0.0`).
//!
//! [`python_dumps`] writes the same values as Python's default `json.dumps(value,
//! ensure_ascii=False)` does (the reference's state stores): insertion order, `", "` and
//! `": "` separators, non-ASCII characters as they are.

use std::borrow::Cow;

use serde_json::Number;
use serde_json::Value;
use std::fmt::Write;

/// What Python makes of a JSON number literal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyNumber<'a> {
    /// An `int`: its decimal digits as Python prints them, with a leading `-` when negative.
    Int(Cow<'a, str>),
    /// A `float`; infinite when the literal overflows (`1e400`), as `float()` makes it.
    Float(f64),
}

/// Reads a literal the way Python's `json.loads` does.
pub(crate) fn classify(number: &Number) -> PyNumber<'_> {
    let literal = number.as_str();
    if literal.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        // Rust's `f64` parsing rounds correctly, as CPython's `float()` does; a JSON literal
        // always parses, so the fallback is never taken.
        return PyNumber::Float(literal.parse().unwrap_or(f64::NAN));
    }
    // JSON forbids leading zeros, so `-0` is the only integer literal Python prints otherwise.
    if literal == "-0" {
        PyNumber::Int(Cow::Borrowed("0"))
    } else {
        PyNumber::Int(Cow::Borrowed(literal))
    }
}

/// How a text is spelled: the canonical form, or Python's default `json.dumps`.
#[derive(Clone, Copy)]
struct Style {
    /// Object keys sorted by code point (`sort_keys=True`), else in insertion order.
    sorted: bool,
    /// Every character outside printable ASCII escaped (`ensure_ascii=True`).
    ascii: bool,
    /// Between items: `","` or `", "`.
    item: &'static str,
    /// Between a key and its value: `":"` or `": "`.
    key: &'static str,
    /// A literal too large for a float (`1e400`) kept as written instead of `Infinity`,
    /// which Python reads as the same value and serde_json cannot read at all.
    keep_overflow: bool,
}

const CANONICAL: Style = Style {
    sorted: true,
    ascii: true,
    item: ",",
    key: ":",
    keep_overflow: false,
};

const DUMPS: Style = Style {
    sorted: false,
    ascii: false,
    item: ", ",
    key: ": ",
    keep_overflow: true,
};

const DUMPS_ASCII: Style = Style {
    ascii: true,
    ..DUMPS
};

/// Returns the canonical JSON text of `value` (Python `json.dumps` with
/// `sort_keys=True, separators=(",", ":"), ensure_ascii=True`).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_value(&mut out, value, CANONICAL);
    out
}

/// Returns `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it: keys in
/// their order, `", "` and `": "` separators, numbers as Python prints what it read, non-ASCII
/// characters unescaped and control characters escaped. What the reference's state and cursor
/// stores keep in their value column. One difference: a literal too large for a float
/// (`1e400`) is kept as written where Python writes `Infinity`; Python reads both as `inf`, and
/// serde_json reads only the first.
///
/// ```
/// use onestep_core::execution::canonical::python_dumps;
/// let value: serde_json::Value = serde_json::from_str(r#"{"b":[1,2.50],"a":"é\n"}"#).unwrap();
/// assert_eq!(python_dumps(&value), r#"{"b": [1, 2.5], "a": "é\n"}"#);
/// ```
pub fn python_dumps(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_value(&mut out, value, DUMPS);
    out
}

/// Returns `value` as Python's `json.dumps(value)` writes it with its defaults: as
/// [`python_dumps`], but every character outside printable ASCII escaped (`ensure_ascii=True`).
/// The reference's envelope codec and HTTP sink send these bytes.
///
/// ```
/// use onestep_core::execution::canonical::python_dumps_ascii;
/// let value: serde_json::Value = serde_json::from_str(r#"{"a":"é✓"}"#).unwrap();
/// assert_eq!(python_dumps_ascii(&value), r#"{"a": "\u00e9\u2713"}"#);
/// ```
pub fn python_dumps_ascii(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_value(&mut out, value, DUMPS_ASCII);
    out
}

/// Returns the length in bytes of [`canonical_json`] of `value`, the size
/// the reference compares against its payload/metadata/result limits.
pub fn canonical_size(value: &Value) -> usize {
    let mut size = Size(0);
    write_value(&mut size, value, CANONICAL);
    size.0
}

/// Counts the bytes written instead of keeping them.
struct Size(usize);

impl Write for Size {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Formats a float exactly like Python's `repr(float)`; non-finite values
/// use the spellings `json.dumps` emits by default (`NaN`, `Infinity`,
/// `-Infinity`).
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    // `{:e}` yields the shortest round-trip digits, e.g. "1.5e300", "-0e0".
    let scientific = format!("{value:e}");
    let (negative, unsigned) = match scientific.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, scientific.as_str()),
    };
    let (mantissa, exponent) = unsigned.split_once('e').unwrap_or((unsigned, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    // Two equally close shortest candidates can both round-trip only with
    // 16 or 17 digits (their spacing must not exceed one ULP).
    let digits = if digits.len() >= 16 {
        break_tie_to_even(value.abs(), digits, exponent)
    } else {
        digits
    };
    // Python's `decpt`: value = 0.d1d2... * 10^decpt.
    let decpt = exponent + 1;
    let ndigits = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if decpt <= -4 || decpt > 16 {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let shown = decpt - 1;
        let _ = write!(
            out,
            "e{}{:02}",
            if shown < 0 { '-' } else { '+' },
            shown.unsigned_abs()
        );
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt >= ndigits {
        out.push_str(&digits);
        for _ in 0..(decpt - ndigits) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        let split = usize::try_from(decpt).unwrap_or(digits.len());
        out.push_str(&digits[..split]);
        out.push('.');
        out.push_str(&digits[split..]);
    }
    out
}

/// Python's shortest-repr algorithm (David Gay's `dtoa`, mode 0) breaks an
/// exact tie between two equally short, equally close digit strings that
/// both round-trip towards an even last digit; Rust's `{:e}` rounds such ties
/// up. Example: `2**-25` is exactly `2.98023223876953125e-08`; Python prints
/// `2.9802322387695312e-08`, Rust `2.9802322387695313e-08`. (For `2**-24`
/// only the upper candidate round-trips, and both print `...063e-08`.)
fn break_tie_to_even(abs: f64, digits: String, exponent: i32) -> String {
    let n = digits.len();
    // Cheap filter: a tie's exact value has n + 1 significant digits ending
    // in 5, so its correctly rounded (n + 3)-digit form ends in "500".
    let precision = n + 2;
    let probe = format!("{abs:.precision$e}");
    if !probe
        .split_once('e')
        .is_some_and(|(mantissa, _)| mantissa.ends_with("500"))
    {
        return digits;
    }
    // A double's exact decimal expansion has at most 767 significant digits.
    let exact = format!("{abs:.1100e}");
    let Some((mantissa, exact_exponent)) = exact.split_once('e') else {
        return digits;
    };
    if exact_exponent.parse::<i32>().ok() != Some(exponent) {
        return digits;
    }
    let exact_digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exact_digits = exact_digits.trim_end_matches('0');
    if exact_digits.len() != n + 1 || !exact_digits.ends_with('5') {
        return digits;
    }
    let low: Vec<u8> = exact_digits.as_bytes()[..n].to_vec();
    let mut high = low.clone();
    let mut index = n;
    loop {
        if index == 0 {
            return digits; // the upper candidate needs another digit
        }
        index -= 1;
        if high[index] == b'9' {
            high[index] = b'0';
        } else {
            high[index] += 1;
            break;
        }
    }
    let round_trips = |candidate: &[u8]| {
        let text = String::from_utf8_lossy(candidate);
        format!("{}.{}e{exponent}", &text[..1], &text[1..])
            .parse::<f64>()
            .ok()
            == Some(abs)
    };
    if !(round_trips(&low) && round_trips(&high)) {
        return digits;
    }
    let even = if low[n - 1].is_multiple_of(2) {
        low
    } else {
        high
    };
    let text = String::from_utf8(even).unwrap_or(digits);
    let trimmed = text.trim_end_matches('0');
    if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// Appends `text` as a JSON string literal with Python's `ensure_ascii` escapes.
pub(crate) fn write_string<W: Write>(out: &mut W, text: &str) {
    write_string_in(out, text, true);
}

/// Appends `text` as a JSON string literal; with `ascii`, every character outside printable
/// ASCII is escaped, else only `"`, `\\` and the control characters (as Python's
/// `ensure_ascii=False`).
fn write_string_in<W: Write>(out: &mut W, text: &str, ascii: bool) {
    let _ = out.write_char('"');
    // Runs of characters that need no escape are written at once.
    let mut plain = 0;
    for (at, c) in text.char_indices() {
        let escaped = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            '\u{08}' => "\\b",
            '\u{0c}' => "\\f",
            ' '..='~' => continue,
            c if !ascii && c >= '\u{7f}' => continue,
            _ => "",
        };
        let _ = out.write_str(&text[plain..at]);
        plain = at + c.len_utf8();
        if escaped.is_empty() {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            let _ = out.write_str(escaped);
        }
    }
    let _ = out.write_str(&text[plain..]);
    let _ = out.write_char('"');
}

fn write_value<W: Write>(out: &mut W, value: &Value, style: Style) {
    match value {
        Value::Null => push(out, "null"),
        Value::Bool(true) => push(out, "true"),
        Value::Bool(false) => push(out, "false"),
        Value::Number(number) => match classify(number) {
            PyNumber::Int(digits) => push(out, &digits),
            PyNumber::Float(float) if style.keep_overflow && !float.is_finite() => {
                push(out, number.as_str());
            }
            PyNumber::Float(float) => push(out, &python_float_repr(float)),
        },
        Value::String(text) => write_string_in(out, text, style.ascii),
        Value::Array(items) => {
            push(out, "[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    push(out, style.item);
                }
                write_value(out, item, style);
            }
            push(out, "]");
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if style.sorted {
                // Sort explicitly: the workspace's `serde_json` keeps insertion order.
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            push(out, "{");
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    push(out, style.item);
                }
                write_string_in(out, key, style.ascii);
                push(out, style.key);
                write_value(out, item, style);
            }
            push(out, "}");
        }
    }
}

/// Writes `text`; writing to a `String` or a [`Size`] cannot fail.
fn push<W: Write>(out: &mut W, text: &str) {
    let _ = out.write_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_dumps_keeps_order_spaces_and_non_ascii() {
        let value: Value = serde_json::from_str(
            r#"{"z": [1, 1.0, 1e-5, 100000000000000000000], "é": "\u001f\u007f☃", "a": {}}"#,
        )
        .unwrap();
        assert_eq!(
            python_dumps(&value),
            "{\"z\": [1, 1.0, 1e-05, 100000000000000000000], \"\u{e9}\": \"\\u001f\u{7f}\u{2603}\", \"a\": {}}"
        );
    }

    #[test]
    fn python_dumps_keeps_an_overflowing_literal_readable() {
        let value: Value = serde_json::from_str("[1e400, -1e400]").unwrap();
        assert_eq!(python_dumps(&value), "[1e+400, -1e+400]");
        assert_eq!(canonical_json(&value), "[Infinity,-Infinity]");
    }

    #[test]
    fn keys_are_sorted_by_code_point_and_separators_are_compact() {
        let value = json!({"b": 1, "a": [true, null], "é": "x", "Z": {}});
        assert_eq!(
            canonical_json(&value),
            r#"{"Z":{},"a":[true,null],"b":1,"\u00e9":"x"}"#
        );
    }

    #[test]
    fn non_ascii_control_and_del_characters_are_escaped_like_python() {
        let value = json!("\u{7f}\u{0}\u{1f}\u{2028}😀é\"\\/\u{8}\u{c}\n\r\t");
        assert_eq!(
            canonical_json(&value),
            r#""\u007f\u0000\u001f\u2028\ud83d\ude00\u00e9\"\\/\b\f\n\r\t""#
        );
    }

    #[test]
    fn floats_print_like_python_repr() {
        let cases = [
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e15, "1000000000000000.0"),
            (123_456_789_012_345.6, "123456789012345.6"),
            (1.5e300, "1.5e+300"),
            (-0.0, "-0.0"),
            (5e-324, "5e-324"),
            (5.0, "5.0"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (1.23e-18, "1.23e-18"),
            (2f64.powi(-25), "2.9802322387695312e-08"),
            (2f64.powi(-24), "5.960464477539063e-08"),
        ];
        for (input, expected) in cases {
            assert_eq!(python_float_repr(input), expected, "{input:e}");
        }
    }

    #[test]
    fn integers_print_without_a_fraction() {
        let value = json!([
            9_223_372_036_854_775_807_i64,
            -9_223_372_036_854_775_808_i64,
            u64::MAX,
            0
        ]);
        assert_eq!(
            canonical_json(&value),
            "[9223372036854775807,-9223372036854775808,18446744073709551615,0]"
        );
    }

    #[test]
    fn size_counts_bytes_of_the_canonical_text() {
        assert_eq!(
            canonical_size(&json!({"a": "é"})),
            r#"{"a":"\u00e9"}"#.len()
        );
    }
}

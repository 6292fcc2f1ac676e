//! The opaque `list` pagination cursor, byte-compatible with the Python
//! reference (`ExecutionStateMachine._encode_cursor` / `_decode_cursor`).
//!
//! A cursor is the unpadded base64url text of the compact JSON
//! `{"v":1,"created_at":"<UTC isoformat>","id":"<uuid>"}` (keys in that
//! order). Decoding follows Python step by step so that the two error texts
//! come out the same: `unknown cursor version` for a well-formed cursor
//! whose `v` is an integer other than 1, `invalid execution cursor` for
//! everything else, including any cursor that is not exactly what
//! [`encode_cursor`] would produce for the decoded values.
//!
//! To get the version error right for odd inputs, the JSON is read the way
//! Python's `json.loads(bytes)` reads it (UTF-8/16/32 detection with
//! surrogates passed through, `NaN`/`Infinity` literals, arbitrary-size
//! integers, duplicate keys where the last wins).

use super::digest::python_isoformat;
use super::pycompat::{py_b64decode_strict, py_fromisoformat, py_isspace, py_uuid_from_str};
use base64::Engine as _;
use time::{OffsetDateTime, UtcOffset};
use uuid::Uuid;

/// Why a cursor was refused; the messages are Python's `ValueError` texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Any malformed, tampered or non-canonical cursor.
    #[error("invalid execution cursor")]
    Invalid,
    /// A well-formed cursor whose integer `v` is not 1.
    #[error("unknown cursor version")]
    UnknownVersion,
}

/// Maximum cursor length in characters accepted by [`decode_cursor`].
pub const MAX_CURSOR_CHARS: usize = 1024;

/// Encodes the keyset position `(created_at, id)` of the last listed item.
///
/// `created_at` is converted to UTC (the reference always passes UTC
/// timestamps) and truncated to microseconds. The conversion never panics:
/// an instant whose UTC form is outside the years `time` represents (only an
/// extreme offset at the ±9999 edge) is clamped to the nearest representable
/// UTC instant (see [`crate::clock::utc`]); stored `created_at` values are
/// UTC already, so listing never meets one.
pub fn encode_cursor(created_at: OffsetDateTime, id: Uuid) -> String {
    let utc = crate::clock::utc(created_at);
    let json = format!(
        "{{\"v\":1,\"created_at\":\"{}\",\"id\":\"{}\"}}",
        python_isoformat(utc),
        id.hyphenated()
    );
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.as_bytes())
}

/// Decodes a cursor made by [`encode_cursor`] (or by the Python reference)
/// into its UTC `created_at` (microsecond precision) and execution id.
pub fn decode_cursor(cursor: &str) -> Result<(OffsetDateTime, Uuid), CursorError> {
    let length = cursor.chars().count();
    if length > MAX_CURSOR_CHARS || cursor.chars().any(py_isspace) {
        return Err(CursorError::Invalid);
    }
    let mut padded = cursor.to_owned();
    for _ in 0..((4 - length % 4) % 4) {
        padded.push('=');
    }
    let raw = py_b64decode_strict(&padded, true).map_err(|_| CursorError::Invalid)?;
    let text = decode_json_bytes(&raw).ok_or(CursorError::Invalid)?;
    let parsed = JsonParser::parse_document(&text).ok_or(CursorError::Invalid)?;
    let PyJson::Object(entries) = parsed else {
        return Err(CursorError::Invalid);
    };
    let lookup = |name: &str| {
        let key: Vec<u32> = name.chars().map(u32::from).collect();
        entries
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, value)| value)
    };
    let mut distinct: Vec<&Vec<u32>> = Vec::new();
    for (key, _) in &entries {
        if !distinct.contains(&key) {
            distinct.push(key);
        }
    }
    let (Some(version), Some(created_at), Some(id)) =
        (lookup("v"), lookup("created_at"), lookup("id"))
    else {
        return Err(CursorError::Invalid);
    };
    if distinct.len() != 3 {
        return Err(CursorError::Invalid);
    }
    match version {
        PyJson::Int(literal) if literal == "1" => {}
        PyJson::Int(_) => return Err(CursorError::UnknownVersion),
        _ => return Err(CursorError::Invalid),
    }
    let (PyJson::Str(created_at), PyJson::Str(id)) = (created_at, id) else {
        return Err(CursorError::Invalid);
    };
    let created_at = code_points_to_string(created_at).ok_or(CursorError::Invalid)?;
    let id = code_points_to_string(id).ok_or(CursorError::Invalid)?;
    let parsed = py_fromisoformat(&created_at).map_err(|_| CursorError::Invalid)?;
    let offset_us = parsed.offset_us.ok_or(CursorError::Invalid)?;
    if offset_us % 1_000_000 != 0 {
        // Python accepts it, but the UTC re-encoding can never match.
        return Err(CursorError::Invalid);
    }
    let month = time::Month::try_from(parsed.month).map_err(|_| CursorError::Invalid)?;
    let date = time::Date::from_calendar_date(parsed.year, month, parsed.day)
        .map_err(|_| CursorError::Invalid)?;
    let clock = time::Time::from_hms_micro(
        parsed.hour,
        parsed.minute,
        parsed.second,
        parsed.microsecond,
    )
    .map_err(|_| CursorError::Invalid)?;
    let offset = i32::try_from(offset_us / 1_000_000)
        .ok()
        .and_then(|seconds| UtcOffset::from_whole_seconds(seconds).ok())
        .ok_or(CursorError::Invalid)?;
    // Python's astimezone() overflows outside years 1..=9999; `time` panics past 9999 in
    // `to_offset`, so convert with the checked variant.
    let created_at = time::PrimitiveDateTime::new(date, clock)
        .assume_offset(offset)
        .checked_to_offset(UtcOffset::UTC)
        .filter(|utc| (1..=9999).contains(&utc.year()))
        .ok_or(CursorError::Invalid)?;
    let id = Uuid::from_u128(py_uuid_from_str(&id).map_err(|_| CursorError::Invalid)?);
    if encode_cursor(created_at, id) != cursor {
        return Err(CursorError::Invalid);
    }
    Ok((created_at, id))
}

fn code_points_to_string(points: &[u32]) -> Option<String> {
    points.iter().map(|point| char::from_u32(*point)).collect()
}

// ---------------------------------------------------------------------------
// json.loads(bytes) emulation
// ---------------------------------------------------------------------------

/// Decodes bytes to code points like `json.detect_encoding` + `bytes.decode(
/// encoding, "surrogatepass")` (lone surrogates survive as code points).
fn decode_json_bytes(bytes: &[u8]) -> Option<Vec<u32>> {
    let starts = |prefix: &[u8]| bytes.starts_with(prefix);
    if starts(&[0x00, 0x00, 0xFE, 0xFF]) {
        return decode_utf32(&bytes[4..], true);
    }
    if starts(&[0xFF, 0xFE, 0x00, 0x00]) {
        return decode_utf32(&bytes[4..], false);
    }
    if starts(&[0xFE, 0xFF]) {
        return decode_utf16(&bytes[2..], true);
    }
    if starts(&[0xFF, 0xFE]) {
        return decode_utf16(&bytes[2..], false);
    }
    if starts(&[0xEF, 0xBB, 0xBF]) {
        return decode_utf8_surrogatepass(&bytes[3..]);
    }
    match bytes {
        [0, b1, _, _, ..] => {
            if *b1 != 0 {
                decode_utf16(bytes, true)
            } else {
                decode_utf32(bytes, true)
            }
        }
        [_, 0, b2, b3, ..] => {
            if *b2 != 0 || *b3 != 0 {
                decode_utf16(bytes, false)
            } else {
                decode_utf32(bytes, false)
            }
        }
        [0, _] => decode_utf16(bytes, true),
        [_, 0] => decode_utf16(bytes, false),
        _ => decode_utf8_surrogatepass(bytes),
    }
}

fn decode_utf32(bytes: &[u8], big_endian: bool) -> Option<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    bytes
        .chunks_exact(4)
        .map(|chunk| {
            let array = [chunk[0], chunk[1], chunk[2], chunk[3]];
            let point = if big_endian {
                u32::from_be_bytes(array)
            } else {
                u32::from_le_bytes(array)
            };
            (point <= 0x10FFFF).then_some(point)
        })
        .collect()
}

fn decode_utf16(bytes: &[u8], big_endian: bool) -> Option<Vec<u32>> {
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    let units: Vec<u32> = bytes
        .chunks_exact(2)
        .map(|chunk| {
            let array = [chunk[0], chunk[1]];
            u32::from(if big_endian {
                u16::from_be_bytes(array)
            } else {
                u16::from_le_bytes(array)
            })
        })
        .collect();
    let mut points = Vec::with_capacity(units.len());
    let mut index = 0;
    while index < units.len() {
        let unit = units[index];
        let next = units.get(index + 1).copied();
        match next {
            Some(low) if (0xD800..0xDC00).contains(&unit) && (0xDC00..0xE000).contains(&low) => {
                points.push(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
                index += 2;
            }
            _ => {
                points.push(unit);
                index += 1;
            }
        }
    }
    Some(points)
}

fn decode_utf8_surrogatepass(bytes: &[u8]) -> Option<Vec<u32>> {
    let mut points = Vec::with_capacity(bytes.len());
    let mut index = 0;
    let continuation = |index: usize| {
        bytes
            .get(index)
            .copied()
            .filter(|b| (0x80..0xC0).contains(b))
            .map(|b| u32::from(b & 0x3F))
    };
    while index < bytes.len() {
        let lead = bytes[index];
        let (width, second_range, initial) = match lead {
            0x00..=0x7F => {
                points.push(u32::from(lead));
                index += 1;
                continue;
            }
            0xC2..=0xDF => (2, 0x80..0xC0, u32::from(lead & 0x1F)),
            0xE0 => (3, 0xA0..0xC0, 0),
            0xE1..=0xEF => (3, 0x80..0xC0, u32::from(lead & 0x0F)),
            0xF0 => (4, 0x90..0xC0, 0),
            0xF1..=0xF3 => (4, 0x80..0xC0, u32::from(lead & 0x07)),
            0xF4 => (4, 0x80..0x90, 4),
            _ => return None,
        };
        if !bytes
            .get(index + 1)
            .is_some_and(|b| second_range.contains(b))
        {
            return None;
        }
        let mut point = initial;
        for offset in 1..width {
            point = (point << 6) | continuation(index + offset)?;
        }
        points.push(point);
        index += width;
    }
    Some(points)
}

/// A JSON value as Python's `json` module sees it (only what the cursor
/// checks need).
#[derive(Debug, Clone, PartialEq)]
enum PyJson {
    Null,
    Bool,
    /// An integer, as its literal text (Python ints are unbounded).
    Int(String),
    Float,
    Str(Vec<u32>),
    Array,
    /// Entries in document order; duplicate keys resolve to the last one.
    Object(Vec<(Vec<u32>, PyJson)>),
}

struct JsonParser<'a> {
    text: &'a [u32],
    pos: usize,
}

impl<'a> JsonParser<'a> {
    fn parse_document(text: &'a [u32]) -> Option<PyJson> {
        let mut parser = Self { text, pos: 0 };
        parser.skip_ws();
        let value = parser.value()?;
        parser.skip_ws();
        (parser.pos == text.len()).then_some(value)
    }

    fn peek(&self) -> Option<u32> {
        self.text.get(self.pos).copied()
    }

    fn at(&self, offset: usize) -> Option<u32> {
        self.text.get(self.pos + offset).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(0x20 | 0x09 | 0x0A | 0x0D)) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        let matches = word
            .chars()
            .enumerate()
            .all(|(offset, c)| self.at(offset) == Some(u32::from(c)));
        if matches {
            self.pos += word.chars().count();
        }
        matches
    }

    fn value(&mut self) -> Option<PyJson> {
        let first = self.peek()?;
        match char::from_u32(first)? {
            '"' => self.string().map(PyJson::Str),
            '{' => self.object(),
            '[' => self.array(),
            'n' if self.literal("null") => Some(PyJson::Null),
            't' if self.literal("true") => Some(PyJson::Bool),
            'f' if self.literal("false") => Some(PyJson::Bool),
            'N' if self.literal("NaN") => Some(PyJson::Float),
            'I' if self.literal("Infinity") => Some(PyJson::Float),
            '-' if self.literal("-Infinity") => Some(PyJson::Float),
            _ => self.number(),
        }
    }

    fn is_digit(&self, offset: usize) -> bool {
        self.at(offset).is_some_and(|c| (0x30..=0x39).contains(&c))
    }

    fn number(&mut self) -> Option<PyJson> {
        let start = self.pos;
        if self.peek() == Some(u32::from('-')) {
            self.pos += 1;
        }
        match self.peek() {
            Some(0x30) => self.pos += 1,
            Some(0x31..=0x39) => {
                while self.is_digit(0) {
                    self.pos += 1;
                }
            }
            _ => return None,
        }
        let mut is_float = false;
        if self.peek() == Some(u32::from('.')) && self.is_digit(1) {
            is_float = true;
            self.pos += 2;
            while self.is_digit(0) {
                self.pos += 1;
            }
        }
        if matches!(self.peek(), Some(0x65 | 0x45)) {
            let exponent_start = self.pos;
            self.pos += 1;
            if matches!(self.peek(), Some(0x2B | 0x2D)) {
                self.pos += 1;
            }
            let digits_start = self.pos;
            while self.is_digit(0) {
                self.pos += 1;
            }
            if self.pos > digits_start {
                is_float = true;
            } else {
                self.pos = exponent_start;
            }
        }
        if is_float {
            return Some(PyJson::Float);
        }
        let literal: String = self.text[start..self.pos]
            .iter()
            .filter_map(|c| char::from_u32(*c))
            .collect();
        // Python's int("-0") is 0; keep a canonical literal for the "== 1" test.
        Some(PyJson::Int(if literal == "-0" {
            "0".to_owned()
        } else {
            literal
        }))
    }

    fn hex4(&self, offset: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, index| {
            let digit = char::from_u32(self.at(offset + index)?)?.to_digit(16)?;
            Some(acc * 16 + digit)
        })
    }

    fn string(&mut self) -> Option<Vec<u32>> {
        self.pos += 1; // opening quote
        let mut out = Vec::new();
        loop {
            let c = self.peek()?;
            self.pos += 1;
            match c {
                0x22 => return Some(out),
                0x00..=0x1F => return None,
                0x5C => {
                    let escape = self.peek()?;
                    self.pos += 1;
                    let simple = match char::from_u32(escape)? {
                        '"' => Some(0x22),
                        '\\' => Some(0x5C),
                        '/' => Some(0x2F),
                        'b' => Some(0x08),
                        'f' => Some(0x0C),
                        'n' => Some(0x0A),
                        'r' => Some(0x0D),
                        't' => Some(0x09),
                        'u' => None,
                        _ => return None,
                    };
                    if let Some(simple) = simple {
                        out.push(simple);
                        continue;
                    }
                    let unit = self.hex4(0)?;
                    self.pos += 4;
                    if (0xD800..0xDC00).contains(&unit)
                        && self.peek() == Some(0x5C)
                        && self.at(1) == Some(u32::from('u'))
                    {
                        let low = self.hex4(2)?;
                        if (0xDC00..0xE000).contains(&low) {
                            self.pos += 6;
                            out.push(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
                            continue;
                        }
                    }
                    out.push(unit);
                }
                _ => out.push(c),
            }
        }
    }

    fn array(&mut self) -> Option<PyJson> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(u32::from(']')) {
            self.pos += 1;
            return Some(PyJson::Array);
        }
        loop {
            self.value()?;
            self.skip_ws();
            match char::from_u32(self.peek()?)? {
                ']' => {
                    self.pos += 1;
                    return Some(PyJson::Array);
                }
                ',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self) -> Option<PyJson> {
        self.pos += 1;
        self.skip_ws();
        let mut entries = Vec::new();
        if self.peek() == Some(u32::from('}')) {
            self.pos += 1;
            return Some(PyJson::Object(entries));
        }
        loop {
            if self.peek() != Some(0x22) {
                return None;
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(u32::from(':')) {
                return None;
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            entries.push((key, value));
            self.skip_ws();
            match char::from_u32(self.peek()?)? {
                '}' => {
                    self.pos += 1;
                    return Some(PyJson::Object(entries));
                }
                ',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn b64(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.as_bytes())
    }

    #[test]
    fn cursors_round_trip_in_utc_with_microseconds() {
        let id = Uuid::from_u128(42);
        let cursor = encode_cursor(datetime!(2024-01-02 11:04:05.000007 +08:00), id);
        let json = r#"{"v":1,"created_at":"2024-01-02T03:04:05.000007+00:00","id":"00000000-0000-0000-0000-00000000002a"}"#;
        assert_eq!(cursor, b64(json));
        assert_eq!(
            decode_cursor(&cursor),
            Ok((datetime!(2024-01-02 03:04:05.000007 UTC), id))
        );
    }

    #[test]
    fn an_instant_beyond_the_utc_range_is_clamped_instead_of_panicking() {
        let id = Uuid::from_u128(7);
        let late = encode_cursor(datetime!(9999-12-31 23:59:59 -23:59), id);
        assert_eq!(
            decode_cursor(&late),
            Ok((datetime!(9999-12-31 23:59:59.999999 UTC), id)),
            "clamped to the last representable UTC instant"
        );
        // Below the range the cursor is still made; it names no listable row, so it is refused.
        let early = encode_cursor(datetime!(-9999-01-01 00:00:00 +23:59), id);
        assert_eq!(decode_cursor(&early), Err(CursorError::Invalid));
    }

    #[test]
    fn other_integer_versions_are_unknown_even_when_other_fields_are_bad() {
        assert_eq!(
            decode_cursor(&b64(r#"{"v":2,"created_at":5,"id":null}"#)),
            Err(CursorError::UnknownVersion)
        );
        assert_eq!(
            decode_cursor(&b64(r#"{"v":-0,"created_at":"","id":""}"#)),
            Err(CursorError::UnknownVersion)
        );
        assert_eq!(
            decode_cursor(&b64(r#"{"v":true,"created_at":"","id":""}"#)),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            decode_cursor(&b64(r#"{"v":1.0,"created_at":"","id":""}"#)),
            Err(CursorError::Invalid)
        );
    }

    #[test]
    fn non_canonical_spellings_are_invalid() {
        let spaced = r#"{"v": 1,"created_at":"2024-01-02T03:04:05+00:00","id":"00000000-0000-0000-0000-00000000002a"}"#;
        assert_eq!(decode_cursor(&b64(spaced)), Err(CursorError::Invalid));
        let offset = r#"{"v":1,"created_at":"2024-01-02T11:04:05+08:00","id":"00000000-0000-0000-0000-00000000002a"}"#;
        assert_eq!(decode_cursor(&b64(offset)), Err(CursorError::Invalid));
        let cursor = encode_cursor(datetime!(2024-01-02 03:04:05 UTC), Uuid::from_u128(1));
        assert_eq!(
            decode_cursor(&format!("{cursor}=")),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            decode_cursor(&format!(" {cursor}")),
            Err(CursorError::Invalid)
        );
    }

    #[test]
    fn times_that_leave_the_year_range_in_utc_are_invalid() {
        let id = r#""id":"00000000-0000-0000-0000-000000000000""#;
        for created_at in ["9999-12-31T20:00:00-04:00", "0001-01-01T00:00:00+01:00"] {
            let json = format!(r#"{{"v":1,"created_at":"{created_at}",{id}}}"#);
            assert_eq!(decode_cursor(&b64(&json)), Err(CursorError::Invalid));
        }
    }

    #[test]
    fn python_json_quirks_still_reach_the_version_check() {
        let utf16: Vec<u8> = r#"{"v":3,"created_at":NaN,"id":"\ud800"}"#
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&utf16);
        assert_eq!(decode_cursor(&cursor), Err(CursorError::UnknownVersion));
    }
}

//! Emulation of the CPython 3.11 behaviours the tagged codec depends on.
//!
//! The Python reference validates tag contents with `datetime.fromisoformat`,
//! `uuid.UUID`, `decimal.Decimal` and `base64.b64decode(validate=True)`.
//! A Rust port that must accept and reject exactly the same stored values
//! needs the same grammars, so this module re-implements their observable
//! behaviour (accepted inputs, resulting values and error texts) from the
//! CPython 3.11 documentation and from black-box tests against the
//! interpreter (see `gen_vectors.py`). No CPython code is copied.
//!
//! Known approximation: `py_repr_str` decides which non-ASCII characters are
//! "printable" with a small table (control, format, separator, private-use
//! and non-character code points) instead of the full Unicode database, so
//! error messages that quote exotic unassigned code points may differ.

use std::fmt::Write as _;

/// Code points whose Unicode 14 decimal value is 0; each starts a run of ten
/// consecutive decimal digits (Python's `unicodedata.decimal`).
const DECIMAL_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

/// Python `str.isspace()` for one character.
pub(crate) fn py_isspace(c: char) -> bool {
    matches!(
        c as u32,
        0x09..=0x0D
            | 0x1C..=0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

/// Python `unicodedata.decimal(c)` (Unicode 14), `None` for non-digits.
pub(crate) fn py_decimal(c: char) -> Option<u8> {
    let cp = c as u32;
    DECIMAL_ZEROS
        .iter()
        .find(|zero| cp >= **zero && cp < **zero + 10)
        .and_then(|zero| u8::try_from(cp - zero).ok())
}

/// Approximation of Python `str.isprintable()` for one non-ASCII character.
fn py_isprintable_non_ascii(cp: u32) -> bool {
    !matches!(
        cp,
        0x80..=0xA0
            | 0xAD
            | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x1680
            | 0x180E
            | 0x2000..=0x200F
            | 0x2028..=0x202F
            | 0x205F..=0x206F
            | 0x3000
            | 0xD800..=0xF8FF
            | 0xFDD0..=0xFDEF
            | 0xFEFF
            | 0xFFF0..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x13438
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0x40000..=0xDFFFF
            | 0xE0000..=0x10FFFF
    ) && (cp & 0xFFFE) != 0xFFFE
}

/// Python `repr(s)` for a `str`.
pub(crate) fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        let cp = c as u32;
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if cp < 0x20 || cp == 0x7F => {
                let _ = write!(out, "\\x{cp:02x}");
            }
            _ if cp < 0x7F || py_isprintable_non_ascii(cp) => out.push(c),
            _ if cp <= 0xFF => {
                let _ = write!(out, "\\x{cp:02x}");
            }
            _ if cp <= 0xFFFF => {
                let _ = write!(out, "\\u{cp:04x}");
            }
            _ => {
                let _ = write!(out, "\\U{cp:08x}");
            }
        }
    }
    out.push(quote);
    out
}

// ---------------------------------------------------------------------------
// base64 (binascii.a2b_base64 with strict_mode=True, Python 3.11)
// ---------------------------------------------------------------------------

fn b64_value(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// `base64.b64decode(s, validate=True)` (optionally with `altchars=b"-_"`).
///
/// Errors carry the `binascii.Error` text; callers in the codec only need
/// the accept/reject decision.
pub(crate) fn py_b64decode_strict(s: &str, urlsafe_altchars: bool) -> Result<Vec<u8>, String> {
    if !s.is_ascii() {
        return Err("string argument should contain only ASCII characters".to_owned());
    }
    let data: Vec<u8> = s
        .bytes()
        .map(|b| match (urlsafe_altchars, b) {
            (true, b'-') => b'+',
            (true, b'_') => b'/',
            _ => b,
        })
        .collect();
    if data.first() == Some(&b'=') {
        return Err("Leading padding not allowed".to_owned());
    }
    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 3);
    let mut quad_pos = 0u8;
    let mut left = 0u8;
    let mut pads = 0u8;
    let mut padding_started = false;
    for (index, byte) in data.iter().enumerate() {
        if *byte == b'=' {
            padding_started = true;
            if quad_pos >= 2 {
                pads += 1;
                if quad_pos + pads >= 4 {
                    if index + 1 < data.len() {
                        return Err("Excess data after padding".to_owned());
                    }
                    return Ok(out);
                }
            }
            continue;
        }
        let Some(value) = b64_value(*byte) else {
            return Err("Only base64 data is allowed".to_owned());
        };
        if padding_started {
            return Err("Discontinuous padding not allowed".to_owned());
        }
        pads = 0;
        match quad_pos {
            0 => {
                left = value;
                quad_pos = 1;
            }
            1 => {
                out.push((left << 2) | (value >> 4));
                left = value & 0x0F;
                quad_pos = 2;
            }
            2 => {
                out.push((left << 4) | (value >> 2));
                left = value & 0x03;
                quad_pos = 3;
            }
            _ => {
                out.push((left << 6) | value);
                quad_pos = 0;
            }
        }
    }
    match quad_pos {
        0 => Ok(out),
        1 => Err(format!(
            "Invalid base64-encoded string: number of data characters ({}) cannot be 1 more than a multiple of 4",
            out.len() / 3 * 4 + 1
        )),
        _ => Err("Incorrect padding".to_owned()),
    }
}

// ---------------------------------------------------------------------------
// datetime.fromisoformat (CPython 3.11 C implementation semantics)
// ---------------------------------------------------------------------------

/// A datetime as Python's `datetime.fromisoformat` returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PyDateTime {
    pub(crate) year: i32,
    pub(crate) month: u8,
    pub(crate) day: u8,
    pub(crate) hour: u8,
    pub(crate) minute: u8,
    pub(crate) second: u8,
    pub(crate) microsecond: u32,
    /// UTC offset in microseconds; `None` for a naive datetime.
    pub(crate) offset_us: Option<i64>,
}

/// Byte reader that yields NUL past the end, like a C string.
struct CStr<'a> {
    bytes: &'a [u8],
}

impl CStr<'_> {
    fn at(&self, index: usize) -> u8 {
        self.bytes.get(index).copied().unwrap_or(0)
    }

    /// Reads `count` ASCII digits starting at `pos`.
    fn digits(&self, pos: usize, count: usize) -> Option<(i64, usize)> {
        let mut value = 0i64;
        for offset in 0..count {
            let byte = self.at(pos + offset);
            if !byte.is_ascii_digit() {
                return None;
            }
            value = value * 10 + i64::from(byte - b'0');
        }
        Some((value, pos + count))
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn days_before_year(year: i64) -> i64 {
    let y = year - 1;
    y * 365 + y / 4 - y / 100 + y / 400
}

fn days_before_month(year: i64, month: i64) -> i64 {
    (1..month).map(|m| days_in_month(year, m)).sum()
}

fn ymd_to_ord(year: i64, month: i64, day: i64) -> i64 {
    days_before_year(year) + days_before_month(year, month) + day
}

fn ord_to_ymd(ordinal: i64) -> (i64, i64, i64) {
    // Walk from an estimate; ordinals here always belong to years 1..=10000.
    let mut year = (ordinal - 1) / 366 + 1;
    while ymd_to_ord(year + 1, 1, 1) <= ordinal {
        year += 1;
    }
    let mut month = 1;
    while month < 12 && ymd_to_ord(year, month + 1, 1) <= ordinal {
        month += 1;
    }
    (year, month, ordinal - ymd_to_ord(year, month, 1) + 1)
}

/// ISO week date to calendar date, `None` when week or weekday is invalid.
///
/// CPython 3.11 does not range-check the year here. For year 0 its calendar
/// arithmetic runs off the start of the calendar and always yields a month
/// below 1, so the later range check reports `month must be in 1..12`;
/// `(1, 0, 0)` reproduces that. Week 53 never exists in year 0 there.
fn iso_to_ymd(year: i64, week: i64, weekday: i64) -> Option<(i64, i64, i64)> {
    if year == 0 {
        return ((1..53).contains(&week) && (1..8).contains(&weekday)).then_some((1, 0, 0));
    }
    let first_ord = ymd_to_ord(year, 1, 1);
    let first_weekday = (first_ord + 6) % 7; // Monday == 0
    if !(1..53).contains(&week) {
        let long_year = first_weekday == 3 || (first_weekday == 2 && is_leap(year));
        if !(week == 53 && long_year) {
            return None;
        }
    }
    if !(1..8).contains(&weekday) {
        return None;
    }
    let mut week1_monday = first_ord - first_weekday;
    if first_weekday > 3 {
        week1_monday += 7;
    }
    Some(ord_to_ymd(week1_monday + (week - 1) * 7 + weekday - 1))
}

fn find_separator(s: &CStr<'_>) -> Option<usize> {
    let len = s.bytes.len();
    if len == 7 {
        return Some(7);
    }
    if s.at(4) == b'-' {
        if s.at(5) == b'W' {
            if len > 8 && s.at(8) == b'-' {
                if len == 9 {
                    return None;
                }
                if len > 10 && s.at(10).is_ascii_digit() {
                    return Some(8);
                }
                return Some(10);
            }
            return Some(8);
        }
        return Some(10);
    }
    if s.at(4) == b'W' {
        let mut idx = 7;
        while idx < len && s.at(idx).is_ascii_digit() {
            idx += 1;
        }
        if idx < 9 {
            return Some(idx);
        }
        return Some(if idx % 2 == 0 { 7 } else { 8 });
    }
    Some(8)
}

/// Parses the date part; `Err(())` means "Invalid isoformat string".
fn parse_date(s: &CStr<'_>, date_len: usize) -> Result<(i64, i64, i64), ()> {
    let (year, mut p) = s.digits(0, 4).ok_or(())?;
    let dashed = s.at(p) == b'-';
    if dashed {
        p += 1;
    }
    if s.at(p) == b'W' {
        let (week, after_week) = s.digits(p + 1, 2).ok_or(())?;
        p = after_week;
        let mut weekday = 1;
        if p < date_len {
            if dashed {
                if s.at(p) != b'-' {
                    return Err(());
                }
                p += 1;
            }
            weekday = s.digits(p, 1).ok_or(())?.0;
        }
        return iso_to_ymd(year, week, weekday).ok_or(());
    }
    let (month, mut p) = s.digits(p, 2).ok_or(())?;
    if dashed {
        if s.at(p) != b'-' {
            return Err(());
        }
        p += 1;
    }
    let (day, _) = s.digits(p, 2).ok_or(())?;
    Ok((year, month, day))
}

/// `[HH[:?MM[:?SS[{.,}ffffff]]]]` between `start` and `end`.
/// Returns the components and whether unparsed text remains (C's rv 0/1).
fn parse_hh_mm_ss_ff(s: &CStr<'_>, start: usize, end: usize) -> Result<([i64; 4], bool), ()> {
    let mut comps = [0i64; 4];
    let mut p = start;
    let mut has_separator = true;
    let mut index = 0;
    while index < 3 {
        let (value, next) = s.digits(p, 2).ok_or(())?;
        comps[index] = value;
        p = next;
        let c = s.at(p);
        p += 1;
        if index == 0 {
            has_separator = c == b':';
        }
        if p >= end {
            return Ok((comps, c != 0));
        } else if has_separator && c == b':' {
            index += 1;
            continue;
        } else if c == b'.' || c == b',' {
            break;
        } else if !has_separator {
            p -= 1;
        } else {
            return Err(());
        }
        index += 1;
    }
    let remaining = end.saturating_sub(p);
    let to_parse = remaining.min(6);
    let (mut fraction, mut q) = s.digits(p, to_parse).ok_or(())?;
    if to_parse < 6 {
        // A zero-length fraction parses as 0 and is scaled by 10^6 in C; the
        // value stays 0 either way.
        fraction *= 10i64.pow(u32::try_from(6 - to_parse).map_err(|_| ())?);
    }
    comps[3] = fraction;
    while s.at(q).is_ascii_digit() {
        q += 1;
    }
    Ok((comps, s.at(q) != 0))
}

enum TimeOutcome {
    Naive([i64; 4]),
    Aware([i64; 4], i64, i64),
}

fn parse_time(s: &CStr<'_>, start: usize, end: usize) -> Result<TimeOutcome, ()> {
    let mut tz_pos = start;
    loop {
        let c = s.at(tz_pos);
        if c == b'Z' || c == b'+' || c == b'-' {
            break;
        }
        tz_pos += 1;
        if tz_pos >= end {
            break;
        }
    }
    let (comps, rest) = parse_hh_mm_ss_ff(s, start, tz_pos)?;
    if tz_pos == end {
        return if rest {
            Err(())
        } else {
            Ok(TimeOutcome::Naive(comps))
        };
    }
    if s.at(tz_pos) == b'Z' {
        return if s.at(tz_pos + 1) != 0 {
            Err(())
        } else {
            Ok(TimeOutcome::Aware(comps, 0, 0))
        };
    }
    let sign = if s.at(tz_pos) == b'-' { -1 } else { 1 };
    let (tz, tz_rest) = parse_hh_mm_ss_ff(s, tz_pos + 1, end)?;
    if tz_rest {
        return Err(());
    }
    let seconds = sign * (tz[0] * 3600 + tz[1] * 60 + tz[2]);
    Ok(TimeOutcome::Aware(comps, seconds, sign * tz[3]))
}

/// Python's `repr(datetime.timedelta(...))` for a total in microseconds.
pub(crate) fn py_timedelta_repr(total_us: i64) -> String {
    let days = total_us.div_euclid(86_400_000_000);
    let rest = total_us.rem_euclid(86_400_000_000);
    let seconds = rest / 1_000_000;
    let micros = rest % 1_000_000;
    let mut parts = Vec::new();
    if days != 0 {
        parts.push(format!("days={days}"));
    }
    if seconds != 0 {
        parts.push(format!("seconds={seconds}"));
    }
    if micros != 0 {
        parts.push(format!("microseconds={micros}"));
    }
    if parts.is_empty() {
        "datetime.timedelta(0)".to_owned()
    } else {
        format!("datetime.timedelta({})", parts.join(", "))
    }
}

/// `datetime.fromisoformat(s)` as in CPython 3.11; errors carry `str(exc)`.
pub(crate) fn py_fromisoformat(text: &str) -> Result<PyDateTime, String> {
    let invalid = || format!("Invalid isoformat string: {}", py_repr_str(text));
    if text.chars().count() < 7 {
        return Err(invalid());
    }
    let s = CStr {
        bytes: text.as_bytes(),
    };
    let len = s.bytes.len();
    let separator = find_separator(&s).ok_or_else(invalid)?;
    let (year, month, day) = parse_date(&s, separator).map_err(|()| invalid())?;
    let mut outcome = TimeOutcome::Naive([0; 4]);
    if len > separator {
        let lead = s.at(separator);
        let width = if lead & 0x80 == 0 {
            1
        } else {
            match lead & 0xF0 {
                0xE0 => 3,
                0xF0 => 4,
                _ => 2,
            }
        };
        let start = separator + width;
        outcome = parse_time(&s, start, len.max(start)).map_err(|()| invalid())?;
    }
    let (comps, offset_us) = match outcome {
        TimeOutcome::Naive(comps) => (comps, None),
        TimeOutcome::Aware(comps, seconds, micros) => {
            if seconds == 0 {
                (comps, Some(0))
            } else {
                let total = seconds * 1_000_000 + micros;
                if total.abs() >= 86_400_000_000 {
                    return Err(format!(
                        "offset must be a timedelta strictly between -timedelta(hours=24) and timedelta(hours=24), not {}.",
                        py_timedelta_repr(total)
                    ));
                }
                (comps, Some(total))
            }
        }
    };
    if !(1..=9999).contains(&year) {
        return Err(format!("year {year} is out of range"));
    }
    if !(1..=12).contains(&month) {
        return Err("month must be in 1..12".to_owned());
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err("day is out of range for month".to_owned());
    }
    if comps[0] > 23 {
        return Err("hour must be in 0..23".to_owned());
    }
    if comps[1] > 59 {
        return Err("minute must be in 0..59".to_owned());
    }
    if comps[2] > 59 {
        return Err("second must be in 0..59".to_owned());
    }
    let narrow = |v: i64| u8::try_from(v).map_err(|_| invalid());
    Ok(PyDateTime {
        year: i32::try_from(year).map_err(|_| invalid())?,
        month: narrow(month)?,
        day: narrow(day)?,
        hour: narrow(comps[0])?,
        minute: narrow(comps[1])?,
        second: narrow(comps[2])?,
        microsecond: u32::try_from(comps[3]).map_err(|_| invalid())?,
        offset_us,
    })
}

/// Python's `datetime.isoformat()` for the given fields.
pub(crate) fn py_isoformat(dt: &PyDateTime) -> String {
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second
    );
    if dt.microsecond != 0 {
        let _ = write!(out, ".{:06}", dt.microsecond);
    }
    if let Some(offset) = dt.offset_us {
        out.push_str(&py_format_offset(offset));
    }
    out
}

/// Python's `datetime._format_offset` (`+HH:MM[:SS[.ffffff]]`).
pub(crate) fn py_format_offset(offset_us: i64) -> String {
    let sign = if offset_us < 0 { '-' } else { '+' };
    let magnitude = offset_us.unsigned_abs();
    let hours = magnitude / 3_600_000_000;
    let minutes = magnitude / 60_000_000 % 60;
    let seconds = magnitude / 1_000_000 % 60;
    let micros = magnitude % 1_000_000;
    let mut out = format!("{sign}{hours:02}:{minutes:02}");
    if seconds != 0 || micros != 0 {
        let _ = write!(out, ":{seconds:02}");
        if micros != 0 {
            let _ = write!(out, ".{micros:06}");
        }
    }
    out
}

// ---------------------------------------------------------------------------
// uuid.UUID(hex)
// ---------------------------------------------------------------------------

/// `int(text, 16)` restricted to what can reach it from `uuid.UUID`.
fn py_int_base16(text: &str) -> Option<u128> {
    // Non-ASCII whitespace becomes a space and non-ASCII decimal digits
    // become ASCII digits; anything else non-ASCII (or DEL) is invalid.
    let mut ascii = Vec::with_capacity(text.len());
    for c in text.chars() {
        if (c as u32) < 0x7F {
            ascii.push(c as u8);
        } else if py_isspace(c) {
            ascii.push(b' ');
        } else {
            ascii.push(b'0' + py_decimal(c)?);
        }
    }
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
    let start = ascii
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(ascii.len());
    let end = ascii
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    let mut body = ascii.get(start..end)?;
    let negative = match body.first() {
        Some(b'+') => {
            body = body.get(1..)?;
            false
        }
        Some(b'-') => {
            body = body.get(1..)?;
            true
        }
        _ => false,
    };
    if body.len() >= 2 && body[0] == b'0' && matches!(body[1], b'x' | b'X') {
        body = body.get(2..)?;
        if body.first() == Some(&b'_') {
            body = body.get(1..)?;
        }
    }
    if body.first() == Some(&b'_') || body.last() == Some(&b'_') || body.is_empty() {
        return None;
    }
    let mut value: u128 = 0;
    let mut previous_underscore = false;
    for byte in body {
        if *byte == b'_' {
            if previous_underscore {
                return None;
            }
            previous_underscore = true;
            continue;
        }
        previous_underscore = false;
        let digit = char::from(*byte).to_digit(16)?;
        value = value.checked_mul(16)?.checked_add(u128::from(digit))?;
    }
    if negative && value != 0 {
        return None;
    }
    Some(value)
}

/// `uuid.UUID(text)`; the error carries Python's `str(exc)`.
pub(crate) fn py_uuid_from_str(text: &str) -> Result<u128, String> {
    let hex = text.replace("urn:", "").replace("uuid:", "");
    let hex = hex.trim_matches(|c| c == '{' || c == '}').replace('-', "");
    if hex.chars().count() != 32 {
        return Err("badly formed hexadecimal UUID string".to_owned());
    }
    py_int_base16(&hex).ok_or_else(|| {
        format!(
            "invalid literal for int() with base 16: {}",
            py_repr_str(&hex)
        )
    })
}

// ---------------------------------------------------------------------------
// decimal.Decimal(str)
// ---------------------------------------------------------------------------

/// Message of `decimal.InvalidOperation` for a string that is not a number.
pub(crate) const DECIMAL_SYNTAX_ERROR: &str = "[<class 'decimal.ConversionSyntax'>]";
/// Message of `decimal.InvalidOperation` for an exponent outside the limits.
pub(crate) const DECIMAL_RANGE_ERROR: &str = "[<class 'decimal.InvalidOperation'>]";

const DECIMAL_MAX_EMAX: i128 = 999_999_999_999_999_999;
const DECIMAL_ETINY: i128 = -1_999_999_999_999_999_997;

/// A parsed Python `Decimal`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PyDecimal {
    /// A finite number: sign, coefficient digits without leading zeros, exponent.
    Finite {
        negative: bool,
        digits: String,
        exponent: i128,
    },
    /// Positive or negative infinity.
    Infinite { negative: bool },
    /// A quiet (`signaling == false`) or signaling NaN with its payload.
    NaN {
        negative: bool,
        signaling: bool,
        payload: String,
    },
}

fn strip_leading_zeros(digits: &str) -> &str {
    let stripped = digits.trim_start_matches('0');
    if stripped.is_empty() { "0" } else { stripped }
}

impl PyDecimal {
    /// `Decimal(text)`; the error carries Python's `str(exc)`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let syntax = || DECIMAL_SYNTAX_ERROR.to_owned();
        let trimmed = text.trim_matches(py_isspace);
        let mut ascii = String::with_capacity(trimmed.len());
        for c in trimmed.chars() {
            let cp = c as u32;
            if c == '_' {
                continue;
            }
            if (1..=127).contains(&cp) {
                ascii.push(c);
            } else if py_isspace(c) {
                ascii.push(' ');
            } else {
                ascii.push(char::from(b'0' + py_decimal(c).ok_or_else(syntax)?));
            }
        }
        let (negative, body) = match ascii.as_bytes().first() {
            Some(b'-') => (true, &ascii[1..]),
            Some(b'+') => (false, &ascii[1..]),
            _ => (false, ascii.as_str()),
        };
        let lower = body.to_ascii_lowercase();
        if lower == "inf" || lower == "infinity" {
            return Ok(Self::Infinite { negative });
        }
        for (prefix, signaling) in [("snan", true), ("nan", false)] {
            if let Some(payload) = lower.strip_prefix(prefix) {
                if !payload.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(syntax());
                }
                let payload = payload.trim_start_matches('0').to_owned();
                return Ok(Self::NaN {
                    negative,
                    signaling,
                    payload,
                });
            }
        }
        let (mantissa, exponent_text) = match lower.find('e') {
            Some(index) => (&lower[..index], Some(&lower[index + 1..])),
            None => (lower.as_str(), None),
        };
        let (int_part, frac_part) = match mantissa.find('.') {
            Some(index) => (&mantissa[..index], &mantissa[index + 1..]),
            None => (mantissa, ""),
        };
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int_part) || !all_digits(frac_part) || int_part.len() + frac_part.len() == 0
        {
            return Err(syntax());
        }
        let mut exponent: i128 = 0;
        if let Some(exp_text) = exponent_text {
            let (exp_negative, exp_digits) = match exp_text.as_bytes().first() {
                Some(b'-') => (true, &exp_text[1..]),
                Some(b'+') => (false, &exp_text[1..]),
                _ => (false, exp_text),
            };
            if exp_digits.is_empty() || !all_digits(exp_digits) {
                return Err(syntax());
            }
            for byte in exp_digits.bytes() {
                // Saturate far beyond every limit; the range check rejects it.
                exponent = (exponent * 10 + i128::from(byte - b'0')).min(i128::from(u64::MAX));
            }
            if exp_negative {
                exponent = -exponent;
            }
        }
        let frac_len = i128::try_from(frac_part.len()).map_err(|_| syntax())?;
        exponent -= frac_len;
        let joined = format!("{int_part}{frac_part}");
        let digits = strip_leading_zeros(&joined).to_owned();
        let ndigits = i128::try_from(digits.len()).map_err(|_| syntax())?;
        let adjusted = if digits == "0" {
            exponent
        } else {
            exponent + ndigits - 1
        };
        if adjusted > DECIMAL_MAX_EMAX || exponent < DECIMAL_ETINY {
            return Err(DECIMAL_RANGE_ERROR.to_owned());
        }
        Ok(Self::Finite {
            negative,
            digits,
            exponent,
        })
    }

    /// Whether this is a signaling NaN (which Python refuses to hash).
    pub(crate) fn is_signaling(&self) -> bool {
        matches!(
            self,
            Self::NaN {
                signaling: true,
                ..
            }
        )
    }

    /// Python's `str(Decimal)` (scientific string, capital `E`).
    pub(crate) fn to_py_string(&self) -> String {
        match self {
            Self::Infinite { negative } => {
                format!("{}Infinity", if *negative { "-" } else { "" })
            }
            Self::NaN {
                negative,
                signaling,
                payload,
            } => format!(
                "{}{}NaN{payload}",
                if *negative { "-" } else { "" },
                if *signaling { "s" } else { "" }
            ),
            Self::Finite {
                negative,
                digits,
                exponent,
            } => {
                let sign = if *negative { "-" } else { "" };
                let len = i128::try_from(digits.len()).unwrap_or(i128::MAX);
                let left_digits = exponent + len;
                let dot_place = if *exponent <= 0 && left_digits > -6 {
                    left_digits
                } else {
                    1
                };
                let mut out = String::from(sign);
                if dot_place <= 0 {
                    out.push_str("0.");
                    for _ in 0..(-dot_place) {
                        out.push('0');
                    }
                    out.push_str(digits);
                } else if dot_place >= len {
                    out.push_str(digits);
                    for _ in 0..(dot_place - len) {
                        out.push('0');
                    }
                } else {
                    let split = usize::try_from(dot_place).unwrap_or(digits.len());
                    out.push_str(&digits[..split]);
                    out.push('.');
                    out.push_str(&digits[split..]);
                }
                if left_digits != dot_place {
                    let _ = write!(out, "E{:+}", left_digits - dot_place);
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}

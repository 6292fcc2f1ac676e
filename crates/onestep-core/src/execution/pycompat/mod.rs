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

mod datetime;
mod decimal;
mod uuid;

pub(crate) use datetime::*;
pub(crate) use decimal::*;
pub(crate) use uuid::*;

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

#[cfg(test)]
mod tests;

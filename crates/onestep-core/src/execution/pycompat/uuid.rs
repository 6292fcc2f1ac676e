//! `uuid.UUID(hex)`: the accepted spellings and Python's error texts.

use super::{py_decimal, py_isspace, py_repr_str};

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

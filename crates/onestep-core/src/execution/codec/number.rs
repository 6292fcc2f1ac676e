//! Numbers as Python reads and writes them.
//!
//! The workspace builds `serde_json` with `arbitrary_precision`, so a [`Number`] keeps the literal
//! it was parsed from: an integer of any size survives, and `1E2`, `1.50` or `-0` stay as
//! written. Python's `json.loads` reads a literal with `.`, `e` or `E` as a `float` and anything
//! else as an `int`, and `json.dumps` writes an `int` as its digits and a `float` as its `repr`.
//! The functions here apply that reading to a literal, in two directions:
//!
//! - [`stored`]: the spelling Python would store (`-0` → `0`, `1E2` → `100.0`), for the encoded
//!   form and for canonical text;
//! - [`rust_view`]: the spelling the Rust view holds: integers as their digits, floats as
//!   `serde_json` prints an `f64` (`1e16`), so that serde's own number handling (untagged enums,
//!   `flatten`) sees the floats it expects.
//!
//! Both keep the value: `rust_view` then `stored` gives Python's text again, because Python's
//! `repr` and Rust's shortest formatting denote the same `f64`.

use std::borrow::Cow;
use std::str::FromStr as _;

use serde_json::Number;

use super::super::canonical::{PyNumber, classify, python_float_repr};

/// Python's default `sys.get_int_max_str_digits()`: a longer integer literal cannot be read or
/// written by Python's `json` module ("Exceeds the limit (4300 digits) for integer string
/// conversion").
pub const MAX_INT_DIGITS: usize = 4300;

/// Why a number cannot be stored the way Python would store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unstorable {
    /// A float literal beyond the `f64` range, which Python reads as infinity.
    NonFinite,
    /// An integer with more digits than [`MAX_INT_DIGITS`].
    TooManyDigits(usize),
}

fn number(text: &str) -> Number {
    // Only called with digits or a float `repr`, which are JSON number literals.
    Number::from_str(text).unwrap_or_else(|_| Number::from(0))
}

/// The number as Python stores it: integer digits, or the float's `repr`.
pub(crate) fn stored(value: &Number) -> Result<Cow<'_, Number>, Unstorable> {
    match classify(value) {
        PyNumber::Int(text) => {
            let digits = text.trim_start_matches('-').len();
            if digits > MAX_INT_DIGITS {
                return Err(Unstorable::TooManyDigits(digits));
            }
            Ok(if text == value.as_str() {
                Cow::Borrowed(value)
            } else {
                Cow::Owned(number(&text))
            })
        }
        PyNumber::Float(float) if float.is_finite() => {
            let repr = python_float_repr(float);
            Ok(if repr == value.as_str() {
                Cow::Borrowed(value)
            } else {
                Cow::Owned(number(&repr))
            })
        }
        PyNumber::Float(_) => Err(Unstorable::NonFinite),
    }
}

/// The number as the Rust view holds it: integer digits, or the float as `serde_json` prints an
/// `f64`. A literal that overflows `f64` is kept as it is.
pub(crate) fn rust_view(value: &Number) -> Cow<'_, Number> {
    match classify(value) {
        PyNumber::Int(text) if text == value.as_str() => Cow::Borrowed(value),
        PyNumber::Int(text) => Cow::Owned(number(&text)),
        PyNumber::Float(float) => match Number::from_f64(float) {
            Some(formatted) if formatted.as_str() != value.as_str() => Cow::Owned(formatted),
            _ => Cow::Borrowed(value),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Number {
        Number::from_str(text).expect("a JSON number")
    }

    #[test]
    fn python_reads_literals_with_a_point_or_exponent_as_floats() {
        assert_eq!(classify(&n("12")), PyNumber::Int(Cow::Borrowed("12")));
        assert_eq!(classify(&n("-0")), PyNumber::Int(Cow::Borrowed("0")));
        assert_eq!(classify(&n("1E2")), PyNumber::Float(100.0));
        assert_eq!(classify(&n("1.50")), PyNumber::Float(1.5));
        assert_eq!(classify(&n("1e400")), PyNumber::Float(f64::INFINITY));
    }

    #[test]
    fn stored_spelling_is_pythons_and_keeps_big_integers() {
        let big = "123456789012345678901234567890";
        assert_eq!(stored(&n(big)).map(|v| v.to_string()), Ok(big.to_owned()));
        assert_eq!(stored(&n("-0")).map(|v| v.to_string()), Ok("0".to_owned()));
        assert_eq!(
            stored(&n("1E2")).map(|v| v.to_string()),
            Ok("100.0".to_owned())
        );
        assert_eq!(
            stored(&n("1e16")).map(|v| v.to_string()),
            Ok("1e+16".to_owned())
        );
        assert_eq!(
            stored(&n("1e-5")).map(|v| v.to_string()),
            Ok("1e-05".to_owned())
        );
        assert_eq!(stored(&n("1e400")), Err(Unstorable::NonFinite));
        let long = "9".repeat(MAX_INT_DIGITS + 1);
        assert_eq!(
            stored(&n(&long)),
            Err(Unstorable::TooManyDigits(MAX_INT_DIGITS + 1))
        );
        assert!(stored(&n(&"9".repeat(MAX_INT_DIGITS))).is_ok());
    }

    #[test]
    fn rust_view_prints_floats_like_serde_and_round_trips_to_python() {
        for (python, rust) in [("1e+16", "1e+16"), ("1e-05", "0.00001"), ("1.50", "1.5")] {
            let view = rust_view(&n(python)).into_owned();
            assert_eq!(view.as_str(), rust);
            let repr = python_float_repr(python.parse().expect("a float"));
            assert_eq!(stored(&view).map(|v| v.to_string()), Ok(repr));
        }
        assert_eq!(
            rust_view(&n("100000000000000000000")).as_str(),
            "100000000000000000000"
        );
    }
}

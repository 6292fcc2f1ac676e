//! `decimal.Decimal(str)`: the grammar, the context limits and Python's `str()` of the result.

use std::fmt::Write as _;

use super::{py_decimal, py_isspace};

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

//! `datetime.fromisoformat`, `isoformat` and `repr(timedelta)` as in CPython 3.11 (its C
//! implementation's semantics).

use std::fmt::Write as _;

use super::py_repr_str;

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

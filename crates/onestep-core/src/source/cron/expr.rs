//! Five-field cron expressions and their next fire time in an IANA time zone.
//!
//! This is the schedule engine behind `CronSource`. It follows the behaviour
//! of the Python `onestep` reference (`onestep.connectors.schedule`):
//!
//! | expression            | fires                                                   |
//! |-----------------------|---------------------------------------------------------|
//! | `*/15 * * * *`        | every quarter hour (:00, :15, :30, :45)                 |
//! | `0 9 * * mon-fri`     | 09:00 on weekdays                                       |
//! | `30 2 1,15 * *`       | 02:30 on the 1st and the 15th of every month            |
//! | `0 0 13 * fri`        | midnight on the 13th *or* on any Friday (DOM/DOW OR)    |
//! | `0 0 29 2 *`          | midnight on leap days only                              |
//! | `5 4 * * 7`           | 04:05 on Sundays (`7` is Sunday, like `0`)              |
//! | `@hourly`, `@daily`   | `0 * * * *`, `0 0 * * *`                                |
//! | `@weekly`             | `0 0 * * 0`                                             |
//! | `@monthly`, `@yearly` | `0 0 1 * *`, `0 0 1 1 *`                                |
//!
//! Field syntax: `*`, single values, lists (`1,5,9`), ranges (`1-5`), steps
//! (`*/15`, `1-10/2`, and `5/20` meaning `5-59/20`). The month field accepts
//! `jan`..`dec` and the day-of-week field `sun`..`sat`, case-insensitively.
//! Day-of-week accepts `0`..=`7`, where both `0` and `7` are Sunday.
//!
//! Day matching: only a field written exactly as `*` counts as unrestricted.
//! When both day-of-month and day-of-week are restricted, a day matches if
//! **either** matches (so `*/1` or `*/2` in one of them makes it restricted).
//!
//! Time zones: fields are matched against the wall clock of the zone. A wall
//! time skipped by a DST gap fires at the instant that wall time names under
//! the offset in force *before* the gap (02:30 on a New York spring-forward
//! day fires at 03:30 EDT). A wall time repeated by a DST fold fires once, at
//! its first occurrence, unless the search starts inside the repeated hour,
//! in which case the later occurrence is used (results are always strictly
//! after the given instant).
//!
//! ```
//! use onestep_core::source::cron::expr::{parse_time_zone, CronExpression};
//!
//! let tz = parse_time_zone("America/New_York")?;
//!
//! // Weekdays, every 15 minutes from 09:00 to 17:45.
//! let expr = CronExpression::parse("*/15 9-17 * * mon-fri")?;
//! // Friday 2024-03-08 17:50 EST: the next run is Monday 09:00, which is
//! // already daylight time (EDT, UTC-4).
//! let after: jiff::Timestamp = "2024-03-08T22:50:00Z".parse()?;
//! let next = expr.next_after(after, &tz).ok_or("no fire time")?;
//! assert_eq!(next.to_string(), "2024-03-11T13:00:00Z");
//!
//! // 02:30 does not exist on 2024-03-10 in New York: it fires at 03:30 EDT.
//! let expr = CronExpression::parse("30 2 * * *")?;
//! let after: jiff::Timestamp = "2024-03-09T12:00:00Z".parse()?;
//! let next = expr.next_after(after, &tz).ok_or("no fire time")?;
//! assert_eq!(next.to_string(), "2024-03-10T07:30:00Z");
//!
//! // An expression that can never match returns `None` instead of looping.
//! let never = CronExpression::parse("0 0 30 2 *")?;
//! assert!(!never.is_satisfiable());
//! assert_eq!(never.next_after(after, &tz), None);
//!
//! // Errors name the field and the expression.
//! let err = CronExpression::parse("0 24 * * *").unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     r#"cron field 'hour' value 24 is out of range 0..=23 in "0 24 * * *""#,
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};

/// How many years past the local year of the start instant the search looks.
///
/// Every satisfiable expression matches within 8 years (the longest gap
/// between two leap days, e.g. 2096-02-29 to 2104-02-29), so this bound is
/// only ever reached near the end of the supported calendar (year 9999).
const MAX_SEARCH_YEARS: i16 = 10;

/// Macros accepted in place of the five fields (matched case-insensitively).
const MACROS: [(&str, &str); 5] = [
    ("@hourly", "0 * * * *"),
    ("@daily", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"),
    ("@yearly", "0 0 1 1 *"),
];

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

const WEEKDAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One of the five positions of a cron expression (used in error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Minute of the hour, `0..=59`.
    Minute,
    /// Hour of the day, `0..=23`.
    Hour,
    /// Day of the month, `1..=31`.
    DayOfMonth,
    /// Month of the year, `1..=12` or `jan`..`dec`.
    Month,
    /// Day of the week, `0..=7` (0 and 7 are Sunday) or `sun`..`sat`.
    DayOfWeek,
}

impl CronField {
    const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// Smallest accepted numeric value.
    fn min(self) -> u32 {
        match self {
            CronField::DayOfMonth | CronField::Month => 1,
            _ => 0,
        }
    }

    /// Largest accepted numeric value as written (day-of-week accepts 7).
    fn max(self) -> u32 {
        match self {
            CronField::Minute => 59,
            CronField::Hour => 23,
            CronField::DayOfMonth => 31,
            CronField::Month => 12,
            CronField::DayOfWeek => 7,
        }
    }

    /// Upper end used by `*` and by `N/step` (day-of-week stops at Saturday).
    fn range_end(self) -> u32 {
        match self {
            CronField::DayOfWeek => 6,
            other => other.max(),
        }
    }

    /// Symbolic names and the value of the first name.
    fn names(self) -> (&'static [&'static str], u32) {
        match self {
            CronField::Month => (&MONTH_NAMES, 1),
            CronField::DayOfWeek => (&WEEKDAY_NAMES, 0),
            _ => (&[], 0),
        }
    }

    /// What a valid value looks like, for error messages.
    fn expected(self) -> &'static str {
        match self {
            CronField::Minute => "a number in 0..=59",
            CronField::Hour => "a number in 0..=23",
            CronField::DayOfMonth => "a number in 1..=31",
            CronField::Month => "a number in 1..=12 or a month name jan..dec",
            CronField::DayOfWeek => "a number in 0..=7 or a weekday name sun..sat",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
        })
    }
}

/// Why a cron expression or time zone name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression is empty or only whitespace.
    #[error(
        "cron expression is empty; expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily"
    )]
    Empty,
    /// The expression starts with `@` but is not a supported macro.
    #[error(
        "unknown cron macro {expr:?}; supported macros are @hourly, @daily, @weekly, @monthly and @yearly"
    )]
    UnknownMacro {
        /// The expression as given (trimmed).
        expr: String,
    },
    /// The expression does not have exactly five whitespace-separated fields.
    #[error(
        "cron expression {expr:?} has {found} field(s); expected 5 (minute hour day-of-month month day-of-week)"
    )]
    FieldCount {
        /// The expression as given (trimmed).
        expr: String,
        /// How many fields were found.
        found: usize,
    },
    /// A comma-separated list has an empty item, e.g. `1,,2` or `1,`.
    #[error("cron field '{field}' has an empty list item in {expr:?}")]
    EmptyListItem {
        /// The field containing the empty item.
        field: CronField,
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A value is neither a plain decimal number nor a name valid for the field.
    #[error("cron field '{field}' value {value:?} is not {} in {expr:?}", .field.expected())]
    InvalidValue {
        /// The offending field.
        field: CronField,
        /// The value as written.
        value: String,
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A number lies outside the range allowed for its field.
    #[error("cron field '{field}' value {value} is out of range {min}..={max} in {expr:?}")]
    OutOfRange {
        /// The offending field.
        field: CronField,
        /// The value as written.
        value: String,
        /// Smallest allowed value.
        min: u32,
        /// Largest allowed value.
        max: u32,
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A step (after `/`) is not a positive decimal integer.
    #[error(
        "cron field '{field}' step {step:?} is invalid (expected a positive integer) in {expr:?}"
    )]
    InvalidStep {
        /// The offending field.
        field: CronField,
        /// The step as written.
        step: String,
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A range starts after it ends, e.g. `10-5` or `mon-sun`.
    #[error("cron field '{field}' range {range:?} starts after it ends in {expr:?}")]
    ReversedRange {
        /// The offending field.
        field: CronField,
        /// The range item as written.
        range: String,
        /// The expression as given (trimmed).
        expr: String,
    },
    /// The time zone name is not in the IANA time zone database.
    #[error(
        "unknown time zone {name:?}; expected an IANA name such as \"UTC\", \"Asia/Shanghai\" or \"America/New_York\""
    )]
    UnknownTimeZone {
        /// The name as given.
        name: String,
    },
}

/// Looks up an IANA time zone (e.g. `"UTC"`, `"Asia/Shanghai"`,
/// `"America/New_York"`) in the time zone database bundled with the binary.
///
/// Lookup is case-insensitive; surrounding whitespace is not accepted.
pub fn parse_time_zone(name: &str) -> Result<TimeZone, CronError> {
    let unknown = || CronError::UnknownTimeZone {
        name: name.to_owned(),
    };
    if name.is_empty() || name.trim() != name {
        return Err(unknown());
    }
    jiff::tz::db().get(name).map_err(|_| unknown())
}

/// A parsed five-field cron expression (minute hour day-of-month month
/// day-of-week); see the module documentation for the syntax and semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpression {
    /// Normalized text: the macro expansion, or the trimmed input.
    source: String,
    /// Bit `n` set when minute `n` matches.
    minutes: u64,
    /// Bit `n` set when hour `n` matches.
    hours: u64,
    /// Bit `n` set when day-of-month `n` matches (bits 1..=31).
    days_of_month: u64,
    /// Bit `n` set when month `n` matches (bits 1..=12).
    months: u64,
    /// Bit `n` set when weekday `n` matches (0 = Sunday, bits 0..=6).
    days_of_week: u64,
    /// Day-of-month field was written exactly as `*`.
    dom_any: bool,
    /// Day-of-week field was written exactly as `*`.
    dow_any: bool,
}

impl CronExpression {
    /// Parses a five-field expression or one of `@hourly`, `@daily`,
    /// `@weekly`, `@monthly`, `@yearly` (case-insensitive, surrounding
    /// whitespace ignored).
    pub fn parse(expr: &str) -> Result<CronExpression, CronError> {
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(CronError::Empty);
        }
        let source = if trimmed.starts_with('@') {
            let lowered = trimmed.to_ascii_lowercase();
            match MACROS.iter().find(|(name, _)| *name == lowered) {
                Some((_, expansion)) => (*expansion).to_owned(),
                None => {
                    return Err(CronError::UnknownMacro {
                        expr: trimmed.to_owned(),
                    });
                }
            }
        } else {
            trimmed.to_owned()
        };

        let fields: Vec<&str> = source.split_whitespace().collect();
        if fields.len() != CronField::ALL.len() {
            return Err(CronError::FieldCount {
                expr: trimmed.to_owned(),
                found: fields.len(),
            });
        }
        let mut bits = [0u64; 5];
        for ((slot, text), field) in bits.iter_mut().zip(&fields).zip(CronField::ALL) {
            *slot = parse_field(text, field, trimmed)?;
        }
        let [minutes, hours, days_of_month, months, days_of_week] = bits;
        Ok(CronExpression {
            dom_any: fields[2] == "*",
            dow_any: fields[4] == "*",
            source,
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
        })
    }

    /// The normalized expression: the expansion of a macro (`@daily` gives
    /// `0 0 * * *`) or the trimmed input. The reference names a cron source
    /// `cron:{this}` by default.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the expression can ever fire. `false` only for day-of-month
    /// lists that no selected month contains, e.g. `0 0 30 2 *` or
    /// `0 0 31 4,6,9,11 *`; such expressions parse, but never fire.
    pub fn is_satisfiable(&self) -> bool {
        // A restricted day-of-week matches some day in every month, and with
        // both day fields restricted either one suffices.
        if !self.dow_any {
            return true;
        }
        (1..=12u32).any(|month| {
            let longest = match month {
                2 => 29,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            has_bit(self.months, month) && (self.days_of_month & mask_through(longest)) != 0
        })
    }

    /// Whether the wall-clock `datetime` matches (seconds are ignored).
    pub fn matches(&self, datetime: DateTime) -> bool {
        has_bit(self.minutes, to_u32(datetime.minute()))
            && has_bit(self.hours, to_u32(datetime.hour()))
            && has_bit(self.months, to_u32(datetime.month()))
            && self.day_matches(datetime.date())
    }

    /// The first fire time strictly after `after`, matched against the wall
    /// clock of `tz` at minute resolution.
    ///
    /// A matching wall time inside a DST gap resolves with the offset in
    /// force before the gap (so it fires as far past the gap start as the
    /// wall time is). A matching wall time inside a DST fold resolves to its
    /// first occurrence, or to its second occurrence when the first is not
    /// after `after`. Returns `None` for expressions that can never match
    /// (see [`is_satisfiable`](Self::is_satisfiable)) and when no match
    /// exists within ten years or before the end of the supported calendar
    /// (year 9999); the search walks fields, not minutes, so it is cheap.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        if !self.is_satisfiable() {
            return None;
        }
        let local = tz.to_datetime(after);
        let limit_year = local.year().saturating_add(MAX_SEARCH_YEARS).min(9999);
        let mut cursor = Wall::from_datetime(local).next_minute();
        loop {
            let candidate = self.next_match(cursor, limit_year)?;
            if let Some(fire) = resolve(tz, candidate.to_datetime()?, after) {
                return Some(fire);
            }
            cursor = candidate.next_minute();
        }
    }

    /// The fire time a schedule starting at `now` runs first: `now` itself
    /// when it lies exactly on a matching minute of the wall clock of `tz`,
    /// otherwise [`next_after`](Self::next_after)`(now)` (the reference's
    /// `first_fire_at`).
    pub fn first_at_or_after(&self, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = tz.to_datetime(now);
        if local.second() == 0 && local.subsec_nanosecond() == 0 && self.matches(local) {
            return Some(now);
        }
        self.next_after(now, tz)
    }

    /// Day matching with the reference's DOM/DOW rule: an unrestricted (`*`)
    /// field defers to the other one; two restricted fields match if either
    /// does.
    fn day_matches(&self, date: Date) -> bool {
        let dom = has_bit(self.days_of_month, to_u32(date.day()));
        let dow = has_bit(
            self.days_of_week,
            to_u32(date.weekday().to_sunday_zero_offset()),
        );
        match (self.dom_any, self.dow_any) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            (false, false) => dom || dow,
        }
    }

    /// The earliest matching wall minute at or after `from`, field by field,
    /// giving up after `limit_year`.
    fn next_match(&self, from: Wall, limit_year: i16) -> Option<Wall> {
        let Wall {
            mut year,
            mut month,
            mut day,
            mut hour,
            mut minute,
        } = from;
        loop {
            if year > limit_year {
                return None;
            }
            let Some(m) = next_bit(self.months, month, 12) else {
                year = year.checked_add(1)?;
                (month, day, hour, minute) = (1, 1, 0, 0);
                continue;
            };
            if m != month {
                (month, day, hour, minute) = (m, 1, 0, 0);
            }
            let first = Date::new(year, to_i8(month)?, 1).ok()?;
            if day > to_u32(first.days_in_month()) {
                (month, day, hour, minute) = (month + 1, 1, 0, 0);
                continue;
            }
            let date = Date::new(year, to_i8(month)?, to_i8(day)?).ok()?;
            if !self.day_matches(date) {
                (day, hour, minute) = (day + 1, 0, 0);
                continue;
            }
            let Some(h) = next_bit(self.hours, hour, 23) else {
                (day, hour, minute) = (day + 1, 0, 0);
                continue;
            };
            if h != hour {
                (hour, minute) = (h, 0);
            }
            let Some(min) = next_bit(self.minutes, minute, 59) else {
                (hour, minute) = (hour + 1, 0);
                continue;
            };
            return Some(Wall {
                year,
                month,
                day,
                hour,
                minute: min,
            });
        }
    }
}

impl fmt::Display for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl FromStr for CronExpression {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronExpression::parse(s)
    }
}

/// A wall-clock minute. Fields may temporarily overflow (e.g. day 32) while
/// searching; `next_match` normalizes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wall {
    year: i16,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
}

impl Wall {
    fn from_datetime(dt: DateTime) -> Wall {
        Wall {
            year: dt.year(),
            month: to_u32(dt.month()),
            day: to_u32(dt.day()),
            hour: to_u32(dt.hour()),
            minute: to_u32(dt.minute()),
        }
    }

    /// The following minute; overflow is left for `next_match` to carry.
    fn next_minute(self) -> Wall {
        Wall {
            minute: self.minute + 1,
            ..self
        }
    }

    fn to_datetime(self) -> Option<DateTime> {
        DateTime::new(
            self.year,
            to_i8(self.month)?,
            to_i8(self.day)?,
            to_i8(self.hour)?,
            to_i8(self.minute)?,
            0,
            0,
        )
        .ok()
    }
}

/// Turns a matching wall time into an instant strictly after `after`, or
/// `None` if every instant it names is not after `after`.
fn resolve(tz: &TimeZone, wall: DateTime, after: Timestamp) -> Option<Timestamp> {
    let later_than = |ts: Option<Timestamp>| ts.filter(|ts| *ts > after);
    match tz.to_ambiguous_timestamp(wall).offset() {
        AmbiguousOffset::Unambiguous { offset } => later_than(offset.to_timestamp(wall).ok()),
        // Like Python's zoneinfo with fold=0: a skipped wall time is read
        // with the offset in force before the transition.
        AmbiguousOffset::Gap { before, .. } => later_than(before.to_timestamp(wall).ok()),
        AmbiguousOffset::Fold {
            before,
            after: second,
        } => later_than(before.to_timestamp(wall).ok())
            .or_else(|| later_than(second.to_timestamp(wall).ok())),
    }
}

/// Parses one field into a bit set of matching values.
fn parse_field(text: &str, field: CronField, expr: &str) -> Result<u64, CronError> {
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(CronError::EmptyListItem {
                field,
                expr: expr.to_owned(),
            });
        }
        bits |= parse_item(item, field, expr)?;
    }
    Ok(bits)
}

/// Parses one list item: `*`, `N`, `A-B`, or any of those (but `N` means
/// `N-max`) followed by `/STEP`.
fn parse_item(item: &str, field: CronField, expr: &str) -> Result<u64, CronError> {
    if item == "*" {
        return Ok(span_bits(field.min(), field.range_end(), 1));
    }
    let (base, step) = match item.split_once('/') {
        Some((base, step_text)) => (base, Some(parse_step(step_text, field, expr)?)),
        None => (item, None),
    };
    let (start, end) = if base == "*" && step.is_some() {
        (field.min(), field.range_end())
    } else if let Some((start_text, end_text)) = base.split_once('-') {
        let start = parse_value(start_text, field, expr)?;
        let end = parse_value(end_text, field, expr)?;
        if field == CronField::DayOfWeek && end == 7 {
            // `N-7` runs through Sunday: expand on 0..=7, then fold 7 into 0.
            return Ok(fold_sunday(span_bits(start, 7, step.unwrap_or(1))));
        }
        (sunday_as_zero(field, start), end)
    } else {
        let start = sunday_as_zero(field, parse_value(base, field, expr)?);
        match step {
            Some(_) => (start, field.range_end()),
            None => (start, start),
        }
    };
    if start > end {
        return Err(CronError::ReversedRange {
            field,
            range: item.to_owned(),
            expr: expr.to_owned(),
        });
    }
    Ok(span_bits(start, end, step.unwrap_or(1)))
}

/// Parses a value (number or name) and checks it against the field's range.
fn parse_value(text: &str, field: CronField, expr: &str) -> Result<u32, CronError> {
    let (names, first) = field.names();
    let lowered = text.to_ascii_lowercase();
    if let Some(index) = names.iter().position(|name| *name == lowered) {
        // At most 12 names, so the index always fits.
        return Ok(first + u32::try_from(index).unwrap_or(u32::MAX));
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CronError::InvalidValue {
            field,
            value: text.to_owned(),
            expr: expr.to_owned(),
        });
    }
    match text.parse::<u32>() {
        Ok(value) if (field.min()..=field.max()).contains(&value) => Ok(value),
        _ => Err(CronError::OutOfRange {
            field,
            value: text.to_owned(),
            min: field.min(),
            max: field.max(),
            expr: expr.to_owned(),
        }),
    }
}

/// Parses a step; absurdly large steps behave like "only the start".
fn parse_step(text: &str, field: CronField, expr: &str) -> Result<u32, CronError> {
    let invalid = || CronError::InvalidStep {
        field,
        step: text.to_owned(),
        expr: expr.to_owned(),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match text.parse::<u32>() {
        Ok(0) => Err(invalid()),
        Ok(step) => Ok(step),
        Err(_) => Ok(u32::MAX),
    }
}

fn sunday_as_zero(field: CronField, value: u32) -> u32 {
    if field == CronField::DayOfWeek && value == 7 {
        0
    } else {
        value
    }
}

fn fold_sunday(bits: u64) -> u64 {
    if has_bit(bits, 7) {
        (bits & !(1 << 7)) | 1
    } else {
        bits
    }
}

/// Bits `start, start+step, ...` up to and including `end` (all below 64).
fn span_bits(start: u32, end: u32, step: u32) -> u64 {
    let mut bits = 0u64;
    let mut value = start;
    while value <= end {
        bits |= 1 << value;
        match value.checked_add(step) {
            Some(next) => value = next,
            None => break,
        }
    }
    bits
}

fn has_bit(bits: u64, value: u32) -> bool {
    value < 64 && bits & (1 << value) != 0
}

/// Bits `0..=last`.
fn mask_through(last: u32) -> u64 {
    (1u64 << (last + 1)) - 1
}

/// The smallest set value `>= from` and `<= max`, if any.
fn next_bit(bits: u64, from: u32, max: u32) -> Option<u32> {
    if from > max {
        return None;
    }
    let rest = (bits & mask_through(max)) >> from;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

fn to_u32(value: i8) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

fn to_i8(value: u32) -> Option<i8> {
    i8::try_from(value).ok()
}

#[cfg(test)]
mod tests;

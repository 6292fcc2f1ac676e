//! Unit tests of the cron grammar and the next-fire search.

use super::*;

/// Cross-check vectors produced by `gen_vectors.py` from the Python reference.
const VECTORS_JSON: &str = include_str!("../../../../tests/data/cron_vectors.json");

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn tz(name: &str) -> TimeZone {
    parse_time_zone(name).unwrap()
}

fn next(expr: &str, zone: &str, after: &str) -> Option<String> {
    CronExpression::parse(expr)
        .unwrap()
        .next_after(ts(after), &tz(zone))
        .map(|t| t.to_string())
}

/// Successive fire times starting after `after`.
fn fires(expr: &str, zone: &str, after: &str, count: usize) -> Vec<String> {
    let expr = CronExpression::parse(expr).unwrap();
    let zone = tz(zone);
    let mut cursor = ts(after);
    let mut out = Vec::new();
    for _ in 0..count {
        cursor = expr.next_after(cursor, &zone).unwrap();
        out.push(cursor.to_string());
    }
    out
}

fn err(expr: &str) -> String {
    CronExpression::parse(expr).unwrap_err().to_string()
}

fn bits_of(values: &[u32]) -> u64 {
    values.iter().fold(0, |acc, v| acc | 1 << v)
}

#[test]
fn every_fifteen_minutes_fires_on_quarter_hours() {
    assert_eq!(
        fires("*/15 * * * *", "UTC", "2024-01-01T00:07:30Z", 4),
        [
            "2024-01-01T00:15:00Z",
            "2024-01-01T00:30:00Z",
            "2024-01-01T00:45:00Z",
            "2024-01-01T01:00:00Z",
        ]
    );
}

#[test]
fn next_after_is_strictly_after_a_fire_time() {
    assert_eq!(
        next("0 9 * * *", "UTC", "2024-05-01T09:00:00Z").as_deref(),
        Some("2024-05-02T09:00:00Z")
    );
}

#[test]
fn seconds_within_the_start_minute_are_skipped() {
    assert_eq!(
        next("* * * * *", "UTC", "2024-01-01T00:00:59.999Z").as_deref(),
        Some("2024-01-01T00:01:00Z")
    );
}

#[test]
fn minute_hour_day_and_month_carry_into_the_next_year() {
    assert_eq!(
        next("59 23 31 12 *", "UTC", "2024-12-31T23:59:00Z").as_deref(),
        Some("2025-12-31T23:59:00Z")
    );
}

#[test]
fn dom_and_dow_restricted_match_either() {
    // The 13th of any month OR any Friday.
    assert_eq!(
        fires("0 0 13 * 5", "UTC", "2024-09-01T00:00:00Z", 4),
        [
            "2024-09-06T00:00:00Z", // Friday
            "2024-09-13T00:00:00Z", // Friday the 13th, once
            "2024-09-20T00:00:00Z",
            "2024-09-27T00:00:00Z",
        ]
    );
    assert_eq!(
        fires("0 0 15 * mon", "UTC", "2024-01-01T00:00:00Z", 3),
        [
            "2024-01-08T00:00:00Z",
            "2024-01-15T00:00:00Z", // the 15th and a Monday
            "2024-01-22T00:00:00Z",
        ]
    );
}

#[test]
fn only_dow_restricted_ignores_day_of_month() {
    assert_eq!(
        fires("0 9 * * mon-fri", "UTC", "2024-03-08T10:00:00Z", 2),
        ["2024-03-11T09:00:00Z", "2024-03-12T09:00:00Z"]
    );
}

#[test]
fn star_step_in_dow_counts_as_restricted() {
    // `*/2` is restricted, so with day-of-month 10 either matches:
    // Sun/Tue/Thu/Sat, plus Monday the 10th.
    let expr = CronExpression::parse("0 12 10 * */2").unwrap();
    assert!(!expr.dow_any);
    assert_eq!(
        fires("0 12 10 * */2", "UTC", "2024-06-07T13:00:00Z", 3),
        [
            "2024-06-08T12:00:00Z", // Saturday
            "2024-06-09T12:00:00Z", // Sunday
            "2024-06-10T12:00:00Z", // Monday the 10th
        ]
    );
    // `*/1` in day-of-month makes every day match when DOW is restricted.
    assert_eq!(
        fires("0 12 */1 * mon", "UTC", "2024-06-07T13:00:00Z", 2),
        ["2024-06-08T12:00:00Z", "2024-06-09T12:00:00Z"]
    );
}

#[test]
fn impossible_date_returns_none() {
    for expr in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 feb *"] {
        let parsed = CronExpression::parse(expr).unwrap();
        assert!(!parsed.is_satisfiable(), "{expr}");
        assert_eq!(next(expr, "UTC", "2024-01-01T00:00:00Z"), None, "{expr}");
    }
    // A restricted day-of-week rescues an impossible day-of-month (OR).
    assert!(
        CronExpression::parse("0 0 30 2 mon")
            .unwrap()
            .is_satisfiable()
    );
    assert_eq!(
        next("0 0 30 2 mon", "UTC", "2024-01-01T00:00:00Z").as_deref(),
        Some("2024-02-05T00:00:00Z")
    );
}

#[test]
fn search_gives_up_at_the_end_of_the_calendar() {
    assert_eq!(next("0 0 1 1 *", "UTC", "9999-06-01T00:00:00Z"), None);
    assert_eq!(
        next("0 0 29 2 *", "Asia/Shanghai", "9996-03-01T00:00:00Z"),
        None
    );
}

#[test]
fn leap_day_is_found_even_eight_years_ahead() {
    assert_eq!(
        next("0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z").as_deref(),
        Some("2028-02-29T00:00:00Z")
    );
    // 2100 is not a leap year.
    assert_eq!(
        next("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z").as_deref(),
        Some("2104-02-29T00:00:00Z")
    );
}

#[test]
fn month_and_day_names_are_case_insensitive() {
    let lower = CronExpression::parse("0 0 * jan-mar mon,wed").unwrap();
    let mixed = CronExpression::parse("0 0 * JAN-Mar MoN,wED").unwrap();
    assert_eq!(lower.months, mixed.months);
    assert_eq!(lower.days_of_week, mixed.days_of_week);
    assert_eq!(lower.months, bits_of(&[1, 2, 3]));
    assert_eq!(lower.days_of_week, bits_of(&[1, 3]));
}

#[test]
fn names_are_only_accepted_in_month_and_day_of_week() {
    assert_eq!(
        err("jan * * * *"),
        r#"cron field 'minute' value "jan" is not a number in 0..=59 in "jan * * * *""#
    );
    assert_eq!(
        err("0 0 * * monday"),
        r#"cron field 'day-of-week' value "monday" is not a number in 0..=7 or a weekday name sun..sat in "0 0 * * monday""#
    );
}

#[test]
fn seven_is_sunday_in_day_of_week() {
    let seven = CronExpression::parse("5 4 * * 7").unwrap();
    let zero = CronExpression::parse("5 4 * * 0").unwrap();
    assert_eq!(seven.days_of_week, zero.days_of_week);
    assert_eq!(seven.days_of_week, 1);
    assert_eq!(
        next("5 4 * * 7", "UTC", "2024-06-03T00:00:00Z").as_deref(),
        Some("2024-06-09T04:05:00Z")
    );
}

#[test]
fn ranges_ending_at_seven_run_through_sunday() {
    let dow = |e: &str| CronExpression::parse(e).unwrap().days_of_week;
    assert_eq!(dow("0 0 * * 1-7"), bits_of(&[0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(dow("0 0 * * 0-7"), bits_of(&[0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(dow("0 0 * * 5-7"), bits_of(&[0, 5, 6]));
    assert_eq!(dow("0 0 * * 1-7/2"), bits_of(&[0, 1, 3, 5]));
    // As in the reference: a leading 7 is Sunday.
    assert_eq!(dow("0 0 * * 7-7"), bits_of(&[0]));
    assert_eq!(dow("0 0 * * 7-3"), bits_of(&[0, 1, 2, 3]));
    assert_eq!(dow("0 0 * * 7/2"), bits_of(&[0, 2, 4, 6]));
    assert_eq!(dow("0 0 * * */2"), bits_of(&[0, 2, 4, 6]));
    // Names stop at Saturday: Monday through Sunday is reversed.
    assert!(CronExpression::parse("0 0 * * mon-sun").is_err());
}

#[test]
fn steps_lists_and_ranges_expand_like_the_reference() {
    let min = |e: &str| CronExpression::parse(e).unwrap().minutes;
    assert_eq!(min("1-10/3 * * * *"), bits_of(&[1, 4, 7, 10]));
    assert_eq!(min("5/20 * * * *"), bits_of(&[5, 25, 45]));
    assert_eq!(min("1,5,10-12 * * * *"), bits_of(&[1, 5, 10, 11, 12]));
    assert_eq!(min("*/100 * * * *"), bits_of(&[0]));
    assert_eq!(min("7/99999999999 * * * *"), bits_of(&[7]));
    assert_eq!(min("05 * * * *"), bits_of(&[5]));
    let months = CronExpression::parse("0 0 1 jan/3 *").unwrap().months;
    assert_eq!(months, bits_of(&[1, 4, 7, 10]));
}

#[test]
fn out_of_range_hour_is_rejected_with_field_name() {
    assert_eq!(
        err("0 24 * * *"),
        r#"cron field 'hour' value 24 is out of range 0..=23 in "0 24 * * *""#
    );
    assert_eq!(
        err("0 0 0 * *"),
        r#"cron field 'day-of-month' value 0 is out of range 1..=31 in "0 0 0 * *""#
    );
    assert_eq!(
        err("0 0 * 13 *"),
        r#"cron field 'month' value 13 is out of range 1..=12 in "0 0 * 13 *""#
    );
    assert_eq!(
        err("0 0 * * 8"),
        r#"cron field 'day-of-week' value 8 is out of range 0..=7 in "0 0 * * 8""#
    );
    assert_eq!(
        err("99999999999 * * * *"),
        r#"cron field 'minute' value 99999999999 is out of range 0..=59 in "99999999999 * * * *""#
    );
}

#[test]
fn wrong_field_count_is_rejected() {
    assert_eq!(
        err("* * * *"),
        r#"cron expression "* * * *" has 4 field(s); expected 5 (minute hour day-of-month month day-of-week)"#
    );
    assert!(matches!(
        CronExpression::parse("0 0 * * * 2024"),
        Err(CronError::FieldCount { found: 6, .. })
    ));
}

#[test]
fn empty_expression_is_rejected() {
    assert_eq!(CronExpression::parse(""), Err(CronError::Empty));
    assert_eq!(CronExpression::parse(" \t\n"), Err(CronError::Empty));
}

#[test]
fn bad_steps_are_rejected() {
    for (expr, step) in [
        ("*/0 * * * *", "0"),
        ("*/ * * * *", ""),
        ("*/x * * * *", "x"),
        ("*/-1 * * * *", "-1"),
        ("*/2/3 * * * *", "2/3"),
    ] {
        assert_eq!(
            CronExpression::parse(expr),
            Err(CronError::InvalidStep {
                field: CronField::Minute,
                step: step.to_owned(),
                expr: expr.to_owned(),
            }),
            "{expr}"
        );
    }
    assert_eq!(
        err("*/0 * * * *"),
        r#"cron field 'minute' step "0" is invalid (expected a positive integer) in "*/0 * * * *""#
    );
}

#[test]
fn malformed_items_are_rejected() {
    assert_eq!(
        err("1,,2 * * * *"),
        r#"cron field 'minute' has an empty list item in "1,,2 * * * *""#
    );
    assert!(matches!(
        CronExpression::parse("0 0 * * 1,"),
        Err(CronError::EmptyListItem {
            field: CronField::DayOfWeek,
            ..
        })
    ));
    assert_eq!(
        err("0 10-5 * * *"),
        r#"cron field 'hour' range "10-5" starts after it ends in "0 10-5 * * *""#
    );
    for expr in [
        "-5 * * * *",
        "1-2-3 * * * *",
        "+5 * * * *",
        "1_0 * * * *",
        "? * * * *",
    ] {
        assert!(
            matches!(
                CronExpression::parse(expr),
                Err(CronError::InvalidValue { .. })
            ),
            "{expr}"
        );
    }
}

#[test]
fn supported_macros_expand_case_insensitively() {
    for (name, expansion) in [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        (" @DAILY ", "0 0 * * *"),
        ("@Hourly", "0 * * * *"),
    ] {
        let parsed = CronExpression::parse(name).unwrap();
        assert_eq!(parsed.as_str(), expansion);
        assert_eq!(parsed, CronExpression::parse(expansion).unwrap());
    }
}

#[test]
fn macros_the_reference_lacks_are_rejected() {
    for name in ["@midnight", "@annually", "@reboot", "@daily extra"] {
        assert_eq!(
            CronExpression::parse(name),
            Err(CronError::UnknownMacro {
                expr: name.to_owned()
            }),
            "{name}"
        );
    }
    assert_eq!(
        err("@midnight"),
        r#"unknown cron macro "@midnight"; supported macros are @hourly, @daily, @weekly, @monthly and @yearly"#
    );
}

#[test]
fn normalized_text_keeps_inner_whitespace_like_the_reference() {
    let parsed: CronExpression = "  0  9 * * *\t".parse().unwrap();
    assert_eq!(parsed.as_str(), "0  9 * * *");
    assert_eq!(parsed.to_string(), "0  9 * * *");
}

#[test]
fn spring_forward_gap_fires_after_the_gap_by_the_same_offset() {
    // New York 2024-03-10: 02:00 EST jumps to 03:00 EDT.
    assert_eq!(
        fires("30 2 * * *", "America/New_York", "2024-03-09T12:00:00Z", 2),
        ["2024-03-10T07:30:00Z", "2024-03-11T06:30:00Z"] // 03:30 EDT, then 02:30 EDT
    );
    // London 2024-03-31: 01:00 GMT jumps to 02:00 BST.
    assert_eq!(
        next("30 1 * * *", "Europe/London", "2024-03-30T12:00:00Z").as_deref(),
        Some("2024-03-31T01:30:00Z") // 02:30 BST
    );
}

#[test]
fn spring_forward_gap_does_not_repeat_instants() {
    assert_eq!(
        fires(
            "*/15 * * * *",
            "America/New_York",
            "2024-03-10T06:50:00Z",
            3
        ),
        [
            "2024-03-10T07:00:00Z", // 02:00 does not exist: 03:00 EDT
            "2024-03-10T07:15:00Z", // 03:15 EDT
            "2024-03-10T07:30:00Z",
        ]
    );
}

#[test]
fn fall_back_fold_fires_once_at_the_first_occurrence() {
    // New York 2024-11-03: 02:00 EDT falls back to 01:00 EST.
    assert_eq!(
        fires("30 1 * * *", "America/New_York", "2024-11-02T12:00:00Z", 2),
        ["2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"] // 01:30 EDT, then EST
    );
    // Every 20 minutes skips the repeated hour once it has been run.
    assert_eq!(
        fires(
            "*/20 * * * *",
            "America/New_York",
            "2024-11-03T05:30:00Z",
            3
        ),
        [
            "2024-11-03T05:40:00Z", // 01:40 EDT
            "2024-11-03T07:00:00Z", // 02:00 EST
            "2024-11-03T07:20:00Z",
        ]
    );
}

#[test]
fn fall_back_fold_started_in_the_repeated_hour_uses_the_second_occurrence() {
    // 06:10Z is 01:10 EST, the second pass through 01:xx.
    assert_eq!(
        next("*/20 * * * *", "America/New_York", "2024-11-03T06:10:00Z").as_deref(),
        Some("2024-11-03T06:20:00Z")
    );
}

#[test]
fn half_hour_dst_gap_on_lord_howe_uses_the_earlier_offset() {
    // Lord Howe 2024-10-06: 02:00 +10:30 jumps to 02:30 +11:00.
    assert_eq!(
        next("15 2 * * *", "Australia/Lord_Howe", "2024-10-05T00:00:00Z").as_deref(),
        Some("2024-10-05T15:45:00Z") // 02:45 +11:00
    );
}

#[test]
fn first_at_or_after_includes_a_matching_start_minute() {
    let expr = CronExpression::parse("0 9 * * *").unwrap();
    let utc = tz("UTC");
    assert_eq!(
        expr.first_at_or_after(ts("2024-05-01T09:00:00Z"), &utc),
        Some(ts("2024-05-01T09:00:00Z"))
    );
    assert_eq!(
        expr.first_at_or_after(ts("2024-05-01T09:00:00.5Z"), &utc),
        Some(ts("2024-05-02T09:00:00Z"))
    );
    // Second pass of a fold: 01:00 EST matches `0 1 * * *` on the wall.
    let expr = CronExpression::parse("0 1 * * *").unwrap();
    assert_eq!(
        expr.first_at_or_after(ts("2024-11-03T06:00:00Z"), &tz("America/New_York")),
        Some(ts("2024-11-03T06:00:00Z"))
    );
}

#[test]
fn matches_uses_wall_clock_fields() {
    let expr = CronExpression::parse("30 9 * * mon").unwrap();
    let monday = jiff::civil::date(2024, 6, 10).at(9, 30, 45, 0);
    assert!(expr.matches(monday));
    assert!(!expr.matches(monday.date().at(9, 31, 0, 0)));
    assert!(!expr.matches(jiff::civil::date(2024, 6, 11).at(9, 30, 0, 0)));
}

#[test]
fn iana_time_zones_resolve_and_unknown_names_are_rejected() {
    for name in ["UTC", "Asia/Shanghai", "America/New_York", "Europe/London"] {
        assert!(parse_time_zone(name).is_ok(), "{name}");
    }
    for name in ["Nope/Zone", "", " UTC", "+08:00"] {
        assert_eq!(
            parse_time_zone(name),
            Err(CronError::UnknownTimeZone {
                name: name.to_owned()
            }),
            "{name:?}"
        );
    }
    assert_eq!(
        parse_time_zone("Mars/Olympus").unwrap_err().to_string(),
        r#"unknown time zone "Mars/Olympus"; expected an IANA name such as "UTC", "Asia/Shanghai" or "America/New_York""#
    );
}

#[test]
fn reference_vectors_match() {
    let root = Json::parse(VECTORS_JSON);
    let cases = root.get("cases").array();
    assert!(cases.len() >= 40, "only {} vectors", cases.len());
    for case in cases {
        let name = case.get("name").str();
        let expr =
            CronExpression::parse(case.get("expr").str()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let zone = tz(case.get("tz").str());
        let mut cursor = ts(case.get("start").str());
        for (step, expected) in case.get("fires").array().iter().enumerate() {
            let got = expr.next_after(cursor, &zone);
            match expected {
                Json::Null => {
                    assert_eq!(got, None, "{name}: step {step}");
                    break;
                }
                other => {
                    let want = ts(other.str());
                    assert_eq!(got, Some(want), "{name}: step {step}");
                    cursor = want;
                }
            }
        }
    }
}

/// Just enough JSON for the vector file.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Json {
        let chars: Vec<char> = text.chars().collect();
        let mut pos = 0;
        let value = Json::value(&chars, &mut pos);
        Json::skip_ws(&chars, &mut pos);
        assert_eq!(pos, chars.len(), "trailing JSON");
        value
    }

    fn skip_ws(c: &[char], pos: &mut usize) {
        while *pos < c.len() && c[*pos].is_whitespace() {
            *pos += 1;
        }
    }

    fn value(c: &[char], pos: &mut usize) -> Json {
        Json::skip_ws(c, pos);
        match c[*pos] {
            '{' => {
                *pos += 1;
                let mut members = Vec::new();
                loop {
                    Json::skip_ws(c, pos);
                    if c[*pos] == '}' {
                        *pos += 1;
                        return Json::Obj(members);
                    }
                    if c[*pos] == ',' {
                        *pos += 1;
                        continue;
                    }
                    let Json::Str(key) = Json::value(c, pos) else {
                        panic!("object key at {pos}")
                    };
                    Json::skip_ws(c, pos);
                    assert_eq!(c[*pos], ':');
                    *pos += 1;
                    members.push((key, Json::value(c, pos)));
                }
            }
            '[' => {
                *pos += 1;
                let mut items = Vec::new();
                loop {
                    Json::skip_ws(c, pos);
                    if c[*pos] == ']' {
                        *pos += 1;
                        return Json::Arr(items);
                    }
                    if c[*pos] == ',' {
                        *pos += 1;
                        continue;
                    }
                    items.push(Json::value(c, pos));
                }
            }
            '"' => {
                *pos += 1;
                let mut s = String::new();
                while c[*pos] != '"' {
                    if c[*pos] == '\\' {
                        *pos += 1;
                        match c[*pos] {
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            'u' => {
                                let hex: String = c[*pos + 1..*pos + 5].iter().collect();
                                let code = u32::from_str_radix(&hex, 16).unwrap();
                                s.push(char::from_u32(code).unwrap());
                                *pos += 4;
                            }
                            other => s.push(other),
                        }
                    } else {
                        s.push(c[*pos]);
                    }
                    *pos += 1;
                }
                *pos += 1;
                Json::Str(s)
            }
            _ => {
                let start = *pos;
                while *pos < c.len() && !",]} \n\t\r".contains(c[*pos]) {
                    *pos += 1;
                }
                let word: String = c[start..*pos].iter().collect();
                match word.as_str() {
                    "null" => Json::Null,
                    "true" => Json::Bool(true),
                    "false" => Json::Bool(false),
                    number => Json::Num(number.parse().unwrap()),
                }
            }
        }
    }

    fn get(&self, key: &str) -> &Json {
        let Json::Obj(members) = self else {
            panic!("not an object")
        };
        members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("missing key {key}"))
    }

    fn array(&self) -> &[Json] {
        let Json::Arr(items) = self else {
            panic!("not an array")
        };
        items
    }

    fn str(&self) -> &str {
        let Json::Str(s) = self else {
            panic!("not a string: {self:?}")
        };
        s
    }
}

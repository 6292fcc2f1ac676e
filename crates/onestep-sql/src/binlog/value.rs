//! Row images of the binary log as JSON: each value read by its column's declared type, as
//! `information_schema.COLUMNS` describes it (the binary log itself carries no names, no
//! signedness and no ENUM or SET labels unless the server logs full row metadata).
//!
//! | column type | JSON |
//! |---|---|
//! | integer types (signed and unsigned), `year`, `bit` | number |
//! | `decimal` | number, every digit kept |
//! | `float`, `double` | number |
//! | `date` | `"YYYY-MM-DD"` |
//! | `datetime`, `timestamp` | `"YYYY-MM-DD HH:MM:SS[.ffffff]"` (`timestamp` in UTC) |
//! | `time` | `"[-]HH:MM:SS[.ffffff]"` |
//! | text types, `enum`, `set` | string (`set` as `"a,b"`), from UTF-8 or `latin1` |
//! | binary types, `blob`, `geometry` | the codec's tagged bytes |
//! | MySQL `json` | the JSON value |

use mysql_async::Value as MyValue;
use mysql_async::binlog::value::BinlogValue;
use onestep_core::execution::codec::bytes_tag;
use serde_json::{Number, Value};
use time::OffsetDateTime;

/// What a value needs of its column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    /// The column's name.
    pub(crate) name: String,
    /// `DATA_TYPE`, lower case (`int`, `varchar`, `datetime`, …).
    pub(crate) data_type: String,
    /// `COLUMN_TYPE` says `unsigned`.
    pub(crate) unsigned: bool,
    /// The column holds bytes, not text (no character set).
    pub(crate) binary: bool,
    /// The text is in `latin1` (one byte per character), not UTF-8.
    pub(crate) latin1: bool,
    /// Fractional-second digits of a temporal column.
    pub(crate) fraction_digits: u32,
    /// The labels of an `enum` or `set`, in declared order.
    pub(crate) labels: Vec<String>,
}

impl Column {
    /// A column from its `information_schema.COLUMNS` fields.
    pub(crate) fn from_schema(
        name: String,
        data_type: &str,
        column_type: &str,
        charset: Option<&str>,
        fraction_digits: Option<u32>,
    ) -> Self {
        let data_type = data_type.to_ascii_lowercase();
        let lower = column_type.to_ascii_lowercase();
        let labels = if data_type == "enum" || data_type == "set" {
            labels(column_type)
        } else {
            Vec::new()
        };
        let binary = match data_type.as_str() {
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob"
            | "geometry" | "point" | "linestring" | "polygon" | "multipoint"
            | "multilinestring" | "multipolygon" | "geometrycollection" => true,
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => {
                charset.is_none_or(|c| c.eq_ignore_ascii_case("binary"))
            }
            _ => false,
        };
        Self {
            name,
            unsigned: lower.contains("unsigned"),
            binary,
            latin1: charset.is_some_and(|c| c.eq_ignore_ascii_case("latin1")),
            fraction_digits: fraction_digits.unwrap_or(0).min(6),
            labels,
            data_type,
        }
    }
}

/// The labels of `enum('a','b')` / `set('a','b')`, quotes undone (`''` is one quote).
fn labels(column_type: &str) -> Vec<String> {
    let Some(open) = column_type.find('(') else {
        return Vec::new();
    };
    let inner = &column_type[open + 1..column_type.rfind(')').unwrap_or(column_type.len())];
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut label = String::new();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    label.push('\'');
                } else {
                    break;
                }
            } else if c == '\\' {
                if let Some(escaped) = chars.next() {
                    label.push(escaped);
                }
            } else {
                label.push(c);
            }
        }
        out.push(label);
    }
    out
}

/// `value` of `column` as JSON; `None` when the image does not hold the column.
pub(crate) fn to_json(value: Option<&BinlogValue<'_>>, column: &Column) -> Result<Value, String> {
    match value {
        None => Ok(Value::Null),
        Some(BinlogValue::Value(v)) => scalar(v, column),
        Some(BinlogValue::Jsonb(doc)) => serde_json::Value::try_from(doc.clone())
            .map_err(|e| format!("column {:?}: unreadable JSON: {e}", column.name)),
        Some(BinlogValue::JsonDiff(_)) => Err(format!(
            "column {:?}: a partial JSON update (binlog_row_value_options=PARTIAL_JSON) carries \
             no full value; turn that option off",
            column.name
        )),
    }
}

fn scalar(value: &MyValue, column: &Column) -> Result<Value, String> {
    let t = column.data_type.as_str();
    Ok(match value {
        MyValue::NULL => Value::Null,
        MyValue::Int(i) => integer(*i, column),
        MyValue::UInt(u) => Value::from(*u),
        MyValue::Float(f) => float(f64::from(*f)),
        MyValue::Double(f) => float(*f),
        MyValue::Date(y, mo, d, h, mi, s, us) => {
            if t == "date" {
                Value::String(format!("{y:04}-{mo:02}-{d:02}"))
            } else {
                Value::String(format!(
                    "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{}",
                    fraction(*us, column.fraction_digits)
                ))
            }
        }
        MyValue::Time(negative, days, h, mi, s, us) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            Value::String(format!(
                "{}{hours:02}:{mi:02}:{s:02}{}",
                if *negative { "-" } else { "" },
                fraction(*us, column.fraction_digits)
            ))
        }
        MyValue::Bytes(bytes) => match t {
            "decimal" | "numeric" => {
                let text = String::from_utf8_lossy(bytes);
                serde_json::from_str::<Number>(&text)
                    .map(Value::Number)
                    .map_err(|_| format!("column {:?}: unreadable decimal {text:?}", column.name))?
            }
            "year" => {
                let year: u64 = String::from_utf8_lossy(bytes).parse().unwrap_or(0);
                // The log holds a year as an offset from 1900; 0 is the zero year.
                Value::from(if year == 1900 { 0 } else { year })
            }
            "timestamp" => timestamp(&String::from_utf8_lossy(bytes), column)?,
            "bit" => Value::from(bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b))),
            "set" => Value::String(set_labels(bytes, &column.labels)),
            _ if column.binary => bytes_tag(bytes),
            _ if column.latin1 => Value::String(bytes.iter().map(|b| char::from(*b)).collect()),
            _ => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        },
    })
}

/// A signed integer of the log; an unsigned column's value wrapped back into range. An `enum`
/// arrives as its 1-based label index.
fn integer(i: i64, column: &Column) -> Value {
    match column.data_type.as_str() {
        "enum" => {
            let label = usize::try_from(i)
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| column.labels.get(n));
            Value::String(label.cloned().unwrap_or_default())
        }
        "timestamp" => timestamp(&i.to_string(), column).unwrap_or_else(|_| Value::from(i)),
        _ if column.unsigned && i < 0 => {
            let bits = match column.data_type.as_str() {
                "tinyint" => 8,
                "smallint" => 16,
                "mediumint" => 24,
                "int" | "integer" => 32,
                _ => 64,
            };
            let wrapped = if bits == 64 {
                i as u64
            } else {
                (i as u64) & ((1u64 << bits) - 1)
            };
            Value::from(wrapped)
        }
        _ => Value::from(i),
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// `.ffffff` cut to `digits` (nothing for 0).
fn fraction(micros: u32, digits: u32) -> String {
    if digits == 0 {
        return String::new();
    }
    let all = format!("{micros:06}");
    format!(".{}", &all[..digits as usize])
}

/// `<seconds>[.<micros>]` since the epoch as UTC text.
fn timestamp(text: &str, column: &Column) -> Result<Value, String> {
    let unreadable = || format!("column {:?}: unreadable timestamp {text:?}", column.name);
    let (seconds, micros) = match text.split_once('.') {
        Some((s, f)) => (s, f.parse::<u32>().map_err(|_| unreadable())?),
        None => (text, 0),
    };
    let seconds: i64 = seconds.parse().map_err(|_| unreadable())?;
    if seconds == 0 && micros == 0 {
        // The zero timestamp.
        return Ok(Value::String(format!(
            "0000-00-00 00:00:00{}",
            fraction(0, column.fraction_digits)
        )));
    }
    let at = OffsetDateTime::from_unix_timestamp(seconds).map_err(|_| unreadable())?;
    Ok(Value::String(format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        fraction(micros, column.fraction_digits)
    )))
}

/// The labels whose bits are set in the little-endian `mask`, joined by commas.
fn set_labels(mask: &[u8], labels: &[String]) -> String {
    let mut chosen = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        if mask
            .get(i / 8)
            .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
        {
            chosen.push(label.as_str());
        }
    }
    chosen.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(data_type: &str, column_type: &str) -> Column {
        Column::from_schema("c".into(), data_type, column_type, Some("utf8mb4"), Some(6))
    }

    #[test]
    fn enum_and_set_labels_are_read_from_the_column_type() {
        assert_eq!(labels("enum('a','it''s','c,d')"), ["a", "it's", "c,d"]);
        let set = column("set", "set('x','y','z')");
        assert_eq!(
            scalar(&MyValue::Bytes(vec![0b101]), &set),
            Ok(json("\"x,z\""))
        );
        let e = column("enum", "enum('new','paid')");
        assert_eq!(integer(2, &e), json("\"paid\""));
        assert_eq!(integer(0, &e), json("\"\""));
    }

    #[test]
    fn unsigned_integers_are_wrapped_back_into_range() {
        assert_eq!(
            integer(-1, &column("tinyint", "tinyint(3) unsigned")),
            json("255")
        );
        assert_eq!(
            integer(-1, &column("int", "int(10) unsigned")),
            json("4294967295")
        );
        assert_eq!(
            integer(-1, &column("bigint", "bigint(20) unsigned")),
            json("18446744073709551615")
        );
        assert_eq!(integer(-1, &column("int", "int(11)")), json("-1"));
    }

    #[test]
    fn temporal_values_keep_their_declared_precision() {
        let dt = Column::from_schema("c".into(), "datetime", "datetime(3)", None, Some(3));
        let v = MyValue::Date(2026, 1, 2, 3, 4, 5, 678_000);
        assert_eq!(scalar(&v, &dt), Ok(json("\"2026-01-02 03:04:05.678\"")));
        let ts = Column::from_schema("c".into(), "timestamp", "timestamp", None, Some(0));
        assert_eq!(
            scalar(&MyValue::Bytes(b"1767322800".to_vec()), &ts),
            Ok(json("\"2026-01-02 03:00:00\""))
        );
        let t = Column::from_schema("c".into(), "time", "time", None, Some(0));
        assert_eq!(
            scalar(&MyValue::Time(true, 1, 2, 3, 4, 0), &t),
            Ok(json("\"-26:03:04\""))
        );
    }

    #[test]
    fn decimals_keep_every_digit_and_bytes_are_tagged() {
        let d = column("decimal", "decimal(30,10)");
        let text = "12345678901234567890.0123456789";
        assert_eq!(
            scalar(&MyValue::Bytes(text.as_bytes().to_vec()), &d).map(|v| v.to_string()),
            Ok(text.to_owned())
        );
        let b = Column::from_schema("c".into(), "varbinary", "varbinary(4)", None, None);
        assert_eq!(
            scalar(&MyValue::Bytes(vec![0, 255]), &b),
            Ok(bytes_tag(&[0, 255]))
        );
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON")
    }
}

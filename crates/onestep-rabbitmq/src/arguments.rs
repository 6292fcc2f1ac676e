//! AMQP field tables from YAML/JSON mappings (`arguments`, `bind_arguments`,
//! `exchange_arguments`), typed as the reference's client (pamqp) types them.
//!
//! The broker compares a redeclared queue's arguments with the ones it has, types included:
//! `x-max-length: 10` declared by Python as a short-short int and by us as a long-long int
//! would be "inequivalent" (`PRECONDITION_FAILED`). So integers take the smallest of pamqp's
//! types that holds them (`b`, `s`, `u`, `I`, `i`, `l`), strings are long strings, floats
//! doubles, `null` void, lists arrays and mappings tables.

use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use onestep_core::{Error, Result};
use serde_json::{Map, Value};

/// `map` as a field table; `field` names it in errors.
pub fn field_table(field: &str, map: &Map<String, Value>) -> Result<FieldTable> {
    let mut table = FieldTable::default();
    for (key, value) in map {
        let path = format!("{field}.{key}");
        if key.len() > 255 {
            return Err(Error::invalid(
                &path,
                "a field-table key is at most 255 bytes",
            ));
        }
        table.insert(ShortString::from(key.as_str()), amqp_value(&path, value)?);
    }
    Ok(table)
}

fn amqp_value(path: &str, value: &Value) -> Result<AMQPValue> {
    Ok(match value {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                integer(i)
            } else if n.as_u64().is_some() {
                return Err(Error::invalid(
                    path,
                    format!("{n} does not fit a signed 64-bit AMQP integer"),
                ));
            } else {
                AMQPValue::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(amqp_value(&format!("{path}[{i}]"), item)?);
            }
            AMQPValue::FieldArray(FieldArray::from(out))
        }
        Value::Object(map) => AMQPValue::FieldTable(field_table(path, map)?),
    })
}

/// pamqp's `table_integer`: the smallest type that holds `i`.
fn integer(i: i64) -> AMQPValue {
    if let Ok(v) = i8::try_from(i) {
        AMQPValue::ShortShortInt(v)
    } else if let Ok(v) = i16::try_from(i) {
        AMQPValue::ShortInt(v)
    } else if let Ok(v) = u16::try_from(i) {
        AMQPValue::ShortUInt(v)
    } else if let Ok(v) = i32::try_from(i) {
        AMQPValue::LongInt(v)
    } else if let Ok(v) = u32::try_from(i) {
        AMQPValue::LongUInt(v)
    } else {
        AMQPValue::LongLongInt(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_take_pamqps_smallest_type() {
        assert_eq!(integer(7), AMQPValue::ShortShortInt(7));
        assert_eq!(integer(-200), AMQPValue::ShortInt(-200));
        assert_eq!(integer(40_000), AMQPValue::ShortUInt(40_000));
        assert_eq!(integer(-40_000), AMQPValue::LongInt(-40_000));
        assert_eq!(integer(3_000_000_000), AMQPValue::LongUInt(3_000_000_000));
        assert_eq!(integer(1 << 40), AMQPValue::LongLongInt(1 << 40));
    }

    #[test]
    fn nested_values_convert_and_errors_name_the_path() {
        let Value::Object(map) = json!({"x-queue-type": "quorum", "x": [1, {"y": null}], "f": 1.5})
        else {
            unreachable!()
        };
        let table = field_table("arguments", &map).expect("converts");
        assert_eq!(table.inner().len(), 3);
        let Value::Object(bad) = json!({"big": u64::MAX}) else {
            unreachable!()
        };
        let err = field_table("arguments", &bad).expect_err("too big");
        assert!(err.to_string().contains("arguments.big"), "{err}");
    }
}

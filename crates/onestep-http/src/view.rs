//! The JSON shapes of the API: the seed documents' `execution_view`, and plain JSON for results.

use onestep_core::execution::Execution;
use onestep_core::execution::digest::python_isoformat;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

fn iso(t: Option<OffsetDateTime>) -> Value {
    t.map_or(Value::Null, |t| Value::String(python_isoformat(t)))
}

/// An execution as the API shows it (the seed documents' `execution_view`): no payload and no
/// result; times in ISO 8601 with offset.
pub fn execution_view(e: &Execution) -> Value {
    json!({
        "id": e.id.to_string(),
        "namespace": e.namespace,
        "task_name": e.task_name,
        "status": e.status.as_str(),
        "attempts": e.attempts,
        "metadata": Value::Object(plain_map(&e.metadata)),
        "version": e.version,
        "created_at": iso(Some(e.created_at)),
        "available_at": iso(Some(e.available_at)),
        "started_at": iso(e.started_at),
        "finished_at": iso(e.finished_at),
        "cancel_requested_at": iso(e.cancel_requested_at),
        "expires_at": iso(e.expires_at),
        "error": e.error.as_ref().map(|d| d.to_json()),
    })
}

fn plain_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter().map(|(k, v)| (k.clone(), plain_json(v))).collect()
}

/// Converts the stored (tagged) form to the plain JSON a web client expects, as FastAPI's encoder
/// does for the Python reference: datetimes and UUIDs become their strings, decimals numbers,
/// bytes UTF-8 text (base64 when not UTF-8), enums their value, named tuples lists.
pub fn plain_json(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(plain_json).collect()),
        Value::Object(m) => match m
            .get("$onestep")
            .and_then(Value::as_object)
            .filter(|_| m.len() == 1)
        {
            Some(tag) => plain_tag(tag),
            None => Value::Object(plain_map(m)),
        },
        other => other.clone(),
    }
}

fn plain_tag(tag: &Map<String, Value>) -> Value {
    let value = tag.get("value").cloned().unwrap_or(Value::Null);
    match tag.get("type").and_then(Value::as_str) {
        Some("datetime" | "uuid") => value,
        Some("decimal") => match value.as_str() {
            Some(s) => match s.parse::<i64>() {
                Ok(i) => Value::from(i),
                Err(_) => s
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(value, Value::Number),
            },
            None => value,
        },
        Some("bytes") => match value.as_str().and_then(decode_base64) {
            Some(bytes) => String::from_utf8(bytes).map_or(value, Value::String),
            None => value,
        },
        Some("enum") => plain_json(&value),
        Some("namedtuple" | "tuple" | "set" | "frozenset") => {
            tag.get("values").map_or(Value::Null, plain_json)
        }
        Some("mapping") => {
            let mut out = Map::new();
            if let Some(items) = tag.get("items").and_then(Value::as_array) {
                for pair in items {
                    if let (Some(k), Some(v)) = (pair.get(0).and_then(Value::as_str), pair.get(1)) {
                        out.insert(k.to_string(), plain_json(v));
                    }
                }
            }
            Value::Object(out)
        }
        _ => Value::Object(tag.clone()),
    }
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_values_become_plain_json() {
        let stored = json!({
            "when": {"$onestep": {"type": "datetime", "value": "2026-01-01T00:00:00+00:00", "fold": 0}},
            "id": {"$onestep": {"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}},
            "amount": {"$onestep": {"type": "decimal", "value": "12.5"}},
            "text": {"$onestep": {"type": "bytes", "value": "aGk="}},
            "pair": {"$onestep": {"type": "tuple", "values": [1, 2]}},
            "plain": [1, {"a": null}],
        });
        assert_eq!(
            plain_json(&stored),
            json!({"when": "2026-01-01T00:00:00+00:00", "id": "12345678-1234-5678-1234-567812345678", "amount": 12.5, "text": "hi", "pair": [1, 2], "plain": [1, {"a": null}]})
        );
    }
}

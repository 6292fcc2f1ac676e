//! Redaction of a captured envelope, as the reference redacts it: secret-looking keys at any
//! depth of `{"body": …, "meta": …}`, then the configured JSON Pointers. Values are in the Rust
//! view of the tagged codec, so a tuple tag is walked as a tuple and a `mapping` tag as a dict.

use serde_json::{Map, Value};

use crate::envelope::Envelope;

const REDACTED: &str = "<redacted>";
const TAG: &str = "$onestep";
const SECRET_KEYS: [&str; 11] = [
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "cookie",
    "api_key",
    "apikey",
    "dsn",
    "database_url",
    "connection_string",
];

/// `envelope` with secret-looking keys and the `pointers` (JSON Pointers into
/// `{"body": …, "meta": …}`) replaced by `"<redacted>"`, and the sorted paths replaced. An
/// invalid pointer is an error; one that names nothing is skipped.
pub fn redact_envelope(
    envelope: &Envelope,
    pointers: &[String],
) -> Result<(Envelope, Vec<String>), String> {
    let mut logical = Map::new();
    logical.insert("body".into(), envelope.body.clone());
    logical.insert("meta".into(), Value::Object(envelope.meta.clone()));
    let mut redacted = Vec::new();
    let mut logical = secret_keys(&Value::Object(logical), "", &mut redacted);
    for pointer in pointers {
        let tokens = decode_pointer(pointer)?;
        if replace(&mut logical, &tokens) {
            redacted.push(pointer.clone());
        }
    }
    redacted.sort();
    redacted.dedup();
    let mut parts = match logical {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let body = parts.remove("body").unwrap_or(Value::Null);
    let meta = match parts.remove("meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    Ok((
        Envelope {
            body,
            meta,
            attempts: envelope.attempts,
        },
        redacted,
    ))
}

fn is_secret(key: &str) -> bool {
    SECRET_KEYS.contains(&key.to_lowercase().replace('-', "_").as_str())
}

fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A tag's type and payload, when `value` is a tag object.
fn tag(value: &Value) -> Option<(&str, &Map<String, Value>)> {
    let map = value.as_object().filter(|m| m.len() == 1)?;
    let payload = map.get(TAG)?.as_object()?;
    Some((payload.get("type")?.as_str()?, payload))
}

/// A mapping item's key as the reference's `str(key)` spells it in a path.
fn key_token(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn secret_keys(value: &Value, path: &str, redacted: &mut Vec<String>) -> Value {
    if let Some((kind, payload)) = tag(value) {
        let mut payload = payload.clone();
        match kind {
            "tuple" | "namedtuple" | "set" | "frozenset" => {
                if let Some(Value::Array(values)) = payload.get_mut("values") {
                    let indexed = kind == "tuple" || kind == "namedtuple";
                    for (i, item) in values.iter_mut().enumerate() {
                        let child = if indexed {
                            format!("{path}/{i}")
                        } else {
                            path.to_owned()
                        };
                        *item = secret_keys(item, &child, redacted);
                    }
                }
            }
            "mapping" => {
                if let Some(Value::Array(items)) = payload.get_mut("items") {
                    for item in items.iter_mut() {
                        if let Some([key, v]) = item.as_array_mut().map(Vec::as_mut_slice) {
                            let child = format!("{path}/{}", escape_token(&key_token(key)));
                            if key.as_str().is_some_and(is_secret) {
                                *v = Value::String(REDACTED.into());
                                redacted.push(child);
                            } else {
                                *v = secret_keys(v, &child, redacted);
                            }
                        }
                    }
                }
            }
            _ => return value.clone(),
        }
        let mut tagged = Map::new();
        tagged.insert(TAG.into(), Value::Object(payload));
        return Value::Object(tagged);
    }
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| {
                    let child = format!("{path}/{}", escape_token(key));
                    if is_secret(key) {
                        redacted.push(child);
                        (key.clone(), Value::String(REDACTED.into()))
                    } else {
                        (key.clone(), secret_keys(item, &child, redacted))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| secret_keys(item, &format!("{path}/{i}"), redacted))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The tokens of a JSON Pointer (`~0` is `~`, `~1` is `/`).
fn decode_pointer(pointer: &str) -> Result<Vec<String>, String> {
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("invalid JSON Pointer {pointer:?}"));
    };
    rest.split('/')
        .map(|raw| {
            let mut token = String::new();
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    token.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => token.push('~'),
                    Some('1') => token.push('/'),
                    _ => return Err(format!("invalid JSON Pointer escape in {pointer:?}")),
                }
            }
            Ok(token)
        })
        .collect()
}

/// Replaces what `tokens` names in `value` with `"<redacted>"`; whether it named something.
fn replace(value: &mut Value, tokens: &[String]) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        *value = Value::String(REDACTED.into());
        return true;
    };
    let index = |len: usize| {
        token
            .parse::<usize>()
            .ok()
            .filter(|i| *i < len && i.to_string() == *token)
    };
    if let Some((kind, _)) = tag(value) {
        let kind = kind.to_owned();
        let Some(payload) = value.get_mut(TAG).and_then(Value::as_object_mut) else {
            return false;
        };
        return match kind.as_str() {
            "tuple" | "namedtuple" => match payload.get_mut("values") {
                Some(Value::Array(values)) => match index(values.len()) {
                    Some(i) => replace(&mut values[i], rest),
                    None => false,
                },
                _ => false,
            },
            "mapping" => match payload.get_mut("items") {
                Some(Value::Array(items)) => items
                    .iter_mut()
                    .filter_map(|item| item.as_array_mut())
                    .find(|pair| pair.first().and_then(Value::as_str) == Some(token.as_str()))
                    .and_then(|pair| pair.get_mut(1))
                    .is_some_and(|v| replace(v, rest)),
                _ => false,
            },
            _ => false,
        };
    }
    match value {
        Value::Object(map) => map.get_mut(token).is_some_and(|v| replace(v, rest)),
        Value::Array(items) => match index(items.len()) {
            Some(i) => replace(&mut items[i], rest),
            None => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_keys_and_pointers_are_redacted_in_plain_and_tagged_values() {
        let mut envelope = Envelope::new(json!({
            "user": {"Password": "p", "name": "n"},
            "pair": {"$onestep": {"type": "tuple", "values": [{"api-key": "k"}, 2]}},
            "card": {"number": "4111", "cvc": "123"},
        }));
        envelope.meta.insert("token".into(), json!("t"));
        let pointers = vec![
            "/body/card/number".to_owned(),
            "/body/pair/1".to_owned(),
            "/body/missing".to_owned(),
        ];
        let (redacted, paths) = redact_envelope(&envelope, &pointers).unwrap();
        assert_eq!(
            redacted.body,
            json!({
                "user": {"Password": "<redacted>", "name": "n"},
                "pair": {"$onestep": {"type": "tuple", "values": [{"api-key": "<redacted>"}, "<redacted>"]}},
                "card": {"number": "<redacted>", "cvc": "123"},
            })
        );
        assert_eq!(redacted.meta["token"], "<redacted>");
        assert_eq!(
            paths,
            [
                "/body/card/number",
                "/body/pair/0/api-key",
                "/body/pair/1",
                "/body/user/Password",
                "/meta/token"
            ]
        );
        assert!(redact_envelope(&envelope, &["/body/~2".to_owned()]).is_err());
    }
}

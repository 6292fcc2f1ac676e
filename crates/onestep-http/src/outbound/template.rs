//! The reference's `{{ variable }}` templating of `http_sink` fields: `body` (or `payload`),
//! `meta` and `attempts` of the envelope being sent, with dotted paths into mappings and list
//! indexes (`{{ body.items.0.id }}`).
//!
//! A string that is one variable and nothing else (surrounding spaces aside) becomes the value
//! itself, of any JSON type; a variable inside other text is replaced by Python's `str()` of its
//! value (`None` as the empty string, `True`, `{'a': 1}`), as the reference renders it. A path
//! that does not resolve is an error naming it.

use onestep_core::Envelope;
use onestep_core::execution::canonical::python_float_repr;
use serde_json::{Map, Value};

/// A path that names nothing in the envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingVariable(pub String);

impl std::fmt::Display for MissingVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "'{}'", self.0)
    }
}

/// `value` with every variable replaced from `envelope`.
pub fn render(value: &Value, envelope: &Envelope) -> Result<Value, MissingVariable> {
    match value {
        Value::String(text) => render_text(text, envelope),
        Value::Array(items) => items
            .iter()
            .map(|item| render(item, envelope))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), render(v, envelope)?)))
            .collect::<Result<Map<_, _>, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// Whether `text` holds a variable at all (a field without one is sent as written).
pub fn has_variables(text: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        if variable_at(&rest[start..]).is_some() {
            return true;
        }
        rest = &rest[start + 2..];
    }
    false
}

fn render_text(text: &str, envelope: &Envelope) -> Result<Value, MissingVariable> {
    let trimmed = text.trim();
    if let Some((path, used)) = variable_at(trimmed)
        && used == trimmed.len()
    {
        return resolve(envelope, path);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        match variable_at(&rest[start..]) {
            Some((path, used)) => {
                let value = resolve(envelope, path)?;
                if !value.is_null() {
                    out.push_str(&python_str(&value));
                }
                rest = &rest[start + used..];
            }
            None => {
                out.push_str("{{");
                rest = &rest[start + 2..];
            }
        }
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// The variable `{{ path }}` at the start of `text`: its path and how many bytes it spans.
fn variable_at(text: &str) -> Option<(&str, usize)> {
    let inner = text.strip_prefix("{{")?;
    let end = inner.find("}}")?;
    let path = inner[..end].trim_matches(|c: char| c.is_ascii_whitespace());
    let mut parts = path.split('.');
    let first = parts.next()?;
    let first_ok = first
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && first.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest_ok =
        parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    (first_ok && rest_ok).then_some((path, 2 + end + 2))
}

/// The value at `path`: `body`/`payload`, `meta` or `attempts`, then keys and list indexes.
fn resolve(envelope: &Envelope, path: &str) -> Result<Value, MissingVariable> {
    let missing = || MissingVariable(path.to_owned());
    let mut parts = path.split('.');
    let found = match parts.next() {
        Some("body" | "payload") => walk(&envelope.body, parts),
        Some("meta") => match parts.next() {
            None => return Ok(Value::Object(envelope.meta.clone())),
            Some(key) => envelope.meta.get(key).and_then(|v| walk(v, parts)),
        },
        Some("attempts") if parts.next().is_none() => return Ok(Value::from(envelope.attempts)),
        _ => None,
    };
    found.cloned().ok_or_else(missing)
}

/// Follows `parts` into `value`: keys of mappings, indexes of lists.
fn walk<'a, 'p>(mut value: &'a Value, parts: impl Iterator<Item = &'p str>) -> Option<&'a Value> {
    for part in parts {
        value = match value {
            Value::Object(map) => map.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// Python's `str()` of a JSON value.
pub fn python_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => python_repr(other),
    }
}

/// Python's `repr()` of a JSON value (`None`, `True`, `'text'`, `[1, 2.5]`, `{'a': None}`).
pub fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => {
            let text = n.to_string();
            if text.contains(['.', 'e', 'E']) {
                n.as_f64().map_or(text, python_float_repr)
            } else {
                text
            }
        }
        Value::String(s) => repr_str(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(python_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", repr_str(k), python_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// Python's `repr()` of a string: single quotes unless it holds one and no double quote.
fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope() -> Envelope {
        let mut e = Envelope::new(
            json!({"id": 7, "user": {"name": "Zoë"}, "items": [{"sku": "a"}], "ok": true, "none": null, "ratio": 0.5}),
        );
        e.meta.insert("trace".into(), json!("t-1"));
        e.attempts = 2;
        e
    }

    #[test]
    fn a_whole_variable_keeps_its_type() {
        let e = envelope();
        assert_eq!(render(&json!("{{ body.id }}"), &e).unwrap(), json!(7));
        assert_eq!(render(&json!(" {{payload}} "), &e).unwrap(), e.body);
        assert_eq!(render(&json!("{{ attempts }}"), &e).unwrap(), json!(2));
        assert_eq!(
            render(&json!("{{ meta.trace }}"), &e).unwrap(),
            json!("t-1")
        );
        assert_eq!(
            render(&json!("{{ body.items.0.sku }}"), &e).unwrap(),
            json!("a")
        );
    }

    #[test]
    fn variables_in_text_are_python_str() {
        let e = envelope();
        let out = render(
            &json!({"u": "/users/{{ body.id }}/{{body.user.name}}", "f": "{{ body.ok }}-{{ body.none }}-{{ body.ratio }}", "d": "x{{ body.user }}"}),
            &e,
        )
        .unwrap();
        assert_eq!(out["u"], json!("/users/7/Zoë"));
        assert_eq!(out["f"], json!("True--0.5"));
        assert_eq!(out["d"], json!("x{'name': 'Zoë'}"));
        assert_eq!(
            render(&json!("{{ not a var }}"), &e).unwrap(),
            json!("{{ not a var }}")
        );
    }

    #[test]
    fn a_missing_path_is_named() {
        let e = envelope();
        let err = render(&json!("{{ body.nope }}"), &e).unwrap_err();
        assert_eq!(err.to_string(), "'body.nope'");
        assert!(render(&json!("{{ meta.trace.x }}"), &e).is_err());
        assert!(render(&json!("{{ other }}"), &e).is_err());
    }

    #[test]
    fn repr_matches_python() {
        assert_eq!(python_repr(&json!("it's")), "\"it's\"");
        assert_eq!(
            python_repr(&json!(["a\n", 1, 1.0, null])),
            "['a\\n', 1, 1.0, None]"
        );
        assert!(has_variables("a {{ body }}") && !has_variables("{{ 1x }}"));
    }
}

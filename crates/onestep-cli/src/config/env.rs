//! Environment interpolation exactly as the reference: `${VAR}`, `${VAR:-default}`,
//! `${VAR:default}`; a string that is only one reference is parsed as JSON to keep numbers and
//! booleans; `.env` files.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

/// Where variables come from: explicit values first, then the process environment.
#[derive(Debug, Default, Clone)]
pub struct Environment {
    values: HashMap<String, String>,
}

impl Environment {
    /// The process environment.
    pub fn from_process() -> Self {
        Self {
            values: std::env::vars().collect(),
        }
    }

    /// An explicit set of variables (tests).
    pub fn from_pairs<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        Self {
            values: pairs.into_iter().collect(),
        }
    }

    /// Adds `KEY=VALUE` lines from a `.env` file; variables already set win.
    pub fn load_dotenv(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read env file {}: {e}", path.display()))?;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("{}:{}: expected KEY=VALUE", path.display(), n + 1));
            };
            let key = key.trim();
            let mut value = value.trim().to_string();
            if let Some(q) = value.chars().next().filter(|c| *c == '"' || *c == '\'')
                && value.len() >= 2
                && value.ends_with(q)
            {
                value = value[1..value.len() - 1].to_string();
            } else if let Some(hash) = value.find(" #") {
                value.truncate(hash);
                value = value.trim_end().to_string();
            }
            self.values.entry(key.to_string()).or_insert(value);
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

/// A `${VAR}` without default whose variable is not set, with where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingVariable {
    /// The variable.
    pub name: String,
    /// The YAML path of the value that referenced it.
    pub path: String,
}

/// Replaces references in every string of `value`; returns the variables that were missing.
pub fn interpolate(value: &mut Value, env: &Environment) -> Vec<MissingVariable> {
    let mut missing = Vec::new();
    walk(value, "", env, &mut missing);
    missing
}

fn walk(value: &mut Value, path: &str, env: &Environment, missing: &mut Vec<MissingVariable>) {
    match value {
        Value::String(s) => {
            if let Some(new) = expand(s, path, env, missing) {
                *value = new;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, &format!("{path}[{i}]"), env, missing);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(v, &child, env, missing);
            }
        }
        _ => {}
    }
}

/// Finds `${...}` references: (start, end, inner).
fn references(s: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(start) = s[i..].find("${").map(|p| p + i) {
        let Some(end) = s[start + 2..].find('}').map(|p| p + start + 2) else {
            break;
        };
        let inner = &s[start + 2..end];
        if !inner.is_empty() {
            out.push((start, end + 1, inner));
        }
        i = end + 1;
    }
    out
}

fn resolve(
    inner: &str,
    path: &str,
    env: &Environment,
    missing: &mut Vec<MissingVariable>,
) -> String {
    let (name, default) = match inner.split_once(":-") {
        Some((n, d)) => (n, Some(d)),
        None => match inner.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        },
    };
    let name = name.trim();
    match (env.get(name), default) {
        (Some(v), _) => v.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            missing.push(MissingVariable {
                name: name.to_string(),
                path: path.to_string(),
            });
            String::new()
        }
    }
}

fn expand(
    s: &str,
    path: &str,
    env: &Environment,
    missing: &mut Vec<MissingVariable>,
) -> Option<Value> {
    let refs = references(s);
    if refs.is_empty() {
        return None;
    }
    if refs.len() == 1 && refs[0].0 == 0 && refs[0].1 == s.len() {
        let text = resolve(refs[0].2, path, env, missing);
        return Some(match serde_json::from_str::<Value>(&text) {
            Ok(Value::Null) | Err(_) => Value::String(text),
            Ok(parsed) => parsed,
        });
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (start, end, inner) in refs {
        out.push_str(&s[last..start]);
        out.push_str(&resolve(inner, path, env, missing));
        last = end;
    }
    out.push_str(&s[last..]);
    Some(Value::String(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> Environment {
        Environment::from_pairs([
            ("PORT".into(), "5432".into()),
            ("HOST".into(), "db".into()),
            ("ON".into(), "true".into()),
        ])
    }

    #[test]
    fn whole_references_keep_json_types_and_mixed_strings_stay_strings() {
        let mut v = json!({"port": "${PORT}", "url": "postgres://${HOST}:${PORT}/x", "on": "${ON}", "d": "${NOPE:-7}", "c": "${NOPE:x}"});
        assert!(interpolate(&mut v, &env()).is_empty());
        assert_eq!(
            v,
            json!({"port": 5432, "url": "postgres://db:5432/x", "on": true, "d": 7, "c": "x"})
        );
    }

    #[test]
    fn missing_variables_are_reported_with_their_paths() {
        let mut v = json!({"a": {"b": ["${MISSING}"]}, "c": "${ALSO_MISSING}"});
        let missing = interpolate(&mut v, &env());
        assert_eq!(missing.len(), 2);
        assert!(missing.contains(&MissingVariable {
            name: "MISSING".into(),
            path: "a.b[0]".into()
        }));
        assert_eq!(v["c"], "");
    }

    #[test]
    fn dotenv_lines_fill_only_unset_variables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        std::fs::write(
            &path,
            "# comment\nHOST=other\nNEW='quoted value'\nexport X=1 # trailing\n",
        )
        .unwrap();
        let mut e = env();
        e.load_dotenv(&path).unwrap();
        assert_eq!(e.get("HOST"), Some("db"));
        assert_eq!(e.get("NEW"), Some("quoted value"));
        assert_eq!(e.get("X"), Some("1"));
    }
}

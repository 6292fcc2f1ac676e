//! [`Checker`]: typed reads over a whole document, every problem kept with its path and line.

use onestep_core::catalog::{Fields, child, type_name};
use serde_json::{Map, Value};

use super::problem::Problems;
use super::yaml::Positions;

/// Reads typed values out of a document, recording problems instead of stopping.
pub struct Checker<'a> {
    /// Where nodes are.
    pub positions: &'a Positions,
    /// What was found.
    pub problems: Problems,
    /// Whether unknown fields are problems (`check --strict`).
    pub strict: bool,
}

impl<'a> Checker<'a> {
    /// Records a problem.
    pub fn problem(&mut self, path: &str, message: impl Into<String>) {
        self.problems.add(self.positions, path, message);
    }

    /// Reports fields of `map` not in `allowed` (strict mode only).
    pub fn unknown_fields(&mut self, map: &Map<String, Value>, allowed: &[&str], path: &str) {
        if !self.strict {
            return;
        }
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let child = child(path, key);
                self.problem(
                    &child,
                    format!("unknown field; expected one of: {}", allowed.join(", ")),
                );
            }
        }
    }

    /// Reports fields of `map` not in `allowed`, strict or not: where the reference refuses
    /// them when it builds the app (hooks, emit bindings and routes, callable refs).
    pub fn unknown_fields_always(
        &mut self,
        map: &Map<String, Value>,
        allowed: &[&str],
        path: &str,
    ) {
        let strict = std::mem::replace(&mut self.strict, true);
        self.unknown_fields(map, allowed, path);
        self.strict = strict;
    }

    /// Runs `read` over `map` at `path`, keeping the problems it finds.
    fn read<T>(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        read: impl FnOnce(&mut Fields<'_>) -> T,
    ) -> T {
        let mut fields = Fields::new("", path, map, self.strict);
        let out = read(&mut fields);
        for p in fields.into_problems() {
            self.problem(&p.path, p.message);
        }
        out
    }

    /// A required non-empty string.
    pub fn string(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        self.read(map, path, |f| f.string(key))
    }

    /// An optional non-empty string.
    pub fn opt_string(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        self.read(map, path, |f| f.opt_string(key))
    }

    /// `v` as a non-empty string, the value at `path`.
    pub fn string_value(&mut self, v: &Value, path: &str) -> Option<String> {
        self.read(&Map::new(), "", |f| f.as_string(path, v))
    }

    /// An optional finite number `> 0` (or `>= 0` when `allow_zero`).
    pub fn opt_number(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        allow_zero: bool,
    ) -> Option<f64> {
        self.read(map, path, |f| f.opt_number(key, allow_zero))
    }

    /// An optional integer `>= min`.
    pub fn opt_integer(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        min: i64,
    ) -> Option<i64> {
        self.read(map, path, |f| f.opt_integer(key, min))
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<bool> {
        self.read(map, path, |f| f.opt_bool(key))
    }

    /// A mapping at `path`.
    pub fn mapping<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            other => {
                self.problem(
                    path,
                    format!("expected a mapping, got {}", type_name(other)),
                );
                None
            }
        }
    }

    /// A string or list of strings (resource references).
    pub fn names(&mut self, v: Option<&Value>, path: &str) -> Vec<String> {
        match v {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.trim().to_string()],
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| self.string_value(item, &format!("{path}[{i}]")))
                .collect(),
            Some(other) => {
                self.problem(
                    path,
                    format!(
                        "expected a resource name or a list of names, got {}",
                        type_name(other)
                    ),
                );
                Vec::new()
            }
        }
    }
}

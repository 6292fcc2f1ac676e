//! [`Fields`]: typed reads of one resource's YAML fields, every problem kept with its path.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Problem, Role};

/// A resource named by another one's field (`connector: pg`), checked once every resource is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The field's path (`resources.jobs.connector`).
    pub path: String,
    /// The resource it names.
    pub name: String,
    /// The role that resource must have.
    pub role: Role,
    /// The type it must have, when one type will do (`postgres` for a PostgreSQL source).
    pub type_name: Option<&'static str>,
}

/// The fields of one resource (everything but `type`), read by a
/// [`ResourceType`](super::ResourceType).
///
/// Each read records what is wrong (with the field's full path, the way `onestep check` prints it)
/// and goes on, so one pass finds every problem. A read of an absent or `null` optional field
/// gives `None`, and the type applies its default.
///
/// ```
/// use onestep_core::catalog::Fields;
/// use serde_json::json;
///
/// let map = json!({"batch_size": 0, "name": "jobs"});
/// let mut fields = Fields::new("jobs", "resources.jobs", map.as_object().unwrap(), false);
/// assert_eq!(fields.opt_integer("batch_size", 1), None);
/// assert_eq!(fields.opt_string("name").as_deref(), Some("jobs"));
/// let problems = fields.into_problems();
/// assert_eq!(problems[0].path, "resources.jobs.batch_size");
/// assert_eq!(problems[0].message, "must be an integer >= 1, got 0");
/// ```
#[derive(Debug)]
pub struct Fields<'a> {
    name: &'a str,
    path: &'a str,
    map: &'a Map<String, Value>,
    strict: bool,
    problems: Vec<Problem>,
    references: Vec<Reference>,
    read: BTreeSet<String>,
}

/// JSON type names as messages say them (`an integer`, `a mapping`).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A type name as the reference normalizes it: trimmed, lowercase, `-` and `.` become `_`
/// (`Postgres-Execution-Source` is `postgres_execution_source`).
pub fn normalize_type(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['-', '.'], "_")
}

/// `parent.key`, or `key` at the top.
pub fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'a> Fields<'a> {
    /// The fields `map` of the resource `name` at `path`; `strict` is `onestep check --strict`.
    pub fn new(name: &'a str, path: &'a str, map: &'a Map<String, Value>, strict: bool) -> Self {
        Self {
            name,
            path,
            map,
            strict,
            problems: Vec::new(),
            references: Vec::new(),
            read: BTreeSet::new(),
        }
    }

    /// The resource's name (the key under `resources`).
    pub fn resource_name(&self) -> &str {
        self.name
    }

    /// The resource's path (`resources.<name>`).
    pub fn path(&self) -> &str {
        self.path
    }

    /// Whether the file is checked strictly (`--strict`): some types then require more.
    pub fn strict(&self) -> bool {
        self.strict
    }

    /// The path of `key` (`resources.<name>.<key>`); `key` may be nested (`auth.token`).
    pub fn path_of(&self, key: &str) -> String {
        child(self.path, key)
    }

    /// Records a problem at `key` (relative to the resource; `""` for the resource itself).
    pub fn problem(&mut self, key: &str, message: impl Into<String>) {
        let path = if key.is_empty() {
            self.path.to_string()
        } else {
            self.path_of(key)
        };
        self.problems.push(Problem {
            path,
            message: message.into(),
        });
    }

    /// Whether no problem was recorded so far.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The value of `key`, `None` when absent or `null`.
    pub fn value(&mut self, key: &str) -> Option<&'a Value> {
        self.read.insert(key.to_string());
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is given (not absent, not `null`).
    pub fn has(&mut self, key: &str) -> bool {
        self.value(key).is_some()
    }

    /// A required non-empty string (trimmed).
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.value(key) {
            None => {
                self.problem(key, "is required (a non-empty string)");
                None
            }
            Some(v) => self.as_string(key, v),
        }
    }

    /// An optional non-empty string (trimmed).
    pub fn opt_string(&mut self, key: &str) -> Option<String> {
        let v = self.value(key)?;
        self.as_string(key, v)
    }

    /// `v`, found at `key` (an item of a list, say `emit[0]`), as a non-empty string.
    pub fn as_string(&mut self, key: &str, v: &Value) -> Option<String> {
        match v.as_str().map(str::trim) {
            Some(s) if !s.is_empty() => Some(s.to_string()),
            Some(_) => {
                self.problem(key, "must be a non-empty string");
                None
            }
            None => {
                self.problem(key, format!("expected a string, got {}", type_name(v)));
                None
            }
        }
    }

    /// An optional finite number `> 0` (or `>= 0` when `allow_zero`); a `*_s` field is at
    /// most [`MAX_SECONDS`](crate::clock::MAX_SECONDS).
    pub fn opt_number(&mut self, key: &str, allow_zero: bool) -> Option<f64> {
        let v = self.value(key)?;
        let bound = if allow_zero { ">= 0" } else { "> 0" };
        match v.as_f64() {
            Some(n) if key.ends_with("_s") && n > crate::clock::MAX_SECONDS => {
                self.problem(
                    key,
                    format!(
                        "must be at most {} seconds (100 years), got {n}",
                        crate::clock::MAX_SECONDS
                    ),
                );
                None
            }
            Some(n) if n.is_finite() && (n > 0.0 || (allow_zero && n == 0.0)) => Some(n),
            Some(n) => {
                self.problem(key, format!("must be a finite number {bound}, got {n}"));
                None
            }
            None => {
                self.problem(
                    key,
                    format!("expected a number {bound}, got {}", type_name(v)),
                );
                None
            }
        }
    }

    /// An optional integer `>= min`.
    pub fn opt_integer(&mut self, key: &str, min: i64) -> Option<i64> {
        let v = self.value(key)?;
        match v.as_i64() {
            Some(n) if n >= min => Some(n),
            Some(n) => {
                self.problem(key, format!("must be an integer >= {min}, got {n}"));
                None
            }
            None => {
                self.problem(
                    key,
                    format!("expected an integer >= {min}, got {}", type_name(v)),
                );
                None
            }
        }
    }

    /// An optional count `>= min` as a `usize` (values beyond it saturate).
    pub fn opt_count(&mut self, key: &str, min: usize) -> Option<usize> {
        let min = i64::try_from(min).unwrap_or(i64::MAX);
        self.opt_integer(key, min)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, key: &str) -> Option<bool> {
        let v = self.value(key)?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                self.problem(key, format!("expected true or false, got {}", type_name(v)));
                None
            }
        }
    }

    /// A required reference to another resource with `role` (and type `type_name` when
    /// given); it is checked once every resource has been read.
    pub fn reference(
        &mut self,
        key: &str,
        role: Role,
        type_name: Option<&'static str>,
    ) -> Option<String> {
        let name = self.string(key)?;
        Some(self.refer(key, name, role, type_name))
    }

    /// An optional reference: `None` when the field is absent or `null`, else as
    /// [`Fields::reference`].
    pub fn opt_reference(
        &mut self,
        key: &str,
        role: Role,
        type_name: Option<&'static str>,
    ) -> Option<String> {
        let name = self.opt_string(key)?;
        Some(self.refer(key, name, role, type_name))
    }

    /// Records that `key` names the resource `name`, to be checked once every resource has
    /// been read; returns `name`.
    fn refer(
        &mut self,
        key: &str,
        name: String,
        role: Role,
        type_name: Option<&'static str>,
    ) -> String {
        self.references.push(Reference {
            path: self.path_of(key),
            name: name.clone(),
            role,
            type_name,
        });
        name
    }

    /// The keys the reads asked for, given or not.
    pub fn asked(&self) -> Vec<&str> {
        self.read.iter().map(String::as_str).collect()
    }

    /// The problems found.
    pub fn into_problems(self) -> Vec<Problem> {
        self.problems
    }

    /// The problems found and the references to check.
    pub fn finish(self) -> (Vec<Problem>, Vec<Reference>) {
        (self.problems, self.references)
    }
}

//! The typed configuration and the rules that produce it. Every problem is collected with its
//! YAML path; nothing stops at the first one.

use onestep_core::catalog::{Fields, Role};
use serde_json::{Map, Value};

pub use onestep_core::catalog::{ResourceSpec, child, type_name};

use super::Document;
use super::problem::Problems;
use super::yaml::Positions;
use crate::registry::Registry;

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "onestep/v1alpha1";

/// A whole app.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec {
    /// `app.name`.
    pub name: String,
    /// `app.shutdown_timeout_s` (default 30; `null` waits forever).
    pub shutdown_timeout_s: Option<f64>,
    /// `app.config`, available to handlers as `ctx.config()`.
    pub config: Value,
    /// `app.logging.level` (default `info`).
    pub log_level: String,
    /// `app.logging.format`: `text` (default) or `json`.
    pub log_format: String,
    /// `resources`, in document order.
    pub resources: Vec<ResourceSpec>,
    /// `tasks`, in document order.
    pub tasks: Vec<TaskSpec>,
}

/// One entry of `tasks`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Its name.
    pub name: String,
    /// A description.
    pub description: Option<String>,
    /// The source resource.
    pub source: Option<String>,
    /// Emit sink resources.
    pub emit: Vec<String>,
    /// Dead-letter sink resources.
    pub dead_letter: Vec<String>,
    /// `config`, available as `ctx.task_config()`.
    pub config: Value,
    /// `metadata`.
    pub metadata: Map<String, Value>,
    /// The handler reference and its params; `None` means passthrough (requires `emit`).
    pub handler: Option<(String, Value)>,
    /// Concurrency (default 1).
    pub concurrency: usize,
    /// Handler timeout in seconds.
    pub timeout_s: Option<f64>,
    /// The retry policy.
    pub retry: RetrySpec,
    /// Its YAML path (`tasks[i]`).
    pub path: String,
}

/// A retry policy from YAML.
#[derive(Debug, Clone, PartialEq)]
pub enum RetrySpec {
    /// `no_retry` / `none`.
    None,
    /// `max_attempts`.
    MaxAttempts {
        /// Runs allowed (default 3).
        max_attempts: u32,
        /// Fixed delay.
        delay_s: Option<f64>,
    },
    /// `exponential_backoff`.
    Exponential {
        /// Runs allowed (default 3).
        max_attempts: u32,
        /// First delay (default 1).
        min_delay_s: f64,
        /// Largest delay (default 60).
        max_delay_s: f64,
        /// Growth (default 2).
        multiplier: f64,
        /// `none`, `full` or `equal`.
        jitter: String,
    },
    /// `by_failure_kind`.
    ByFailureKind {
        /// Fallback policy.
        default: Option<Box<RetrySpec>>,
        /// For kind `error`.
        error: Option<Box<RetrySpec>>,
        /// For kind `timeout`.
        timeout: Option<Box<RetrySpec>>,
        /// For kind `cancelled`.
        cancelled: Option<Box<RetrySpec>>,
    },
}

/// Seconds as a person reads them: `5 s`, `0.5 s`.
fn seconds(value: f64) -> String {
    format!("{value} s")
}

/// The policy in the YAML's words, for `onestep check`:
/// `exponential_backoff: 3 attempts, waits 1 s, ×2, at most 30 s, jitter none`.
impl std::fmt::Display for RetrySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetrySpec::None => f.write_str("no_retry"),
            RetrySpec::MaxAttempts {
                max_attempts,
                delay_s,
            } => {
                write!(f, "max_attempts: {max_attempts} attempts")?;
                match delay_s {
                    Some(delay) if *delay > 0.0 => write!(f, ", {} apart", seconds(*delay)),
                    _ => f.write_str(", no wait"),
                }
            }
            RetrySpec::Exponential {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                jitter,
            } => write!(
                f,
                "exponential_backoff: {max_attempts} attempts, waits {}, ×{multiplier}, at most \
                 {}, jitter {jitter}",
                seconds(*min_delay_s),
                seconds(*max_delay_s)
            ),
            RetrySpec::ByFailureKind {
                default,
                error,
                timeout,
                cancelled,
            } => {
                f.write_str("by_failure_kind (")?;
                let mut first = true;
                for (kind, policy) in [
                    ("error", error),
                    ("timeout", timeout),
                    ("cancelled", cancelled),
                    ("default", default),
                ] {
                    if let Some(policy) = policy {
                        if !first {
                            f.write_str("; ")?;
                        }
                        first = false;
                        write!(f, "{kind} → {policy}")?;
                    }
                }
                if first {
                    f.write_str("no policies: no retry")?;
                }
                f.write_str(")")
            }
        }
    }
}

const TOP_LEVEL: &[&str] = &["apiVersion", "kind", "app", "resources", "tasks", "$schema"];
const APP_FIELDS: &[&str] = &[
    "name",
    "shutdown_timeout_s",
    "config",
    "state",
    "logging",
    "env_file",
    "strict_env",
    "failure_capture",
];
const LOGGING_FIELDS: &[&str] = &["level", "format"];
const TASK_FIELDS: &[&str] = &[
    "name",
    "description",
    "source",
    "emit",
    "dead_letter",
    "config",
    "metadata",
    "handler",
    "hooks",
    "concurrency",
    "timeout_s",
    "retry",
];
const LOG_LEVELS: &[&str] = &[
    "trace", "debug", "info", "warning", "warn", "error", "critical",
];

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
    fn string_value(&mut self, v: &Value, path: &str) -> Option<String> {
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

    fn no_transform(&mut self, m: &Map<String, Value>, path: &str) {
        if m.contains_key("transform") {
            self.problem(
                &child(path, "transform"),
                "emit transforms are not supported in YAML yet; transform in the handler",
            );
        }
        if m.contains_key("when") {
            self.problem(
                &child(path, "when"),
                "emit routes are not supported in YAML yet; route in the handler",
            );
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
                .filter_map(|(i, item)| match item {
                    Value::Object(m) if m.contains_key("sink") => {
                        self.no_transform(m, &format!("{path}[{i}]"));
                        self.unknown_fields(m, &["sink"], &format!("{path}[{i}]"));
                        self.string(m, "sink", &format!("{path}[{i}]"))
                    }
                    other => self.string_value(other, &format!("{path}[{i}]")),
                })
                .collect(),
            Some(Value::Object(m)) if m.contains_key("sink") => {
                self.no_transform(m, path);
                self.unknown_fields(m, &["sink"], path);
                self.string(m, "sink", path).into_iter().collect()
            }
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

/// Normalizes a type name as the reference does: lowercase, `-` and `.` become `_`.
pub fn normalize_type(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['-', '.'], "_")
}

/// Validates a document into an [`AppSpec`], collecting every problem.
pub fn validate(doc: &Document, registry: &Registry, strict: bool) -> Result<AppSpec, Problems> {
    let mut c = Checker {
        positions: &doc.positions,
        problems: Problems::new(doc.path.display().to_string()),
        strict,
    };
    let spec = app_spec(&doc.value, registry, &mut c);
    match spec {
        Some(spec) if c.problems.is_empty() => Ok(spec),
        _ => Err(c.problems),
    }
}

fn app_spec(root: &Value, registry: &Registry, c: &mut Checker<'_>) -> Option<AppSpec> {
    let top = c.mapping(root, "")?;
    for (key, what) in [
        ("hooks", "app-level hooks"),
        ("reporter", "the control-plane reporter"),
        (
            "connectors",
            "the legacy `connectors` section (use `resources`)",
        ),
        ("sources", "the legacy `sources` section (use `resources`)"),
        ("sinks", "the legacy `sinks` section (use `resources`)"),
    ] {
        if top.get(key).is_some() {
            c.problem(
                key,
                format!("{what} is not supported by this port yet; remove it"),
            );
        }
    }
    let top_known: Vec<&str> = TOP_LEVEL
        .iter()
        .copied()
        .chain(["hooks", "reporter", "connectors", "sources", "sinks"])
        .collect();
    c.unknown_fields(top, &top_known, "");
    match (top.get("apiVersion"), top.get("kind")) {
        (Some(v), Some(k)) => {
            if v.as_str() != Some(API_VERSION) {
                c.problem("apiVersion", format!("must be {API_VERSION:?}, got {v}"));
            }
            if k.as_str() != Some("App") {
                c.problem("kind", format!("must be \"App\", got {k}"));
            }
        }
        (Some(_), None) => c.problem("kind", "is required with apiVersion (\"App\")"),
        (None, Some(_)) => c.problem(
            "apiVersion",
            format!("is required with kind ({API_VERSION:?})"),
        ),
        (None, None) if c.strict => c.problem(
            "apiVersion",
            format!("is required ({API_VERSION:?}) with kind: App"),
        ),
        (None, None) => {}
    }

    let empty = Map::new();
    let app = match top.get("app") {
        Some(v) => c.mapping(v, "app").unwrap_or(&empty),
        None => {
            c.problem("app", "is required (a mapping with at least `name`)");
            &empty
        }
    };
    c.unknown_fields(app, APP_FIELDS, "app");
    let name = c.string(app, "name", "app");
    let shutdown_timeout_s = match app.get("shutdown_timeout_s") {
        Some(Value::Null) => None,
        None => Some(30.0),
        Some(_) => c.opt_number(app, "shutdown_timeout_s", "app", false),
    };
    if app.get("failure_capture").is_some() {
        c.problem(
            "app.failure_capture",
            "failure capture is not supported by this port yet; remove it",
        );
    }
    if app.get("state").is_some_and(|s| !s.is_null()) {
        c.problem(
            "app.state",
            "state stores are not available in YAML yet; remove the field",
        );
    }
    c.opt_bool(app, "strict_env", "app");
    if let Some(v) = app
        .get("env_file")
        .filter(|v| !v.is_string() && !v.is_null())
    {
        c.problem(
            "app.env_file",
            format!("expected a file path string, got {}", type_name(v)),
        );
    }
    let (mut log_level, mut log_format) = ("info".to_string(), "text".to_string());
    if let Some(logging) = app.get("logging").and_then(|l| c.mapping(l, "app.logging")) {
        c.unknown_fields(logging, LOGGING_FIELDS, "app.logging");
        if let Some(level) = c.opt_string(logging, "level", "app.logging") {
            if LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
                log_level = level.to_ascii_lowercase();
            } else {
                c.problem(
                    "app.logging.level",
                    format!("must be one of {}, got {level:?}", LOG_LEVELS.join(", ")),
                );
            }
        }
        if let Some(format) = c.opt_string(logging, "format", "app.logging") {
            if format == "text" || format == "json" {
                log_format = format;
            } else {
                c.problem(
                    "app.logging.format",
                    format!("must be text or json, got {format:?}"),
                );
            }
        }
    }

    let mut resources = Vec::new();
    if let Some(map) = top
        .get("resources")
        .filter(|v| !v.is_null())
        .and_then(|v| c.mapping(v, "resources"))
    {
        for (rname, rvalue) in map {
            let path = child("resources", rname);
            let Some(fields) = c.mapping(rvalue, &path) else {
                continue;
            };
            let Some(type_raw) = c.string(fields, "type", &path) else {
                continue;
            };
            let type_name = normalize_type(&type_raw);
            if registry.catalog().get(&type_name).is_none() {
                c.problem(
                    &child(&path, "type"),
                    format!(
                        "unknown resource type {type_raw:?}; known types: {}",
                        registry.catalog().names().join(", ")
                    ),
                );
            }
            let mut rest = fields.clone();
            rest.shift_remove("type");
            resources.push(ResourceSpec {
                name: rname.clone(),
                type_name,
                fields: rest,
                path,
            });
        }
    }
    for problem in registry.catalog().check(&resources, c.strict) {
        c.problem(&problem.path, problem.message);
    }

    let mut tasks = Vec::new();
    match top.get("tasks") {
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(t) = task_spec(item, i, &resources, registry, c) {
                    tasks.push(t);
                }
            }
        }
        Some(Value::Null) | None => c.problem("tasks", "is required (a list of tasks)"),
        Some(other) => c.problem(
            "tasks",
            format!("expected a list of tasks, got {}", type_name(other)),
        ),
    }
    let mut seen = std::collections::HashSet::new();
    for t in &tasks {
        if !seen.insert(t.name.clone()) {
            c.problem(
                &child(&t.path, "name"),
                format!("duplicate task name {:?}", t.name),
            );
        }
    }

    Some(AppSpec {
        name: name?,
        shutdown_timeout_s,
        config: app.get("config").cloned().unwrap_or(Value::Null),
        log_level,
        log_format,
        resources,
        tasks,
    })
}

fn resource_ref(
    c: &mut Checker<'_>,
    registry: &Registry,
    resources: &[ResourceSpec],
    name: &str,
    path: &str,
    role: Role,
) {
    match resources.iter().find(|r| r.name == name) {
        None => c.problem(
            path,
            format!("unknown resource {name:?}; define it under resources"),
        ),
        Some(r) => {
            let known = registry.catalog().get(&r.type_name).is_some();
            if known && !registry.catalog().roles_of(&r.type_name).contains(&role) {
                c.problem(
                    path,
                    format!(
                        "resource {name:?} of type {} cannot be used as a {role}",
                        r.type_name
                    ),
                );
            }
        }
    }
}

fn task_spec(
    item: &Value,
    i: usize,
    resources: &[ResourceSpec],
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Option<TaskSpec> {
    let path = format!("tasks[{i}]");
    let map = c.mapping(item, &path)?;
    c.unknown_fields(map, TASK_FIELDS, &path);
    let name = c.string(map, "name", &path);
    let source = c.opt_string(map, "source", &path);
    if let Some(s) = &source {
        resource_ref(
            c,
            registry,
            resources,
            s,
            &child(&path, "source"),
            Role::Source,
        );
    }
    let emit = c.names(map.get("emit"), &child(&path, "emit"));
    for (j, e) in emit.iter().enumerate() {
        let p = if map.get("emit").is_some_and(Value::is_array) {
            format!("{path}.emit[{j}]")
        } else {
            child(&path, "emit")
        };
        resource_ref(c, registry, resources, e, &p, Role::Sink);
    }
    let dead_letter = c.names(map.get("dead_letter"), &child(&path, "dead_letter"));
    for d in &dead_letter {
        resource_ref(
            c,
            registry,
            resources,
            d,
            &child(&path, "dead_letter"),
            Role::Sink,
        );
    }
    let handler = match map.get("handler") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some((r.trim().to_string(), Value::Object(Map::new()))),
        Some(Value::Object(h)) => {
            let hp = child(&path, "handler");
            c.unknown_fields(h, &["ref", "params"], &hp);
            let r = c.string(h, "ref", &hp);
            let params = h
                .get("params")
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            if !params.is_object() {
                c.problem(
                    &child(&hp, "params"),
                    format!("expected a mapping, got {}", type_name(&params)),
                );
            }
            r.map(|r| (r, params))
        }
        Some(other) => {
            c.problem(
                &child(&path, "handler"),
                format!(
                    "expected a handler ref string or {{ref, params}}, got {}",
                    type_name(other)
                ),
            );
            None
        }
    };
    if let Some((r, _)) = &handler
        && !registry.has_handler(r)
    {
        let known = registry.handler_names();
        c.problem(
            &child(
                &path,
                if map.get("handler").is_some_and(Value::is_object) {
                    "handler.ref"
                } else {
                    "handler"
                },
            ),
            format!(
                "handler {r:?} is not registered; registered handlers: {}",
                known.join(", ")
            ),
        );
    }
    if handler.is_none() && emit.is_empty() && map.get("handler").is_none_or(Value::is_null) {
        c.problem(
            &child(&path, "handler"),
            "is required when the task has no emit targets",
        );
    }
    if map.get("hooks").is_some_and(|h| !h.is_null()) {
        c.problem(
            &child(&path, "hooks"),
            "task hooks are not available in YAML yet; use a handler that wraps the work",
        );
    }
    let concurrency = c.opt_integer(map, "concurrency", &path, 1).unwrap_or(1);
    let timeout_s = c.opt_number(map, "timeout_s", &path, false);
    let retry = match map.get("retry") {
        None | Some(Value::Null) => RetrySpec::None,
        Some(v) => retry_spec(v, &child(&path, "retry"), c).unwrap_or(RetrySpec::None),
    };
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => c
            .mapping(v, &child(&path, "metadata"))
            .cloned()
            .unwrap_or_default(),
    };
    Some(TaskSpec {
        name: name?,
        description: c.opt_string(map, "description", &path),
        source,
        emit,
        dead_letter,
        config: map.get("config").cloned().unwrap_or(Value::Null),
        metadata,
        handler,
        concurrency: usize::try_from(concurrency).unwrap_or(1),
        timeout_s,
        retry,
        path,
    })
}

const RETRY_TYPES: &str = "no_retry, none, max_attempts, exponential_backoff, by_failure_kind";

fn retry_spec(v: &Value, path: &str, c: &mut Checker<'_>) -> Option<RetrySpec> {
    let empty = Map::new();
    let (type_raw, map) = match v {
        Value::String(s) => (s.clone(), &empty),
        Value::Object(m) => match m.get("type").and_then(Value::as_str) {
            Some(t) => (t.to_string(), m),
            None => {
                c.problem(
                    &child(path, "type"),
                    format!("is required; one of {RETRY_TYPES}"),
                );
                return None;
            }
        },
        other => {
            c.problem(
                path,
                format!(
                    "expected a retry type or a mapping with `type`, got {}",
                    type_name(other)
                ),
            );
            return None;
        }
    };
    let kind = normalize_type(&type_raw).replace("-", "_");
    let attempts =
        |c: &mut Checker<'_>| c.opt_integer(map, "max_attempts", path, 1).unwrap_or(3) as u32;
    Some(match kind.as_str() {
        "no_retry" | "none" => {
            c.unknown_fields(map, &["type"], path);
            RetrySpec::None
        }
        "max_attempts" => {
            c.unknown_fields(map, &["type", "max_attempts", "delay_s"], path);
            RetrySpec::MaxAttempts {
                max_attempts: attempts(c),
                delay_s: c.opt_number(map, "delay_s", path, true),
            }
        }
        "exponential_backoff" => {
            c.unknown_fields(
                map,
                &[
                    "type",
                    "max_attempts",
                    "min_delay_s",
                    "max_delay_s",
                    "multiplier",
                    "jitter",
                ],
                path,
            );
            let max_attempts = attempts(c);
            let min_delay_s = c.opt_number(map, "min_delay_s", path, true).unwrap_or(1.0);
            let max_delay_s = c.opt_number(map, "max_delay_s", path, true).unwrap_or(60.0);
            let multiplier = c.opt_number(map, "multiplier", path, false).unwrap_or(2.0);
            if max_delay_s < min_delay_s {
                c.problem(
                    &child(path, "max_delay_s"),
                    format!("must be >= min_delay_s ({min_delay_s}), got {max_delay_s}"),
                );
            }
            let jitter = c
                .opt_string(map, "jitter", path)
                .unwrap_or_else(|| "none".into());
            if !["none", "full", "equal"].contains(&jitter.as_str()) {
                c.problem(
                    &child(path, "jitter"),
                    format!("must be one of none, full, equal; got {jitter:?}"),
                );
            }
            RetrySpec::Exponential {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                jitter,
            }
        }
        "by_failure_kind" => {
            c.unknown_fields(
                map,
                &["type", "default", "error", "timeout", "cancelled"],
                path,
            );
            let sub = |key: &str, c: &mut Checker<'_>| {
                map.get(key)
                    .filter(|v| !v.is_null())
                    .and_then(|v| retry_spec(v, &child(path, key), c))
                    .map(Box::new)
            };
            let spec = RetrySpec::ByFailureKind {
                default: sub("default", c),
                error: sub("error", c),
                timeout: sub("timeout", c),
                cancelled: sub("cancelled", c),
            };
            if ["default", "error", "timeout", "cancelled"]
                .iter()
                .all(|k| map.get(*k).is_none_or(Value::is_null))
            {
                c.problem(
                    path,
                    "by_failure_kind needs at least one of default, error, timeout, cancelled",
                );
            }
            spec
        }
        _ => {
            c.problem(
                &child(path, "type"),
                format!("unknown retry type {type_raw:?}; expected one of {RETRY_TYPES}"),
            );
            return None;
        }
    })
}

#[cfg(test)]
mod retry_text_tests {
    use super::RetrySpec;

    #[test]
    fn retry_policies_print_in_the_yamls_words() {
        let exponential = RetrySpec::Exponential {
            max_attempts: 3,
            min_delay_s: 1.0,
            max_delay_s: 30.0,
            multiplier: 2.0,
            jitter: "none".into(),
        };
        assert_eq!(
            exponential.to_string(),
            "exponential_backoff: 3 attempts, waits 1 s, ×2, at most 30 s, jitter none"
        );
        let fixed = RetrySpec::MaxAttempts {
            max_attempts: 2,
            delay_s: Some(0.5),
        };
        assert_eq!(fixed.to_string(), "max_attempts: 2 attempts, 0.5 s apart");
        let by_kind = RetrySpec::ByFailureKind {
            default: Some(Box::new(RetrySpec::None)),
            error: Some(Box::new(fixed)),
            timeout: None,
            cancelled: None,
        };
        assert_eq!(
            by_kind.to_string(),
            "by_failure_kind (error → max_attempts: 2 attempts, 0.5 s apart; default → no_retry)"
        );
    }
}

//! The typed configuration and the rules that produce it. Every problem is collected with its
//! YAML path; nothing stops at the first one.

use onestep_core::catalog::Role;
use serde_json::{Map, Value};

pub use onestep_core::catalog::{ResourceSpec, child, normalize_type, type_name};

use super::Document;
pub use super::callable::is_python_ref;
use super::callable::{AppHooksSpec, TaskHooksSpec, app_hooks, task_hooks};
pub use super::checker::Checker;
use super::emit::{EmitSpec, emit_targets};
use super::problem::Problems;
pub use super::retry::RetrySpec;
use super::retry::retry_spec;
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
    /// `app.state`: the state store resource behind `ctx.state()` (in memory when absent).
    pub state: Option<String>,
    /// `resources`, in document order.
    pub resources: Vec<ResourceSpec>,
    /// `tasks`, in document order.
    pub tasks: Vec<TaskSpec>,
    /// Top-level `hooks`: `startup`, `shutdown`, `events`.
    pub hooks: AppHooksSpec,
    /// `app.failure_capture`: where failed attempts' envelopes are written.
    pub failure_capture: Option<onestep_core::capture::FailureCaptureConfig>,
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
    /// Every sink `emit` may send to (route branches included), in YAML order.
    pub emit: Vec<String>,
    /// `emit` as written: bindings with transforms and routes.
    pub targets: Vec<EmitSpec>,
    /// `hooks`: `before`, `after_success`, `on_failure`.
    pub hooks: TaskHooksSpec,
    /// Dead-letter sink resources.
    pub dead_letter: Vec<String>,
    /// `config`, available as `ctx.task_config()`.
    pub config: Value,
    /// `metadata`.
    pub metadata: Map<String, Value>,
    /// The handler reference and its params; `None` means passthrough (requires `emit`).
    pub handler: Option<(String, Value)>,
    /// The YAML path of the handler ref (`tasks[i].handler` or `tasks[i].handler.ref`).
    pub handler_path: String,
    /// Concurrency (default 1).
    pub concurrency: usize,
    /// Handler timeout in seconds.
    pub timeout_s: Option<f64>,
    /// The retry policy.
    pub retry: RetrySpec,
    /// Its YAML path (`tasks[i]`).
    pub path: String,
}

const TOP_LEVEL: &[&str] = &[
    "apiVersion",
    "kind",
    "app",
    "resources",
    "tasks",
    "hooks",
    "$schema",
];
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
const LEGACY_APP_FIELDS: [&str; 4] = ["name", "shutdown_timeout_s", "config", "state"];
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

/// Validates a document into an [`AppSpec`], collecting every problem.
pub fn validate(doc: &Document, registry: &Registry, strict: bool) -> Result<AppSpec, Problems> {
    let mut c = Checker {
        positions: &doc.positions,
        problems: Problems::new(doc.path.display().to_string()),
        strict,
    };
    let absolute = std::path::absolute(&doc.path).unwrap_or_else(|_| doc.path.clone());
    let spec = app_spec(&doc.value, absolute.to_str(), registry, &mut c);
    match spec {
        Some(spec) if c.problems.is_empty() => Ok(spec),
        _ => Err(c.problems),
    }
}

fn app_spec(
    root: &Value,
    config_path: Option<&str>,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Option<AppSpec> {
    let top = c.mapping(root, "")?;
    if top.get("reporter").is_some() {
        c.problem(
            "reporter",
            "the control-plane reporter is not supported by this port yet; remove it",
        );
    }
    let top_known: Vec<&str> = TOP_LEVEL
        .iter()
        .copied()
        .chain(["reporter", "connectors", "sources", "sinks"])
        .chain(LEGACY_APP_FIELDS)
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

    // The reference's legacy form: `name`, `shutdown_timeout_s`, `config` and `state` at the
    // top level stand for an `app:` section; with `app:`, strict mode refuses them.
    let legacy: Map<String, Value> = LEGACY_APP_FIELDS
        .iter()
        .filter_map(|k| top.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    let app = match top.get("app") {
        Some(v) => {
            if c.strict && !legacy.is_empty() {
                let keys: Vec<&str> = legacy.keys().map(String::as_str).collect();
                c.problem(
                    "app",
                    format!(
                        "strict mode does not allow mixing 'app' with legacy top-level app \
                         fields: {}",
                        keys.join(", ")
                    ),
                );
            }
            c.mapping(v, "app").cloned().unwrap_or_default()
        }
        None if !legacy.is_empty() => legacy,
        None => {
            c.problem("app", "is required (a mapping with at least `name`)");
            Map::new()
        }
    };
    let app = &app;
    c.unknown_fields(app, APP_FIELDS, "app");
    let name = c.string(app, "name", "app");
    let shutdown_timeout_s = match app.get("shutdown_timeout_s") {
        Some(Value::Null) => None,
        None => Some(30.0),
        Some(_) => c.opt_number(app, "shutdown_timeout_s", "app", false),
    };
    let failure_capture = app
        .get("failure_capture")
        .filter(|v| !v.is_null())
        .and_then(|v| super::capture::failure_capture(v, c));
    let state = c.opt_string(app, "state", "app");
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

    let mut resources: Vec<ResourceSpec> = Vec::new();
    // `connectors`, `sources` and `sinks` are the reference's older names for `resources`: the
    // same specs, merged; a name defined twice must be defined the same way.
    for section in ["resources", "connectors", "sources", "sinks"] {
        let Some(map) = top
            .get(section)
            .filter(|v| !v.is_null())
            .and_then(|v| c.mapping(v, section))
        else {
            continue;
        };
        for (rname, rvalue) in map {
            let path = child(section, rname);
            if let Some(seen) = resources.iter().find(|r| &r.name == rname) {
                let mut same = seen.fields.clone();
                same.insert("type".into(), Value::String(seen.type_name.clone()));
                let differs = rvalue.as_object().is_none_or(|m| {
                    let mut m = m.clone();
                    if let Some(Value::String(t)) = m.get("type") {
                        let t = normalize_type(t);
                        m.insert("type".into(), Value::String(t));
                    }
                    m != same
                });
                if differs {
                    c.problem(
                        &path,
                        format!(
                            "resource {rname:?} is defined multiple times with different configs"
                        ),
                    );
                }
                continue;
            }
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
    if let Some(name) = &state {
        resource_ref(c, registry, &resources, name, "app.state", Role::StateStore);
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

    let hooks = app_hooks(top.get("hooks"), registry, c);
    // As the reference: a mapping (`{}` when absent) that also says where the file is.
    let mut config = match app.get("config") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            c.problem(
                "app.config",
                format!("expected a mapping, got {}", type_name(other)),
            );
            Map::new()
        }
    };
    if let Some(path) = config_path {
        config
            .entry("config_path")
            .or_insert_with(|| Value::String(path.to_owned()));
    }
    let config = Value::Object(config);
    Some(AppSpec {
        name: name?,
        shutdown_timeout_s,
        config,
        log_level,
        log_format,
        state,
        resources,
        tasks,
        hooks,
        failure_capture,
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
    let targets = emit_targets(map.get("emit"), &child(&path, "emit"), registry, c);
    let mut emit = Vec::new();
    for binding in targets.iter().flat_map(EmitSpec::bindings) {
        resource_ref(
            c,
            registry,
            resources,
            &binding.sink,
            &binding.path,
            Role::Sink,
        );
        emit.push(binding.sink.clone());
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
    let handler_path = child(
        &path,
        if map.get("handler").is_some_and(Value::is_object) {
            "handler.ref"
        } else {
            "handler"
        },
    );
    if let Some((r, _)) = &handler
        && !registry.has_handler(r)
        && !is_python_ref(r)
    {
        let known = registry.handler_names();
        c.problem(
            &handler_path,
            format!(
                "handler {r:?} is neither a registered Rust handler ({}) nor a Python ref \
                 'package.module:attr'",
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
    let hooks = task_hooks(map.get("hooks"), &child(&path, "hooks"), registry, c);
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
        targets,
        hooks,
        dead_letter,
        config: map.get("config").cloned().unwrap_or(Value::Null),
        metadata,
        handler,
        handler_path,
        concurrency: usize::try_from(concurrency).unwrap_or(1),
        timeout_s,
        retry,
        path,
    })
}

//! Function refs besides handlers: task `hooks`, top-level `hooks`, emit `transform`s and route
//! `when` predicates. Each is a ref string or `{ref, params}`; hooks also take a list. A ref
//! names a Rust callback the binary registered ([`Registry::callback`]) or, shaped
//! `package.module:attr`, a Python function.

use onestep_core::catalog::{child, type_name};
use serde_json::{Map, Value};

use super::checker::Checker;
use crate::registry::Registry;

/// One function ref with its params and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct CallableRef {
    /// The ref (`app.hooks:audit` or a registered Rust callback's name).
    pub reference: String,
    /// `params`, passed as keyword arguments (an object; empty when absent).
    pub params: Value,
    /// The YAML path of the ref (`tasks[0].hooks.before[1]` or `….ref`).
    pub path: String,
}

/// Task `hooks`: each runs in order; as in the reference.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskHooksSpec {
    /// `before(ctx, payload)`: an error fails the attempt before the handler runs.
    pub before: Vec<CallableRef>,
    /// `after_success(ctx, payload, result)`: an error fails the attempt.
    pub after_success: Vec<CallableRef>,
    /// `on_failure(ctx, payload, failure)`: errors are logged and ignored.
    pub on_failure: Vec<CallableRef>,
}

/// Top-level `hooks`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppHooksSpec {
    /// `startup(app)`, after the resources opened; an error stops the app.
    pub startup: Vec<CallableRef>,
    /// `shutdown(app)`, before the resources close.
    pub shutdown: Vec<CallableRef>,
    /// `events(event)`, for every task event; errors are logged and ignored.
    pub events: Vec<CallableRef>,
}

impl TaskHooksSpec {
    /// Every ref, in YAML order.
    pub fn all(&self) -> impl Iterator<Item = &CallableRef> {
        self.before
            .iter()
            .chain(&self.after_success)
            .chain(&self.on_failure)
    }
}

impl AppHooksSpec {
    /// Every ref, in YAML order.
    pub fn all(&self) -> impl Iterator<Item = &CallableRef> {
        self.startup
            .iter()
            .chain(&self.shutdown)
            .chain(&self.events)
    }
}

/// A ref string or `{ref, params}` at `path`.
pub fn callable(
    value: &Value,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Option<CallableRef> {
    let (reference, params, ref_path) = match value {
        Value::String(r) => (
            r.trim().to_owned(),
            Value::Object(Map::new()),
            path.to_owned(),
        ),
        Value::Object(m) => {
            c.unknown_fields_always(m, &["ref", "params"], path);
            let reference = c.string(m, "ref", path)?;
            let params = m
                .get("params")
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            if !params.is_object() {
                c.problem(
                    &child(path, "params"),
                    format!("expected a mapping, got {}", type_name(&params)),
                );
            }
            (reference, params, child(path, "ref"))
        }
        other => {
            c.problem(
                path,
                format!(
                    "expected a ref string or {{ref, params}}, got {}",
                    type_name(other)
                ),
            );
            return None;
        }
    };
    if !registry.has_callback(&reference) && !is_python_ref(&reference) {
        let known = registry.callback_names();
        let known = if known.is_empty() {
            "none registered".to_owned()
        } else {
            known.join(", ")
        };
        c.problem(
            &ref_path,
            format!(
                "{reference:?} is neither a registered Rust callback ({known}) nor a Python ref \
                 'package.module:attr'"
            ),
        );
        return None;
    }
    Some(CallableRef {
        reference,
        params,
        path: ref_path,
    })
}

/// One ref or a list of refs at `path` (a hook's value); `null` is none.
pub fn callables(
    value: Option<&Value>,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Vec<CallableRef> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| callable(item, &format!("{path}[{i}]"), registry, c))
            .collect(),
        Some(one) => callable(one, path, registry, c).into_iter().collect(),
    }
}

/// A task's `hooks` mapping at `path`.
pub fn task_hooks(
    value: Option<&Value>,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> TaskHooksSpec {
    let Some(map) = hooks_map(value, path, &["before", "after_success", "on_failure"], c) else {
        return TaskHooksSpec::default();
    };
    let mut list = |key: &str| callables(map.get(key), &child(path, key), registry, c);
    TaskHooksSpec {
        before: list("before"),
        after_success: list("after_success"),
        on_failure: list("on_failure"),
    }
}

/// The top-level `hooks` mapping.
pub fn app_hooks(value: Option<&Value>, registry: &Registry, c: &mut Checker<'_>) -> AppHooksSpec {
    let Some(map) = hooks_map(value, "hooks", &["startup", "shutdown", "events"], c) else {
        return AppHooksSpec::default();
    };
    let mut list = |key: &str| callables(map.get(key), &child("hooks", key), registry, c);
    AppHooksSpec {
        startup: list("startup"),
        shutdown: list("shutdown"),
        events: list("events"),
    }
}

fn hooks_map<'v>(
    value: Option<&'v Value>,
    path: &str,
    keys: &[&str],
    c: &mut Checker<'_>,
) -> Option<&'v Map<String, Value>> {
    let map = c.mapping(value.filter(|v| !v.is_null())?, path)?;
    c.unknown_fields_always(map, keys, path);
    Some(map)
}

/// Whether `reference` has the shape of a Python ref, `package.module:attr.path`: a dotted
/// module name, one colon, a dotted attribute path, every part an identifier.
pub fn is_python_ref(reference: &str) -> bool {
    let identifier = |part: &str| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
            && chars.all(|c| c == '_' || c.is_alphanumeric())
    };
    let dotted = |s: &str| !s.is_empty() && s.split('.').all(identifier);
    reference
        .split_once(':')
        .is_some_and(|(module, attr)| dotted(module) && dotted(attr))
}

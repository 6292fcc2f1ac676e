//! A task's `emit`: sink names, `{sink, transform}` bindings and `{when, then, otherwise}`
//! routes, in the reference's shapes:
//!
//! ```yaml
//! emit:
//!   - audit                                  # a sink
//!   - {sink: results, transform: app.t:shape}  # the transform's return value is sent
//!   - when: app.t:is_large                   # a predicate on (ctx, payload, result)
//!     then: [large, {sink: review, transform: app.t:summary}]
//!     otherwise: small
//! ```

use onestep_core::catalog::{child, type_name};
use serde_json::{Map, Value};

use super::callable::{CallableRef, callable};
use super::checker::Checker;
use crate::registry::Registry;

/// A sink with an optional transform.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingSpec {
    /// The sink resource.
    pub sink: String,
    /// `transform(ctx, payload, result)`: what is sent instead of the result.
    pub transform: Option<CallableRef>,
    /// Its YAML path.
    pub path: String,
}

/// One entry of `emit`.
#[derive(Debug, Clone, PartialEq)]
pub enum EmitSpec {
    /// A sink name or `{sink, transform}`.
    Binding(BindingSpec),
    /// `{when, then, otherwise}`: `then` when the predicate is truthy, else `otherwise`.
    Route {
        /// `when(ctx, payload, result)`.
        when: CallableRef,
        /// The bindings taken when it holds.
        then: Vec<BindingSpec>,
        /// The bindings taken when it does not (none when absent).
        otherwise: Vec<BindingSpec>,
    },
}

impl EmitSpec {
    /// The bindings it may send to, `then` before `otherwise`.
    pub fn bindings(&self) -> Vec<&BindingSpec> {
        match self {
            Self::Binding(b) => vec![b],
            Self::Route {
                then, otherwise, ..
            } => then.iter().chain(otherwise).collect(),
        }
    }
}

/// Reads `emit` at `path` (a task's `tasks[i].emit`).
pub fn emit_targets(
    value: Option<&Value>,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Vec<EmitSpec> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .flat_map(|(i, item)| entry(item, &format!("{path}[{i}]"), registry, c))
            .collect(),
        Some(one) => entry(one, path, registry, c),
    }
}

/// One entry; a plain string is one binding (a list inside a list is refused).
fn entry(value: &Value, path: &str, registry: &Registry, c: &mut Checker<'_>) -> Vec<EmitSpec> {
    match value {
        Value::Object(m) if is_binding(m) => binding(m, path, registry, c)
            .map(EmitSpec::Binding)
            .into_iter()
            .collect(),
        Value::Object(m) => route(m, path, registry, c).into_iter().collect(),
        Value::String(_) => c
            .string_value(value, path)
            .map(|sink| {
                EmitSpec::Binding(BindingSpec {
                    sink,
                    transform: None,
                    path: path.to_owned(),
                })
            })
            .into_iter()
            .collect(),
        other => {
            c.problem(
                path,
                format!(
                    "expected a sink name, {{sink, transform}} or {{when, then, otherwise}}, got {}",
                    type_name(other)
                ),
            );
            Vec::new()
        }
    }
}

fn is_binding(m: &Map<String, Value>) -> bool {
    m.contains_key("sink") || m.contains_key("transform")
}

fn binding(
    m: &Map<String, Value>,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Option<BindingSpec> {
    c.unknown_fields_always(m, &["sink", "transform"], path);
    let transform = m
        .get("transform")
        .and_then(|t| callable(t, &child(path, "transform"), registry, c));
    let sink = c.string(m, "sink", path)?;
    Some(BindingSpec {
        sink,
        transform,
        path: child(path, "sink"),
    })
}

fn route(
    m: &Map<String, Value>,
    path: &str,
    registry: &Registry,
    c: &mut Checker<'_>,
) -> Option<EmitSpec> {
    c.unknown_fields_always(m, &["when", "then", "otherwise"], path);
    for key in ["when", "then"] {
        if !m.contains_key(key) {
            c.problem(
                &child(path, key),
                "is required in an emit route ({when, then, otherwise}); a binding is \
                 {sink, transform}",
            );
        }
    }
    let when = m
        .get("when")
        .and_then(|w| callable(w, &child(path, "when"), registry, c));
    let then = m
        .get("then")
        .map(|t| branch(t, &child(path, "then"), registry, c));
    let otherwise = m
        .get("otherwise")
        .map(|o| branch(o, &child(path, "otherwise"), registry, c))
        .unwrap_or_default();
    Some(EmitSpec::Route {
        when: when?,
        then: then?,
        otherwise,
    })
}

/// A route's `then`/`otherwise`: a sink name, one binding, or a non-empty list of both.
fn branch(value: &Value, path: &str, registry: &Registry, c: &mut Checker<'_>) -> Vec<BindingSpec> {
    let one = |item: &Value, path: &str, c: &mut Checker<'_>| match item {
        Value::Object(m) if is_binding(m) => binding(m, path, registry, c),
        Value::String(_) => c.string_value(item, path).map(|sink| BindingSpec {
            sink,
            transform: None,
            path: path.to_owned(),
        }),
        other => {
            c.problem(
                path,
                format!(
                    "expected a sink name or {{sink, transform}}, got {}",
                    type_name(other)
                ),
            );
            None
        }
    };
    match value {
        Value::Array(items) if items.is_empty() => {
            c.problem(path, "must not be empty");
            Vec::new()
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| one(item, &format!("{path}[{i}]"), c))
            .collect(),
        other => one(other, path, c).into_iter().collect(),
    }
}

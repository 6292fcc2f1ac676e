//! Builds an [`OneStepApp`] from a validated [`AppSpec`]: resources on demand (references
//! resolved by name, cycles reported), tasks with their handlers and retry policies.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::BuildContext;
use onestep_core::{OneStepApp, Task, TaskContext};
use serde_json::Value;

use onestep_python::{PythonConfig, PythonPool};

use super::callbacks;
use super::retry::retry_policy;
use super::spec::AppSpec;
use crate::registry::Registry;

/// What the command line adds to a file when building its app.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// How Python handlers start (refs that name no Rust handler).
    pub python: PythonConfig,
    /// Whether task events are logged (`run --no-task-events` turns it off).
    pub log_task_events: bool,
}

/// Builds the app. Errors name the resource or task path. Handler refs that name no Rust
/// handler run in one [`PythonPool`] started with `options.python`, opened before the other
/// resources.
pub fn build_app(
    spec: &AppSpec,
    registry: &Registry,
    options: &BuildOptions,
) -> Result<OneStepApp, String> {
    let mut ctx = BuildContext::new(registry.catalog(), &spec.resources);
    for r in &spec.resources {
        ctx.get(&r.name).map_err(|e| e.to_string())?;
    }
    let mut builder = OneStepApp::builder(&spec.name)
        .config(spec.config.clone())
        .shutdown_timeout(spec.shutdown_timeout_s.map(Duration::from_secs_f64))
        .log_task_events(options.log_task_events);
    if let Some(state) = &spec.state {
        builder = builder.state(
            ctx.state_store(state)
                .map_err(|e| format!("app.state: {e}"))?,
        );
    }
    let pool = (!super::python::python_refs(spec, registry).is_empty())
        .then(|| Arc::new(PythonPool::new(options.python.clone())));
    if let Some(pool) = &pool {
        builder = builder.resource(pool.clone());
    }
    for lifecycle in ctx.take_lifecycles() {
        builder = builder.resource(lifecycle);
    }
    let resolver = callbacks::Resolver::new(registry, pool.as_ref());
    builder =
        callbacks::with_app_hooks(builder, &spec.hooks, (&spec.name, &spec.config), &resolver)?;
    for t in &spec.tasks {
        let mut task = Task::new(&t.name)
            .concurrency(t.concurrency)
            .config(t.config.clone())
            .metadata(t.metadata.clone())
            .retry_arc(retry_policy(&t.retry).map_err(|e| format!("{}.retry: {e}", t.path))?);
        if let Some(d) = &t.description {
            task = task.description(d);
        }
        if let Some(s) = &t.source {
            task = task.source(
                ctx.source(s)
                    .map_err(|e| format!("{}.source: {e}", t.path))?,
            );
        }
        for target in &t.targets {
            task = task.emit(callbacks::emit_target(target, &mut ctx, &resolver)?);
        }
        task = callbacks::with_task_hooks(task, &t.hooks, &resolver)?;
        for d in &t.dead_letter {
            task = task.dead_letter(
                ctx.sink(d)
                    .map_err(|err| format!("{}.dead_letter: {err}", t.path))?,
            );
        }
        if let Some(timeout) = t.timeout_s {
            task = task.timeout(Duration::from_secs_f64(timeout));
        }
        if let Some((reference, params)) = &t.handler {
            let handler = match (registry.get_handler(reference), &pool) {
                (Some(handler), _) => handler,
                (None, Some(pool)) => {
                    let python = pool.handler(reference, params.clone());
                    Arc::new(move |ctx, input, _params| python(ctx, input))
                }
                (None, None) => {
                    return Err(format!(
                        "{}.handler: handler {reference:?} is not registered",
                        t.path
                    ));
                }
            };
            let params = Arc::new(params.clone());
            task = task
                .handler_ref(reference)
                .handler(move |ctx: TaskContext, input: Value| handler(ctx, input, params.clone()));
        }
        builder = builder.task(task);
    }
    builder.build().map_err(|e| e.to_string())
}

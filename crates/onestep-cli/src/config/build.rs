//! Builds an [`OneStepApp`] from a validated [`AppSpec`]: resources on demand (references
//! resolved by name, cycles reported), tasks with their handlers and retry policies.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{BuildContext, Built};
use onestep_core::{OneStepApp, Sink, Source, Task, TaskContext, TaskEvent};
use serde_json::Value;

use onestep_python::{PythonConfig, PythonPool};

use super::callbacks;
use super::retry::retry_policy;
use super::spec::AppSpec;
use crate::registry::Registry;

/// What the command line adds to a file when building its app.
#[derive(Clone, Default)]
pub struct BuildOptions {
    /// How Python handlers start (refs that name no Rust handler).
    pub python: PythonConfig,
    /// Whether task events are logged (`run --no-task-events` turns it off).
    pub log_task_events: bool,
    /// Build only one task, fed and watched by `onestep task run`/`replay`.
    pub diagnostic: Option<Diagnostic>,
    /// Serve `/metrics`, `/healthz` and `/readyz` here (`run --metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// How a sink is used, for [`Diagnostic::wrap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkUse {
    /// An emit target (a binding or a route branch).
    Emit,
    /// A dead letter.
    DeadLetter,
}

/// Wraps a sink the task sends to (see [`Diagnostic::wrap`]).
pub type SinkWrap = Arc<dyn Fn(Arc<dyn Sink>, SinkUse) -> Arc<dyn Sink> + Send + Sync>;

/// A diagnostic build: only `task`, its source replaced, its sinks wrapped, its events watched.
#[derive(Clone)]
pub struct Diagnostic {
    /// The task to build.
    pub task: String,
    /// Makes the task's source from the name its configured source has at runtime.
    pub source: Arc<dyn Fn(Option<String>) -> Arc<dyn Source> + Send + Sync>,
    /// Wraps each sink the task sends to.
    pub wrap: SinkWrap,
    /// Sees every task event.
    pub observe: Arc<dyn Fn(&TaskEvent) + Send + Sync>,
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("python", &self.python)
            .field("log_task_events", &self.log_task_events)
            .field("diagnostic", &self.diagnostic.as_ref().map(|d| &d.task))
            .field("metrics_addr", &self.metrics_addr)
            .finish()
    }
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
    if let Some(capture) = &spec.failure_capture {
        builder = builder.failure_capture(capture.clone());
    }
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
        for r in &spec.resources {
            let built = ctx.get(&r.name).map_err(|e| e.to_string())?;
            let sink = match &built {
                Built::Sink(s) | Built::Both { sink: s, .. } => Some(s.clone()),
                _ => None,
            };
            let runtime = built
                .resource()
                .map_or_else(|| r.name.clone(), |res| res.name().to_owned());
            pool.expose(&r.name, &runtime, sink);
        }
        let pool = pool.clone();
        builder = builder.on_startup(move |handle| {
            pool.set_app_handle(handle);
            async { Ok(()) }
        });
    }
    for lifecycle in ctx.take_lifecycles() {
        builder = builder.resource(lifecycle);
    }
    let resolver = callbacks::Resolver::new(registry, pool.as_ref());
    let diagnostic = options.diagnostic.as_ref();
    let wrap = |sink: Arc<dyn Sink>, used: SinkUse| match diagnostic {
        Some(d) => (d.wrap)(sink, used),
        None => sink,
    };
    if let Some(d) = diagnostic {
        let observe = d.observe.clone();
        builder = builder.on_event(move |event| observe(event));
    }
    builder =
        callbacks::with_app_hooks(builder, &spec.hooks, (&spec.name, &spec.config), &resolver)?;
    if let Some(addr) = options.metrics_addr {
        let mut probed = Vec::new();
        for t in &spec.tasks {
            let source = match &t.source {
                Some(s) => {
                    let name = ctx.source(s).map_err(|e| e.to_string())?.name().to_owned();
                    let class = spec
                        .resources
                        .iter()
                        .find(|r| &r.name == s)
                        .and_then(|r| registry.catalog().get(&r.type_name))
                        .map_or_else(|| s.clone(), |c| c.class_name().to_owned());
                    Some((name, class))
                }
                None => None,
            };
            probed.push(crate::probes::ProbedTask {
                task: t.name.clone(),
                source,
            });
        }
        let exporter = Arc::new(onestep_core::metrics::PrometheusExporter::new(env!(
            "CARGO_PKG_VERSION"
        )));
        if let Some(pool) = &pool {
            pool.set_metrics(exporter.clone());
        }
        builder = crate::probes::install(builder, exporter, addr, &spec.name, probed);
    }
    for t in &spec.tasks {
        if diagnostic.is_some_and(|d| d.task != t.name) {
            continue;
        }
        let mut task = Task::new(&t.name)
            .concurrency(t.concurrency)
            .config(t.config.clone())
            .metadata(t.metadata.clone())
            .retry_arc(retry_policy(&t.retry).map_err(|e| format!("{}.retry: {e}", t.path))?);
        if let Some(d) = &t.description {
            task = task.description(d);
        }
        let source = match &t.source {
            Some(s) => Some(
                ctx.source(s)
                    .map_err(|e| format!("{}.source: {e}", t.path))?,
            ),
            None => None,
        };
        match (diagnostic, source) {
            (Some(d), source) => {
                task = task.source((d.source)(source.map(|s| s.name().to_owned())))
            }
            (None, Some(source)) => task = task.source(source),
            (None, None) => {}
        }
        for target in &t.targets {
            let emit_wrap = |sink| wrap(sink, SinkUse::Emit);
            task = task.emit(callbacks::emit_target(
                target, &mut ctx, &resolver, &emit_wrap,
            )?);
        }
        task = callbacks::with_task_hooks(task, &t.hooks, &resolver)?;
        for d in &t.dead_letter {
            let sink = ctx
                .sink(d)
                .map_err(|err| format!("{}.dead_letter: {err}", t.path))?;
            task = task.dead_letter(wrap(sink, SinkUse::DeadLetter));
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

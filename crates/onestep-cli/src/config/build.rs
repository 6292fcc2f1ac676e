//! Builds an [`OneStepApp`] from a validated [`AppSpec`]: resources on demand (references
//! resolved by name, cycles reported), tasks with their handlers and retry policies.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use onestep_core::{
    ByFailureKind, ExponentialBackoff, FailureKind, MaxAttempts, NoRetry, OneStepApp, Resource,
    RetryPolicy, Sink, Source, Task, TaskContext,
};
use serde_json::Value;

use super::spec::{AppSpec, ResourceSpec, RetrySpec};
use crate::registry::{Built, Registry};

/// Builds resources by name, each once, in dependency order.
pub struct BuildContext<'a> {
    registry: &'a Registry,
    specs: &'a [ResourceSpec],
    built: HashMap<String, Built>,
    building: HashSet<String>,
    /// Connector lifecycles to open and close with the app.
    lifecycles: Vec<Arc<dyn Resource>>,
    /// One value per type, shared by the resources of this build (see [`BuildContext::shared`]).
    shared: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl<'a> BuildContext<'a> {
    /// A context over `specs`.
    pub fn new(registry: &'a Registry, specs: &'a [ResourceSpec]) -> Self {
        Self {
            registry,
            specs,
            built: HashMap::new(),
            building: HashSet::new(),
            lifecycles: Vec::new(),
            shared: HashMap::new(),
        }
    }

    /// The one `T` of this build, made with `T::default()` on first use: state the resources
    /// of one app share, such as the listeners webhook sources on one port serve from.
    pub fn shared<T: Default + Clone + Send + Sync + 'static>(&mut self) -> T {
        let slot = self
            .shared
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        // The slot of `TypeId::of::<T>()` always holds a `T`.
        slot.downcast_ref::<T>().cloned().unwrap_or_default()
    }

    /// The resource named `name`, built on first use.
    pub fn get(&mut self, name: &str) -> Result<Built, String> {
        if let Some(b) = self.built.get(name) {
            return Ok(b.clone());
        }
        let spec = self
            .specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("unknown resource {name:?}"))?;
        if !self.building.insert(name.to_string()) {
            return Err(format!(
                "{}: resource references form a cycle through {name:?}",
                spec.path
            ));
        }
        let rtype = self
            .registry
            .resource_type(&spec.type_name)
            .ok_or_else(|| {
                format!(
                    "{}.type: unknown resource type {:?}",
                    spec.path, spec.type_name
                )
            })?;
        let built = (rtype.build)(spec, self).map_err(|e| {
            if e.starts_with("resources.") {
                e
            } else {
                format!("{}: {e}", spec.path)
            }
        })?;
        if let Built::Connector { lifecycle, .. } = &built {
            self.lifecycles.push(lifecycle.clone());
        }
        self.building.remove(name);
        self.built.insert(name.to_string(), built.clone());
        Ok(built)
    }

    fn source(&mut self, name: &str) -> Result<Arc<dyn Source>, String> {
        match self.get(name)? {
            Built::Source(s) => Ok(s),
            Built::Queue(q) => Ok(q),
            _ => Err(format!("resource {name:?} is not a source")),
        }
    }

    fn sink(&mut self, name: &str) -> Result<Arc<dyn Sink>, String> {
        match self.get(name)? {
            Built::Sink(s) => Ok(s),
            Built::Queue(q) => Ok(q),
            _ => Err(format!("resource {name:?} is not a sink")),
        }
    }
}

/// The retry policy a spec describes.
pub fn retry_policy(spec: &RetrySpec) -> Result<Arc<dyn RetryPolicy>, String> {
    Ok(match spec {
        RetrySpec::None => Arc::new(NoRetry),
        RetrySpec::MaxAttempts {
            max_attempts,
            delay_s,
        } => {
            let p = MaxAttempts::new(*max_attempts).map_err(|e| e.to_string())?;
            Arc::new(match delay_s {
                Some(d) => p.with_delay(Duration::from_secs_f64(*d)),
                None => p,
            })
        }
        RetrySpec::Exponential {
            max_attempts,
            min_delay_s,
            max_delay_s,
            multiplier,
            jitter,
        } => Arc::new(
            ExponentialBackoff::from_secs(
                *max_attempts,
                *min_delay_s,
                *max_delay_s,
                *multiplier,
                jitter
                    .parse()
                    .map_err(|e: onestep_core::Error| e.to_string())?,
            )
            .map_err(|e| e.to_string())?,
        ),
        RetrySpec::ByFailureKind {
            default,
            error,
            timeout,
            cancelled,
        } => {
            let mut b = ByFailureKind::builder();
            let boxed = |s: &RetrySpec| retry_policy(s).map(ArcPolicy);
            if let Some(d) = default {
                b = b.default_policy(boxed(d)?);
            }
            for (kind, sub) in [
                (FailureKind::Error, error),
                (FailureKind::Timeout, timeout),
                (FailureKind::Cancelled, cancelled),
            ] {
                if let Some(s) = sub {
                    b = b.on(kind, boxed(s)?);
                }
            }
            Arc::new(b.build().map_err(|e| e.to_string())?)
        }
    })
}

/// A shared policy usable where an owned one is expected.
#[derive(Debug)]
struct ArcPolicy(Arc<dyn RetryPolicy>);

impl RetryPolicy for ArcPolicy {
    fn on_error(
        &self,
        envelope: &onestep_core::Envelope,
        failure: &onestep_core::FailureInfo,
    ) -> onestep_core::RetryAction {
        self.0.on_error(envelope, failure)
    }

    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// Builds the app. Errors name the resource or task path.
pub fn build_app(spec: &AppSpec, registry: &Registry) -> Result<OneStepApp, String> {
    let mut ctx = BuildContext::new(registry, &spec.resources);
    for r in &spec.resources {
        ctx.get(&r.name)?;
    }
    let mut builder = OneStepApp::builder(&spec.name)
        .config(spec.config.clone())
        .shutdown_timeout(spec.shutdown_timeout_s.map(Duration::from_secs_f64));
    for lifecycle in std::mem::take(&mut ctx.lifecycles) {
        builder = builder.resource(lifecycle);
    }
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
        for e in &t.emit {
            task = task.emit(
                ctx.sink(e)
                    .map_err(|err| format!("{}.emit: {err}", t.path))?,
            );
        }
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
            let handler = registry.get_handler(reference).ok_or_else(|| {
                format!(
                    "{}.handler: handler {reference:?} is not registered",
                    t.path
                )
            })?;
            let params = Arc::new(params.clone());
            task = task
                .handler_ref(reference)
                .handler(move |ctx: TaskContext, input: Value| handler(ctx, input, params.clone()));
        }
        builder = builder.task(task);
    }
    builder.build().map_err(|e| e.to_string())
}

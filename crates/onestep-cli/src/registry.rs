//! Handler references and resource types, resolved by name from YAML.
//!
//! Rust has no dynamic import: a handler ref such as `app.handlers:run_agent` resolves against
//! this registry, filled by the binary that runs the config (the stock `onestep` binary registers
//! the built-ins; your own binary adds its handlers with [`Cli::handler`](crate::Cli::handler)).
//! Resource types register the same way, so crates add theirs without editing a central match.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use onestep_core::task::BoxFuture;
use onestep_core::{Sink, Source, TaskContext, TaskError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::config::build::BuildContext;
use crate::config::spec::{Checker, ResourceSpec};

/// A registered handler: `(ctx, input, params)` to a JSON result.
pub type HandlerFn = Arc<
    dyn Fn(TaskContext, Value, Arc<Value>) -> BoxFuture<'static, Result<Value, TaskError>>
        + Send
        + Sync,
>;

/// What a resource type builds.
#[derive(Clone)]
pub enum Built {
    /// A source.
    Source(Arc<dyn Source>),
    /// A sink.
    Sink(Arc<dyn Sink>),
    /// Both a source and a sink (a queue).
    Queue(Arc<onestep_core::MemoryQueue>),
    /// A connector other resources reference by name; `kind` names it in errors (`postgres`).
    Connector {
        /// The connector's kind, e.g. `postgres`.
        kind: &'static str,
        /// The connector, downcast by the resources that use it.
        value: Arc<dyn Any + Send + Sync>,
        /// Closes it at shutdown.
        lifecycle: Arc<dyn onestep_core::Resource>,
    },
}

/// One documented field of a resource type.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FieldDoc {
    /// The field name.
    pub name: &'static str,
    /// `string`, `number`, `integer`, `boolean`, `json`, `list`.
    pub kind: &'static str,
    /// Whether it must be given.
    pub required: bool,
    /// The default, as YAML would write it.
    pub default: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
}

/// A resource type: its fields, its checks, and how to build it.
#[derive(Clone)]
pub struct ResourceType {
    /// The normalized type name (`postgres_execution_source`).
    pub name: &'static str,
    /// `source`, `sink`, `connector`.
    pub roles: &'static [&'static str],
    /// The fields besides `type`.
    pub fields: &'static [FieldDoc],
    /// Field checks beyond "known field" (types, ranges, cross-field rules).
    pub validate: fn(&Map<String, Value>, &str, &mut Checker<'_>),
    /// Builds the resource; may build referenced resources through the context.
    pub build: fn(&ResourceSpec, &mut BuildContext<'_>) -> Result<Built, String>,
}

impl ResourceType {
    /// Whether `field` is one of its fields.
    pub fn allows(&self, field: &str) -> bool {
        self.fields.iter().any(|f| f.name == field)
    }

    /// Its field names.
    pub fn field_names(&self) -> Vec<&'static str> {
        self.fields.iter().map(|f| f.name).collect()
    }
}

/// Handlers and resource types by name.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: BTreeMap<String, HandlerFn>,
    resources: BTreeMap<String, ResourceType>,
}

impl Registry {
    /// The built-in handlers and resource types.
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        crate::builtin::register(&mut r);
        crate::resource::register(&mut r);
        r
    }

    /// Registers a typed handler `async fn(ctx, input: I) -> Result<O, E>`.
    pub fn handler<I, O, E, F, Fut>(&mut self, reference: &str, f: F)
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.handler_with_params(reference, move |ctx, input: I, _params: Arc<Value>| {
            let f = f.clone();
            async move { f(ctx, input).await }
        });
    }

    /// Registers a typed handler that also receives the YAML `handler.params`.
    pub fn handler_with_params<I, O, E, F, Fut>(&mut self, reference: &str, f: F)
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, I, Arc<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let f = Arc::new(f);
        let erased: HandlerFn = Arc::new(move |ctx, body, params| {
            let f = f.clone();
            Box::pin(async move {
                let input: I = onestep_core::execution::codec::from_value(&body).map_err(|e| {
                    TaskError::new(
                        "InvalidInput",
                        format!("task input does not match the handler's input type: {e}"),
                    )
                })?;
                let output = f(ctx, input, params).await.map_err(Into::into)?;
                serde_json::to_value(output).map_err(|e| {
                    TaskError::new(
                        "InvalidOutput",
                        format!("task result cannot be serialized to JSON: {e}"),
                    )
                })
            })
        });
        self.handlers.insert(reference.to_string(), erased);
    }

    /// The resource type named `name` (normalized).
    pub fn resource_type(&self, name: &str) -> Option<&ResourceType> {
        self.resources.get(name)
    }

    /// Registers (or replaces) a resource type.
    pub fn add_resource_type(&mut self, rtype: ResourceType) {
        self.resources.insert(rtype.name.to_string(), rtype);
    }

    /// Every resource type, sorted by name.
    pub fn resource_types(&self) -> impl Iterator<Item = &ResourceType> {
        self.resources.values()
    }

    /// The names of every resource type.
    pub fn resource_type_names(&self) -> Vec<&str> {
        self.resources.keys().map(String::as_str).collect()
    }

    /// Whether `reference` is registered.
    pub fn has_handler(&self, reference: &str) -> bool {
        self.handlers.contains_key(reference)
    }

    /// The handler registered as `reference`.
    pub fn get_handler(&self, reference: &str) -> Option<HandlerFn> {
        self.handlers.get(reference).cloned()
    }

    /// Every handler reference, sorted.
    pub fn handler_names(&self) -> Vec<&str> {
        self.handlers.keys().map(String::as_str).collect()
    }
}

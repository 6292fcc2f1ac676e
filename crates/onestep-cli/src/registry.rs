//! Handler references and resource types, resolved by name from YAML.
//!
//! Rust has no dynamic import: a handler ref such as `app.handlers:run_agent` resolves against
//! this registry, filled by the binary that runs the config (the stock `onestep` binary registers
//! the built-ins; your own binary adds its handlers with [`Cli::handler`](crate::Cli::handler)).
//! Resource types come from a [`Catalog`] that each crate adds its types to
//! (`onestep_sql::catalog::register`, …), so the binary only composes them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use onestep_core::catalog::{Catalog, ResourceType};
use onestep_core::task::BoxFuture;
use onestep_core::{TaskContext, TaskError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A registered handler: `(ctx, input, params)` to a JSON result.
pub type HandlerFn = Arc<
    dyn Fn(TaskContext, Value, Arc<Value>) -> BoxFuture<'static, Result<Value, TaskError>>
        + Send
        + Sync,
>;

/// A registered callback: a hook, an emit transform or route predicate, or an event subscriber
/// named in YAML. It gets the delivery's context (none in `startup`/`shutdown`/`events` hooks),
/// the reference's arguments as JSON (see [`Registry::callback`]) and the YAML `params`.
pub type CallbackFn = Arc<
    dyn Fn(
            Option<TaskContext>,
            Vec<Value>,
            Arc<Value>,
        ) -> BoxFuture<'static, Result<Value, TaskError>>
        + Send
        + Sync,
>;

/// Handlers, callbacks and resource types by name.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: BTreeMap<String, HandlerFn>,
    callbacks: BTreeMap<String, CallbackFn>,
    catalog: Catalog,
}

impl Registry {
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

    /// Registers a callback YAML can name where the reference takes a function ref: task
    /// `hooks`, top-level `hooks`, emit `transform` and route `when`. It is called with the
    /// delivery's context when there is one and the reference's positional arguments as JSON:
    ///
    /// | used as | `args` | result |
    /// |---|---|---|
    /// | `hooks.before` | `[payload]` | ignored; an error fails the attempt |
    /// | `hooks.after_success` | `[payload, result]` | ignored; an error fails the attempt |
    /// | `hooks.on_failure` | `[payload, failure]` (`kind`, `exception_type`, `message`, `stage`) | ignored; errors are logged |
    /// | `transform` | `[payload, result]` | the body sent to the sink |
    /// | `when` | `[payload, result]` | its truth as in Python (`null`, `false`, `0`, `""`, `[]`, `{}` are false) |
    /// | top-level `startup`, `shutdown` | `[{"name", "config"}]` | ignored; a startup error stops the app |
    /// | top-level `events` | `[event]` (a `TaskEvent` as JSON) | ignored; errors are logged |
    pub fn callback<F, Fut>(&mut self, reference: &str, f: F)
    where
        F: Fn(Option<TaskContext>, Vec<Value>, Arc<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, TaskError>> + Send + 'static,
    {
        self.callbacks.insert(
            reference.to_string(),
            Arc::new(move |ctx, args, params| Box::pin(f(ctx, args, params))),
        );
    }

    /// Whether a callback is registered as `reference`.
    pub fn has_callback(&self, reference: &str) -> bool {
        self.callbacks.contains_key(reference)
    }

    /// The callback registered as `reference`.
    pub fn get_callback(&self, reference: &str) -> Option<CallbackFn> {
        self.callbacks.get(reference).cloned()
    }

    /// Every callback reference, sorted.
    pub fn callback_names(&self) -> Vec<&str> {
        self.callbacks.keys().map(String::as_str).collect()
    }

    /// The resource types.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The resource types, to add to (`onestep_sql::catalog::register(registry.catalog_mut())`).
    pub fn catalog_mut(&mut self) -> &mut Catalog {
        &mut self.catalog
    }

    /// Registers (or replaces) a resource type.
    pub fn add_resource_type<T: ResourceType>(&mut self, rtype: T) {
        self.catalog.add(rtype);
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

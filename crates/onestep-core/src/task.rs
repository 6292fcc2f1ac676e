//! Tasks: a typed handler plus where its input comes from and where its output goes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::args::TaskArgs;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::execution::ExecutionInfo;
use crate::failure::{FailureInfo, TaskError};
use crate::retry::{NoRetry, RetryPolicy};
use crate::source::{IntoSink, IntoSource, Sink, Source};
use crate::state::ScopedState;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A handler behind its input and output types. It reads the payload where it lies, in its
/// context's envelope, so a typed handler's input is deserialized without a copy of the payload
/// first (inside the future, so a task's timeout counts the deserializing).
pub(crate) type ErasedHandler =
    Arc<dyn Fn(TaskContext) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;
pub(crate) type BeforeHook =
    Arc<dyn Fn(TaskContext, Value) -> BoxFuture<'static, Result<(), TaskError>> + Send + Sync>;
pub(crate) type AfterSuccessHook = Arc<
    dyn Fn(TaskContext, Value, Value) -> BoxFuture<'static, Result<(), TaskError>> + Send + Sync,
>;
pub(crate) type FailureHook =
    Arc<dyn Fn(TaskContext, Value, FailureInfo) -> BoxFuture<'static, ()> + Send + Sync>;
pub(crate) type Transform = Arc<
    dyn Fn(TaskContext, Value, Value) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync,
>;
pub(crate) type Predicate = Arc<
    dyn Fn(TaskContext, Value, Value) -> BoxFuture<'static, Result<bool, TaskError>> + Send + Sync,
>;

/// What a handler and its hooks can see and do while processing one delivery.
#[derive(Clone)]
pub struct TaskContext {
    pub(crate) app_name: Arc<str>,
    pub(crate) task_name: Arc<str>,
    pub(crate) config: Arc<Value>,
    pub(crate) task_config: Arc<Value>,
    pub(crate) envelope: Arc<Envelope>,
    pub(crate) cancellation: CancellationToken,
    pub(crate) state: ScopedState,
    pub(crate) sinks: Arc<[Arc<dyn Sink>]>,
    pub(crate) execution: Option<ExecutionInfo>,
    pub(crate) metrics: Option<Arc<crate::metrics::PrometheusExporter>>,
}

impl TaskContext {
    /// The app's name.
    pub fn app_name(&self) -> &str {
        &self.app_name
    }

    /// The task's name.
    pub fn task_name(&self) -> &str {
        &self.task_name
    }

    /// The app-wide configuration value.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The task's own configuration value.
    pub fn task_config(&self) -> &Value {
        &self.task_config
    }

    /// The envelope being processed (body, metadata, previous attempts).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The envelope's metadata.
    pub fn meta(&self) -> &Map<String, Value> {
        &self.envelope.meta
    }

    /// How many times this message was attempted before.
    pub fn attempts(&self) -> u32 {
        self.envelope.attempts
    }

    /// Cancelled when this attempt is being cancelled (shutdown past its timeout, lost lease, or a
    /// cancel request). Long handlers should check it at safe points; the handler's future is
    /// dropped shortly after.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }

    /// The tracked execution this attempt runs (its id, attempt number, lease deadline and
    /// cancel state), `None` for a delivery of any other source.
    pub fn execution(&self) -> Option<&ExecutionInfo> {
        self.execution.as_ref()
    }

    /// Reports progress of the tracked execution this attempt runs
    /// ([`ExecutionInfo::report_progress`]); does nothing for other deliveries.
    pub fn report_progress(
        &self,
        progress: serde_json::Value,
    ) -> crate::execution::ExecutionResult<()> {
        match &self.execution {
            Some(execution) => execution.report_progress(progress),
            None => Ok(()),
        }
    }

    /// This task's own counters and gauges (the reference's `ctx.metrics`), rendered by the
    /// app's exporter ([`AppBuilder::metrics`](crate::AppBuilder::metrics)) with a `task` label.
    pub fn metrics(&self) -> crate::metrics::handler::TaskMetrics {
        crate::metrics::handler::TaskMetrics {
            exporter: self.metrics.clone(),
            task: self.task_name.clone(),
        }
    }

    /// State scoped to this task (`"<app>:<task>"`).
    pub fn state(&self) -> &ScopedState {
        &self.state
    }

    /// Sends `body` to the sink named `sink`, or to every emit sink of the task when `None`.
    /// Not retried.
    pub async fn emit(
        &self,
        body: Value,
        sink: Option<&str>,
        meta: Map<String, Value>,
    ) -> Result<()> {
        let targets: Vec<&Arc<dyn Sink>> = match sink {
            Some(name) => {
                let found: Vec<_> = self.sinks.iter().filter(|s| s.name() == name).collect();
                if found.is_empty() {
                    return Err(Error::invalid(
                        "sink",
                        format!("{name:?} is not an emit sink of task {}", self.task_name),
                    ));
                }
                found
            }
            None => self.sinks.iter().collect(),
        };
        for target in targets {
            target
                .send(Envelope::new(body.clone()).with_meta(meta.clone()))
                .await?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("app", &self.app_name)
            .field("task", &self.task_name)
            .field("attempts", &self.envelope.attempts)
            .finish()
    }
}

/// A sink with an optional transform of `(ctx, payload, result)` into the body that is sent.
#[derive(Clone)]
pub struct EmitBinding {
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) transform: Option<Transform>,
}

impl EmitBinding {
    /// Sends the handler's result as is.
    pub fn new(sink: Arc<dyn Sink>) -> Self {
        Self {
            sink,
            transform: None,
        }
    }

    /// Sends `transform(ctx, payload, result)` instead of the result.
    pub fn with_transform<F>(mut self, transform: F) -> Self
    where
        F: Fn(&TaskContext, &Value, &Value) -> Result<Value, TaskError> + Send + Sync + 'static,
    {
        self.transform = Some(Arc::new(move |ctx, payload, result| {
            let body = transform(&ctx, &payload, &result);
            Box::pin(std::future::ready(body))
        }));
        self
    }

    /// Sends what the future `transform(ctx, payload, result)` resolves to instead of the
    /// result (a transform that does I/O, such as one written in Python).
    pub fn with_async_transform<F, Fut>(mut self, transform: F) -> Self
    where
        F: Fn(TaskContext, Value, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, TaskError>> + Send + 'static,
    {
        self.transform = Some(Arc::new(move |ctx, payload, result| {
            Box::pin(transform(ctx, payload, result))
        }));
        self
    }

    /// The sink this binding sends to.
    pub fn sink(&self) -> &Arc<dyn Sink> {
        &self.sink
    }
}

/// Chooses bindings by a predicate on `(ctx, payload, result)`.
#[derive(Clone)]
pub struct EmitRoute {
    pub(crate) when: Predicate,
    pub(crate) then: Vec<EmitBinding>,
    pub(crate) otherwise: Vec<EmitBinding>,
}

impl EmitRoute {
    /// A route taking `then` when `when` holds and `otherwise` when it does not.
    pub fn new<F>(when: F, then: Vec<EmitBinding>, otherwise: Vec<EmitBinding>) -> Self
    where
        F: Fn(&TaskContext, &Value, &Value) -> Result<bool, TaskError> + Send + Sync + 'static,
    {
        Self {
            when: Arc::new(move |ctx, payload, result| {
                Box::pin(std::future::ready(when(&ctx, &payload, &result)))
            }),
            then,
            otherwise,
        }
    }

    /// A route whose predicate is a future (one that does I/O, such as one written in Python).
    pub fn new_async<F, Fut>(when: F, then: Vec<EmitBinding>, otherwise: Vec<EmitBinding>) -> Self
    where
        F: Fn(TaskContext, Value, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, TaskError>> + Send + 'static,
    {
        Self {
            when: Arc::new(move |ctx, payload, result| Box::pin(when(ctx, payload, result))),
            then,
            otherwise,
        }
    }
}

/// One entry of a task's `emit` list.
#[derive(Clone)]
pub enum Emit {
    /// Always send through this binding.
    Binding(EmitBinding),
    /// Send through the bindings the route selects.
    Route(EmitRoute),
}

impl Emit {
    pub(crate) fn sinks(&self) -> Vec<Arc<dyn Sink>> {
        match self {
            Self::Binding(b) => vec![b.sink.clone()],
            Self::Route(r) => r
                .then
                .iter()
                .chain(&r.otherwise)
                .map(|b| b.sink.clone())
                .collect(),
        }
    }
}

impl<S: IntoSink> From<S> for Emit {
    fn from(sink: S) -> Self {
        Self::Binding(EmitBinding::new(sink.into_sink()))
    }
}

impl From<EmitBinding> for Emit {
    fn from(binding: EmitBinding) -> Self {
        Self::Binding(binding)
    }
}

impl From<EmitRoute> for Emit {
    fn from(route: EmitRoute) -> Self {
        Self::Route(route)
    }
}

/// Hooks around a task's handler.
#[derive(Clone, Default)]
pub struct TaskHooks {
    pub(crate) before: Option<BeforeHook>,
    pub(crate) after_success: Option<AfterSuccessHook>,
    pub(crate) on_failure: Option<FailureHook>,
}

/// A task definition: name, source, handler, emit targets and policies.
///
/// # Example
/// ```
/// use onestep_core::{MaxAttempts, MemoryQueue, Task, TaskContext, TaskError};
///
/// #[derive(serde::Deserialize)]
/// struct Order { id: u64 }
///
/// async fn charge(_ctx: TaskContext, order: Order) -> Result<u64, TaskError> {
///     Ok(order.id)
/// }
///
/// let queue = MemoryQueue::new("orders", 100).unwrap();
/// let task = Task::new("charge")
///     .source(queue)
///     .handler(charge)
///     .concurrency(4)
///     .retry(MaxAttempts::new(3).unwrap());
/// assert_eq!(task.name(), "charge");
/// ```
#[derive(Clone)]
pub struct Task {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) source: Option<Arc<dyn Source>>,
    pub(crate) emit: Vec<Emit>,
    pub(crate) dead_letter: Vec<Arc<dyn Sink>>,
    pub(crate) concurrency: usize,
    pub(crate) retry: Arc<dyn RetryPolicy>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) hooks: TaskHooks,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) config: Value,
    pub(crate) handler: Option<ErasedHandler>,
    pub(crate) handler_ref: Option<String>,
}

impl Task {
    /// A task named `name` with concurrency 1, no retries, no timeout and no handler yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            source: None,
            emit: Vec::new(),
            dead_letter: Vec::new(),
            concurrency: 1,
            retry: Arc::new(NoRetry),
            timeout: None,
            hooks: TaskHooks::default(),
            metadata: Map::new(),
            config: Value::Null,
            handler: None,
            handler_ref: None,
        }
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A human description shown by `describe()`.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The task for handler `F` of [`TaskArgs`] `A`: named `A::TASK_NAME`, its input `A`, its
    /// output `A::Output`, so it cannot disagree with what
    /// [`submit_args`](crate::execution::ExecutionClient::submit_args) sends.
    ///
    /// ```
    /// use onestep_core::{Task, TaskArgs, TaskContext, TaskError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Resize { url: String, width: u32 }
    ///
    /// impl TaskArgs for Resize {
    ///     const TASK_NAME: &'static str = "resize";
    ///     type Output = String;
    /// }
    ///
    /// async fn resize(_ctx: TaskContext, job: Resize) -> Result<String, TaskError> {
    ///     Ok(format!("{} at {}px", job.url, job.width))
    /// }
    ///
    /// assert_eq!(Task::of(resize).name(), "resize");
    /// ```
    pub fn of<A, E, F, Fut>(handler: F) -> Self
    where
        A: TaskArgs,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<A::Output, E>> + Send + 'static,
    {
        Self::new(A::TASK_NAME).handler(handler)
    }

    /// Where deliveries come from: a source by value, or one already shared (an `Arc`). A task
    /// without a source runs only when called directly.
    pub fn source(mut self, source: impl IntoSource) -> Self {
        self.source = Some(source.into_source());
        self
    }

    /// Adds an emit target: a sink, an [`EmitBinding`] or an [`EmitRoute`]. Non-null results are
    /// sent to every target after the handler succeeds.
    pub fn emit(mut self, target: impl Into<Emit>) -> Self {
        self.emit.push(target.into());
        self
    }

    /// Adds a dead-letter sink: failed deliveries are published there before failing.
    pub fn dead_letter(mut self, sink: impl IntoSink) -> Self {
        self.dead_letter.push(sink.into_sink());
        self
    }

    /// How many deliveries run at once (>= 1; checked when the app is built).
    ///
    /// A delivery holds its slot from the fetch until it is settled (acked, retried or failed).
    /// A tracked execution gives its slot back as soon as its attempt succeeded (handler, hooks
    /// and sinks done), while its completion is written in a batch (see
    /// [`Delivery::frees_slot_before_ack`](crate::delivery::Delivery::frees_slot_before_ack)); a
    /// runner keeps at most `3 × concurrency` deliveries in flight, running or settling, and a
    /// graceful shutdown waits for all of them.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The retry policy (default [`NoRetry`]).
    pub fn retry(mut self, policy: impl RetryPolicy + 'static) -> Self {
        self.retry = Arc::new(policy);
        self
    }

    /// The retry policy, shared.
    pub fn retry_arc(mut self, policy: Arc<dyn RetryPolicy>) -> Self {
        self.retry = policy;
        self
    }

    /// Fails an attempt whose handler runs longer than `timeout` (kind `timeout`). Hooks are not
    /// counted.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Free-form metadata shown by `describe()`.
    pub fn metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// The task's configuration, available as `ctx.task_config()`.
    pub fn config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// Records where the handler came from (a YAML `handler.ref`), for `describe()`.
    pub fn handler_ref(mut self, reference: impl Into<String>) -> Self {
        self.handler_ref = Some(reference.into());
        self
    }

    /// The handler: `async fn(ctx, input: I) -> Result<O, E>`.
    ///
    /// The envelope body is deserialized into `I` with [`codec::from_value`], so Python tuples,
    /// sets, `mapping`s and named tuples of a tracked execution's payload read into the Rust
    /// types that ask for them, and an `I` of `serde_json::Value` gets the lossless view. A body
    /// that does not fit is a failure of kind `error` at stage `handler` (type `InvalidInput`),
    /// handled like any other failure. The returned `O` is serialized to JSON; `()` and `None`
    /// mean "no result" (nothing is emitted).
    ///
    /// [`codec::from_value`]: crate::execution::codec::from_value
    pub fn handler<I, O, E, F, Fut>(mut self, handler: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, E>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.handler = Some(Arc::new(move |ctx: TaskContext| {
            let handler = handler.clone();
            Box::pin(async move {
                let input: I =
                    crate::execution::codec::from_value(&ctx.envelope().body).map_err(|e| {
                        TaskError::new(
                            "InvalidInput",
                            format!("task input does not match the handler's input type: {e}"),
                        )
                    })?;
                let output = handler(ctx, input).await.map_err(Into::into)?;
                output_value(output).map_err(|e| {
                    TaskError::new(
                        "InvalidOutput",
                        format!("task result cannot be serialized to JSON: {e}"),
                    )
                })
            }) as BoxFuture<'static, Result<Value, TaskError>>
        }));
        self
    }

    /// Runs before the handler; an error fails the attempt at stage `before_hook`.
    pub fn before<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), TaskError>> + Send + 'static,
    {
        self.hooks.before = Some(Arc::new(move |ctx, payload| Box::pin(hook(ctx, payload))));
        self
    }

    /// Runs after the handler succeeded with `(ctx, payload, result)`; an error fails the attempt at
    /// stage `after_success_hook`.
    pub fn after_success<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(TaskContext, Value, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), TaskError>> + Send + 'static,
    {
        self.hooks.after_success = Some(Arc::new(move |ctx, payload, result| {
            Box::pin(hook(ctx, payload, result))
        }));
        self
    }

    /// Runs after any failed attempt with `(ctx, payload, failure)`, before the retry policy.
    pub fn on_failure<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(TaskContext, Value, FailureInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.hooks.on_failure = Some(Arc::new(move |ctx, payload, failure| {
            Box::pin(hook(ctx, payload, failure))
        }));
        self
    }

    /// A passthrough handler that returns the payload; what a task with only `emit` does.
    pub(crate) fn passthrough() -> ErasedHandler {
        Arc::new(|ctx: TaskContext| {
            let body = ctx.envelope().body.clone();
            Box::pin(async move { Ok(body) })
        })
    }

    pub(crate) fn validate(&self, index: usize) -> Result<()> {
        let field = |f: &str| format!("tasks[{index}] ({}).{f}", self.name);
        if self.name.trim().is_empty() {
            return Err(Error::invalid(
                format!("tasks[{index}].name"),
                "must be a non-empty string",
            ));
        }
        if let Some((at, c)) = self.name.chars().enumerate().find(|(_, c)| c.is_control()) {
            // The name is printed raw by logs and tools: an escape sequence would rewrite a
            // terminal. `{:?}` shows it escaped.
            return Err(Error::invalid(
                format!("tasks[{index}].name"),
                format!(
                    "must not contain control characters; found U+{:04X} at character {} of {:?}",
                    u32::from(c),
                    at + 1,
                    self.name
                ),
            ));
        }
        if self.concurrency < 1 {
            return Err(Error::invalid(
                field("concurrency"),
                format!("must be >= 1, got {}", self.concurrency),
            ));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(field("timeout_s"), "must be > 0, got 0"));
        }
        if self.handler.is_none() && self.emit.is_empty() {
            return Err(Error::invalid(
                field("handler"),
                "is required when the task has no emit targets",
            ));
        }
        if let Some(source) = &self.source {
            source.validate_task(&self.name)?;
        }
        Ok(())
    }
}

/// A handler's output as JSON. A `Value` is the result as it stands: serializing it into a
/// `Value` again gives the same value (numbers keep their text, objects their order) through a
/// copy of every key and item.
fn output_value<O: Serialize + 'static>(output: O) -> serde_json::Result<Value> {
    let mut slot = Some(output);
    if let Some(value) = (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<Value>>() {
        return Ok(value.take().unwrap_or(Value::Null));
    }
    match slot {
        Some(output) => serde_json::to_value(output),
        None => Ok(Value::Null),
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.name)
            .field(
                "source",
                &self.source.as_ref().map(|s| s.name().to_string()),
            )
            .field("concurrency", &self.concurrency)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_output_is_what_serializing_it_would_give() {
        let value: Value = serde_json::from_str(
            r#"{"z": 1, "a": [1.0, 100000000000000000000, -0.0, "t"], "m": {"b": null, "a": true}}"#,
        )
        .expect("parses");
        let moved = output_value(value.clone()).expect("a value");
        assert_eq!(moved, serde_json::to_value(&value).expect("serializes"));
        // Same order and the same number texts, not only equal maps.
        assert_eq!(moved.to_string(), value.to_string());

        #[derive(Serialize)]
        struct Report {
            rows: u32,
        }
        assert_eq!(
            output_value(Report { rows: 3 }).expect("a struct"),
            json!({"rows": 3})
        );
        assert_eq!(output_value(()).expect("unit"), Value::Null);
    }
}

//! [`OneStepApp`]: tasks, resources and lifecycle in one place.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::task::JoinSet;

use crate::connector::BoxError;
use crate::error::{Error, Result};
use crate::event::{EventHandler, TaskEvent};
use crate::runtime::TaskRuntime;
use crate::runtime::control::{Control, RunnerStatus};
use crate::runtime::runner::{Runner, ShutdownBudget};
use crate::source::Resource;
use crate::state::{InMemoryStateStore, StateStore};
use crate::task::{BoxFuture, Task};

type LifecycleHook =
    Arc<dyn Fn(AppHandle) -> BoxFuture<'static, std::result::Result<(), BoxError>> + Send + Sync>;

/// Builds a [`OneStepApp`]; every option is checked in [`build`](AppBuilder::build).
pub struct AppBuilder {
    name: String,
    config: Value,
    state: Option<Arc<dyn StateStore>>,
    shutdown_timeout: Option<Duration>,
    cleanup_timeout: Duration,
    tasks: Vec<Task>,
    resources: Vec<Arc<dyn Resource>>,
    startup: Vec<LifecycleHook>,
    shutdown: Vec<LifecycleHook>,
    events: Vec<EventHandler>,
    log_task_events: bool,
    capture: Option<Arc<crate::capture::FailureCaptureConfig>>,
    metrics: Option<Arc<crate::metrics::PrometheusExporter>>,
}

impl AppBuilder {
    /// App-wide configuration, available to handlers as `ctx.config()`.
    pub fn config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// The state store behind `ctx.state()` (default: in memory).
    pub fn state(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state = Some(store);
        self
    }

    /// How long shutdown waits for in-flight deliveries before cancelling them (default 30 s).
    /// `None` waits forever.
    pub fn shutdown_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// How long cancelled deliveries get to settle after the shutdown timeout (default 5 s)
    /// before they are aborted.
    pub fn cleanup_timeout(mut self, timeout: Duration) -> Self {
        self.cleanup_timeout = timeout;
        self
    }

    /// Adds a task.
    pub fn task(mut self, task: Task) -> Self {
        self.tasks.push(task);
        self
    }

    /// Adds a named resource opened before the tasks' sources and sinks (a shared connector).
    pub fn resource(mut self, resource: Arc<dyn Resource>) -> Self {
        self.resources.push(resource);
        self
    }

    /// Runs `hook` after resources are opened, before any task starts.
    pub fn on_startup<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(AppHandle) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        self.startup.push(Arc::new(move |h| Box::pin(hook(h))));
        self
    }

    /// Runs `hook` after the tasks stopped, before resources are closed.
    pub fn on_shutdown<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(AppHandle) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        self.shutdown.push(Arc::new(move |h| Box::pin(hook(h))));
        self
    }

    /// Calls `handler` for every [`TaskEvent`]. A panicking subscriber is logged and ignored.
    pub fn on_event<F>(mut self, handler: F) -> Self
    where
        F: Fn(&TaskEvent) + Send + Sync + 'static,
    {
        self.events.push(Arc::new(handler));
        self
    }

    /// Whether every [`TaskEvent`] is also logged as one structured `tracing` event (target
    /// `onestep.events`, the reference's `StructuredEventLogger` fields; default on, as the
    /// reference's `onestep run --task-events`). Subscribers of [`on_event`](Self::on_event)
    /// are called either way.
    pub fn log_task_events(mut self, enabled: bool) -> Self {
        self.log_task_events = enabled;
        self
    }

    /// Writes the envelope of failed attempts to a directory, as the reference's
    /// `app.failure_capture` does (see [`capture`](crate::capture)); off by default.
    pub fn failure_capture(mut self, config: crate::capture::FailureCaptureConfig) -> Self {
        self.capture = Some(Arc::new(config));
        self
    }

    /// Where handlers' own series go ([`TaskContext::metrics`](crate::TaskContext::metrics)):
    /// rendered by `exporter` after its families. Without one, handlers' updates are checked
    /// and dropped. (Recording the runtime's families is [`on_event`](Self::on_event)'s job:
    /// `on_event(move |e| exporter.record(e))`.)
    pub fn metrics(mut self, exporter: Arc<crate::metrics::PrometheusExporter>) -> Self {
        self.metrics = Some(exporter);
        self
    }

    /// Checks every option and builds the app.
    ///
    /// Fails with a field-qualified message on an empty app name, a zero shutdown timeout, a
    /// duplicate task name, a task with concurrency 0, a task without handler or emit targets, or
    /// a source that rejects the task (an execution source bound to another task name).
    pub fn build(self) -> Result<OneStepApp> {
        if self.name.trim().is_empty() {
            return Err(Error::invalid("app.name", "must be a non-empty string"));
        }
        if self.shutdown_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(
                "app.shutdown_timeout_s",
                "must be > 0, got 0",
            ));
        }
        let mut names = HashSet::new();
        for (index, task) in self.tasks.iter().enumerate() {
            task.validate(index)?;
            if !names.insert(task.name.clone()) {
                return Err(Error::invalid(
                    format!("tasks[{index}].name"),
                    format!("{:?} is used by another task", task.name),
                ));
            }
        }
        let name: Arc<str> = Arc::from(self.name.as_str());
        let config = Arc::new(self.config);
        let state = self
            .state
            .unwrap_or_else(|| Arc::new(InMemoryStateStore::default()));
        let events = crate::event::EventRoute {
            log: self.log_task_events,
            handlers: self.events.into(),
        };
        let tasks = self
            .tasks
            .into_iter()
            .map(|task| {
                Arc::new(TaskRuntime::new(
                    name.clone(),
                    task,
                    config.clone(),
                    state.clone(),
                    events.clone(),
                    self.capture.clone(),
                    self.metrics.clone(),
                ))
            })
            .collect();
        Ok(OneStepApp {
            inner: Arc::new(AppInner {
                name,
                tasks,
                resources: self.resources,
                startup: self.startup,
                shutdown: self.shutdown,
                budget: ShutdownBudget {
                    timeout: self.shutdown_timeout,
                    cleanup: self.cleanup_timeout,
                },
                control: Arc::new(Control::new()),
            }),
        })
    }
}

struct AppInner {
    name: Arc<str>,
    tasks: Vec<Arc<TaskRuntime>>,
    resources: Vec<Arc<dyn Resource>>,
    startup: Vec<LifecycleHook>,
    shutdown: Vec<LifecycleHook>,
    budget: ShutdownBudget,
    control: Arc<Control>,
}

/// An app: tasks with their sources and sinks, run until shutdown.
///
/// # Example
/// ```
/// use onestep_core::{MemoryQueue, OneStepApp, Sink, Task, TaskContext, TaskError};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let queue = MemoryQueue::new("numbers", 10)?;
/// let app = OneStepApp::builder("demo")
///     .task(Task::new("double").source(queue.clone()).handler(|_ctx: TaskContext, n: i64| async move {
///         Ok::<_, TaskError>(n * 2)
///     }))
///     .build()?;
/// queue.publish(serde_json::json!(21), Default::default()).await?;
/// let handle = app.handle();
/// tokio::spawn(async move {
///     tokio::time::sleep(std::time::Duration::from_millis(200)).await;
///     handle.request_shutdown();
/// });
/// app.serve().await?;
/// # Ok::<(), onestep_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct OneStepApp {
    inner: Arc<AppInner>,
}

impl OneStepApp {
    /// Starts building an app named `name`.
    pub fn builder(name: impl Into<String>) -> AppBuilder {
        AppBuilder {
            name: name.into(),
            config: Value::Null,
            state: None,
            shutdown_timeout: Some(Duration::from_secs(30)),
            cleanup_timeout: Duration::from_secs(5),
            tasks: Vec::new(),
            resources: Vec::new(),
            startup: Vec::new(),
            shutdown: Vec::new(),
            events: Vec::new(),
            log_task_events: true,
            capture: None,
            metrics: None,
        }
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The names of the app's tasks, in registration order.
    pub fn task_names(&self) -> Vec<String> {
        self.inner
            .tasks
            .iter()
            .map(|t| t.task_name.to_string())
            .collect()
    }

    /// A handle to control the running app from elsewhere.
    pub fn handle(&self) -> AppHandle {
        AppHandle {
            control: self.inner.control.clone(),
            tasks: self
                .inner
                .tasks
                .iter()
                .map(|t| t.task_name.to_string())
                .collect::<Vec<_>>()
                .into(),
        }
    }

    /// A JSON summary of the app: tasks, sources, sinks, policies.
    pub fn describe(&self) -> Value {
        let tasks: Vec<Value> = self
            .inner
            .tasks
            .iter()
            .map(|rt| {
                let t = &rt.task;
                json!({
                    "name": t.name,
                    "description": t.description,
                    "source": t.source.as_ref().map(|s| json!({"name": s.name(), "details": s.describe()})),
                    "emit": rt.sinks.iter().map(|s| s.name().to_string()).collect::<Vec<_>>(),
                    "dead_letter": t.dead_letter.iter().map(|s| s.name().to_string()).collect::<Vec<_>>(),
                    "concurrency": t.concurrency,
                    "retry": t.retry.describe(),
                    "timeout_s": t.timeout.map(|d| d.as_secs_f64()),
                    "handler_ref": t.handler_ref,
                    "metadata": Value::Object(t.metadata.clone()),
                })
            })
            .collect();
        json!({
            "name": &*self.inner.name,
            "shutdown_timeout_s": self.inner.budget.timeout.map(|d| d.as_secs_f64()),
            "resources": self.inner.resources.iter().map(|r| r.name().to_string()).collect::<Vec<_>>(),
            "tasks": tasks,
        })
    }

    /// Every resource in open order, each once: named resources, then per task its source, emit
    /// sinks and dead-letter sinks.
    fn lifecycle_resources(&self) -> Vec<Arc<dyn Resource>> {
        let mut seen = HashSet::new();
        let mut out: Vec<Arc<dyn Resource>> = Vec::new();
        let mut push = |r: Arc<dyn Resource>| {
            if seen.insert(Arc::as_ptr(&r) as *const () as usize) {
                out.push(r);
            }
        };
        for r in &self.inner.resources {
            push(r.clone());
        }
        for rt in &self.inner.tasks {
            if let Some(source) = &rt.task.source {
                push(source.clone() as Arc<dyn Resource>);
            }
            for sink in rt.sinks.iter() {
                push(sink.clone() as Arc<dyn Resource>);
            }
            for sink in &rt.task.dead_letter {
                push(sink.clone() as Arc<dyn Resource>);
            }
        }
        out
    }

    /// Opens resources in order and runs startup hooks; on failure closes what was opened, in
    /// reverse, and returns the error.
    async fn startup(&self) -> Result<Vec<Arc<dyn Resource>>> {
        let mut opened: Vec<Arc<dyn Resource>> = Vec::new();
        for resource in self.lifecycle_resources() {
            if let Err(err) = resource.open().await {
                close_all(&opened).await;
                return Err(Error::Lifecycle {
                    context: format!("opening {}", resource.name()),
                    source: Box::new(err),
                });
            }
            opened.push(resource);
        }
        for (index, hook) in self.inner.startup.iter().enumerate() {
            if let Err(err) = hook(self.handle()).await {
                close_all(&opened).await;
                return Err(Error::Lifecycle {
                    context: format!("startup hook {}", index + 1),
                    source: err,
                });
            }
        }
        Ok(opened)
    }

    /// Starts everything and runs until [`AppHandle::request_shutdown`] or a task runner fails.
    ///
    /// Shutdown stops fetching, waits for in-flight deliveries up to the shutdown timeout,
    /// cancels the rest (they are retried), runs shutdown hooks and closes resources in reverse
    /// order. A runner that fails (a non-retryable source error) shuts the others down the same
    /// way and its error is returned.
    pub async fn serve(&self) -> Result<()> {
        let opened = self.startup().await?;
        tracing::info!(app = %self.inner.name, tasks = self.inner.tasks.len(), "app started");
        let mut runners = JoinSet::new();
        for rt in &self.inner.tasks {
            if let Some(source) = &rt.task.source {
                let runner = Runner::new(
                    rt.clone(),
                    source.clone(),
                    self.inner.control.clone(),
                    self.inner.budget,
                );
                runners.spawn(runner.run());
            }
        }
        let mut first_error: Option<Error> = None;
        if runners.is_empty() {
            let mut control = self.inner.control.state.subscribe();
            let _ = control.wait_for(|s| s.shutdown).await;
        }
        while let Some(done) = runners.join_next().await {
            let failed = match done {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err),
                Err(join) => Some(Error::from(join)),
            };
            if let Some(err) = failed {
                self.handle().request_shutdown();
                first_error.get_or_insert(err);
            }
        }
        for (index, hook) in self.inner.shutdown.iter().enumerate() {
            if let Err(err) = hook(self.handle()).await {
                tracing::error!(app = %self.inner.name, hook = index + 1, error = %err, "shutdown hook failed");
            }
        }
        close_all(&opened).await;
        tracing::info!(app = %self.inner.name, "app stopped");
        match first_error {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Like [`serve`](OneStepApp::serve), shutting down gracefully on SIGINT (Ctrl-C) or SIGTERM.
    pub async fn run(&self) -> Result<()> {
        let serve = self.serve();
        tokio::pin!(serve);
        tokio::select! {
            result = &mut serve => return result,
            _ = shutdown_signal() => {
                tracing::info!(app = %self.inner.name, "shutdown signal received");
                self.handle().request_shutdown();
            }
        }
        serve.await
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn close_all(opened: &[Arc<dyn Resource>]) {
    for resource in opened.iter().rev() {
        if let Err(err) = resource.close().await {
            tracing::error!(resource = resource.name(), error = %err, "closing resource failed");
        }
    }
}

/// Controls a running app: shutdown, drain, per-task pause. Cheap to clone.
#[derive(Clone)]
pub struct AppHandle {
    control: Arc<Control>,
    tasks: Arc<[String]>,
}

impl AppHandle {
    /// Asks the app to stop: no more fetching, in-flight work finishes within the shutdown timeout.
    pub fn request_shutdown(&self) {
        self.control.state.send_modify(|s| s.shutdown = true);
    }

    /// Whether shutdown was requested.
    pub fn is_shutting_down(&self) -> bool {
        self.control.state.borrow().shutdown
    }

    /// Stops fetching on every task and lets in-flight work finish; runners then park.
    pub fn request_drain(&self) {
        self.control.state.send_modify(|s| s.draining = true);
    }

    /// Ends a drain: runners resume fetching.
    pub fn resume_after_drain(&self) {
        self.control.state.send_modify(|s| s.draining = false);
    }

    /// Pauses one task: its runner stops fetching, waits for its in-flight work and parks.
    pub fn pause_task(&self, task: &str) -> Result<()> {
        self.check_task(task)?;
        self.control.state.send_modify(|s| {
            s.paused.insert(task.to_string());
        });
        Ok(())
    }

    /// Resumes a paused task.
    pub fn resume_task(&self, task: &str) -> Result<()> {
        self.check_task(task)?;
        self.control.state.send_modify(|s| {
            s.paused.remove(task);
        });
        Ok(())
    }

    fn check_task(&self, task: &str) -> Result<()> {
        if self.tasks.iter().any(|t| t == task) {
            Ok(())
        } else {
            Err(Error::invalid(
                "task",
                format!(
                    "{task:?} is not a task of this app (known: {})",
                    self.tasks.join(", ")
                ),
            ))
        }
    }

    /// What the runner of `task` is doing, once it started.
    pub fn task_status(&self, task: &str) -> Option<RunnerStatus> {
        self.control.status.borrow().get(task).copied()
    }

    /// Waits until every running task runner is parked or stopped (after [`request_drain`]).
    ///
    /// [`request_drain`]: AppHandle::request_drain
    pub async fn wait_drained(&self) {
        let mut status = self.control.status.subscribe();
        let _ = status
            .wait_for(|map| map.values().all(|s| *s != RunnerStatus::Running))
            .await;
    }

    /// Waits until the runner of `task` is parked or stopped (after [`pause_task`]).
    ///
    /// [`pause_task`]: AppHandle::pause_task
    pub async fn wait_task_parked(&self, task: &str) {
        let mut status = self.control.status.subscribe();
        let _ = status
            .wait_for(|map| map.get(task).is_some_and(|s| *s != RunnerStatus::Running))
            .await;
    }

    /// Waits until the runner of `task` is running again.
    pub async fn wait_task_running(&self, task: &str) {
        let mut status = self.control.status.subscribe();
        let _ = status
            .wait_for(|map| map.get(task) == Some(&RunnerStatus::Running))
            .await;
    }
}

impl std::fmt::Debug for OneStepApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneStepApp")
            .field("name", &self.inner.name)
            .field("tasks", &self.task_names())
            .finish()
    }
}

/// Key/value metadata type used across the crate.
pub type Meta = Map<String, Value>;

//! [`PythonPool`]: long-lived Python processes shared by every Python handler of an app.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use onestep_core::metrics::{CustomKind, PrometheusExporter};
use onestep_core::task::BoxFuture;
use onestep_core::{AppHandle, Resource, Sink, TaskContext, TaskError};
use serde_json::Value;

use crate::call::{CallbackArg, Exposed, Returns, call, callback};
use crate::config::PythonConfig;
use crate::error::PythonError;
use crate::process::{Process, host_command};

/// A pool of Python worker processes.
///
/// Each process imports a handler's module once, on first use (or at [`open`](Resource::open)
/// for every handler made by [`handler`](Self::handler) before), and then serves calls over
/// its pipe: async functions run concurrently on its event loop, sync functions in its thread
/// pool. A call goes to the process with the fewest calls in flight. A process that dies fails
/// the calls it held with `PythonWorkerExited` (retried per the task's policy) and is started
/// again for the next call.
///
/// Add the pool to the app as a resource so it starts with the app and stops after the tasks:
///
/// ```no_run
/// use std::sync::Arc;
/// use onestep_core::{OneStepApp, Task};
/// use onestep_python::{PythonConfig, PythonPool};
///
/// let pool = Arc::new(PythonPool::new(PythonConfig::default()));
/// let run_agent = pool.handler("app.handlers:run_agent", serde_json::json!({}));
/// let app = OneStepApp::builder("agents")
///     .resource(pool.clone())
///     .task(Task::new("run_agent").handler(move |ctx, input: serde_json::Value| run_agent(ctx, input)))
///     .build();
/// ```
pub struct PythonPool {
    config: PythonConfig,
    refs: Mutex<BTreeSet<String>>,
    processes: Mutex<Vec<Option<Arc<Process>>>>,
    spawning: tokio::sync::Mutex<()>,
    exposed: Exposed,
    app: Arc<Mutex<Option<AppHandle>>>,
    metrics: Arc<Mutex<Option<Arc<PrometheusExporter>>>>,
}

/// The outcome of importing one ref with [`PythonPool::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefCheck {
    /// It imported and is callable; `is_async` tells whether it is a coroutine function.
    Callable {
        /// Whether it is an `async def` (or its `__call__` is).
        is_async: bool,
    },
    /// It did not import or is not callable: the Python exception and its traceback.
    Failed(String),
}

/// A handler made by [`PythonPool::handler`].
pub type PythonHandler =
    Arc<dyn Fn(TaskContext, Value) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;

impl PythonPool {
    /// A pool that starts `config.processes` processes (at least one) when opened.
    pub fn new(config: PythonConfig) -> Self {
        let size = config.processes.max(1);
        Self {
            config,
            refs: Mutex::new(BTreeSet::new()),
            processes: Mutex::new(vec![None; size]),
            spawning: tokio::sync::Mutex::new(()),
            exposed: Exposed::default(),
            app: Arc::default(),
            metrics: Arc::default(),
        }
    }

    /// Where Python's `ctx.metrics` updates go (the exporter `run --metrics-addr` serves);
    /// without one they stay in the Python processes, as without a reporter in the reference.
    pub fn set_metrics(&self, exporter: Arc<PrometheusExporter>) {
        *lock(&self.metrics) = Some(exporter);
    }

    /// The app Python's `app.request_shutdown()` stops; until it is set (the CLI sets it in a
    /// startup hook) the request is logged and ignored.
    pub fn set_app_handle(&self, handle: AppHandle) {
        *lock(&self.app) = Some(handle);
    }

    /// Makes the resource `name` visible to Python as `app.resources[name]` and
    /// `ctx.resources[name]` (`runtime_name` is its `.name`); a sink takes
    /// `await r.publish(body, meta=None)` and `await r.send(envelope)`, anything else only
    /// says what it is.
    pub fn expose(&self, name: &str, runtime_name: &str, sink: Option<Arc<dyn Sink>>) {
        let mut exposed = self
            .exposed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        exposed.retain(|(n, _, _)| n != name);
        exposed.push((name.to_owned(), runtime_name.to_owned(), sink));
    }

    /// The configuration.
    pub fn config(&self) -> &PythonConfig {
        &self.config
    }

    /// A handler calling `reference(ctx, payload, **params)` in the pool. `params` is an
    /// object (YAML `handler.params`) or null.
    pub fn handler(self: &Arc<Self>, reference: &str, params: Value) -> PythonHandler {
        lock(&self.refs).insert(reference.to_owned());
        let pool = self.clone();
        let reference: Arc<str> = reference.into();
        let params = Arc::new(params);
        Arc::new(move |ctx: TaskContext, input: Value| {
            let pool = pool.clone();
            let reference = reference.clone();
            let params = params.clone();
            Box::pin(async move {
                let process = pool
                    .pick()
                    .await
                    .map_err(|e| TaskError::new("PythonWorkerUnavailable", e.to_string()))?;
                call(&process, &pool.exposed, &ctx, &reference, &params, input).await
            })
        })
    }

    /// A callback (a hook, an emit transform or route predicate, an event subscriber) calling
    /// `reference(*args, **params)` in the pool, with only as many positional args as the
    /// function takes, as the reference calls them. `params` is an object or null.
    pub fn callback(self: &Arc<Self>, reference: &str, params: Value) -> PythonCallback {
        lock(&self.refs).insert(reference.to_owned());
        PythonCallback {
            pool: self.clone(),
            reference: reference.into(),
            params: Arc::new(params),
        }
    }

    /// Imports each ref in a short-lived process of the configured interpreter, as
    /// `onestep check` does, without starting the pool.
    pub async fn check(
        config: &PythonConfig,
        refs: &[String],
    ) -> Result<BTreeMap<String, RefCheck>, PythonError> {
        let interpreter = config
            .resolve_interpreter()
            .ok_or(PythonError::NoInterpreter)?;
        let mut command = host_command(&interpreter, config);
        command
            .arg("--check")
            .args(refs)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|source| PythonError::Spawn {
            interpreter: interpreter.display().to_string(),
            source,
        })?;
        let output = tokio::time::timeout(config.startup_timeout, child.wait_with_output())
            .await
            .map_err(|_| PythonError::Startup("importing the handler refs timed out".into()))?
            .map_err(|e| PythonError::Startup(e.to_string()))?;
        let report: Value = serde_json::from_slice(&output.stdout).map_err(|_| {
            PythonError::Startup(format!(
                "{} could not import the handler refs ({}); its output is above",
                interpreter.display(),
                output.status
            ))
        })?;
        Ok(refs
            .iter()
            .map(|r| {
                let entry = &report[r.as_str()];
                let check = if entry["ok"] == Value::Bool(true) {
                    RefCheck::Callable {
                        is_async: entry["async"] == Value::Bool(true),
                    }
                } else {
                    RefCheck::Failed(crate::process::describe_exception(entry))
                };
                (r.clone(), check)
            })
            .collect())
    }

    /// The live process with the fewest calls in flight, starting one where a slot is empty
    /// or its process has died.
    async fn pick(&self) -> Result<Arc<Process>, PythonError> {
        let (best, empty) = {
            let processes = lock(&self.processes);
            let best = processes
                .iter()
                .flatten()
                .filter(|p| p.is_alive())
                .min_by_key(|p| p.inflight())
                .cloned();
            let empty = processes
                .iter()
                .position(|p| p.as_ref().is_none_or(|p| !p.is_alive()));
            (best, empty)
        };
        match (best, empty) {
            (Some(best), Some(slot)) if best.inflight() > 0 => self.start(slot).await.or(Ok(best)),
            (Some(best), _) => Ok(best),
            (None, Some(slot)) => self.start(slot).await,
            (None, None) => Err(PythonError::Exited("no Python process is running".into())),
        }
    }

    /// Starts a process in `slot` (unless another call just did) and imports the known refs.
    async fn start(&self, slot: usize) -> Result<Arc<Process>, PythonError> {
        let _one_at_a_time = self.spawning.lock().await;
        if let Some(Some(p)) = lock(&self.processes).get(slot)
            && p.is_alive()
        {
            return Ok(p.clone());
        }
        let (app, metrics) = (self.app.clone(), self.metrics.clone());
        let control: crate::process::Control = Arc::new(move |msg: &Value| {
            if msg["op"] == "metric" {
                if let Some(exporter) = lock(&metrics).as_ref() {
                    record_metric(exporter, msg);
                }
                return;
            }
            match (msg["what"].as_str(), lock(&app).as_ref()) {
                (Some("request_shutdown"), Some(handle)) => {
                    tracing::info!("shutdown requested by Python (app.request_shutdown())");
                    handle.request_shutdown();
                }
                (what, _) => tracing::warn!(?what, "python control request ignored"),
            }
        });
        let process = Process::spawn(&self.config, control).await?;
        let refs: Vec<String> = lock(&self.refs).iter().cloned().collect();
        if let Some((reference, error)) = process.load(&refs).await?.into_iter().next() {
            process.close().await;
            return Err(PythonError::Import { reference, error });
        }
        if let Some(entry) = lock(&self.processes).get_mut(slot) {
            *entry = Some(process.clone());
        }
        tracing::info!(pid = process.pid(), slot, "python worker process started");
        Ok(process)
    }
}

/// A Python function the runtime calls with the reference's callback arguments; made by
/// [`PythonPool::callback`]. Cheap to clone.
#[derive(Clone)]
pub struct PythonCallback {
    pool: Arc<PythonPool>,
    reference: Arc<str>,
    params: Arc<Value>,
}

impl PythonCallback {
    /// The ref it calls.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// Calls it and returns its result (a transform's body). With `ctx`, the function may
    /// use `ctx.emit`/`ctx.state` and sees the delivery's cancellation; a tracked execution's
    /// values go over in the tagged codec.
    pub async fn value(
        &self,
        ctx: Option<&TaskContext>,
        args: Vec<CallbackArg>,
    ) -> Result<Value, TaskError> {
        self.run(ctx, args, Returns::Value).await
    }

    /// Calls it and returns Python's truth of its result (a route predicate).
    pub async fn truth(
        &self,
        ctx: Option<&TaskContext>,
        args: Vec<CallbackArg>,
    ) -> Result<bool, TaskError> {
        let value = self.run(ctx, args, Returns::Truth).await?;
        Ok(value == Value::Bool(true))
    }

    /// Calls it for its effect; what it returns is dropped in Python (a hook).
    pub async fn call(
        &self,
        ctx: Option<&TaskContext>,
        args: Vec<CallbackArg>,
    ) -> Result<(), TaskError> {
        self.run(ctx, args, Returns::Nothing).await.map(drop)
    }

    async fn run(
        &self,
        ctx: Option<&TaskContext>,
        args: Vec<CallbackArg>,
        returns: Returns,
    ) -> Result<Value, TaskError> {
        let process = self
            .pool
            .pick()
            .await
            .map_err(|e| TaskError::new("PythonWorkerUnavailable", e.to_string()))?;
        callback(
            &process,
            &self.pool.exposed,
            ctx,
            &self.reference,
            &self.params,
            args,
            returns,
        )
        .await
    }
}

impl std::fmt::Debug for PythonCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonCallback")
            .field("reference", &self.reference)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Resource for PythonPool {
    fn name(&self) -> &str {
        "python"
    }

    /// Starts every process and imports every handler's module in each; the first import
    /// error fails the app's startup with the Python traceback.
    async fn open(&self) -> onestep_core::Result<()> {
        let size = lock(&self.processes).len();
        for slot in 0..size {
            self.start(slot).await.map_err(onestep_core::Error::other)?;
        }
        Ok(())
    }

    /// Closes every pipe and waits for the processes to exit.
    async fn close(&self) -> onestep_core::Result<()> {
        let processes: Vec<Arc<Process>> = lock(&self.processes)
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for p in processes {
            p.close().await;
        }
        Ok(())
    }
}

/// One `ctx.metrics` update from a host.
fn record_metric(exporter: &PrometheusExporter, msg: &Value) {
    let kind = match msg["kind"].as_str() {
        Some("counter") => CustomKind::Counter,
        Some("gauge") => CustomKind::Gauge,
        _ => return,
    };
    let labels: BTreeMap<String, String> = msg["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    if let (Some(task), Some(name), Some(value)) = (
        msg["task"].as_str(),
        msg["name"].as_str(),
        msg["value"].as_f64(),
    ) {
        exporter.update_custom(task, name, kind, &labels, value);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

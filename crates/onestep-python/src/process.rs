//! One long-lived Python process: its pipe, the calls waiting on it, and why it ended.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::config::PythonConfig;
use crate::error::PythonError;
use crate::frame;

/// The host script, shipped inside the binary.
pub(crate) const HOST_SCRIPT: &str = include_str!("host.py");

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a call or a load, unique in this process.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What receives the host's control and metric frames.
pub(crate) type Control = Arc<dyn Fn(&Value) + Send + Sync>;

/// Messages from the host, routed by their `id`.
type Route = mpsc::UnboundedSender<Value>;

/// A running host process.
pub(crate) struct Process {
    pid: u32,
    outgoing: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    routes: Arc<Mutex<Option<HashMap<u64, Route>>>>,
    inflight: AtomicUsize,
    ended: Arc<OnceLock<String>>,
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Process {
    /// Starts the host with `config`'s interpreter and waits for it to say it is ready.
    /// `control` gets the host's control frames (`app.request_shutdown()`).
    pub(crate) async fn spawn(
        config: &PythonConfig,
        control: Control,
    ) -> Result<Arc<Self>, PythonError> {
        let interpreter = config
            .resolve_interpreter()
            .ok_or(PythonError::NoInterpreter)?;
        let mut command = host_command(&interpreter, config);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        // Its own process group: a Ctrl-C in the terminal signals the Rust runtime, which
        // stops gracefully and closes the pipes, not the Python processes in mid-call.
        command.process_group(0);
        let mut child = command.spawn().map_err(|source| PythonError::Spawn {
            interpreter: interpreter.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(PythonError::Protocol(
                "the child's pipes are missing".into(),
            ));
        };
        let ready = tokio::time::timeout(config.startup_timeout, frame::read(&mut stdout)).await;
        match ready {
            Ok(Ok(Some(msg))) if msg["op"] == "ready" => {}
            Ok(Ok(Some(other))) => {
                return Err(PythonError::Protocol(format!(
                    "expected a ready frame from the host, got {other}"
                )));
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                let status = exit_status(&mut child, Duration::from_secs(2)).await;
                return Err(PythonError::Startup(format!(
                    "{} exited before it was ready ({status}); its output is above",
                    interpreter.display()
                )));
            }
            Err(_) => {
                return Err(PythonError::Startup(format!(
                    "{} was not ready within {:.0}s",
                    interpreter.display(),
                    config.startup_timeout.as_secs_f64()
                )));
            }
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let mut stdin = stdin;
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if stdin.write_all(&frame).await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes the pipe: the host finishes and exits.
        });
        let routes = Arc::new(Mutex::new(Some(HashMap::new())));
        let ended = Arc::new(OnceLock::new());
        let reader = {
            let routes = routes.clone();
            let ended = ended.clone();
            let grace = config.shutdown_timeout;
            tokio::spawn(async move {
                let why = loop {
                    match frame::read(&mut stdout).await {
                        Ok(Some(msg)) if msg["op"] == "control" || msg["op"] == "metric" => {
                            control(&msg);
                        }
                        Ok(Some(msg)) => route(&routes, msg),
                        Ok(None) => break None,
                        Err(e) => break Some(format!("its pipe broke: {e}")),
                    }
                };
                let status = exit_status(&mut child, grace).await;
                let _ = ended.set(match why {
                    Some(why) => format!("the Python process {pid} failed ({why}; {status})"),
                    None => format!("the Python process {pid} exited ({status})"),
                });
                // Dropping every route tells each waiting call that the process is gone.
                lock(&routes).take();
            })
        };
        tracing::debug!(pid, interpreter = %interpreter.display(), "python host ready");
        Ok(Arc::new(Self {
            pid,
            outgoing: Mutex::new(Some(tx)),
            routes,
            inflight: AtomicUsize::new(0),
            ended,
            reader: Mutex::new(Some(reader)),
        }))
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process still serves calls.
    pub(crate) fn is_alive(&self) -> bool {
        lock(&self.routes).is_some() && lock(&self.outgoing).is_some()
    }

    /// Calls waiting on this process now.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Counts a call for as long as the returned guard lives.
    pub(crate) fn enter(self: &Arc<Self>) -> Inflight {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        Inflight(self.clone())
    }

    /// Why the process ended, once it has.
    pub(crate) fn ended(&self) -> String {
        self.ended
            .get()
            .cloned()
            .unwrap_or_else(|| format!("the Python process {} is shutting down", self.pid))
    }

    /// Registers `id`: messages carrying it arrive on the returned receiver, which closes when
    /// the process ends. `None` when it already has.
    pub(crate) fn open_route(&self, id: u64) -> Option<mpsc::UnboundedReceiver<Value>> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.routes).as_mut()?.insert(id, tx);
        Some(rx)
    }

    /// Forgets `id`; later messages for it are dropped.
    pub(crate) fn close_route(&self, id: u64) {
        if let Some(routes) = lock(&self.routes).as_mut() {
            routes.remove(&id);
        }
    }

    /// Queues `message` for the host; false when the process is closing or gone.
    pub(crate) fn send(&self, message: &Value) -> bool {
        lock(&self.outgoing)
            .as_ref()
            .is_some_and(|tx| tx.send(frame::encode(message)).is_ok())
    }

    /// Closes the pipe, waits for the host to exit (killing it after the grace period).
    pub(crate) async fn close(&self) {
        lock(&self.outgoing).take();
        let reader = lock(&self.reader).take();
        if let Some(reader) = reader {
            let _ = reader.await;
        }
    }

    /// Imports `refs` in the process; the refs that failed, with the Python error of each.
    pub(crate) async fn load(&self, refs: &[String]) -> Result<Vec<(String, String)>, PythonError> {
        let id = next_id();
        let mut rx = self
            .open_route(id)
            .ok_or_else(|| PythonError::Exited(self.ended()))?;
        self.send(&json!({"op": "load", "id": id, "refs": refs}));
        let reply = rx.recv().await;
        self.close_route(id);
        let reply = reply.ok_or_else(|| PythonError::Exited(self.ended()))?;
        let errors = reply["errors"].as_object().cloned().unwrap_or_default();
        Ok(errors
            .into_iter()
            .map(|(r, e)| (r, describe_exception(&e)))
            .collect())
    }
}

/// Decrements the process's in-flight count when dropped.
pub(crate) struct Inflight(Arc<Process>);

impl Drop for Inflight {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `Type: message` and the traceback of a Python exception the host described.
pub(crate) fn describe_exception(e: &Value) -> String {
    let kind = e["type"].as_str().unwrap_or("Exception");
    let message = e["message"].as_str().unwrap_or("");
    match e["traceback"].as_str() {
        Some(tb) if !tb.is_empty() => format!("{kind}: {message}\n{}", tb.trim_end()),
        _ => format!("{kind}: {message}"),
    }
}

/// `python -u -c <host script> --path DIR...`, with the environment the host expects.
pub(crate) fn host_command(interpreter: &Path, config: &PythonConfig) -> Command {
    let mut command = Command::new(interpreter);
    command.arg("-u").arg("-c").arg(HOST_SCRIPT);
    for path in &config.import_paths {
        command.arg("--path").arg(path);
    }
    command.env("PYTHONUNBUFFERED", "1");
    if std::env::var_os("ONESTEP_PYTHON_LOG_LEVEL").is_none() {
        // Python's records are logged by this process's subscriber: ask for what it keeps.
        let level = match tracing::level_filters::LevelFilter::current() {
            tracing::level_filters::LevelFilter::TRACE
            | tracing::level_filters::LevelFilter::DEBUG => "DEBUG",
            tracing::level_filters::LevelFilter::INFO => "INFO",
            tracing::level_filters::LevelFilter::WARN => "WARNING",
            _ => "ERROR",
        };
        command.env("ONESTEP_PYTHON_LOG_LEVEL", level);
    }
    command
}

fn route(routes: &Mutex<Option<HashMap<u64, Route>>>, msg: Value) {
    if msg["op"] == "log" {
        log_record(&msg);
        return;
    }
    let Some(id) = msg["id"].as_u64() else {
        tracing::warn!(%msg, "python host sent a frame without an id");
        return;
    };
    if let Some(tx) = lock(routes).as_ref().and_then(|r| r.get(&id)) {
        let _ = tx.send(msg);
    }
}

/// A Python `logging` record, logged through `tracing` (target `python`, field `logger`) so it
/// reaches the same subscriber, and in `--log-format json` the same JSON lines, as Rust's own.
fn log_record(msg: &Value) {
    let logger = msg["logger"].as_str().unwrap_or("root");
    let message = msg["message"].as_str().unwrap_or_default();
    let exc_info = msg["exc_info"].as_str();
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(target: "python", logger, exc_info, "{message}")
        };
    }
    match msg["level"].as_u64().unwrap_or(20) {
        0..=19 => emit!(debug),
        20..=29 => emit!(info),
        30..=39 => emit!(warn),
        _ => emit!(error),
    }
}

async fn exit_status(child: &mut Child, grace: Duration) -> String {
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("its status is unknown: {e}"),
        Err(_) => {
            let _ = child.kill().await;
            format!(
                "killed after it did not exit within {:.0}s",
                grace.as_secs_f64()
            )
        }
    }
}

/// Locks, recovering from a poisoned lock (a panic elsewhere must not stop every call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

//! What the stock `onestep` binary knows: the handlers `onestep:echo`, `onestep:sleep`,
//! `onestep:fail` and `onestep:exec` (run any program as a worker), and the resource types of
//! `onestep-core`, `onestep-sql` and `onestep-http`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::{TaskContext, TaskError};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::registry::Registry;

impl Registry {
    /// The built-in handlers and the resource types of the workspace's crates.
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        *registry.catalog_mut() = onestep_core::catalog::Catalog::core();
        onestep_sql::catalog::register(registry.catalog_mut());
        onestep_http::catalog::register(registry.catalog_mut());
        onestep_redis::catalog::register(registry.catalog_mut());
        onestep_rabbitmq::catalog::register(registry.catalog_mut());
        onestep_sqs::catalog::register(registry.catalog_mut());
        register(&mut registry);
        registry
    }
}

/// Adds the built-in handlers to `registry`.
pub fn register(registry: &mut Registry) {
    registry.handler(
        "onestep:echo",
        |_ctx: TaskContext, input: Value| async move { Ok::<_, TaskError>(input) },
    );
    registry.handler("onestep:sleep", sleep);
    registry.handler_with_params("onestep:fail", fail);
    registry.handler_with_params("onestep:exec", exec);
}

/// `{"seconds": n}` (default 1): sleeps, stopping at once when the attempt is cancelled, and
/// reports `{"slept_s", "of_s"}` progress every half second when it runs a tracked execution.
async fn sleep(ctx: TaskContext, input: Value) -> Result<Value, TaskError> {
    let seconds = input.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
    if !(seconds.is_finite() && (0.0..=onestep_core::clock::MAX_SECONDS).contains(&seconds)) {
        return Err(TaskError::new(
            "ValueError",
            format!("seconds must be a finite number >= 0, got {seconds}"),
        ));
    }
    // A tracked execution shows how far it slept (the store keeps one write a second at most).
    let started = std::time::Instant::now();
    let total = Duration::from_secs_f64(seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let slept = started.elapsed().min(total);
                if slept >= total {
                    return Ok(serde_json::json!({"slept_s": seconds}));
                }
                let _ = ctx.report_progress(serde_json::json!({
                    "slept_s": (slept.as_secs_f64() * 10.0).round() / 10.0,
                    "of_s": seconds,
                }));
            }
            _ = tokio::time::sleep(total.saturating_sub(started.elapsed())) => {
                return Ok(serde_json::json!({"slept_s": seconds}));
            }
            _ = ctx.cancellation().cancelled() => {
                return Err(TaskError::new("CancelledError", "sleep was cancelled"));
            }
        }
    }
}

/// Always fails, with `params.exception_type` (default `Failure`) and the payload's or params'
/// `message`.
async fn fail(_ctx: TaskContext, input: Value, params: Arc<Value>) -> Result<Value, TaskError> {
    let kind = params
        .get("exception_type")
        .and_then(Value::as_str)
        .unwrap_or("Failure");
    let message = input
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| params.get("message").and_then(Value::as_str))
        .unwrap_or("onestep:fail always fails");
    Err(TaskError::new(kind, message))
}

/// Params of `onestep:exec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecParams {
    /// The program and its arguments.
    command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    /// Working directory.
    cwd: Option<String>,
}

/// Runs `params.command` with the payload as JSON on stdin; stdout (JSON) is the result (empty
/// stdout is `null`, non-JSON stdout a string). A non-zero exit fails the attempt with the tail of
/// stderr. The child is killed when the attempt is cancelled or times out.
async fn exec(ctx: TaskContext, input: Value, params: Arc<Value>) -> Result<Value, TaskError> {
    let params: ExecParams = serde_json::from_value((*params).clone()).map_err(|e| {
        TaskError::new(
            "ConfigError",
            format!(
                "onestep:exec params: {e} (expected {{command: [program, args...], env, cwd}})"
            ),
        )
    })?;
    let (program, args) = params.command.split_first().ok_or_else(|| {
        TaskError::new(
            "ConfigError",
            "onestep:exec params.command must name a program",
        )
    })?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(&params.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = &params.cwd {
        command.current_dir(dir);
    }
    if let Some(meta) = ctx.meta().get("onestep.execution") {
        command.env(
            "ONESTEP_EXECUTION_ID",
            meta.get("id").and_then(Value::as_str).unwrap_or_default(),
        );
        command.env(
            "ONESTEP_ATTEMPT_ID",
            meta.get("attempt_id")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        );
    }
    command.env("ONESTEP_ATTEMPTS", ctx.attempts().to_string());
    let mut child = command
        .spawn()
        .map_err(|e| TaskError::new("ExecError", format!("cannot start {program:?}: {e}")))?;
    let stdin_bytes = serde_json::to_vec(&input).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let write = async move {
        if let Some(mut s) = stdin.take() {
            let _ = s.write_all(&stdin_bytes).await;
        }
    };
    let read_out = async move {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    };
    let read_err = async move {
        let mut buf = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    };
    let ((), out, err, status) = tokio::join!(write, read_out, read_err, child.wait());
    let status = status
        .map_err(|e| TaskError::new("ExecError", format!("waiting for {program:?} failed: {e}")))?;
    if !status.success() {
        let text = String::from_utf8_lossy(&err);
        let tail: String = text
            .trim()
            .chars()
            .rev()
            .take(500)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let code = status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| c.to_string());
        return Err(TaskError::new(
            "ExecFailed",
            format!("{program} exited with {code}: {tail}"),
        ));
    }
    let text = String::from_utf8_lossy(&out);
    let text = text.trim();
    if text.is_empty() {
        return Ok(Value::Null);
    }
    Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())))
}

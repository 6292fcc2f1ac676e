//! One call of a Python handler: the request, the context requests it makes while it runs
//! (`ctx.emit`, `ctx.state`), the progress it reports, its cancellation and its result.

use std::sync::Arc;

use onestep_core::execution::codec::{decode_value, encode_value};
use onestep_core::execution::source::MAX_PROGRESS_BYTES;
use onestep_core::{FailureInfo, Sink, TaskContext, TaskError, TaskEvent};
use serde_json::{Map, Value, json};

use crate::process::{Process, describe_exception, next_id};

/// The app's resources Python may name (`app.resources`, `ctx.resources`): YAML name, runtime
/// name, and the sink when it is one.
pub(crate) type Exposed = Arc<std::sync::RwLock<Vec<(String, String, Option<Arc<dyn Sink>>)>>>;

/// `[[name, runtime name, is a sink], …]`, as the host builds its proxies from.
fn exposed_fields(exposed: &Exposed) -> Value {
    let entries = exposed
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Value::Array(
        entries
            .iter()
            .map(|(name, runtime, sink)| json!([name, runtime, sink.is_some()]))
            .collect(),
    )
}

/// Runs `reference(ctx, input, **params)` in `process` and returns its result.
///
/// A tracked execution's payload goes over in the stored (tagged) form and the result comes
/// back in it, so Python sees `datetime`, `UUID`, tuples, … as the reference gives them; any
/// other delivery's body is plain JSON, as the reference's brokers give it.
pub(crate) async fn call(
    process: &Arc<Process>,
    exposed: &Exposed,
    ctx: &TaskContext,
    reference: &str,
    params: &Value,
    input: Value,
) -> Result<Value, TaskError> {
    let tagged = ctx.execution().is_some();
    let message = json!({
        "op": "call",
        "ref": reference,
        "params": params,
        "codec": if tagged { "tagged" } else { "plain" },
        "payload": encode(tagged, input)?,
        "ctx": context_fields(ctx, reference, exposed),
    });
    exchange(process, exposed, Some(ctx), reference, tagged, message).await
}

/// One argument of a callback: what the reference passes its hooks, transforms, predicates and
/// event subscribers, in order.
#[derive(Debug, Clone)]
pub enum CallbackArg {
    /// The delivery's `TaskContext` (the call must be made with one).
    Context,
    /// A JSON value: a payload or a result.
    Value(Value),
    /// The failure an `on_failure` hook gets (`FailureInfo` in Python).
    Failure(FailureInfo),
    /// The event a `hooks.events` subscriber gets (`TaskEvent` in Python).
    Event(TaskEvent),
    /// The app a `startup`/`shutdown` hook gets: an object with `name` and `config`.
    App {
        /// `app.name`.
        name: String,
        /// `app.config`.
        config: Value,
    },
}

/// What a callback's result is turned into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returns {
    /// The value (a transform).
    Value,
    /// Python's truth of the value (a predicate).
    Truth,
    /// Nothing (a hook).
    Nothing,
}

/// Runs the callback `reference(*args, **params)` (only as many positional args as it takes),
/// with `ctx`'s cancellation and context requests when there is one.
pub(crate) async fn callback(
    process: &Arc<Process>,
    exposed: &Exposed,
    ctx: Option<&TaskContext>,
    reference: &str,
    params: &Value,
    args: Vec<CallbackArg>,
    returns: Returns,
) -> Result<Value, TaskError> {
    let tagged = ctx.is_some_and(|c| c.execution().is_some());
    let args = args
        .into_iter()
        .map(|arg| {
            Ok(match arg {
                CallbackArg::Context => json!({"ctx": true}),
                CallbackArg::Value(v) => json!({"value": encode(tagged, v)?}),
                CallbackArg::Failure(f) => json!({"failure": failure_fields(&f)}),
                CallbackArg::Event(e) => json!({"event": event_fields(&e)}),
                CallbackArg::App { name, config } => json!({"app": {
                    "name": name,
                    "config": config,
                    "resources": exposed_fields(exposed),
                }}),
            })
        })
        .collect::<Result<Vec<Value>, TaskError>>()?;
    let mut message = json!({
        "op": "callback",
        "ref": reference,
        "params": params,
        "codec": if tagged { "tagged" } else { "plain" },
        "args": args,
        "truth": returns == Returns::Truth,
        "discard": returns == Returns::Nothing,
    });
    if let Some(ctx) = ctx {
        message["ctx"] = context_fields(ctx, reference, exposed);
    }
    exchange(process, exposed, ctx, reference, tagged, message).await
}

fn encode(tagged: bool, value: Value) -> Result<Value, TaskError> {
    if tagged {
        encode_value(&value).map_err(|e| TaskError::new("CaptureEncodingError", e.to_string()))
    } else {
        Ok(value)
    }
}

/// What the host's `TaskContext` is made of.
fn context_fields(ctx: &TaskContext, reference: &str, exposed: &Exposed) -> Value {
    json!({
        "resources": exposed_fields(exposed),
        "app": ctx.app_name(),
        "task": ctx.task_name(),
        "config": ctx.config(),
        "task_config": ctx.task_config(),
        "meta": ctx.meta(),
        "attempts": ctx.attempts(),
        "handler_ref": reference,
        // Present only for a tracked execution: ctx.report_progress checks the size against it
        // and does nothing without it, as TaskContext::report_progress does.
        "progress_limit": ctx.execution().map(|_| MAX_PROGRESS_BYTES),
    })
}

fn failure_fields(failure: &FailureInfo) -> Value {
    json!({
        "kind": failure.kind.as_str(),
        "exception_type": failure.exception_type,
        "message": failure.message,
        "traceback": failure.traceback,
    })
}

/// A task event as the reference's `TaskEvent` holds it (`attempts` counts earlier attempts).
fn event_fields(event: &TaskEvent) -> Value {
    let emitted_at = event
        .emitted_at
        .to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    json!({
        "kind": event.kind.as_str(),
        "app": event.app,
        "task": event.task,
        "source": event.source,
        "attempts": event.attempt.saturating_sub(1),
        "emitted_at": emitted_at.replace('Z', "+00:00"),
        "duration_s": event.duration.map(|d| d.as_secs_f64()),
        "failure": event.failure.as_ref().map(failure_fields),
        "meta": event.meta,
    })
}

/// Sends `message` as call `id`, serves the context requests the call makes, and returns its
/// result.
async fn exchange(
    process: &Arc<Process>,
    exposed: &Exposed,
    ctx: Option<&TaskContext>,
    reference: &str,
    tagged: bool,
    mut message: Value,
) -> Result<Value, TaskError> {
    let id = next_id();
    message["id"] = id.into();
    let _inflight = process.enter();
    let mut rx = process
        .open_route(id)
        .ok_or_else(|| exited(process.ended()))?;
    let mut guard = Pending {
        process,
        id,
        done: false,
    };
    if !process.send(&message) {
        return Err(exited(process.ended()));
    }
    let never = tokio_util::sync::CancellationToken::new();
    let cancellation = ctx.map_or(&never, TaskContext::cancellation);
    let mut cancel_sent = false;
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            () = cancellation.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                process.send(&json!({"op": "cancel", "id": id}));
                continue;
            }
        };
        let Some(msg) = msg else {
            guard.done = true;
            return Err(exited(process.ended()));
        };
        match msg["op"].as_str() {
            Some("result") => {
                guard.done = true;
                process.close_route(id);
                return outcome(ctx.map(TaskContext::task_name), reference, tagged, msg);
            }
            Some("progress") => {
                if let Some(ctx) = ctx
                    && let Err(err) = ctx.report_progress(msg["value"].clone())
                {
                    tracing::warn!(
                        task = ctx.task_name(),
                        handler = reference,
                        "python handler's progress was not kept: {err}"
                    );
                }
            }
            Some("request") => {
                let reply = match ctx {
                    _ if msg["what"] == "resource.publish" => publish(exposed, &msg).await,
                    Some(ctx) => serve(ctx, &msg).await,
                    None => Err("ctx is not available outside a delivery".to_owned()),
                };
                let mut frame = json!({"op": "reply", "rid": msg["rid"]});
                match reply {
                    Ok(value) => {
                        frame["ok"] = Value::Bool(true);
                        frame["value"] = value;
                    }
                    Err(error) => {
                        frame["ok"] = Value::Bool(false);
                        frame["error"] = Value::String(error);
                    }
                }
                process.send(&frame);
            }
            _ => tracing::warn!(%msg, "unexpected frame from the python host"),
        }
    }
}

/// The handler's result or its failure.
fn outcome(
    task: Option<&str>,
    reference: &str,
    tagged: bool,
    msg: Value,
) -> Result<Value, TaskError> {
    if msg["ok"] == Value::Bool(true) {
        let value = msg.get("value").cloned().unwrap_or(Value::Null);
        return if tagged {
            decode_value(&value).map_err(|e| TaskError::new("CaptureEncodingError", e.to_string()))
        } else {
            Ok(value)
        };
    }
    if msg["cancelled"] == Value::Bool(true) {
        return Err(TaskError::new(
            "CancelledError",
            "the Python handler was cancelled",
        ));
    }
    let error = &msg["error"];
    tracing::warn!(
        task,
        handler = reference,
        "python handler raised {}",
        describe_exception(error)
    );
    let failure = TaskError::new(
        error["type"].as_str().unwrap_or("Exception"),
        error["message"].as_str().unwrap_or(""),
    );
    Err(match error["traceback"].as_str() {
        Some(traceback) => failure.with_traceback(traceback),
        None => failure,
    })
}

/// Publishes to a named sink for `app.resources[name].publish(...)`.
async fn publish(exposed: &Exposed, msg: &Value) -> Result<Value, String> {
    let name = msg["resource"].as_str().unwrap_or_default();
    let sink = exposed
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, sink)| sink.clone());
    let sink = match sink {
        Some(Some(sink)) => sink,
        Some(None) => return Err(format!("resource {name:?} is not a sink")),
        None => return Err(format!("unknown resource {name:?}")),
    };
    let meta = msg["meta"].as_object().cloned().unwrap_or_else(Map::new);
    sink.publish(msg["body"].clone(), meta)
        .await
        .map(|()| Value::Null)
        .map_err(|e| e.to_string())
}

/// Answers one context request of the running handler.
async fn serve(ctx: &TaskContext, msg: &Value) -> Result<Value, String> {
    let what = msg["what"].as_str().unwrap_or_default();
    if what == "emit" {
        let meta = msg["meta"].as_object().cloned().unwrap_or_else(Map::new);
        ctx.emit(msg["body"].clone(), msg["sink"].as_str(), meta)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Value::Null);
    }
    let mut state = ctx.state().clone();
    for scope in msg["scopes"].as_array().into_iter().flatten() {
        state = state.child(scope.as_str().unwrap_or_default());
    }
    let key = msg["key"].as_str().unwrap_or_default();
    let done = match what {
        "state.load" => state.load(key).await.map(Option::unwrap_or_default),
        "state.save" => state
            .save(key, msg["value"].clone())
            .await
            .map(|()| Value::Null),
        "state.delete" => state.delete(key).await.map(|()| Value::Null),
        other => return Err(format!("unknown context request {other:?}")),
    };
    done.map_err(|e| e.to_string())
}

fn exited(why: String) -> TaskError {
    TaskError::new("PythonWorkerExited", why)
}

/// Tells the host to cancel the call when its future is dropped before the result arrived
/// (the task's timeout, a lost lease, shutdown).
struct Pending<'a> {
    process: &'a Arc<Process>,
    id: u64,
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.process.close_route(self.id);
            self.process.send(&json!({"op": "cancel", "id": self.id}));
        }
    }
}

//! One call of a Python handler: the request, the context requests it makes while it runs
//! (`ctx.emit`, `ctx.state`), its cancellation and its result.

use std::sync::Arc;

use onestep_core::execution::codec::{decode_value, encode_value};
use onestep_core::{TaskContext, TaskError};
use serde_json::{Map, Value, json};

use crate::process::{Process, describe_exception, next_id};

/// Runs `reference(ctx, input, **params)` in `process` and returns its result.
///
/// A tracked execution's payload goes over in the stored (tagged) form and the result comes
/// back in it, so Python sees `datetime`, `UUID`, tuples, … as the reference gives them; any
/// other delivery's body is plain JSON, as the reference's brokers give it.
pub(crate) async fn call(
    process: &Arc<Process>,
    ctx: &TaskContext,
    reference: &str,
    params: &Value,
    input: Value,
) -> Result<Value, TaskError> {
    let tagged = ctx.execution().is_some();
    let payload = if tagged {
        encode_value(&input).map_err(|e| TaskError::new("CaptureEncodingError", e.to_string()))?
    } else {
        input
    };
    let id = next_id();
    let _inflight = process.enter();
    let mut rx = process
        .open_route(id)
        .ok_or_else(|| exited(process.ended()))?;
    let mut guard = Pending {
        process,
        id,
        done: false,
    };
    let message = json!({
        "op": "call",
        "id": id,
        "ref": reference,
        "params": params,
        "codec": if tagged { "tagged" } else { "plain" },
        "payload": payload,
        "ctx": {
            "app": ctx.app_name(),
            "task": ctx.task_name(),
            "config": ctx.config(),
            "task_config": ctx.task_config(),
            "meta": ctx.meta(),
            "attempts": ctx.attempts(),
            "handler_ref": reference,
        },
    });
    if !process.send(&message) {
        return Err(exited(process.ended()));
    }
    let mut cancel_sent = false;
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            () = ctx.cancellation().cancelled(), if !cancel_sent => {
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
                return outcome(ctx, reference, tagged, msg);
            }
            Some("request") => {
                let reply = serve(ctx, &msg).await;
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
    ctx: &TaskContext,
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
        task = ctx.task_name(),
        handler = reference,
        "python handler raised {}",
        describe_exception(error)
    );
    Err(TaskError::new(
        error["type"].as_str().unwrap_or("Exception"),
        error["message"].as_str().unwrap_or(""),
    ))
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

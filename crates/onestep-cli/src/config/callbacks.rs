//! The function refs of a spec, built into what the app calls: task hooks, emit transforms and
//! route predicates, top-level `startup`/`shutdown`/`events` hooks. A ref is a registered Rust
//! callback ([`Registry::callback`]) or a Python function in the app's [`PythonPool`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use onestep_core::catalog::BuildContext;
use onestep_core::{
    AppBuilder, BoxError, Emit, EmitBinding, EmitRoute, Sink, Task, TaskContext, TaskError,
    TaskEvent,
};
use onestep_python::{CallbackArg, PythonCallback, PythonPool};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::callable::{AppHooksSpec, CallableRef, TaskHooksSpec};
use super::emit::{BindingSpec, EmitSpec};
use crate::registry::{CallbackFn, Registry};

/// What a callback's result is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Value,
    Truth,
    Effect,
}

/// One resolved function ref.
#[derive(Clone)]
enum Callback {
    Rust { f: CallbackFn, params: Arc<Value> },
    Python(PythonCallback),
}

/// Resolves refs against the registry, Python refs into the pool.
pub struct Resolver<'a> {
    registry: &'a Registry,
    pool: Option<&'a Arc<PythonPool>>,
}

impl<'a> Resolver<'a> {
    /// Resolves Rust callbacks from `registry` and every other ref in `pool`.
    pub fn new(registry: &'a Registry, pool: Option<&'a Arc<PythonPool>>) -> Self {
        Self { registry, pool }
    }

    fn resolve(&self, r: &CallableRef) -> Result<Callback, String> {
        if let Some(f) = self.registry.get_callback(&r.reference) {
            return Ok(Callback::Rust {
                f,
                params: Arc::new(r.params.clone()),
            });
        }
        match self.pool {
            Some(pool) => Ok(Callback::Python(
                pool.callback(&r.reference, r.params.clone()),
            )),
            None => Err(format!("{}: {:?} is not registered", r.path, r.reference)),
        }
    }

    fn resolve_all(&self, refs: &[CallableRef]) -> Result<Arc<[Callback]>, String> {
        refs.iter().map(|r| self.resolve(r)).collect()
    }
}

impl Callback {
    /// Calls it with `args` (the delivery's context first, when there is one, for Python).
    async fn invoke(
        &self,
        ctx: Option<&TaskContext>,
        args: Vec<CallbackArg>,
        used: Use,
    ) -> Result<Value, TaskError> {
        match self {
            Self::Python(python) => {
                let args: Vec<CallbackArg> = ctx
                    .map(|_| CallbackArg::Context)
                    .into_iter()
                    .chain(args)
                    .collect();
                match used {
                    Use::Value => python.value(ctx, args).await,
                    Use::Truth => python.truth(ctx, args).await.map(Value::Bool),
                    Use::Effect => python.call(ctx, args).await.map(|()| Value::Null),
                }
            }
            Self::Rust { f, params } => {
                let args = args.into_iter().map(json_arg).collect();
                let value = f(ctx.cloned(), args, params.clone()).await?;
                Ok(match used {
                    Use::Truth => Value::Bool(truthy(&value)),
                    Use::Value | Use::Effect => value,
                })
            }
        }
    }
}

/// An argument as a Rust callback gets it.
fn json_arg(arg: CallbackArg) -> Value {
    match arg {
        CallbackArg::Context => Value::Null,
        CallbackArg::Value(v) => v,
        CallbackArg::Failure(f) => serde_json::to_value(f).unwrap_or(Value::Null),
        CallbackArg::Event(e) => serde_json::to_value(e).unwrap_or(Value::Null),
        CallbackArg::App { name, config } => json!({"name": name, "config": config}),
    }
}

/// Python's truth of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Calls every hook of `hooks` in order; the first error stops them.
async fn run_all(
    hooks: &[Callback],
    ctx: Option<&TaskContext>,
    args: &[CallbackArg],
) -> Result<(), TaskError> {
    for hook in hooks {
        hook.invoke(ctx, args.to_vec(), Use::Effect).await?;
    }
    Ok(())
}

/// Adds the task's `hooks` to `task`.
pub fn with_task_hooks(
    mut task: Task,
    hooks: &TaskHooksSpec,
    resolver: &Resolver<'_>,
) -> Result<Task, String> {
    let before = resolver.resolve_all(&hooks.before)?;
    if !before.is_empty() {
        task = task.before(move |ctx, payload| {
            let before = before.clone();
            async move { run_all(&before, Some(&ctx), &[CallbackArg::Value(payload)]).await }
        });
    }
    let after = resolver.resolve_all(&hooks.after_success)?;
    if !after.is_empty() {
        task = task.after_success(move |ctx, payload, result| {
            let after = after.clone();
            async move {
                let args = [CallbackArg::Value(payload), CallbackArg::Value(result)];
                run_all(&after, Some(&ctx), &args).await
            }
        });
    }
    let on_failure = resolver.resolve_all(&hooks.on_failure)?;
    if !on_failure.is_empty() {
        task = task.on_failure(move |ctx, payload, failure| {
            let hooks = on_failure.clone();
            async move {
                let args = [CallbackArg::Value(payload), CallbackArg::Failure(failure)];
                for hook in hooks.iter() {
                    if let Err(e) = hook.invoke(Some(&ctx), args.to_vec(), Use::Effect).await {
                        tracing::warn!(task = ctx.task_name(), error = %e, "task failure hook failed");
                    }
                }
            }
        });
    }
    Ok(task)
}

/// Builds one `emit` entry; each sink goes through `wrap` (the identity outside `onestep task`).
pub fn emit_target(
    spec: &EmitSpec,
    ctx: &mut BuildContext<'_>,
    resolver: &Resolver<'_>,
    wrap: &dyn Fn(Arc<dyn Sink>) -> Arc<dyn Sink>,
) -> Result<Emit, String> {
    match spec {
        EmitSpec::Binding(b) => binding(b, ctx, resolver, wrap).map(Emit::from),
        EmitSpec::Route {
            when,
            then,
            otherwise,
        } => {
            let when = resolver.resolve(when)?;
            let then = then
                .iter()
                .map(|b| binding(b, ctx, resolver, wrap))
                .collect::<Result<_, _>>()?;
            let otherwise = otherwise
                .iter()
                .map(|b| binding(b, ctx, resolver, wrap))
                .collect::<Result<_, _>>()?;
            let route = EmitRoute::new_async(
                move |ctx, payload, result| {
                    let when = when.clone();
                    async move {
                        let args = vec![CallbackArg::Value(payload), CallbackArg::Value(result)];
                        let holds = when.invoke(Some(&ctx), args, Use::Truth).await?;
                        Ok(holds == Value::Bool(true))
                    }
                },
                then,
                otherwise,
            );
            Ok(Emit::from(route))
        }
    }
}

fn binding(
    spec: &BindingSpec,
    ctx: &mut BuildContext<'_>,
    resolver: &Resolver<'_>,
    wrap: &dyn Fn(Arc<dyn Sink>) -> Arc<dyn Sink>,
) -> Result<EmitBinding, String> {
    let sink = ctx
        .sink(&spec.sink)
        .map_err(|e| format!("{}: {e}", spec.path))?;
    let binding = EmitBinding::new(wrap(sink));
    let Some(transform) = &spec.transform else {
        return Ok(binding);
    };
    let transform = resolver.resolve(transform)?;
    Ok(binding.with_async_transform(move |ctx, payload, result| {
        let transform = transform.clone();
        async move {
            let args = vec![CallbackArg::Value(payload), CallbackArg::Value(result)];
            transform.invoke(Some(&ctx), args, Use::Value).await
        }
    }))
}

/// Adds the top-level `hooks` to `builder`. `startup` and `shutdown` hooks get the app (`name`,
/// `config`); `events` subscribers get every task event, in order, on one background task, so a
/// slow subscriber never holds up a delivery; the events still queued at shutdown are delivered
/// before the resources close.
pub fn with_app_hooks(
    mut builder: AppBuilder,
    hooks: &AppHooksSpec,
    app: (&str, &Value),
    resolver: &Resolver<'_>,
) -> Result<AppBuilder, String> {
    let app_arg = CallbackArg::App {
        name: app.0.to_owned(),
        config: app.1.clone(),
    };
    let lifecycle = |hook: Callback| {
        let arg = app_arg.clone();
        move |_handle| {
            let hook = hook.clone();
            let arg = arg.clone();
            async move {
                hook.invoke(None, vec![arg], Use::Effect)
                    .await
                    .map(drop)
                    .map_err(|e| BoxError::from(e.to_string()))
            }
        }
    };
    for hook in resolver.resolve_all(&hooks.startup)?.iter() {
        builder = builder.on_startup(lifecycle(hook.clone()));
    }
    let subscribers = resolver.resolve_all(&hooks.events)?;
    if !subscribers.is_empty() {
        builder = with_event_subscribers(builder, subscribers);
    }
    for hook in resolver.resolve_all(&hooks.shutdown)?.iter() {
        builder = builder.on_shutdown(lifecycle(hook.clone()));
    }
    Ok(builder)
}

/// What the event queue carries: an event, or a request to say when all before it were handled.
enum Queued {
    Event(Box<TaskEvent>),
    Flush(oneshot::Sender<()>),
}

fn with_event_subscribers(builder: AppBuilder, subscribers: Arc<[Callback]>) -> AppBuilder {
    let (tx, rx) = mpsc::unbounded_channel::<Queued>();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let flush = tx.clone();
    let started = Arc::new(AtomicBool::new(false));
    let running = started.clone();
    builder
        .on_event(move |event| {
            let _ = tx.send(Queued::Event(Box::new(event.clone())));
        })
        .on_startup(move |_handle| {
            let rx = rx.lock().map(|mut r| r.take()).unwrap_or(None);
            let subscribers = subscribers.clone();
            let started = started.clone();
            async move {
                if let Some(rx) = rx {
                    tokio::spawn(deliver_events(rx, subscribers));
                    started.store(true, Ordering::Release);
                }
                Ok(())
            }
        })
        .on_shutdown(move |_handle| {
            let (done, wait) = oneshot::channel();
            let sent = running.load(Ordering::Acquire) && flush.send(Queued::Flush(done)).is_ok();
            async move {
                if sent {
                    let _ = wait.await;
                }
                Ok(())
            }
        })
}

async fn deliver_events(mut rx: mpsc::UnboundedReceiver<Queued>, subscribers: Arc<[Callback]>) {
    while let Some(queued) = rx.recv().await {
        match queued {
            Queued::Event(event) => {
                for subscriber in subscribers.iter() {
                    let args = vec![CallbackArg::Event((*event).clone())];
                    if let Err(e) = subscriber.invoke(None, args, Use::Effect).await {
                        tracing::warn!(event_kind = event.kind.as_str(), error = %e, "event handler failed");
                    }
                }
            }
            Queued::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

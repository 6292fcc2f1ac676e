//! Python handlers on the Rust runtime, against the real interpreter (`python`/`python3` on
//! PATH or `ONESTEP_PYTHON`): the tagged codec both ways, sync and async functions, params,
//! `ctx.state`, `ctx.emit`, `ctx.report_progress`, failures, a crashed process, the task's timeout, import errors.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionClient, ExecutionSourceOptions, ExecutionStatus,
    MemoryExecutionBackend, SubmitOptions,
};
use onestep_core::{InMemoryStateStore, MaxAttempts, MemoryQueue, OneStepApp, Source, Task};
use onestep_python::{PythonConfig, PythonPool, RefCheck};
use serde_json::{Value, json};

fn config() -> PythonConfig {
    let support = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support");
    let config = PythonConfig {
        import_paths: vec![support],
        processes: 2,
        ..PythonConfig::default()
    };
    assert!(
        config.resolve_interpreter().is_some(),
        "these tests need python or python3 on PATH (or ONESTEP_PYTHON)"
    );
    config
}

/// Runs one task with `reference` over a fresh memory backend until `payload`'s execution is
/// terminal; returns the execution.
async fn run_one(
    reference: &str,
    params: Value,
    payload: Value,
    task: impl FnOnce(Task) -> Task,
) -> onestep_core::execution::Execution {
    let client = ExecutionClient::new(MemoryExecutionBackend::new(), "py").unwrap();
    let submitted = client
        .submit("t", &payload, SubmitOptions::default())
        .await
        .unwrap();
    let pool = Arc::new(PythonPool::new(config()));
    let handler = pool.handler(reference, params);
    let mut options = ExecutionSourceOptions::new("py", "t");
    options.poll_interval = Duration::from_millis(20);
    let app = OneStepApp::builder("pyapp")
        .config(json!({"region": "eu"}))
        .resource(pool.clone())
        .task(task(
            Task::new("t")
                .source(client.source(options).unwrap())
                .handler(move |ctx, input: Value| handler(ctx, input)),
        ))
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let done = client
        .wait(submitted.id, Duration::from_secs(30))
        .await
        .unwrap();
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    done
}

#[tokio::test]
async fn a_sync_function_gets_python_values_and_its_result_is_stored_tagged() {
    let at =
        json!({"$onestep": {"type": "datetime", "value": "2026-01-02T03:04:05+00:00", "fold": 0}});
    let done = run_one(
        "handlers:sync_echo",
        json!({"suffix": "!"}),
        json!({"at": at}),
        |t| t,
    )
    .await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{done:?}");
    let result = done.result.unwrap();
    assert_eq!(result["kind"], "datetime");
    assert_eq!(
        result["at_plus_a_day"],
        json!({"$onestep": {"type": "datetime", "value": "2026-01-03T03:04:05+00:00", "fold": 0}})
    );
    assert_eq!(
        result["id"],
        json!({"$onestep": {"type": "uuid", "value": done.id.to_string()}})
    );
    assert_eq!(
        result["pair"],
        json!({"$onestep": {"type": "tuple", "values": [1, "two"]}})
    );
    assert_eq!(result["task"], "t");
    assert_eq!(result["config"], json!({"region": "eu"}));
    assert_eq!(result["attempts"], 0);
    assert_eq!(result["suffix"], "!");
}

#[tokio::test]
async fn an_async_function_uses_state_and_emit_through_the_rust_context() {
    let queue = MemoryQueue::new("queue", 10).unwrap();
    let out = MemoryQueue::new("out", 10).unwrap();
    let state = Arc::new(InMemoryStateStore::default());
    for n in [1, 2] {
        onestep_core::Sink::publish(&queue, json!(n), Default::default())
            .await
            .unwrap();
    }
    let pool = Arc::new(PythonPool::new(config()));
    let handler = pool.handler("handlers:async_state_and_emit", Value::Null);
    let app = OneStepApp::builder("pyapp")
        .state(state.clone())
        .resource(pool.clone())
        .task(
            Task::new("t")
                .source(queue.clone())
                .emit(out.clone())
                .handler(move |ctx, input: Value| handler(ctx, input)),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let mut bodies = Vec::new();
    for _ in 0..600 {
        for d in out.fetch(10).await.unwrap() {
            bodies.push(d.envelope().body.clone());
        }
        if bodies.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    // Each delivery emits its ctx.emit body and then its result to the task's sink.
    let echoes: Vec<&Value> = bodies.iter().filter(|b| b.get("echo").is_some()).collect();
    assert_eq!(echoes.len(), 2, "{bodies:?}");
    let seen: Vec<i64> = bodies
        .iter()
        .filter_map(|b| b.get("seen_before").and_then(Value::as_i64))
        .collect();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 1], "the state counter is shared: {bodies:?}");
    use onestep_core::StateStore;
    assert_eq!(state.load("pyapp:t:seen").await.unwrap(), Some(json!(2)));
    assert!(state.load("pyapp:t:inner:k").await.unwrap().is_some());
}

#[tokio::test]
async fn a_python_exception_is_a_failure_with_its_type_and_is_retried() {
    let failed = run_one("handlers:fail_first", Value::Null, json!("x"), |t| t).await;
    assert_eq!(failed.status, ExecutionStatus::Failed);
    let error = failed.error.unwrap();
    assert_eq!(error.exception_type, "ValueError");
    assert_eq!(error.kind, "error");

    let retried = run_one("handlers:fail_first", Value::Null, json!("x"), |t| {
        t.retry(MaxAttempts::new(2).unwrap())
    })
    .await;
    assert_eq!(retried.status, ExecutionStatus::Succeeded);
    assert_eq!(retried.result, Some(json!("ok after 1")));
}

#[tokio::test]
async fn a_crashed_process_fails_its_call_and_a_new_process_takes_the_retry() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("crashed");
    let done = run_one(
        "handlers:crash_first",
        Value::Null,
        json!({"marker": marker}),
        |t| t.retry(MaxAttempts::new(2).unwrap()),
    )
    .await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{done:?}");
    let result = done.result.unwrap();
    assert_ne!(result["pid"], result["crashed_pid"], "{result}");
    assert_eq!(done.attempts, 2);
}

#[tokio::test]
async fn the_tasks_timeout_cancels_the_python_coroutine() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled");
    let done = run_one(
        "handlers:slow",
        Value::Null,
        json!({"marker": marker}),
        |t| t.timeout(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.error.unwrap().kind, "timeout");
    for _ in 0..200 {
        if marker.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled");
}

#[tokio::test]
async fn an_import_error_fails_startup_with_the_python_traceback() {
    let pool = Arc::new(PythonPool::new(config()));
    let handler = pool.handler("no_such_module:fn", Value::Null);
    let app = OneStepApp::builder("pyapp")
        .resource(pool.clone())
        .task(
            Task::new("t")
                .source(MemoryQueue::new("q", 1).unwrap())
                .handler(move |ctx, input: Value| handler(ctx, input)),
        )
        .build()
        .unwrap();
    let err = app.serve().await.unwrap_err().to_string();
    assert!(err.contains("no_such_module:fn"), "{err}");
    assert!(err.contains("ModuleNotFoundError"), "{err}");
}

#[tokio::test]
async fn check_imports_each_ref_and_tells_sync_from_async() {
    let refs: Vec<String> = [
        "handlers:sync_echo",
        "handlers:slow",
        "handlers:not_callable",
        "handlers:missing",
        "no_colon",
    ]
    .map(String::from)
    .to_vec();
    let report = PythonPool::check(&config(), &refs).await.unwrap();
    assert_eq!(
        report["handlers:sync_echo"],
        RefCheck::Callable { is_async: false }
    );
    assert_eq!(
        report["handlers:slow"],
        RefCheck::Callable { is_async: true }
    );
    let failed = |r: &str| match &report[r] {
        RefCheck::Failed(e) => e.clone(),
        other => panic!("{r}: {other:?}"),
    };
    assert!(failed("handlers:not_callable").starts_with("TypeError"));
    assert!(failed("handlers:missing").starts_with("AttributeError"));
    assert!(failed("no_colon").contains("expected 'package.module:attr'"));
}

/// Callbacks get as many of the reference's arguments as they take: a failure, an event, the
/// app; each as the reference's Python object.
#[tokio::test]
async fn callbacks_get_the_reference_objects_and_only_the_arguments_they_take() {
    use onestep_core::{FailureInfo, FailureKind, Resource, Stage, TaskError, TaskEvent};
    use onestep_python::CallbackArg;
    let pool = Arc::new(PythonPool::new(config()));
    let first = pool.callback("handlers:first_only", Value::Null);
    let failure = pool.callback("handlers:describe_failure", Value::Null);
    let event = pool.callback("handlers:describe_event", Value::Null);
    let app = pool.callback("handlers:describe_app", Value::Null);
    pool.open().await.unwrap();
    let args = vec![CallbackArg::Value(json!(1)), CallbackArg::Value(json!(2))];
    assert_eq!(first.value(None, args).await.unwrap(), json!({"got": 1}));
    let info = FailureInfo::from_error(
        FailureKind::Timeout,
        Stage::Handler,
        &TaskError::new("TimeoutError", "too slow"),
    );
    let described = failure
        .value(None, vec![CallbackArg::Failure(info.clone())])
        .await
        .unwrap();
    assert_eq!(described, json!("timeout:TimeoutError:too slow"));
    let task_event = TaskEvent {
        kind: onestep_core::TaskEventKind::Retried,
        app: "a".into(),
        task: "t".into(),
        source: None,
        attempt: 2,
        emitted_at: time::OffsetDateTime::now_utc(),
        duration: Some(Duration::from_millis(5)),
        failure: Some(info),
        meta: serde_json::Map::new(),
    };
    let described = event
        .value(None, vec![CallbackArg::Event(task_event)])
        .await
        .unwrap();
    assert_eq!(described["kind"], "retried");
    assert_eq!(described["attempts"], 1, "attempts before this one");
    assert_eq!(described["aware"], true);
    assert_eq!(described["failure"]["kind"], "timeout");
    let named = CallbackArg::App {
        name: "shop".into(),
        config: json!({"region": "eu"}),
    };
    assert_eq!(
        app.value(None, vec![named]).await.unwrap(),
        json!("shop in eu")
    );
    pool.close().await.unwrap();
}

/// In a task: a Python before hook, a Python route predicate (truthy list) and a Python
/// transform with params shape what the sinks receive.
#[tokio::test]
async fn python_hooks_predicates_and_transforms_run_in_the_delivery() {
    use onestep_core::{EmitBinding, EmitRoute, StateStore};
    use onestep_python::CallbackArg;
    let queue = MemoryQueue::new("queue", 10).unwrap();
    let chosen = MemoryQueue::new("chosen", 10).unwrap();
    let other = MemoryQueue::new("other", 10).unwrap();
    onestep_core::Sink::publish(&queue, json!({"n": 5}), Default::default())
        .await
        .unwrap();
    let state = Arc::new(InMemoryStateStore::default());
    let pool = Arc::new(PythonPool::new(config()));
    let before = pool.callback("handlers:remember_payload", Value::Null);
    let when = pool.callback("handlers:has_items", Value::Null);
    let shape = pool.callback("handlers:shape", json!({"label": "from-yaml"}));
    let args = |payload: Value, result: Value| {
        vec![
            CallbackArg::Context,
            CallbackArg::Value(payload),
            CallbackArg::Value(result),
        ]
    };
    let route = EmitRoute::new_async(
        move |ctx, payload, result| {
            let when = when.clone();
            let args = args(payload, result);
            async move { when.truth(Some(&ctx), args).await }
        },
        vec![
            EmitBinding::new(Arc::new(chosen.clone())).with_async_transform(
                move |ctx, payload, result| {
                    let shape = shape.clone();
                    let args = args(payload, result);
                    async move { shape.value(Some(&ctx), args).await }
                },
            ),
        ],
        vec![EmitBinding::new(Arc::new(other.clone()))],
    );
    let app = OneStepApp::builder("pyapp")
        .state(state.clone())
        .resource(pool.clone())
        .task(
            Task::new("t")
                .source(queue.clone())
                .emit(route)
                .before(move |ctx, payload| {
                    let before = before.clone();
                    async move {
                        let args = vec![CallbackArg::Context, CallbackArg::Value(payload)];
                        before.call(Some(&ctx), args).await
                    }
                })
                .handler(|_ctx, _input: Value| async {
                    Ok::<Value, onestep_core::TaskError>(json!({"items": [1, 2]}))
                }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let mut bodies = Vec::new();
    for _ in 0..600 {
        bodies.extend(
            chosen
                .fetch(10)
                .await
                .unwrap()
                .iter()
                .map(|d| d.envelope().body.clone()),
        );
        if !bodies.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    assert_eq!(
        bodies,
        [json!({"label": "from-yaml", "task": "t", "in": {"n": 5}, "count": 2})]
    );
    assert!(other.fetch(10).await.unwrap().is_empty());
    assert_eq!(
        state.load("pyapp:t:before").await.unwrap(),
        Some(json!({"n": 5}))
    );
}

/// `ctx.report_progress` of a sync and an async function reaches the store (SQLite, whose
/// tables keep progress); values the runtime would refuse are refused in Python, with the
/// field-qualified message, and keep nothing.
#[tokio::test]
async fn python_progress_reaches_the_store_and_bad_values_are_refused_in_python() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}/progress.db?mode=rwc", dir.path().display());
    let backend = onestep_sql::sqlite::SqliteExecutionBackend::new(
        &dsn,
        onestep_sql::BackendOptions::default(),
    )
    .unwrap();
    let client = ExecutionClient::new(backend, "py").unwrap();
    let sync = client
        .submit("sync", &json!({"total": 3}), SubmitOptions::default())
        .await
        .unwrap();
    let not_sync = client
        .submit("async", &json!({"total": 5}), SubmitOptions::default())
        .await
        .unwrap();
    let pool = Arc::new(PythonPool::new(config()));
    let mut app = OneStepApp::builder("pyapp").resource(pool.clone());
    for (task, reference) in [
        ("sync", "handlers:report_progress"),
        ("async", "handlers:report_progress_async"),
    ] {
        let handler = pool.handler(reference, json!({}));
        let mut options = ExecutionSourceOptions::new("py", task);
        options.poll_interval = Duration::from_millis(20);
        app = app.task(
            Task::new(task)
                .source(client.source(options).unwrap())
                .handler(move |ctx, input: Value| handler(ctx, input)),
        );
    }
    let app = app.build().unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let done = client.wait(sync.id, Duration::from_secs(30)).await.unwrap();
    let async_done = client
        .wait(not_sync.id, Duration::from_secs(30))
        .await
        .unwrap();
    handle.request_shutdown();
    worker.await.unwrap().unwrap();

    assert_eq!(done.status, ExecutionStatus::Succeeded, "{done:?}");
    let refused = done.result.unwrap();
    assert!(
        refused["not_json"]
            .as_str()
            .unwrap()
            .starts_with("TypeError: progress is not JSON serializable"),
        "{refused}"
    );
    assert_eq!(
        refused["nul"],
        "ValueError: progress must not contain the NUL character (\\u0000)"
    );
    assert_eq!(
        refused["too_large"],
        "ValueError: progress must be at most 65536 bytes as JSON, got 70002"
    );
    assert_eq!(
        client.backend().progress("py", sync.id).await.unwrap(),
        Some(json!({"done": 3, "total": 3, "stage": "écrit"})),
        "the last report is written before the completion"
    );
    assert_eq!(async_done.status, ExecutionStatus::Succeeded);
    assert_eq!(
        client.backend().progress("py", not_sync.id).await.unwrap(),
        Some(json!({"done": 5, "async": true}))
    );
}

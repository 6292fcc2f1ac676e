//! The worker runtime on top of a backend: an [`ExecutionSource`] inside a real [`OneStepApp`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use onestep_core::execution::stored::MAX_STORED_DEPTH;
use onestep_core::execution::{
    Execution, ExecutionBackend, ExecutionClient, ExecutionSource, ExecutionSourceOptions,
    ExecutionStatus, LeasedExecutionBackend, Prefetch, SubmitOptions,
};
use onestep_core::{
    ExponentialBackoff, Jitter, MaxAttempts, MemoryQueue, OneStepApp, Sink, Source, Task,
    TaskContext, TaskError,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;

pub(super) fn options(task: &str) -> ExecutionSourceOptions {
    let mut o = ExecutionSourceOptions::new(NS, task);
    o.poll_interval = Duration::from_millis(20);
    o.lease_duration = Duration::from_secs(30);
    o.heartbeat_interval = Duration::from_millis(50);
    o.worker_id = "conformance-worker".into();
    o
}

fn source<B: LeasedExecutionBackend + Clone + 'static>(
    b: &B,
    task: &str,
) -> Arc<ExecutionSource<B>> {
    Arc::new(ExecutionSource::new(b.clone(), options(task)).unwrap())
}

/// Serves `app` in the background until the returned guard asks it to stop.
pub(super) struct Running {
    handle: onestep_core::AppHandle,
    serve: tokio::task::JoinHandle<onestep_core::Result<()>>,
}

impl Running {
    pub(super) fn start(app: OneStepApp) -> Self {
        let handle = app.handle();
        let serve = tokio::spawn(async move { app.serve().await });
        Self { handle, serve }
    }

    pub(super) async fn stop(self) {
        self.handle.request_shutdown();
        tokio::time::timeout(Duration::from_secs(20), self.serve)
            .await
            .expect("the app stops within 20 s")
            .expect("the app task does not panic")
            .expect("the app stops cleanly");
    }
}

async fn wait_until<B: ExecutionBackend>(
    b: &B,
    id: Uuid,
    what: &str,
    pred: impl Fn(&Execution) -> bool,
) -> Execution {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let e = match b.get(NS, id).await {
            Ok(found) => found.expect("the execution exists"),
            // A loaded machine may time out one poll; the contract is about the final state.
            Err(err) if err.is_retryable() => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for {what}: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(err) => panic!("reading {id} failed: {err}"),
        };
        if pred(&e) {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; last state {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_terminal<B: ExecutionBackend>(b: &B, id: Uuid) -> Execution {
    wait_until(b, id, "a terminal status", Execution::is_terminal).await
}

/// A handler's return value is stored as the result and read back by the client.
pub async fn worker_stores_the_handler_result<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let e = client
        .submit(
            "answer",
            &json!({"question": "life"}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let app = OneStepApp::builder("worker")
        .task(Task::new("answer").source(source(&b, "answer")).handler(
            |ctx: TaskContext, input: Value| async move {
                assert!(ctx.meta()["onestep.execution"]["id"].is_string());
                Ok::<_, TaskError>(json!({"answer": 42, "question": input["question"]}))
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(app);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(
        client.result::<Value>(e.id).await.unwrap(),
        json!({"answer": 42, "question": "life"})
    );
}

/// Failures retry by the task's policy (attempts counted from the store) and finally fail with the
/// public error detail. Task events number the attempts as the stored execution does (1, 2, 3).
pub async fn worker_retries_with_backoff_then_fails_with_the_error_detail<F: BackendFactory>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "flaky", json!(1)).await;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let retry =
        ExponentialBackoff::new(3, Duration::ZERO, Duration::ZERO, 2.0, Jitter::None).unwrap();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = events.clone();
    let app = OneStepApp::builder("worker")
        .on_event(move |event: &onestep_core::TaskEvent| {
            use onestep_core::TaskEventKind::{Failed, Retried, Started};
            if matches!(event.kind, Started | Retried | Failed) {
                recorded.lock().unwrap().push((event.kind, event.attempt));
            }
        })
        .task(
            Task::new("flaky")
                .source(source(&b, "flaky"))
                .retry(retry)
                .handler(move |ctx: TaskContext, _v: Value| {
                    let counter = counter.clone();
                    async move {
                        assert_eq!(
                            ctx.attempts() as usize,
                            counter.fetch_add(1, Ordering::SeqCst)
                        );
                        Err::<(), _>(TaskError::new(
                            "ValueError",
                            "secret detail that must not be stored",
                        ))
                    }
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.attempts, 3);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    {
        use onestep_core::TaskEventKind::{Failed, Retried, Started};
        assert_eq!(
            *events.lock().unwrap(),
            [
                (Started, 1),
                (Retried, 1),
                (Started, 2),
                (Retried, 2),
                (Started, 3),
                (Failed, 3)
            ],
            "events number attempts from 1, as the execution's attempts"
        );
    }
    let error = done.error.unwrap();
    assert_eq!(
        (error.kind.as_str(), error.exception_type.as_str()),
        ("error", "ValueError")
    );
    assert_eq!(error.stage.as_deref(), Some("handler"));
    assert_eq!(
        (error.backend, error.operation, error.connector_kind),
        (None, None, None)
    );
}

/// A handler past its timeout fails with kind `timeout`.
pub async fn worker_records_a_timeout_as_kind_timeout<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "slow", json!(1)).await;
    let app = OneStepApp::builder("worker")
        .task(
            Task::new("slow")
                .source(source(&b, "slow"))
                .timeout(Duration::from_millis(50))
                .handler(|_ctx: TaskContext, _v: Value| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Failed);
    let error = done.error.unwrap();
    assert_eq!(
        (error.kind.as_str(), error.stage.as_deref()),
        ("timeout", Some("handler"))
    );
}

/// Cancelling a running execution stops its handler (seen by the next heartbeat) and ends it
/// cancelled with no result.
pub async fn worker_cancel_while_running_ends_cancelled_without_result<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let e = client
        .submit("long", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let flag = finished.clone();
    let app = OneStepApp::builder("worker")
        .task(Task::new("long").source(source(&b, "long")).handler(
            move |_ctx: TaskContext, _v: Value| {
                let flag = flag.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    flag.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, TaskError>(json!("should never be stored"))
                }
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(app);
    wait_until(&b, e.id, "running", |e| {
        e.status == ExecutionStatus::Running
    })
    .await;
    let requested = client
        .cancel(e.id, Some("user clicked cancel"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(requested.status, ExecutionStatus::CancelRequested);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!((done.result, done.error), (None, None));
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler was stopped"
    );
}

/// A cancel request that lands while the handler is returning success wins: cancelled, no result.
pub async fn worker_cancel_racing_a_success_ends_cancelled<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "race", json!(1)).await;
    let api = b.clone();
    let app = OneStepApp::builder("worker")
        .task(Task::new("race").source(source(&b, "race")).handler(
            move |ctx: TaskContext, _v: Value| {
                let api = api.clone();
                async move {
                    let id = ctx.meta()["onestep.execution"]["id"]
                        .as_str()
                        .unwrap_or_default()
                        .parse::<Uuid>()
                        .unwrap();
                    api.request_cancel(NS, id, Some("racing")).await.unwrap();
                    Ok::<_, TaskError>(json!("late success"))
                }
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(app);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!(done.result, None);
}

/// Shutting a worker down mid-handler leaves the execution retrying at once; another worker
/// finishes it as attempt 2.
pub async fn worker_shutdown_mid_handler_leaves_retrying_for_another_worker<F: BackendFactory>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "job", json!(1)).await;
    // Shutdown must come once the handler runs: a delivery claimed but not yet started is
    // released to `queued` instead, which is right but not what this case checks.
    let started = Arc::new(tokio::sync::Notify::new());
    let handler_started = started.clone();
    let first = OneStepApp::builder("worker-a")
        .shutdown_timeout(Some(Duration::from_millis(100)))
        .task(Task::new("job").source(source(&b, "job")).handler(
            move |_ctx: TaskContext, _v: Value| {
                let started = handler_started.clone();
                async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, TaskError>(())
                }
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(first);
    tokio::time::timeout(Duration::from_secs(30), started.notified())
        .await
        .expect("the handler starts within 30 s");
    running.stop().await;
    let after_shutdown = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!(after_shutdown.status, ExecutionStatus::Retrying);

    let second = OneStepApp::builder("worker-b")
        .task(Task::new("job").source(source(&b, "job")).handler(
            |ctx: TaskContext, _v: Value| async move {
                Ok::<_, TaskError>(json!({"attempt": ctx.attempts() + 1}))
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(second);
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(done.attempts, 2);
    assert_eq!(done.result, Some(json!({"attempt": 2})));
}

/// A result that cannot be stored fails every attempt at stage `result_validation` before any
/// sink runs; a storable result is emitted once and stored.
pub async fn worker_result_preflight_prevents_emit_on_every_attempt<F: BackendFactory>(f: &F) {
    let (b, _) = backend_with_result_limit(f, 64).await;
    let big = submit(&b, "emit", json!({"size": 200})).await;
    let small = submit(&b, "emit", json!({"size": 4})).await;
    let sink = Arc::new(MemoryQueue::new("downstream", 100).unwrap());
    let app = OneStepApp::builder("worker")
        .task(
            Task::new("emit")
                .source(source(&b, "emit"))
                .emit(sink.clone() as Arc<dyn Sink>)
                .retry(MaxAttempts::new(2).unwrap())
                .handler(|_ctx: TaskContext, input: Value| async move {
                    Ok::<_, TaskError>(json!(
                        "r".repeat(input["size"].as_u64().unwrap_or(0) as usize)
                    ))
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    let failed = wait_terminal(&b, big.id).await;
    let succeeded = wait_terminal(&b, small.id).await;
    running.stop().await;
    assert_eq!(
        (failed.status, failed.attempts),
        (ExecutionStatus::Failed, 2)
    );
    assert_eq!(
        failed.error.unwrap().stage.as_deref(),
        Some("result_validation")
    );
    assert_eq!(succeeded.status, ExecutionStatus::Succeeded);
    let emitted = sink.fetch(10).await.unwrap();
    assert_eq!(emitted.len(), 1, "only the storable result was emitted");
    assert_eq!(emitted[0].envelope().body, json!("rrrr"));
}

/// A handler result holding U+0000 or nested deeper than `MAX_STORED_DEPTH` levels as stored fails
/// its attempt at
/// stage `result_validation` (`ExecutionEncodingError`) instead of leaving the execution stuck or
/// unreadable; a handler error type holding U+0000 is stored with U+FFFD in its place. The
/// namespace still lists.
pub async fn worker_fails_unstorable_results_at_result_validation<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let nul = submit(&b, "store", json!("nul")).await;
    let deep = submit(&b, "store", json!("deep")).await;
    let error = submit(&b, "store", json!("error")).await;
    let fine = submit(&b, "store", json!("fine")).await;
    let app = OneStepApp::builder("worker")
        .task(Task::new("store").source(source(&b, "store")).handler(
            |_ctx: TaskContext, input: Value| async move {
                match input.as_str() {
                    Some("nul") => Ok(json!({"text": "a\u{0}b"})),
                    Some("deep") => Ok(nested(MAX_STORED_DEPTH + 1)),
                    Some("error") => Err(TaskError::new("Bad\u{0}Type", "boom")),
                    _ => Ok(nested(MAX_STORED_DEPTH)),
                }
            },
        ))
        .build()
        .unwrap();
    let running = Running::start(app);
    let mut done = Vec::new();
    for e in [&nul, &deep, &error, &fine] {
        done.push(wait_terminal(&b, e.id).await);
    }
    running.stop().await;
    for failed in &done[..2] {
        assert_eq!(
            (failed.status, failed.result.as_ref()),
            (ExecutionStatus::Failed, None)
        );
        let detail = failed.error.as_ref().unwrap();
        assert_eq!(
            (detail.stage.as_deref(), detail.exception_type.as_str()),
            (Some("result_validation"), "ExecutionEncodingError"),
            "{failed:?}"
        );
    }
    assert_eq!(done[2].status, ExecutionStatus::Failed);
    let detail = done[2].error.as_ref().unwrap();
    assert_eq!(
        (detail.stage.as_deref(), detail.exception_type.as_str()),
        (Some("handler"), "Bad\u{FFFD}Type")
    );
    assert_eq!(
        (done[3].status, done[3].result.as_ref()),
        (ExecutionStatus::Succeeded, Some(&nested(MAX_STORED_DEPTH)))
    );
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    assert_eq!(
        client.list(None, None, 10, None).await.unwrap().items.len(),
        4
    );
}

/// Source options are checked at construction with field-qualified messages.
pub async fn execution_source_rejects_invalid_options_with_field_names<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    type Change = Box<dyn Fn(&mut ExecutionSourceOptions)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|o| o.task_names = vec![]),
            "task_names must contain exactly one task name, got 0",
        ),
        (
            Box::new(|o| o.task_names = vec!["a".into(), "b".into()]),
            "task_names must contain exactly one task name, got 2",
        ),
        (
            Box::new(|o| o.batch_size = 0),
            "batch_size must be >= 1, got 0",
        ),
        (
            Box::new(|o| o.prefetch = Prefetch::Fixed(10_001)),
            "prefetch must be <= 10000 or `auto`, got 10001",
        ),
        (
            Box::new(|o| o.poll_interval = Duration::ZERO),
            "poll_interval must be longer than 0 s and at most 100 years, got 0 s",
        ),
        (
            Box::new(|o| o.lease_duration = Duration::ZERO),
            "lease_duration must be longer than 0 s and at most 100 years, got 0 s",
        ),
        (
            Box::new(|o| o.lease_duration = Duration::MAX),
            "lease_duration must be longer than 0 s and at most 100 years, got 18446744073709552000 s",
        ),
        (
            Box::new(|o| {
                o.lease_duration = Duration::from_secs(90);
                o.heartbeat_interval = Duration::from_secs(31);
            }),
            "heartbeat_interval must be <= lease_duration / 3 (30 s), got 31 s",
        ),
        (
            Box::new(|o| o.worker_id = "  ".into()),
            "worker_id must be a non-empty string",
        ),
        (
            Box::new(|o| o.namespace = "n".repeat(256)),
            "namespace must be at most 255 characters, got 256",
        ),
    ];
    for (change, message) in cases {
        let mut o = ExecutionSourceOptions::new(NS, "t");
        change(&mut o);
        let err = ExecutionSource::new(b.clone(), o)
            .err()
            .expect("invalid options are rejected");
        assert_eq!(err.to_string(), message);
    }
    let mut o = ExecutionSourceOptions::new(NS, "t");
    o.lease_duration = Duration::from_secs(90);
    o.heartbeat_interval = Duration::from_secs(30);
    assert!(
        ExecutionSource::new(b.clone(), o).is_ok(),
        "exactly a third is allowed"
    );
}

/// An execution source serves exactly one task; registering it for another fails at build.
pub async fn execution_source_rejects_a_task_with_another_name<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let err = OneStepApp::builder("worker")
        .task(
            Task::new("other")
                .source(source(&b, "report"))
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap_err();
    let expected = format!(
        "`{}.execution:{NS}` is configured for task 'report', not 'other'",
        b.backend_name()
    );
    assert_eq!(err.to_string(), expected);
}

/// Fetch claims at most the batch size; envelopes carry the payload, the metadata plus
/// `onestep.execution`, and `attempts = execution attempts - 1`.
pub async fn execution_source_fetch_carries_correlation_meta<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let mut meta = serde_json::Map::new();
    meta.insert("tenant".into(), json!("acme"));
    for n in 0..3 {
        b.submit(request(
            "t",
            json!({"n": n}),
            SubmitOptions::default().metadata(meta.clone()),
        ))
        .await
        .unwrap();
    }
    let mut o = options("t");
    o.batch_size = 2;
    let source = ExecutionSource::new(b.clone(), o).unwrap();
    assert!(!source.fetch_is_cancel_safe());
    let deliveries = source.fetch(5).await.unwrap();
    assert_eq!(deliveries.len(), 2);
    for d in &deliveries {
        let env = d.envelope();
        assert_eq!(env.attempts, 0);
        assert_eq!(env.meta["tenant"], "acme");
        let correlation = &env.meta["onestep.execution"];
        let id: Uuid = correlation["id"].as_str().unwrap().parse().unwrap();
        let attempt: Uuid = correlation["attempt_id"].as_str().unwrap().parse().unwrap();
        assert_ne!(id, attempt);
        assert_eq!(
            b.get(NS, id).await.unwrap().unwrap().status,
            ExecutionStatus::Running
        );
    }
}

/// Deliveries fetched but never started go back to the queue when released.
pub async fn source_release_unstarted_returns_claims_to_the_queue<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let source = ExecutionSource::new(b.clone(), options("t")).unwrap();
    let mut deliveries = source.fetch(1).await.unwrap();
    deliveries[0].release_unstarted().await.unwrap();
    let row = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!((row.status, row.attempts), (ExecutionStatus::Queued, 1));
    let again = source.fetch(1).await.unwrap();
    assert_eq!(
        again[0].envelope().attempts,
        1,
        "the released attempt counts"
    );
}

/// A worker whose lease expires stops its handler; the next claim reclaims the execution as a new
/// attempt that finishes it.
pub async fn worker_that_loses_its_lease_stops_and_a_new_attempt_finishes<F: BackendFactory>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "lease", json!(1)).await;
    let app = OneStepApp::builder("worker")
        .task(
            Task::new("lease")
                .source(source(&b, "lease"))
                .concurrency(2)
                .handler(|ctx: TaskContext, _v: Value| async move {
                    if ctx.attempts() == 0 {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    Ok::<_, TaskError>(json!({"attempt": ctx.attempts() + 1}))
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    wait_until(&b, e.id, "running", |e| {
        e.status == ExecutionStatus::Running
    })
    .await;
    setup.clock.advance(secs(31.0));
    let done = wait_terminal(&b, e.id).await;
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"attempt": 2})));
}

/// An idle worker picks up a new submission well before its next poll (a wake-up channel).
pub async fn idle_workers_wake_up_on_submit<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let mut o = options("wake");
    o.poll_interval = Duration::from_secs(5);
    let app = OneStepApp::builder("worker")
        .task(
            Task::new("wake")
                .source(Arc::new(ExecutionSource::new(b.clone(), o).unwrap()))
                .handler(|_ctx: TaskContext, _v: Value| async {
                    Ok::<_, TaskError>(json!("awake"))
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let submitted_at = tokio::time::Instant::now();
    let e = submit(&b, "wake", json!(1)).await;
    let done = wait_terminal(&b, e.id).await;
    let took = submitted_at.elapsed();
    running.stop().await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert!(
        took < Duration::from_secs(3),
        "picked up after {took:?}, not at the 5 s poll"
    );
}

//! The runtime's contract, mirroring the reference's runtime contract tests.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use onestep_core::{
    AppHandle, ConnectorErrorKind, EmitBinding, EmitRoute, Error, FailureInfo, MaxAttempts,
    MemoryQueue, OneStepApp, Sink, Task, TaskContext, TaskError,
};
use serde_json::{Value, json};
use support::*;
use tokio::sync::Notify;

/// Serves `app` on a task of its own; returns its handle and the serving task.
fn serve_in_background(
    app: &OneStepApp,
) -> (AppHandle, tokio::task::JoinHandle<onestep_core::Result<()>>) {
    let app = app.clone();
    (app.handle(), tokio::spawn(async move { app.serve().await }))
}

fn shutdown_after(app: &OneStepApp, after: Duration) {
    let handle = app.handle();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        handle.request_shutdown();
    });
}

#[tokio::test(start_paused = true)]
async fn single_delivery_success_runs_stages_in_a_stable_order() {
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!(1)], &log));
    let sink = RecordingSink::new("out", &log);
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(source)
                .emit(sink.clone() as Arc<dyn Sink>)
                .before(move |_ctx, _p| {
                    let l = l1.clone();
                    async move {
                        l.push("before");
                        Ok(())
                    }
                })
                .handler(move |_ctx: TaskContext, n: i64| {
                    let l = l2.clone();
                    async move {
                        l.push("handler");
                        Ok::<_, TaskError>(n + 1)
                    }
                })
                .after_success(move |_ctx, _p, r| {
                    let l = l3.clone();
                    async move {
                        l.push(format!("after_success:{r}"));
                        Ok(())
                    }
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    assert_eq!(
        log.entries(),
        vec![
            "open:scripted",
            "open:out",
            "start:1",
            "before",
            "handler",
            "after_success:2",
            "send:out:2",
            "ack:1",
            "close:out",
            "close:scripted"
        ]
    );
    assert_eq!(events.kinds(), vec!["fetched", "started", "succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn task_timeout_retries_once_then_fails_with_kind_timeout() {
    let events = Events::default();
    let queue = Arc::new(MemoryQueue::new("q", 10).unwrap());
    queue
        .publish(json!("slow"), Default::default())
        .await
        .unwrap();
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(queue.clone())
                .timeout(Duration::from_secs(1))
                .retry(MaxAttempts::new(2).unwrap())
                .handler(|_ctx: TaskContext, _v: Value| async move {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(5));
    app.serve().await.unwrap();
    let outcomes: Vec<_> = events
        .all()
        .into_iter()
        .filter(|e| e.failure.is_some())
        .collect();
    assert_eq!(outcomes.len(), 2);
    assert_eq!(outcomes[0].kind.as_str(), "retried");
    assert_eq!(outcomes[1].kind.as_str(), "failed");
    assert_eq!((outcomes[0].attempt, outcomes[1].attempt), (1, 2));
    let failure = outcomes[1].failure.as_ref().unwrap();
    assert_eq!(
        (failure.kind.as_str(), failure.stage.as_str()),
        ("timeout", "handler")
    );
    assert!(queue.is_empty());
}

/// A task's timeout counts the time its typed input takes to deserialize, as it counts the
/// handler's: the deserializing runs inside the timed future. Real time: the input blocks its
/// thread for 60 ms, past the 40 ms limit, and the handler then waits 20 ms more.
#[tokio::test]
async fn the_timeout_counts_deserializing_the_input() {
    struct SlowInput;
    impl<'de> serde::Deserialize<'de> for SlowInput {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            std::thread::sleep(Duration::from_millis(60));
            Value::deserialize(d).map(|_| SlowInput)
        }
    }
    let events = Events::default();
    let queue = Arc::new(MemoryQueue::new("q", 10).unwrap());
    queue.publish(json!("x"), Default::default()).await.unwrap();
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(queue.clone())
                .timeout(Duration::from_millis(40))
                .retry(MaxAttempts::new(1).unwrap())
                .handler(|_ctx: TaskContext, _input: SlowInput| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    let failed: Vec<_> = events.all().into_iter().filter_map(|e| e.failure).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        (failed[0].kind.as_str(), failed[0].stage.as_str()),
        ("timeout", "handler")
    );
}

#[tokio::test(start_paused = true)]
async fn final_failure_publishes_the_dead_letter_payload_then_fails() {
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!({"order": 7})], &log));
    let dlq = RecordingSink::new("dlq", &log);
    let app = OneStepApp::builder("shop")
        .on_event(events.recorder())
        .task(
            Task::new("charge")
                .source(source)
                .dead_letter(dlq.clone())
                .handler(|_ctx: TaskContext, _v: Value| async {
                    Err::<(), _>("card declined".parse::<i32>().unwrap_err())
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    let letters = dlq.received.lock().unwrap().clone();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].body,
        json!({"payload": {"order": 7}, "failure": {"kind": "error", "exception_type": "ParseIntError", "message": "invalid digit found in string"}})
    );
    assert_eq!(
        Value::Object(letters[0].meta.clone()),
        json!({"app": "shop", "task": "charge", "source": "scripted", "original_meta": {}, "original_attempts": 0})
    );
    assert_eq!(letters[0].attempts, 0);
    assert_eq!(log.count("fail:"), 1);
    assert_eq!(
        events.kinds(),
        vec!["fetched", "started", "dead_lettered", "failed"]
    );
}

#[tokio::test(start_paused = true)]
async fn failing_dead_letter_publish_retries_the_original_delivery() {
    let log = Log::default();
    let source = Arc::new(ScriptedSource::new([json!(1)], &log));
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source)
                .dead_letter(RecordingSink::failing("dlq", &log))
                .handler(|_ctx: TaskContext, _v: Value| async {
                    Err::<(), _>(TaskError::msg("boom"))
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    assert_eq!(log.count("retry:1"), 1);
    assert_eq!(log.count("fail:"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_delivery_whose_fail_errors_is_retried_instead() {
    let log = Log::default();
    let mut source = ScriptedSource::new([json!(1)], &log);
    source.fail_errors = true;
    let app =
        OneStepApp::builder("app")
            .task(Task::new("t").source(Arc::new(source)).handler(
                |_ctx: TaskContext, _v: Value| async { Err::<(), _>(TaskError::msg("boom")) },
            ))
            .build()
            .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    assert_eq!(log.count("fail:1"), 1);
    assert_eq!(log.count("retry:1"), 1);
}

#[tokio::test(start_paused = true)]
async fn retryable_fetch_errors_back_off_and_the_worker_keeps_going() {
    let log = Log::default();
    let source = ScriptedSource::new([json!(1)], &log).with_fetch_errors([
        connector_error(ConnectorErrorKind::Disconnected),
        connector_error(ConnectorErrorKind::Transient),
        connector_error(ConnectorErrorKind::Throttled),
    ]);
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(5));
    app.serve().await.unwrap();
    assert_eq!(log.count("fetch:error"), 3);
    assert_eq!(log.count("ack:1"), 1);
}

/// Serves an app of one task over `source` until it stops on its own (within 5 s), and returns
/// its error, after checking that its resources were closed.
async fn serve_until_it_fails(source: ScriptedSource, log: &Log) -> Error {
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), app.serve())
        .await
        .expect("app must stop")
        .unwrap_err();
    assert!(
        log.entries().contains(&"close:scripted".to_string()),
        "resources are closed on failure"
    );
    err
}

#[tokio::test(start_paused = true)]
async fn non_retryable_fetch_error_stops_the_app_with_that_error() {
    let log = Log::default();
    let source = ScriptedSource::new([], &log)
        .with_fetch_errors([connector_error(ConnectorErrorKind::Misconfigured)]);
    let err = serve_until_it_fails(source, &log).await;
    assert_eq!(
        err.as_connector().unwrap().kind,
        ConnectorErrorKind::Misconfigured
    );
}

/// A fetch that panics stops the app with an error naming the panic, and resources close.
#[tokio::test(start_paused = true)]
async fn a_panicking_fetch_stops_the_app_with_an_error() {
    let log = Log::default();
    let mut source = ScriptedSource::new([], &log);
    source.fetch_panics = true;
    let err = serve_until_it_fails(source, &log).await;
    assert!(err.to_string().contains("panicked"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_timeout_cancels_in_flight_work_and_retries_the_delivery() {
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!(1)], &log));
    let app = OneStepApp::builder("app")
        .shutdown_timeout(Some(Duration::from_secs(2)))
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(source)
                .handler(|ctx: TaskContext, _v: Value| async move {
                    ctx.cancellation().cancelled().await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(200));
    let started = tokio::time::Instant::now();
    app.serve().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(log.count("retry:1:None"), 1);
    assert_eq!(log.count("ack:"), 0);
    assert_eq!(
        events.kinds(),
        vec!["fetched", "started", "cancelled", "retried"]
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_bounds_cleanup_of_deliveries_that_never_settle() {
    let log = Log::default();
    let mut source = ScriptedSource::new([json!(1)], &log);
    source.retry_hangs = true;
    let app = OneStepApp::builder("app")
        .shutdown_timeout(Some(Duration::from_secs(1)))
        .cleanup_timeout(Duration::from_secs(1))
        .task(Task::new("t").source(Arc::new(source)).handler(
            |_ctx: TaskContext, _v: Value| async {
                std::future::pending::<()>().await;
                Ok::<_, TaskError>(())
            },
        ))
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(100));
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), app.serve())
        .await
        .expect("shutdown must be bounded")
        .unwrap();
    assert!(
        started.elapsed() <= Duration::from_millis(2200),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn drain_during_a_non_cancel_safe_fetch_releases_what_it_claimed() {
    let log = Log::default();
    let gate = Arc::new(Notify::new());
    let mut source = ScriptedSource::new([json!(1), json!(2)], &log);
    source.cancel_safe = false;
    source.gate = Some(gate.clone());
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .concurrency(2)
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    let (handle, serve) = serve_in_background(&app);
    eventually(Duration::from_secs(1), || log.count("fetch:waiting") == 1).await;
    handle.request_drain();
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.notify_one();
    tokio::time::timeout(Duration::from_secs(1), handle.wait_drained())
        .await
        .unwrap();
    assert_eq!(log.count("release:"), 2);
    assert_eq!(log.count("start:"), 0);
    assert_eq!(
        log.count("ack:") + log.count("retry:") + log.count("fail:"),
        0
    );
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
}

/// Runs four deliveries through a task of concurrency 4 whose fetches wait at a gate (the first
/// is let through): 0 and 1 end after 10 ms (half the slots free: a fetch), 2 and 3 after
/// 20 ms. Once all four have ended, two more bodies are queued, a drain is requested and the
/// gate opens. Returns the source's fetch limits and the log.
async fn gated_fetches(concurrent_fetches: usize) -> (Vec<usize>, Log) {
    let log = Log::default();
    let gate = Arc::new(Notify::new());
    let mut source = ScriptedSource::new((0..4).map(|n| json!(n)), &log);
    source.cancel_safe = false;
    source.gate = Some(gate.clone());
    source.concurrent_fetches = concurrent_fetches;
    let source = Arc::new(source);
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source.clone())
                .concurrency(4)
                .handler(|_ctx: TaskContext, v: Value| async move {
                    // Two slots free up at 10 ms (half of them, enough for a fetch), two more
                    // at 20 ms; the rest would hold theirs.
                    let ms = match v.as_u64() {
                        Some(0 | 1) => 10,
                        Some(2 | 3) => 20,
                        _ => 10_000,
                    };
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    let (handle, serve) = serve_in_background(&app);
    eventually(Duration::from_secs(1), || log.count("fetch:waiting") == 1).await;
    gate.notify_one();
    eventually(Duration::from_secs(1), || log.count("ack:") == 4).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    source.bodies.lock().unwrap().extend([json!(4), json!(5)]);
    handle.request_drain();
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.notify_waiters();
    tokio::time::timeout(Duration::from_secs(60), handle.wait_drained())
        .await
        .unwrap();
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
    let limits = source.limits.lock().unwrap().clone();
    (limits, log)
}

/// A source that may be fetched twice at once gets a second fetch while another waits, for the
/// slots freed meanwhile (never more than the free slots); a drain awaits both fetches and hands
/// back what they claimed.
#[tokio::test(start_paused = true)]
async fn a_second_fetch_asks_only_for_slots_freed_meanwhile() {
    let (limits, log) = gated_fetches(2).await;
    assert_eq!(limits, [4, 2, 2]);
    assert_eq!(log.count("start:"), 4);
    assert_eq!(log.count("ack:"), 4);
    assert_eq!(log.count("release:"), 2, "{:?}", log.entries());

    let (limits, log) = gated_fetches(1).await;
    assert_eq!(limits, [4, 2], "one fetch at a time by default");
    assert_eq!(log.count("ack:"), 4);
    assert_eq!(log.count("release:"), 2, "{:?}", log.entries());
}

/// Fetches side by side that both bring work start all of it within the concurrency, hand
/// nothing back, and once the queue is empty the runner waits a poll interval between fetches
/// instead of fetching again as each empty answer comes back.
#[tokio::test]
async fn fetches_side_by_side_share_the_slots_and_rest_when_the_queue_is_empty() {
    let log = Log::default();
    let mut source = ScriptedSource::new((0..60).map(|n| json!(n)), &log);
    source.concurrent_fetches = 2;
    // Long enough that slots free up while a fetch is still under way even on a loaded machine
    // (at 3 ms, a busy CI run once saw no two fetches overlap).
    source.fetch_delay = Duration::from_millis(12);
    source.frees_slot_before_ack = true;
    source.ack_delay = Duration::from_millis(2);
    source.poll = Duration::from_millis(50);
    let source = Arc::new(source);
    let peak = Peak::default();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source.clone())
                .concurrency(8)
                .handler(peak.handler(|| Duration::from_millis(fastrand::u64(1..6)))),
        )
        .build()
        .unwrap();
    let (handle, serve) = serve_in_background(&app);
    eventually(Duration::from_secs(10), || log.count("ack:") == 60).await;
    let fetched_by_then = source.limits.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_fetches = source.limits.lock().unwrap().len() - fetched_by_then;
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
    assert_eq!(
        source
            .most_fetching
            .load(std::sync::atomic::Ordering::SeqCst),
        2,
        "two fetches were under way at once"
    );
    assert!(peak.most() <= 8, "{} handlers ran at once", peak.most());
    assert_eq!(log.count("release:"), 0, "{:?}", log.entries());
    assert_eq!(log.count("start:"), 60);
    // Idle, a fetch every 50 ms is ~10 in 500 ms; fetching on each empty answer is thousands.
    assert!(idle_fetches <= 25, "{idle_fetches} fetches in 500 ms idle");
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_never_exceeded() {
    let log = Log::default();
    let source = Arc::new(ScriptedSource::new((0..30).map(|n| json!(n)), &log));
    let peak = Peak::default();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source)
                .concurrency(3)
                .handler(peak.handler(|| Duration::from_millis(fastrand::u64(1..20)))),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(5));
    app.serve().await.unwrap();
    assert_eq!(log.count("ack:"), 30);
    assert_eq!(peak.most(), 3);
}

/// Runs 20 deliveries whose acks take 1 s through a task of concurrency 2 with 10 ms handlers;
/// returns the most handlers and the most acks that ran at once.
async fn slow_acks(frees_slot_before_ack: bool) -> (usize, usize) {
    let log = Log::default();
    let mut source = ScriptedSource::new((0..20).map(|n| json!(n)), &log);
    source.ack_delay = Duration::from_secs(1);
    source.frees_slot_before_ack = frees_slot_before_ack;
    let peak = Peak::default();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .concurrency(2)
                .handler(peak.handler(|| Duration::from_millis(10))),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(60));
    app.serve().await.unwrap();
    assert_eq!(
        log.count("ack:"),
        20,
        "a graceful shutdown waits for settling work"
    );
    let (mut acking, mut most) = (0usize, 0usize);
    for entry in log.entries() {
        if entry.starts_with("ack-start:") {
            acking += 1;
            most = most.max(acking);
        } else if entry.starts_with("ack:") {
            acking -= 1;
        }
    }
    (peak.most(), most)
}

/// A delivery that frees its slot before its ack (a tracked execution) lets the next handlers
/// start while slow acks run, with at most three times the concurrency in flight; any other
/// delivery holds its slot until it is settled.
#[tokio::test(start_paused = true)]
async fn a_slot_frees_before_the_ack_only_when_the_delivery_allows_it() {
    assert_eq!(
        slow_acks(true).await,
        (2, 6),
        "two handlers at most; six deliveries in flight, all of them acking"
    );
    assert_eq!(
        slow_acks(false).await,
        (2, 2),
        "the slot is held through the ack"
    );
}

/// When the ack of a delivery that freed its slot early fails, its failure path (here an
/// `on_failure` hook) takes a slot again: handlers and hooks together never exceed the task's
/// concurrency.
#[tokio::test(start_paused = true)]
async fn a_failed_ack_after_an_early_slot_release_runs_its_failure_path_in_a_slot() {
    let log = Log::default();
    let mut source = ScriptedSource::new((0..6).map(|n| json!(n)), &log);
    source.frees_slot_before_ack = true;
    source.ack_fails = true;
    let peak = Peak::default();
    let hook = peak.clone();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .concurrency(1)
                .on_failure(move |_ctx, _p, _f: FailureInfo| {
                    let hook = hook.clone();
                    async move {
                        hook.enter();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        hook.leave();
                    }
                })
                .handler(peak.handler(|| Duration::from_millis(10))),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(10));
    app.serve().await.unwrap();
    assert_eq!(
        log.count("ack-failed:"),
        6,
        "every ack was tried and failed"
    );
    assert_eq!(
        peak.most(),
        1,
        "a failure hook never runs beside a handler at concurrency 1"
    );
}

/// A source that returns more deliveries than it was asked for gets the extra ones handed back
/// unstarted; the task's concurrency is never exceeded.
#[tokio::test(start_paused = true)]
async fn deliveries_beyond_what_was_asked_for_are_handed_back() {
    let log = Log::default();
    let mut source = ScriptedSource::new((0..12).map(|n| json!(n)), &log);
    source.over_deliver = 2;
    let peak = Peak::default();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .concurrency(2)
                .handler(peak.handler(|| Duration::from_millis(10))),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_secs(5));
    app.serve().await.unwrap();
    assert_eq!(peak.most(), 2, "the concurrency is never exceeded");
    assert!(
        log.count("release:") > 0,
        "the extra deliveries were handed back"
    );
    assert_eq!(
        log.count("ack:") + log.count("release:"),
        12,
        "every delivery was either run or handed back"
    );
}

#[tokio::test(start_paused = true)]
async fn input_that_does_not_fit_the_handler_type_is_a_handler_failure() {
    #[derive(serde::Deserialize)]
    struct Order {
        #[allow(dead_code)] // only the shape matters
        id: u64,
    }
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!({"id": "not a number"})], &log));
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(source)
                .handler(|_ctx: TaskContext, _o: Order| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(300));
    app.serve().await.unwrap();
    let failed = events
        .all()
        .into_iter()
        .find(|e| e.kind.as_str() == "failed")
        .unwrap();
    let f = failed.failure.unwrap();
    assert_eq!(
        (f.kind.as_str(), f.stage.as_str(), f.exception_type.as_str()),
        ("error", "handler", "InvalidInput")
    );
    assert!(f.message.contains("invalid type"), "{}", f.message);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_a_failure_not_a_crash() {
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!(1), json!(2)], &log));
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(source)
                .handler(|_ctx: TaskContext, n: i64| async move {
                    if n == 1 {
                        panic!("bad row");
                    }
                    Ok::<_, TaskError>(())
                }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(300));
    app.serve().await.unwrap();
    assert_eq!(log.count("fail:1:error"), 1);
    assert_eq!(log.count("ack:2"), 1);
    let failed = events
        .all()
        .into_iter()
        .find(|e| e.kind.as_str() == "failed")
        .unwrap();
    assert_eq!(failed.failure.unwrap().message, "handler panicked: bad row");
}

#[tokio::test(start_paused = true)]
async fn routes_and_transforms_pick_sinks_and_bodies_before_any_send() {
    let log = Log::default();
    let source = Arc::new(ScriptedSource::new([json!(5), json!(50)], &log));
    let small = RecordingSink::new("small", &log);
    let big = RecordingSink::new("big", &log);
    let audit = RecordingSink::new("audit", &log);
    let route = EmitRoute::new(
        |_ctx, _p, r| Ok(r.as_i64().unwrap_or(0) >= 10),
        vec![EmitBinding::new(big.clone())],
        vec![EmitBinding::new(small.clone())],
    );
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source)
                .emit(route)
                .emit(
                    EmitBinding::new(audit.clone())
                        .with_transform(|_ctx, p, r| Ok(json!({"in": p, "out": r}))),
                )
                .handler(|_ctx: TaskContext, n: i64| async move { Ok::<_, TaskError>(n) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(300));
    app.serve().await.unwrap();
    assert_eq!(small.bodies(), vec![json!(5)]);
    assert_eq!(big.bodies(), vec![json!(50)]);
    assert_eq!(
        audit.bodies(),
        vec![json!({"in": 5, "out": 5}), json!({"in": 50, "out": 50})]
    );
}

#[tokio::test(start_paused = true)]
async fn null_results_emit_nothing_and_sink_failures_fail_at_stage_sink() {
    let log = Log::default();
    let events = Events::default();
    let source = Arc::new(ScriptedSource::new([json!(null), json!(1)], &log));
    let sink = RecordingSink::failing("out", &log);
    let app = OneStepApp::builder("app")
        .on_event(events.recorder())
        .task(
            Task::new("t")
                .source(source)
                .emit(sink as Arc<dyn Sink>)
                .handler(|_ctx: TaskContext, v: Value| async move { Ok::<_, TaskError>(v) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(300));
    app.serve().await.unwrap();
    assert_eq!(log.count("ack:null"), 1);
    assert_eq!(log.count("send:out:1"), 1);
    let failed = events
        .all()
        .into_iter()
        .find(|e| e.kind.as_str() == "failed")
        .unwrap();
    assert_eq!(failed.failure.unwrap().stage.as_str(), "sink");
}

#[tokio::test(start_paused = true)]
async fn pause_parks_one_task_and_resume_restarts_it() {
    let queue = Arc::new(MemoryQueue::new("q", 100).unwrap());
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let app =
        OneStepApp::builder("app")
            .task(Task::new("t").source(queue.clone()).handler(
                move |_ctx: TaskContext, _v: Value| {
                    let d = d.clone();
                    async move {
                        d.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, TaskError>(())
                    }
                },
            ))
            .build()
            .unwrap();
    let (handle, serve) = serve_in_background(&app);
    handle.wait_task_running("t").await;
    handle.pause_task("t").unwrap();
    handle.wait_task_parked("t").await;
    queue.publish(json!(1), Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "a paused task does not fetch"
    );
    handle.resume_task("t").unwrap();
    eventually(Duration::from_secs(2), || done.load(Ordering::SeqCst) == 1).await;
    assert!(
        handle
            .pause_task("nope")
            .unwrap_err()
            .to_string()
            .contains("\"nope\" is not a task of this app")
    );
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn resources_open_once_in_order_and_close_in_reverse() {
    let log = Log::default();
    let queue_like = Arc::new(ScriptedSource::new([], &log));
    let sink = RecordingSink::new("sink", &log);
    let app = OneStepApp::builder("app")
        .resource(sink.clone())
        .task(
            Task::new("a")
                .source(queue_like.clone())
                .emit(sink.clone() as Arc<dyn Sink>)
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(100));
    app.serve().await.unwrap();
    assert_eq!(
        log.entries(),
        vec!["open:sink", "open:scripted", "close:scripted", "close:sink"]
    );
}

#[tokio::test(start_paused = true)]
async fn failing_startup_hook_closes_opened_resources_and_reports_the_hook() {
    let log = Log::default();
    let app = OneStepApp::builder("app")
        .resource(RecordingSink::new("a", &log))
        .resource(RecordingSink::new("b", &log))
        .on_startup(|_h| async { Err("migrations missing".into()) })
        .build()
        .unwrap();
    let err = app.serve().await.unwrap_err();
    assert_eq!(err.to_string(), "startup hook 1: migrations missing");
    assert_eq!(
        log.entries(),
        vec!["open:a", "open:b", "close:b", "close:a"]
    );
}

#[test]
fn invalid_task_definitions_fail_at_build_with_field_names() {
    let handler = |_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) };
    let err = OneStepApp::builder("app")
        .task(Task::new("t").concurrency(0).handler(handler))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks[0] (t).concurrency must be >= 1, got 0"
    );
    let err = OneStepApp::builder("app")
        .task(Task::new("t").handler(handler))
        .task(Task::new("t").handler(handler))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks[1].name \"t\" is used by another task"
    );
    let err = OneStepApp::builder("app")
        .task(Task::new("t"))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks[0] (t).handler is required when the task has no emit targets"
    );
    let err = OneStepApp::builder(" ").build().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }));
    let err = OneStepApp::builder("app")
        .shutdown_timeout(Some(Duration::ZERO))
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "app.shutdown_timeout_s must be > 0, got 0");
}

#[tokio::test(start_paused = true)]
async fn on_failure_hook_sees_the_failure_before_the_retry_decision() {
    let log = Log::default();
    let source = Arc::new(ScriptedSource::new([json!(1)], &log));
    let l = log.clone();
    let app = OneStepApp::builder("app")
        .task(
            Task::new("t")
                .source(source)
                .retry(
                    MaxAttempts::new(3)
                        .unwrap()
                        .with_delay(Duration::from_secs(2)),
                )
                .on_failure(move |_ctx, _p, f: FailureInfo| {
                    let l = l.clone();
                    async move { l.push(format!("on_failure:{}:{}", f.kind, f.stage)) }
                })
                .before(|_ctx, _p| async { Err(TaskError::msg("not yet")) })
                .handler(|_ctx: TaskContext, _v: Value| async { Ok::<_, TaskError>(()) }),
        )
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(300));
    app.serve().await.unwrap();
    let entries = log.entries();
    let hook = entries
        .iter()
        .position(|e| e == "on_failure:error:before_hook")
        .unwrap();
    let retry = entries
        .iter()
        .position(|e| e == "retry:1:Some(2s)")
        .unwrap();
    assert!(hook < retry);
}

#[tokio::test(start_paused = true)]
async fn a_single_free_slot_is_filled_while_long_tasks_run() {
    let queue = Arc::new(MemoryQueue::new("q", 100).unwrap());
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let app = OneStepApp::builder("app")
        .task(Task::new("t").source(queue.clone()).concurrency(8).handler(
            move |_ctx: TaskContext, long: bool| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(if long { 3600 } else { 0 })).await;
                    Ok::<_, TaskError>(())
                }
            },
        ))
        .build()
        .unwrap();
    for _ in 0..7 {
        queue
            .publish(json!(true), Default::default())
            .await
            .unwrap();
    }
    let (handle, serve) = serve_in_background(&app);
    eventually(Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) == 7
    })
    .await;
    queue
        .publish(json!(false), Default::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) == 8
    })
    .await;
    handle.request_shutdown();
    serve.abort();
}

#[tokio::test(start_paused = true)]
async fn a_handlers_own_series_reach_the_apps_exporter() {
    let exporter = Arc::new(onestep_core::metrics::PrometheusExporter::new("test"));
    let queue = Arc::new(MemoryQueue::new("q", 10).unwrap());
    for rows in [3, 4] {
        queue
            .publish(json!(rows), Default::default())
            .await
            .unwrap();
    }
    let app = OneStepApp::builder("app")
        .metrics(exporter.clone())
        .task(Task::new("import").source(queue.clone()).handler(
            |ctx: TaskContext, rows: u32| async move {
                let metrics = ctx.metrics();
                let bad = metrics.counter("rows imported", &[]).unwrap_err();
                metrics
                    .counter("rows_imported", &[("table", "orders")])
                    .and_then(|c| c.inc(f64::from(rows)))
                    .map_err(|e| TaskError::new("MetricError", e.to_string()))?;
                metrics
                    .gauge("last_batch", &[])
                    .and_then(|g| g.set(f64::from(rows)))
                    .map_err(|e| TaskError::new("MetricError", e.to_string()))?;
                Ok::<_, TaskError>(bad.to_string())
            },
        ))
        .build()
        .unwrap();
    shutdown_after(&app, Duration::from_millis(500));
    app.serve().await.unwrap();
    let text = exporter.render();
    assert!(
        text.contains("rows_imported{task=\"import\",table=\"orders\"} 7"),
        "{text}"
    );
    assert!(text.contains("# TYPE last_batch gauge"), "{text}");
    assert!(queue.is_empty());
}

//! Typed tasks end to end on the memory backend: a submit, a worker task and a result read that
//! agree on the name and types by construction; what a handler sees of its execution.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use onestep_core::execution::{
    ExecutionClient, ExecutionSourceOptions, ExecutionStatus, MemoryExecutionBackend, SubmitOptions,
};
use onestep_core::{MaxAttempts, OneStepApp, Task, TaskArgs, TaskContext, TaskError};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Debug, Serialize, Deserialize)]
struct Resize {
    url: String,
    width: u32,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Resized {
    url: String,
    width: u32,
    attempt: u32,
}

impl TaskArgs for Resize {
    const TASK_NAME: &'static str = "resize";
    type Output = Resized;
}

/// What the handler saw of its execution, attempt by attempt.
type Seen = Arc<Mutex<Vec<(Uuid, u32, OffsetDateTime, bool)>>>;

#[tokio::test]
async fn a_typed_submit_is_handled_by_its_typed_task_and_read_back_typed() {
    let client = ExecutionClient::new(MemoryExecutionBackend::new(), "images").unwrap();
    let submitted = client
        .submit_args(
            &Resize {
                url: "a.png".into(),
                width: 640,
            },
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(submitted.task_name, "resize");

    let seen: Seen = Arc::default();
    let record = seen.clone();
    let handler = move |ctx: TaskContext, job: Resize| {
        let record = record.clone();
        async move {
            let execution = ctx.execution().expect("a tracked execution");
            let attempt = execution.attempt();
            record.lock().unwrap().push((
                execution.id(),
                attempt,
                execution.lease_expires_at(),
                execution.cancel_requested(),
            ));
            if attempt == 1 {
                return Err(TaskError::new("Flaky", "first attempts fail"));
            }
            Ok::<_, TaskError>(Resized {
                url: job.url,
                width: job.width,
                attempt,
            })
        }
    };
    let mut options = ExecutionSourceOptions::new("images", Resize::TASK_NAME);
    options.poll_interval = Duration::from_millis(20);
    let app = OneStepApp::builder("worker")
        .task(
            Task::of(handler)
                .source(client.source(options).unwrap())
                .retry(MaxAttempts::new(2).unwrap()),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let done = client
        .wait(submitted.id, Duration::from_secs(10))
        .await
        .unwrap();
    handle.request_shutdown();
    worker.await.unwrap().unwrap();

    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let output: Resized = client.output::<Resize>(submitted.id).await.unwrap();
    assert_eq!(
        output,
        Resized {
            url: "a.png".into(),
            width: 640,
            attempt: 2
        }
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| (s.0, s.1, s.3)).collect::<Vec<_>>(),
        [(submitted.id, 1, false), (submitted.id, 2, false)]
    );
    let now = OffsetDateTime::now_utc();
    assert!(
        seen.iter().all(|s| s.2 > now - time::Duration::seconds(5)),
        "the lease deadline is the current lease's: {seen:?}"
    );
}

#[tokio::test]
async fn source_for_claims_the_clients_namespace_and_the_args_task() {
    let client = ExecutionClient::new(MemoryExecutionBackend::new(), "images").unwrap();
    let source = client.source_for::<Resize>().unwrap();
    assert_eq!(source.options().namespace, "images");
    assert_eq!(source.options().task_names, ["resize"]);
}

#[tokio::test]
async fn a_handler_outside_tracked_execution_sees_no_execution() {
    let queue = onestep_core::MemoryQueue::new("q", 10).unwrap();
    onestep_core::Sink::publish(&queue, serde_json::json!(1), Default::default())
        .await
        .unwrap();
    let saw = Arc::new(Mutex::new(None));
    let record = saw.clone();
    let app = OneStepApp::builder("plain")
        .task(
            Task::new("t")
                .source(queue)
                .handler(move |ctx: TaskContext, _n: i64| {
                    let record = record.clone();
                    async move {
                        *record.lock().unwrap() = Some(ctx.execution().is_some());
                        Ok::<_, TaskError>(())
                    }
                }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    for _ in 0..200 {
        if saw.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    assert_eq!(*saw.lock().unwrap(), Some(false));
}

//! Submits three executions to PostgreSQL, runs a worker that completes them (one fails, one is
//! cancelled while running), and prints each outcome.
//!
//! Run with `ONESTEP_POSTGRES_URL=postgres://postgres@127.0.0.1/test cargo run -p onestep-postgres
//! --example tracked_postgres` (defaults to that URL).

use std::time::Duration;

use onestep_core::execution::{ExecutionClient, ExecutionSourceOptions, SubmitOptions};
use onestep_core::{MaxAttempts, OneStepApp, Task, TaskArgs, TaskContext, TaskError};
use onestep_postgres::{BackendOptions, PostgresExecutionBackend};
use serde::{Deserialize, Serialize};

/// `n` squared; `sleep_s` makes it slow. `n` is JSON, so a bad submission fails on the worker.
#[derive(Serialize, Deserialize)]
struct Square {
    n: serde_json::Value,
    #[serde(default)]
    sleep_s: u64,
}

impl TaskArgs for Square {
    const TASK_NAME: &'static str = "square";
    type Output = i64;
}

async fn square(_ctx: TaskContext, input: Square) -> Result<i64, TaskError> {
    let n = input
        .n
        .as_i64()
        .ok_or_else(|| TaskError::new("ValueError", "n must be an integer"))?;
    tokio::time::sleep(Duration::from_secs(input.sleep_s)).await;
    Ok(n * n)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let dsn = std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let namespace = format!("example-{}", std::process::id());
    let client = ExecutionClient::new(
        PostgresExecutionBackend::new(&dsn, BackendOptions::default())?,
        &namespace,
    )?;

    let submit = |n: serde_json::Value, sleep_s, options| {
        let client = &client;
        async move { client.submit_args(&Square { n, sleep_s }, options).await }
    };
    let ok = submit(
        12.into(),
        0,
        SubmitOptions::default().idempotency_key("square-12"),
    )
    .await?;
    let bad = submit("twelve".into(), 0, SubmitOptions::default()).await?;
    let slow = submit(7.into(), 30, SubmitOptions::default()).await?;

    let options = ExecutionSourceOptions::new(&namespace, Square::TASK_NAME)
        .with_poll_interval(Duration::from_millis(200))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_lease_duration(Duration::from_secs(5));
    let app = OneStepApp::builder("square-worker")
        .task(
            Task::of(square)
                .source(client.source(options)?)
                .concurrency(4)
                .retry(MaxAttempts::new(2)?),
        )
        .build()?;
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });

    tokio::time::sleep(Duration::from_secs(1)).await;
    client
        .cancel(slow.id, Some("example: no longer needed"))
        .await?;
    for id in [ok.id, bad.id, slow.id] {
        let done = client.wait(id, Duration::from_secs(20)).await?;
        let result = client.output::<Square>(id).await.ok();
        let error = done.error.map(|e| e.exception_type);
        println!("{id}: {} result={result:?} error={error:?}", done.status);
    }
    handle.request_shutdown();
    worker.await??;
    Ok(())
}

//! Submits three executions to PostgreSQL, runs a worker that completes them (one fails, one is
//! cancelled while running), and prints each outcome.
//!
//! Run with `ONESTEP_POSTGRES_URL=postgres://postgres@127.0.0.1/test cargo run -p onestep-postgres
//! --example tracked_postgres` (defaults to that URL).

use std::sync::Arc;
use std::time::Duration;

use onestep_core::execution::{ExecutionClient, ExecutionSourceOptions, SubmitOptions};
use onestep_core::{MaxAttempts, OneStepApp, Task, TaskContext, TaskError};
use onestep_postgres::{BackendOptions, PostgresExecutionBackend, execution_source};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_target(false)
        // Colours only on a terminal, never into a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let dsn = std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let namespace = format!("example-{}", std::process::id());

    let client = ExecutionClient::new(
        PostgresExecutionBackend::new(&dsn, BackendOptions::default())?,
        &namespace,
    )?;
    let ok = client
        .submit(
            "square",
            &json!({"n": 12}),
            SubmitOptions::default().idempotency_key("square-12"),
        )
        .await?;
    let bad = client
        .submit("square", &json!({"n": "twelve"}), SubmitOptions::default())
        .await?;
    let slow = client
        .submit(
            "square",
            &json!({"n": 7, "sleep_s": 30}),
            SubmitOptions::default(),
        )
        .await?;

    let mut options = ExecutionSourceOptions::new(&namespace, "square");
    options.poll_interval = Duration::from_millis(200);
    options.heartbeat_interval = Duration::from_millis(500);
    options.lease_duration = Duration::from_secs(5);
    let source = execution_source(&dsn, BackendOptions::default(), options)?;
    let app = OneStepApp::builder("square-worker")
        .task(
            Task::new("square")
                .source(Arc::new(source))
                .concurrency(4)
                .retry(MaxAttempts::new(2)?)
                .handler(|_ctx: TaskContext, input: Value| async move {
                    let n = input["n"]
                        .as_i64()
                        .ok_or_else(|| TaskError::new("ValueError", "n must be an integer"))?;
                    if let Some(s) = input["sleep_s"].as_u64() {
                        tokio::time::sleep(Duration::from_secs(s)).await;
                    }
                    Ok::<_, TaskError>(json!({"square": n * n}))
                }),
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
        println!(
            "{id}: {} result={:?} error={:?}",
            done.status,
            done.result,
            done.error.map(|e| e.exception_type)
        );
    }
    handle.request_shutdown();
    worker.await??;
    Ok(())
}

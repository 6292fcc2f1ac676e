//! Tracked execution on embedded SQLite, API and worker in one process: submits a few report
//! jobs (one idempotent resubmit, one that fails then succeeds on retry, one cancelled while
//! running), runs a worker, and prints each execution as the caller sees it.
//!
//! Run with `cargo run -p onestep-sql --example sqlite_tracked` (database:
//! `./onestep-example.db`, or the path in `ONESTEP_SQLITE_PATH`).

use std::sync::Arc;
use std::time::Duration;

use onestep_core::execution::{
    ExecutionClient, ExecutionSource, ExecutionSourceOptions, SubmitOptions,
};
use onestep_core::{ExponentialBackoff, Jitter, OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::BackendOptions;
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct ReportRequest {
    month: String,
    #[serde(default)]
    slow: bool,
    #[serde(default)]
    flaky: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    month: String,
    rows: u32,
    attempt: u32,
}

/// Builds a report; `flaky` requests fail on their first attempt, `slow` ones take a minute.
async fn build_report(ctx: TaskContext, request: ReportRequest) -> Result<Report, TaskError> {
    if request.flaky && ctx.attempts() == 0 {
        return Err(TaskError::new(
            "WarehouseTimeout",
            "the warehouse did not answer in time",
        ));
    }
    if request.slow {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(Report {
        month: request.month,
        rows: 42,
        attempt: ctx.attempts() + 1,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_target(false)
        // Colours only on a terminal, never into a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let path = std::env::var("ONESTEP_SQLITE_PATH").unwrap_or_else(|_| "onestep-example.db".into());
    let dsn = format!("sqlite://{path}");
    let backend = SqliteExecutionBackend::new(&dsn, BackendOptions::default())?;
    let namespace = format!("example-{}", std::process::id());

    // The API side: submit and get ids back.
    let client = ExecutionClient::new(backend.clone(), &namespace)?;
    let key = SubmitOptions::default().idempotency_key("report-2026-10");
    let october = client
        .submit(
            "report",
            &serde_json::json!({"month": "2026-10"}),
            key.clone(),
        )
        .await?;
    let again = client
        .submit("report", &serde_json::json!({"month": "2026-10"}), key)
        .await?;
    assert_eq!(october.id, again.id);
    let november = client
        .submit(
            "report",
            &serde_json::json!({"month": "2026-11", "flaky": true}),
            SubmitOptions::default(),
        )
        .await?;
    let december = client
        .submit(
            "report",
            &serde_json::json!({"month": "2026-12", "slow": true}),
            SubmitOptions::default(),
        )
        .await?;
    println!(
        "submitted {} executions (the repeated key returned {})",
        3, again.id
    );

    // The worker side: claim under a lease, heartbeat, retry, store results.
    let mut options = ExecutionSourceOptions::new(&namespace, "report");
    options.poll_interval = Duration::from_millis(100);
    options.lease_duration = Duration::from_secs(3);
    options.heartbeat_interval = Duration::from_millis(500);
    let retry = ExponentialBackoff::new(
        3,
        Duration::from_millis(200),
        Duration::from_secs(2),
        2.0,
        Jitter::None,
    )?;
    let app = OneStepApp::builder("report-worker")
        .task(
            Task::new("report")
                .source(Arc::new(ExecutionSource::new(backend, options)?))
                .concurrency(3)
                .retry(retry)
                .handler(build_report),
        )
        .build()?;
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });

    tokio::time::sleep(Duration::from_millis(700)).await;
    client
        .cancel(december.id, Some("the month is not over yet"))
        .await?;
    for (name, id) in [
        ("october", october.id),
        ("november", november.id),
        ("december", december.id),
    ] {
        let done = client.wait(id, Duration::from_secs(30)).await?;
        let outcome = match client.result::<serde_json::Value>(id).await {
            Ok(result) => format!("result {result}"),
            Err(err) => format!("{err}"),
        };
        println!(
            "{name}: {} after {} attempt(s): {outcome}",
            done.status, done.attempts
        );
    }
    handle.request_shutdown();
    worker.await??;
    Ok(())
}

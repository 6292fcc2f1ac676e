//! Tracked execution on embedded SQLite, API and worker in one process: submits a few report
//! jobs (one idempotent resubmit, one that fails then succeeds on retry, one cancelled while
//! running), runs a worker, and prints each execution as the caller sees it.
//!
//! Run with `cargo run -p onestep-sql --example sqlite_tracked` (database:
//! `./onestep-example.db`, or the path in `ONESTEP_SQLITE_PATH`).

use std::time::Duration;

use onestep_core::execution::{ExecutionClient, ExecutionSourceOptions, SubmitOptions};
use onestep_core::{
    ExponentialBackoff, Jitter, OneStepApp, Task, TaskArgs, TaskContext, TaskError,
};
use onestep_sql::BackendOptions;
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde::{Deserialize, Serialize};

/// What the API submits; the task's name and result type come with it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ReportRequest {
    month: String,
    #[serde(default)]
    slow: bool,
    #[serde(default)]
    flaky: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    month: String,
    rows: u32,
    attempt: u32,
}

impl TaskArgs for ReportRequest {
    const TASK_NAME: &'static str = "report";
    type Output = Report;
}

/// Builds a report; `flaky` requests fail on their first attempt, `slow` ones take a minute.
async fn build_report(ctx: TaskContext, request: ReportRequest) -> Result<Report, TaskError> {
    let attempt = ctx.execution().map_or(1, |execution| execution.attempt());
    if request.flaky && attempt == 1 {
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
        attempt,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let path = std::env::var("ONESTEP_SQLITE_PATH").unwrap_or_else(|_| "onestep-example.db".into());
    let backend =
        SqliteExecutionBackend::new(&format!("sqlite://{path}"), BackendOptions::default())?;
    let namespace = format!("example-{}", std::process::id());

    // The API side: submit and get ids back.
    let client = ExecutionClient::new(backend, &namespace)?;
    let month = |month: &str| ReportRequest {
        month: month.into(),
        ..ReportRequest::default()
    };
    let key = SubmitOptions::default().idempotency_key("report-2026-10");
    let october = client.submit_args(&month("2026-10"), key.clone()).await?;
    let again = client.submit_args(&month("2026-10"), key).await?;
    assert_eq!(
        october.id, again.id,
        "the repeated key returns the first execution"
    );
    let flaky = ReportRequest {
        flaky: true,
        ..month("2026-11")
    };
    let november = client.submit_args(&flaky, SubmitOptions::default()).await?;
    let slow = ReportRequest {
        slow: true,
        ..month("2026-12")
    };
    let december = client.submit_args(&slow, SubmitOptions::default()).await?;

    // The worker side, on the client's pool: claim under a lease, heartbeat, retry, store results.
    let options = ExecutionSourceOptions::new(&namespace, ReportRequest::TASK_NAME)
        .with_poll_interval(Duration::from_millis(100))
        .with_lease_duration(Duration::from_secs(3))
        .with_heartbeat_interval(Duration::from_millis(500));
    let retry = ExponentialBackoff::new(
        3,
        Duration::from_millis(200),
        Duration::from_secs(2),
        2.0,
        Jitter::None,
    )?;
    let app = OneStepApp::builder("report-worker")
        .task(
            Task::of(build_report)
                .source(client.source(options)?)
                .concurrency(3)
                .retry(retry),
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
        let outcome = match client.output::<ReportRequest>(id).await {
            Ok(report) => format!("{report:?}"),
            Err(err) => err.to_string(),
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

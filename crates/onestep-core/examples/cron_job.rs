//! A schedule: an interval job that runs every second (and once at start), plus a cron job
//! declared for 02:30 on weekdays in London. Stops after three interval runs.
//!
//! Run with `cargo run -p onestep-core --example cron_job`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use onestep_core::{CronSource, IntervalSource, OneStepApp, Overlap, Task, TaskContext, TaskError};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), onestep_core::Error> {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_target(false)
        // Colours only on a terminal, never into a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();

    let heartbeat = IntervalSource::every(Duration::from_secs(1))?
        .immediate(true)
        .overlap(Overlap::Skip)
        .build();
    let nightly = CronSource::on("30 2 * * mon-fri")?
        .time_zone("Europe/London")?
        .payload(serde_json::json!({"report": "daily-sales"}))
        .build();

    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    let app = OneStepApp::builder("scheduler")
        .task(Task::new("heartbeat").source(heartbeat).handler(
            move |ctx: TaskContext, _body: Value| {
                let counter = counter.clone();
                async move {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    println!("heartbeat #{n} scheduled at {}", ctx.meta()["scheduled_at"]);
                    Ok::<_, TaskError>(())
                }
            },
        ))
        .task(Task::new("nightly-report").source(nightly).handler(
            |_ctx: TaskContext, body: Value| async move {
                println!("building report {}", body["report"]);
                Ok::<_, TaskError>(())
            },
        ))
        .build()?;

    println!(
        "{}",
        serde_json::to_string_pretty(&app.describe()).unwrap_or_default()
    );
    let handle = app.handle();
    let stopper = async {
        while runs.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        handle.request_shutdown();
    };
    let (result, ()) = tokio::join!(app.serve(), stopper);
    result
}

//! The worker process of the crash test (`tests/crash.rs`): drains `--queue`, appending each
//! handled message's `id` as a line to the file `--effects` before the handler returns, until
//! it is killed or stopped (SIGTERM: it finishes what runs and deletes what it acked). It
//! receives ten at a time with a 3 s visibility timeout, in region us-east-1 with the
//! emulator's test credentials.
//!
//! ```text
//! sqs_worker --endpoint http://127.0.0.1:5000 --queue-url URL --effects FILE
//! ```
//!
//! Prints `ready` once the worker runs.

use std::io::Write;
use std::time::Duration;

use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_sqs::{AwsSettings, SqsConnector, SqsQueue, SqsQueueOptions};
use serde_json::Value;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    url: String,
    queue: String,
    effects: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        queue: String::new(),
        effects: String::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoint" => a.url = value()?,
            "--queue-url" => a.queue = value()?,
            "--effects" => a.effects = value()?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.url.is_empty() || a.queue.is_empty() || a.effects.is_empty() {
        return Err("--endpoint, --queue-url and --effects are required".into());
    }
    Ok(a)
}

async fn run(a: Args) -> Result<(), BoxError> {
    let settings = AwsSettings::new()
        .with_region("us-east-1")
        .with_endpoint_url(&a.url)
        .with_credentials("testing", "testing-secret", None);
    let queue = SqsQueue::new(
        SqsConnector::new(settings)?,
        SqsQueueOptions::new(&a.queue)
            .with_wait_time_s(1)
            .with_visibility_timeout(3)
            .with_batch_size(10),
    )?;
    let effects = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.effects)?;
    let effects = std::sync::Arc::new(std::sync::Mutex::new(effects));
    let handler = move |_ctx: TaskContext, body: Value| {
        let effects = effects.clone();
        async move {
            let id = body["id"]
                .as_i64()
                .ok_or_else(|| TaskError::new("NoId", "a message without id"))?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            // One write per effect: a SIGKILL never leaves half a line.
            let line = format!("{id}\n");
            effects
                .lock()
                .map_err(|_| TaskError::new("Effects", "poisoned"))?
                .write_all(line.as_bytes())
                .map_err(|e| TaskError::new("Effects", e.to_string()))?;
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("sqs-crash")
        .task(
            Task::new("messages")
                .source(queue)
                .concurrency(8)
                .handler(handler),
        )
        .build()?;
    println!("ready");
    app.run().await?;
    Ok(())
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sqs_worker: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(a).await {
        eprintln!("sqs_worker: {e}");
        std::process::exit(1);
    }
}

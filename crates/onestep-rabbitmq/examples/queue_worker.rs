//! The worker process of the crash test (`tests/crash.rs`): drains `--queue`, appending each
//! handled message's `id` as a line to the file `--effects` before the handler returns, until
//! it is killed.
//!
//! ```text
//! queue_worker --url amqp://guest:guest@127.0.0.1:5672/%2f --queue Q --effects FILE [--publish N]
//! ```
//!
//! With `--publish N` it first publishes N messages `{"id": 1..=N}` (persistent, confirmed),
//! as the chaos suite's broker restart needs.
//!
//! Prints `ready` once the worker runs.

use std::io::Write;
use std::time::Duration;

use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
use serde_json::{Map, Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    url: String,
    queue: String,
    effects: String,
    publish: i64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        queue: String::new(),
        effects: String::new(),
        publish: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--queue" => a.queue = value()?,
            "--effects" => a.effects = value()?,
            "--publish" => {
                let n = value()?;
                a.publish = n
                    .parse()
                    .map_err(|_| format!("--publish: expected a count, got {n:?}"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.url.is_empty() || a.queue.is_empty() || a.effects.is_empty() {
        return Err("--url, --queue and --effects are required".into());
    }
    Ok(a)
}

async fn run(a: Args) -> Result<(), BoxError> {
    let mut arguments = Map::new();
    arguments.insert("x-expires".into(), json!(60_000));
    let queue = RabbitMqQueue::new(
        RabbitMqConnector::new(&a.url)?,
        RabbitMqQueueOptions::new(&a.queue)
            .with_arguments(arguments)
            .with_prefetch(20)
            .with_batch_size(20)
            .with_poll_interval(Duration::from_millis(50)),
    )?;
    for id in 1..=a.publish {
        onestep_core::Sink::publish(&queue, json!({ "id": id }), Map::new()).await?;
    }
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
    let app = OneStepApp::builder("rabbitmq-crash")
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
            eprintln!("queue_worker: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(a).await {
        eprintln!("queue_worker: {e}");
        std::process::exit(1);
    }
}

//! The worker process of the crash test (`tests/crash.rs`): drains `--stream` as `--consumer`
//! of group `crash`, recording each handled entry's `id` in the Redis list `<stream>:effects`
//! before the handler returns, until it is killed.
//!
//! ```text
//! stream_worker --url redis://127.0.0.1:6379 --stream S --consumer C [--reclaim-idle-ms 1000]
//! ```
//!
//! Prints `ready` once the worker runs.

use std::time::Duration;

use onestep_core::{MaxAttempts, OneStepApp, Task, TaskContext, TaskError};
use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
use serde_json::Value;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    url: String,
    stream: String,
    consumer: String,
    reclaim_idle_ms: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        stream: String::new(),
        consumer: String::new(),
        reclaim_idle_ms: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--stream" => a.stream = value()?,
            "--consumer" => a.consumer = value()?,
            "--reclaim-idle-ms" => {
                a.reclaim_idle_ms = value()?
                    .parse()
                    .map_err(|e| format!("--reclaim-idle-ms: {e}"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.url.is_empty() || a.stream.is_empty() || a.consumer.is_empty() {
        return Err("--url, --stream and --consumer are required".into());
    }
    Ok(a)
}

async fn run(a: Args) -> Result<(), BoxError> {
    let connector = RedisConnector::new(&a.url)?;
    let stream = RedisStream::new(
        connector,
        RedisStreamOptions::new(&a.stream)
            .with_group("crash")
            .with_start_id("0")
            .with_consumer(&a.consumer)
            .with_batch_size(20)
            .with_poll_interval(Duration::from_millis(50))
            .with_reclaim_idle(Duration::from_millis(a.reclaim_idle_ms)),
    )?;
    let client = redis::Client::open(a.url.as_str())?;
    let effects = format!("{}:effects", a.stream);
    let handler = move |_ctx: TaskContext, body: Value| {
        let client = client.clone();
        let effects = effects.clone();
        async move {
            let id = body["id"]
                .as_i64()
                .ok_or_else(|| TaskError::new("NoId", "an entry without id"))?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| TaskError::new("Redis", e.to_string()))?;
            let _: i64 = redis::cmd("RPUSH")
                .arg(&effects)
                .arg(id)
                .query_async(&mut conn)
                .await
                .map_err(|e| TaskError::new("Redis", e.to_string()))?;
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("redis-crash")
        .task(
            Task::new("entries")
                .source(stream)
                .concurrency(8)
                // The effect is a write to Redis: while the server restarts (the chaos suite's
                // broker restart) it fails, and the entry must be retried, not failed for good.
                .retry(MaxAttempts::new(100)?.with_delay(Duration::from_millis(200)))
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
            eprintln!("stream_worker: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(a).await {
        eprintln!("stream_worker: {e}");
        std::process::exit(1);
    }
}

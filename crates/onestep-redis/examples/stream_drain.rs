//! Drain rate of `redis_stream`, for `cargo xtask bench --peers` (beside the reference's plugin
//! doing the same work, `bench/peers/py_redis_bench.py`).
//!
//! ```text
//! stream_drain --url redis://127.0.0.1:6379 [--n 5000] [--concurrency 32]
//! ```
//!
//! Appends `n` envelopes to a fresh stream (one pipeline), drains it with one worker app and a
//! handler that does nothing (each entry acked), and prints one JSON line: `{"source",
//! "backend", "n", "drain_per_s", "seconds"}`. The stream is deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onestep_core::wire::encode_envelope;
use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn run(url: &str, n: usize, concurrency: usize) -> Result<Value, BoxError> {
    let name = format!("onestep-bench:{}", std::process::id());
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut conn).await?;
    let mut pipe = redis::pipe();
    for i in 0..n {
        let envelope =
            onestep_core::Envelope::new(json!({"id": i, "payload": "order of the benchmark"}));
        pipe.cmd("XADD")
            .arg(&name)
            .arg("*")
            .arg("body")
            .arg(encode_envelope(&envelope))
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await?;
    let stream = RedisStream::new(
        RedisConnector::new(url)?,
        RedisStreamOptions::new(&name)
            .with_group("bench")
            .with_start_id("0")
            .with_batch_size(100)
            .with_poll_interval(Duration::from_millis(20)),
    )?;
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let handler = move |_ctx: TaskContext, _body: Value| {
        count.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, TaskError>(Value::Null) }
    };
    let app = OneStepApp::builder("stream-drain")
        .task(
            Task::new("entries")
                .source(stream)
                .concurrency(concurrency)
                .handler(handler),
        )
        .build()?;
    let handle = app.handle();
    let started = Instant::now();
    let worker = tokio::spawn(async move { app.serve().await });
    while handled.load(Ordering::Relaxed) < n {
        if worker.is_finished() {
            let ended = worker.await?;
            return Err(format!(
                "the worker app stopped after {} of {n} entries: {ended:?}",
                handled.load(Ordering::Relaxed)
            )
            .into());
        }
        if started.elapsed() > Duration::from_secs(120) {
            // What the group holds says where entries stopped: delivered and pending, or unread.
            let group: redis::Value = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(&name)
                .query_async(&mut conn)
                .await?;
            return Err(format!(
                "the drain did not finish within 120 s ({} of {n} entries handled); the group: \
                 {group:?}",
                handled.load(Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    worker.await??;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut conn).await?;
    Ok(json!({
        "source": "redis_stream",
        "backend": "redis",
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
        "drain_per_s": (n as f64 / seconds).round(),
    }))
}

#[tokio::main]
async fn main() {
    let mut url = String::new();
    let (mut n, mut concurrency) = (5000usize, 32usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--url" => url = value,
            "--n" => n = value.parse().unwrap_or(n),
            "--concurrency" => concurrency = value.parse().unwrap_or(concurrency),
            other => {
                eprintln!("stream_drain: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if url.is_empty() {
        eprintln!("stream_drain: --url is required");
        std::process::exit(2);
    }
    match run(&url, n, concurrency).await {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("stream_drain: {e}");
            std::process::exit(1);
        }
    }
}

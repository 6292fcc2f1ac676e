//! Drain rate of `rabbitmq_queue`, for `cargo xtask bench --peers` (beside the reference's
//! plugin doing the same work, `bench/peers/py_rabbitmq_bench.py`).
//!
//! ```text
//! queue_drain --url amqp://guest:guest@127.0.0.1:5672/%2f [--n 5000] [--concurrency 32]
//! ```
//!
//! Publishes `n` persistent envelopes to a fresh durable queue (confirmed once, at the end),
//! drains it with one worker app (prefetch 100) and a handler that does nothing (each message
//! acked), and prints one JSON line: `{"source", "backend", "n", "drain_per_s", "seconds"}`.
//! The queue is deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use onestep_core::wire::encode_envelope;
use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn run(url: &str, n: usize, concurrency: usize) -> Result<Value, BoxError> {
    let name = format!("onestep-bench.{}", std::process::id());
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(name.as_str().into(), durable, FieldTable::default())
        .await?;
    for i in 0..n {
        let envelope =
            onestep_core::Envelope::new(json!({"id": i, "payload": "order of the benchmark"}));
        let _confirm = channel
            .basic_publish(
                "".into(),
                name.as_str().into(),
                BasicPublishOptions::default(),
                encode_envelope(&envelope).as_bytes(),
                BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_delivery_mode(2),
            )
            .await?;
    }
    channel.wait_for_confirms().await?;
    let queue = RabbitMqQueue::new(
        RabbitMqConnector::new(url)?,
        RabbitMqQueueOptions::new(&name)
            .with_prefetch(100)
            .with_batch_size(100)
            .with_poll_interval(Duration::from_millis(20)),
    )?;
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let handler = move |_ctx: TaskContext, _body: Value| {
        count.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, TaskError>(Value::Null) }
    };
    let app = OneStepApp::builder("queue-drain")
        .task(
            Task::new("messages")
                .source(queue)
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
                "the worker app stopped after {} of {n} messages: {ended:?}",
                handled.load(Ordering::Relaxed)
            )
            .into());
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "the drain did not finish within 120 s ({} of {n} messages handled)",
                handled.load(Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    worker.await??;
    channel
        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
        .await?;
    let _ = conn.close(200, "".into()).await;
    Ok(json!({
        "source": "rabbitmq_queue",
        "backend": "rabbitmq",
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
                eprintln!("queue_drain: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if url.is_empty() {
        eprintln!("queue_drain: --url is required");
        std::process::exit(2);
    }
    match run(&url, n, concurrency).await {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("queue_drain: {e}");
            std::process::exit(1);
        }
    }
}

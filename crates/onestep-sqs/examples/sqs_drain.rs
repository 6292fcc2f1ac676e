//! Drain rate of `sqs_queue`, for `cargo xtask bench --peers` (beside the reference's plugin
//! doing the same work, `bench/peers/py_sqs_bench.py`).
//!
//! ```text
//! sqs_drain --url http://127.0.0.1:5000 [--n 5000] [--concurrency 32]
//! ```
//!
//! Against an SQS endpoint (moto in the bench; region us-east-1, its test credentials): sends
//! `n` envelopes to a fresh queue in batches of ten, drains it with one worker app (ten per
//! receive, deletes grouped by ten) and a handler that does nothing, and prints one JSON line:
//! `{"source", "backend", "n", "drain_per_s", "seconds"}`. The queue is deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onestep_core::wire::encode_envelope;
use onestep_core::{Envelope, OneStepApp, Task, TaskContext, TaskError};
use onestep_sqs::aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use onestep_sqs::{AwsSettings, SqsConnector, SqsQueue, SqsQueueOptions};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn run(endpoint: &str, n: usize, concurrency: usize) -> Result<Value, BoxError> {
    let settings = AwsSettings::new()
        .with_region("us-east-1")
        .with_endpoint_url(endpoint)
        .with_credentials("testing", "testing-secret", None);
    let connector = SqsConnector::new(settings)?;
    let client = connector.client("bench").await?;
    let name = format!("onestep-bench-{}", std::process::id());
    let url = client
        .create_queue()
        .queue_name(&name)
        .send()
        .await?
        .queue_url()
        .ok_or("no queue URL")?
        .to_owned();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
        let entries = chunk
            .iter()
            .map(|i| {
                let envelope = Envelope::new(json!({"id": i, "payload": "order of the benchmark"}));
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(encode_envelope(&envelope))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        client
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }
    let queue = SqsQueue::new(
        connector,
        SqsQueueOptions::new(&url)
            .with_wait_time_s(1)
            .with_batch_size(10),
    )?;
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let handler = move |_ctx: TaskContext, _body: Value| {
        count.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, TaskError>(Value::Null) }
    };
    let app = OneStepApp::builder("sqs-drain")
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
        if started.elapsed() > Duration::from_secs(900) {
            return Err("the drain did not finish within 900 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    worker.await??;
    client.delete_queue().queue_url(&url).send().await?;
    Ok(json!({
        "source": "sqs_queue",
        "backend": "sqs",
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
                eprintln!("sqs_drain: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if url.is_empty() {
        eprintln!("sqs_drain: --url is required");
        std::process::exit(2);
    }
    match run(&url, n, concurrency).await {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("sqs_drain: {e}");
            std::process::exit(1);
        }
    }
}

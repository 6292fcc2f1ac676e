//! A runner never stops fetching while work waits: drains of many short handlers, on a runtime
//! whose other threads free slots while the runner decides what to wait for.
//!
//! Regression: the runner read its free slots twice per turn, once to decide whether to fetch
//! and once to decide whether to wait for slots. A slot freed between the two readings (every
//! slot busy at the first, one free at the second) left it waiting for nothing, and nothing woke
//! it again: about one `redis_stream` drain of 5,000 entries in 100 stopped half way. These
//! drains turn the loop often enough that the old runner stopped in most runs of this file.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use onestep_core::{MemoryQueue, OneStepApp, Sink, Task, TaskContext, TaskError};
use serde_json::{Value, json};

/// Drains `n` messages through `concurrency` slots; fails if the drain stalls for 5 s.
async fn drain(n: usize, concurrency: usize) {
    let queue = Arc::new(MemoryQueue::unbounded("q").with_batch_size(16).unwrap());
    for i in 0..n {
        queue.publish(json!(i), Default::default()).await.unwrap();
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let app = OneStepApp::builder("liveness")
        .task(
            Task::new("t")
                .source(queue.clone())
                .concurrency(concurrency)
                .handler(move |_ctx: TaskContext, _v: Value| {
                    count.fetch_add(1, Ordering::Relaxed);
                    async { Ok::<_, TaskError>(()) }
                }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let serve = tokio::spawn(async move { app.serve().await });
    let (mut last, mut since) = (0, tokio::time::Instant::now());
    while handled.load(Ordering::Relaxed) < n {
        let now = handled.load(Ordering::Relaxed);
        if now != last {
            (last, since) = (now, tokio::time::Instant::now());
        }
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "the runner stopped fetching after {now} of {n} messages ({} queued)",
            queue.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_of_one_slot_drains_to_the_end() {
    drain(50_000, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_of_a_few_slots_drains_to_the_end() {
    for concurrency in [2, 3, 8, 32] {
        drain(50_000, concurrency).await;
    }
}

//! The cost of a Python handler call: drains `--n` messages from a memory queue through a Rust
//! echo handler, a sync Python echo and an async Python echo, at concurrency 1 and 16, and
//! prints one JSON line with the microseconds per delivery of each and the Python overhead
//! over Rust. Run by `cargo xtask bench`; by hand:
//!
//! ```text
//! cargo run --release -p onestep-python --example python_calls -- --n 5000
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onestep_core::task::BoxFuture;
use onestep_core::{MemoryQueue, OneStepApp, Sink, Task, TaskContext, TaskError};
use onestep_python::{PythonConfig, PythonPool};
use serde_json::{Value, json};

type Handler =
    Arc<dyn Fn(TaskContext, Value) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;

const MODULE: &str = "
def sync_echo(ctx, payload):
    return payload

async def async_echo(ctx, payload):
    return payload
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut n = 5000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--n", Some(v)) => n = v.parse().map_err(|e| format!("--n: {e}"))?,
            (other, _) => return Err(format!("unknown argument {other:?}; expected --n N").into()),
        }
    }
    let dir = std::env::temp_dir().join(format!("onestep-python-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("onestep_bench_echo.py"), MODULE)?;
    let pool = Arc::new(PythonPool::new(PythonConfig {
        import_paths: vec![dir.clone()],
        ..PythonConfig::default()
    }));
    let rust: Handler = Arc::new(|_ctx, input| Box::pin(async move { Ok(input) }));
    let handlers = [
        ("rust", rust),
        (
            "python_sync",
            pool.handler("onestep_bench_echo:sync_echo", Value::Null),
        ),
        (
            "python_async",
            pool.handler("onestep_bench_echo:async_echo", Value::Null),
        ),
    ];
    onestep_core::Resource::open(pool.as_ref()).await?;
    let mut results = serde_json::Map::new();
    for concurrency in [1usize, 16] {
        for (name, handler) in &handlers {
            let seconds = drain(handler.clone(), n, concurrency).await?;
            results.insert(
                format!("{name}_c{concurrency}_us"),
                json!((seconds * 1e6 / n as f64 * 10.0).round() / 10.0),
            );
        }
        let us = |k: &str| {
            results[&format!("{k}_c{concurrency}_us")]
                .as_f64()
                .unwrap_or(0.0)
        };
        let overheads: Vec<(String, Value)> = ["python_sync", "python_async"]
            .iter()
            .map(|python| {
                (
                    format!("{python}_c{concurrency}_overhead_us"),
                    json!(((us(python) - us("rust")) * 10.0).round() / 10.0),
                )
            })
            .collect();
        results.extend(overheads);
    }
    onestep_core::Resource::close(pool.as_ref()).await?;
    let _ = std::fs::remove_dir_all(&dir);
    let mut line = json!({"workload": "python_calls", "n": n});
    if let Value::Object(map) = &mut line {
        map.extend(results);
    }
    println!("{line}");
    Ok(())
}

/// Seconds to run `n` deliveries through `handler` at `concurrency`.
async fn drain(
    handler: Handler,
    n: usize,
    concurrency: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let queue = MemoryQueue::new("calls", n)?;
    for i in 0..n {
        queue.publish(json!({"i": i}), Default::default()).await?;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let counted = done.clone();
    let app = OneStepApp::builder("python-calls")
        .task(
            Task::new("echo")
                .source(queue)
                .concurrency(concurrency)
                .handler(move |ctx, input: Value| {
                    let handler = handler.clone();
                    let counted = counted.clone();
                    async move {
                        let out = handler(ctx, input).await;
                        counted.fetch_add(1, Ordering::Relaxed);
                        out.map(drop)
                    }
                }),
        )
        .build()?;
    let handle = app.handle();
    let started = Instant::now();
    let worker = tokio::spawn(async move { app.serve().await });
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    worker.await??;
    Ok(seconds)
}

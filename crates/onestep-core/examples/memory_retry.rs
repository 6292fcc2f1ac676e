//! A worker over an in-memory queue whose handler fails twice, then succeeds: the log shows the
//! retries with exponential back-off, then the success.
//!
//! Run with `cargo run -p onestep-core --example memory_retry`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use onestep_core::{
    ExponentialBackoff, Jitter, MemoryQueue, OneStepApp, Sink, Source, Task, TaskContext, TaskError,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct Invoice {
    id: u32,
    amount_cents: u64,
}

#[derive(Debug, Serialize)]
struct Receipt {
    invoice: u32,
    charged_cents: u64,
    attempt: u32,
}

/// Pretends the payment gateway times out on the first two attempts of every invoice.
async fn charge(ctx: TaskContext, invoice: Invoice) -> Result<Receipt, TaskError> {
    if ctx.attempts() < 2 {
        return Err(TaskError::new(
            "GatewayTimeout",
            format!("gateway timed out charging invoice {}", invoice.id),
        ));
    }
    Ok(Receipt {
        invoice: invoice.id,
        charged_cents: invoice.amount_cents,
        attempt: ctx.attempts() + 1,
    })
}

#[tokio::main]
async fn main() -> Result<(), onestep_core::Error> {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_target(false)
        // Colours only on a terminal, never into a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();

    // A MemoryQueue is a handle: clones share one queue.
    let invoices = MemoryQueue::new("invoices", 100)?;
    let receipts = MemoryQueue::new("receipts", 100)?;
    let retry = ExponentialBackoff::new(
        4,
        Duration::from_millis(200),
        Duration::from_secs(2),
        2.0,
        Jitter::None,
    )?;

    let done = Arc::new(AtomicU32::new(0));
    let counter = done.clone();
    let app = OneStepApp::builder("billing")
        .shutdown_timeout(Some(Duration::from_secs(5)))
        .on_event(move |event| {
            if event.kind == onestep_core::TaskEventKind::Succeeded {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
        .task(
            Task::new("charge")
                .description("charge an invoice, retrying gateway timeouts")
                .source(invoices.clone())
                .emit(receipts.clone())
                .retry(retry)
                .handler(charge),
        )
        .build()?;

    for (id, amount) in [(1, 1250), (2, 9900)] {
        invoices
            .publish(
                serde_json::json!({"id": id, "amount_cents": amount}),
                Default::default(),
            )
            .await?;
    }

    let handle = app.handle();
    let watcher = async {
        while done.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        handle.request_shutdown();
    };
    let (result, ()) = tokio::join!(app.serve(), watcher);
    result?;

    for receipt in receipts.fetch(10).await? {
        println!("receipt: {}", receipt.envelope().body);
    }
    Ok(())
}
